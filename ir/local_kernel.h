// A kernel as its own code sees it, apart from the program around it.
//
// A kernel names places of its program: buffer ids, runtime-scalar slots
// and node numbers (the node an error names). Two kernels that compute the
// same thing on other buffers (the same layer's backward in each of 80
// unsynced backward calls, the blocks of a stacked model, the steps of an
// unrolled loop) differ only in those names. localize() renames them in
// order of first use, so such kernels have equal keys, and a code generator
// compiles one function for all of them; each kernel then runs it with its
// own tables (`buffers`, `scalars`, `nodes`) mapping the local names back.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/kernel.h"

namespace loom::ir {

// Sizes as arguments (symbolic sizes, docs/ARCHITECTURE.md "Sizes that
// change"): a kernel localized with them keeps in its key only the numbers
// that carry structure (0, 1 and -1: a broadcast, a contiguous walk, a
// size-1 loop) and reads every other extent, stride, offset and constant
// from its int scalars, after its runtime scalars: the same code then runs
// the kernel at every size whose structure is the same (a batch of 32 and a
// last batch of 17, a sequence of 100 tokens and one of 101). A code
// generator reads a lifted number only through value()/slot(), and makes no
// decision on its value in this program (it differs in the next).
struct SizeArgs {
  static constexpr int32_t kFixed = -1;
  std::vector<int32_t> loop;                           // per loop dim: its slot, or kFixed
  std::vector<int32_t> offset;                         // per access
  std::vector<std::array<int32_t, kMaxDims>> strides;  // per access, per loop dim
  std::vector<int32_t> imm;                            // per expr: a Const's value, a Gather's step
  int32_t k = kFixed, a_k = kFixed, b_k = kFixed;      // the contraction's depth and K strides
  std::vector<int64_t> values;  // slot -> this kernel's number
  uint32_t base = 0;            // slot 0's place in the kernel's int scalars (its runtime scalars come first)
  bool any() const { return !values.empty(); }
  // The slot of a number, or kFixed: every one for a static kernel, whose
  // per-place lists are empty.
  int32_t loop_slot(int d) const { return any() ? loop[d] : kFixed; }
  int32_t offset_slot(uint32_t a) const { return any() ? offset[a] : kFixed; }
  int32_t stride_slot(uint32_t a, int d) const { return any() ? strides[a][d] : kFixed; }
  int32_t imm_slot(uint32_t e) const { return any() ? imm[e] : kFixed; }
  // Whether loop d's extent is an argument (a code generator must not
  // size a stack buffer or pick a schedule by it).
  bool lifted_loop(int d) const { return loop_slot(d) != kFixed; }
};

// Whether a number can be an argument: 0, 1 and -1 decide code (a broadcast
// is not loaded per element, a unit stride is a vector load, a size-1 loop
// is no loop), so they stay in the key as guards.
inline bool liftable(int64_t v) { return v < -1 || v > 1; }

// Which of a kernel's liftable numbers localize() makes arguments.
enum class Lift : uint8_t {
  None,  // none: the static kernel
  Seen,  // those that differed between its compiles at other sizes (SizeHistory):
         // a batch dim that changed is an argument, the model's width stays a constant
  All,   // every one (loom::set_dynamic_shapes Always, a graph reading a marked tensor)
};

// The numbers each kernel was compiled with, for Lift::Seen. Per shape (the
// kernel's key with every liftable number an argument) a few lineages: the
// numbers a kernel of that shape had in the compile that met it first, and
// which of them have differed since. A compile's kernel follows the lineage
// of an earlier compile nearest to it (fewest numbers that differ and are
// not arguments yet) and lifts what differs from it; what it lifts, that
// lineage lifts from then on. So a graph never seen before reuses the
// kernels an earlier graph compiled at other sizes (the first call of a
// model casting its weights for autocast, the later calls not), while one
// graph's own kernels of one shape at several widths (a block's three
// products) stay static in its first compile: they are lineages of their
// own, not differences. A backend owns one for the process and notes every
// compile, static ones too. Thread-safe.
class SizeHistory {
 public:
  // A compile's number: what it notes is seen by later compiles, not by
  // itself. share_kernels() takes one per call.
  uint64_t begin() { return next_.fetch_add(1) + 1; }
  // Notes `values` (in SizeArgs slot order of Lift::All) for `shape` in
  // compile `generation`; returns, per value, whether to lift it.
  std::vector<bool> note(const std::string& shape, const std::vector<int64_t>& values, uint64_t generation);

