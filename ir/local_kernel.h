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
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/kernel.h"

namespace loom::ir {

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

  const Kernel& kernel() const { return program.kernels[0]; }
};

LocalKernel localize(const KernelProgram& p, const Kernel& k);

// A program's kernels grouped into shared functions: kernels whose
// localize() keys, followed by `extra_key(kernel)` (what a code generator
// reads beyond the kernel: jit/llvm's memory hints, jit/cuda's alignment
// of temporaries), are equal share one. A kernel `shareable` refuses
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
SharedKernels share_kernels(const KernelProgram& p, const std::function<std::string(const Kernel&)>& extra_key,
                            const std::function<bool(const Kernel&)>& shareable = {});

// A symbol for the function whose key is `key`: `prefix` and the key's
// 128-bit hash in hex. The same code gets the same name in every program,
// so a code generator can compile it once and load it into any of them.
std::string key_symbol(const char* prefix, const std::string& key);

}  // namespace loom::ir