 private:
  struct Lineage {
    std::vector<int64_t> first;
    std::vector<bool> varied;
    uint64_t generation = 0;  // the compile that began it
  };
  static constexpr size_t kLineagesPerShape = 16;
  // The lineage of an earlier compile than `generation` that `values` lie
  // nearest, and what lifting it asks, or null.
  Lineage* nearest(std::vector<Lineage>& lineages, const std::vector<int64_t>& values, uint64_t generation,
                   std::vector<bool>& lift);
  std::mutex mu_;
  std::atomic<uint64_t> next_{0};
  std::unordered_map<std::string, std::vector<Lineage>> by_shape_;
};

struct LocalKernel {
  // The kernel alone (program.kernels[0], one Generated step) with the
  // buffers it touches, renamed 0, 1, ... in order of first use (their
  // BufferInfo as in the program). A code generator or launch planner given
  // this program sees everything of the kernel it may depend on; for
  // kernels sharing a function, the first one's program is the one emitted.
  KernelProgram program;
  std::vector<uint32_t> buffers;  // local buffer id -> the program's
  std::vector<uint32_t> scalars;  // local runtime-scalar slot -> RunArgs' slot
  std::vector<uint32_t> nodes;    // local node number -> canonical node; nodes[0] is the kernel's root
  // Every field of the renamed kernel, and its buffers' dtypes, as bytes:
  // kernels with equal keys compile to the same code. Their buffers may
  // differ in kind and size (a layer's input is the graph's, the next
  // layer's a temporary), so a code generator reads a buffer's dtype only;
  // sizes are for launch planning, which is per kernel, and what depends on
  // the rest of the program (jit/llvm's memory hints) is added to the key
  // by the code generator. A field added to Kernel, Expr, Phase, Access or
  // Contraction must be added to the key too.
  std::string key;
  // Empty unless localized with sizes as arguments; then also part of `key`
  // (which places are arguments, never their values).
  SizeArgs sizes;

  const Kernel& kernel() const { return program.kernels[0]; }
};

// `history`, when given, notes the kernel's numbers in compile `generation`
// (SizeHistory::begin) and serves Lift::Seen.
LocalKernel localize(const KernelProgram& p, const Kernel& k, Lift lift = Lift::None, SizeHistory* history = nullptr,
                     uint64_t generation = 0);

// The kernel's shape as SizeHistory keeps it: its key with every liftable
// number an argument, and runtime view offsets not told from constant ones
// (a code generator keeps what the kernel's other sizes chose by it:
// jit/cuda's tile configurations).
std::string shape_key(const KernelProgram& p, const Kernel& k);

// A program's kernels grouped into shared functions: kernels whose
// localize() keys, followed by `extra_key(kernel, its local form)` (what
// a code generator reads beyond the kernel: jit/llvm's memory hints,
// jit/cuda's alignment of temporaries and launch plan), are equal share one. A kernel `shareable` refuses
// (jit/cuda's GEMM kernels) gets a function of its own.
struct SharedKernels {
  std::vector<LocalKernel> local;  // per kernel of the program: as its function sees it
  std::vector<uint32_t> function;  // per kernel: the function that runs it
  std::vector<uint32_t> first;     // per function: the first kernel it runs (emitted from)
  // Per function: its key and extra key, everything its code depends on.
  // Equal in another program, the function there is the same code (a code
  // generator may reuse what it compiled for the other: jit/llvm).
  std::vector<std::string> keys;
};
SharedKernels share_kernels(const KernelProgram& p,
                            const std::function<std::string(const Kernel&, const LocalKernel&)>& extra_key,
                            const std::function<bool(const Kernel&)>& shareable = {}, Lift lift = Lift::None,
                            SizeHistory* history = nullptr);

// A symbol for the function whose key is `key`: `prefix` and the key's
// 128-bit hash in hex. The same code gets the same name in every program,
// so a code generator can compile it once and load it into any of them.
std::string key_symbol(const char* prefix, const std::string& key);

}  // namespace loom::ir
