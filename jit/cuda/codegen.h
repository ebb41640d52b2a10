// Loop IR -> CUDA C: one __global__ function per ir::Kernel, from the same
// KernelProgram the LLVM code generator reads (ir/ is shared; only this
// file knows CUDA). NVRTC compiles the text (runtime/cuda/nvrtc_compile.h).
//
// Two shapes of kernel:
// - pointwise (no reduce phase): a grid-stride loop over the flattened
//   iteration space; when every access allows it each thread handles 4
//   consecutive elements with 16-byte vector loads and stores; over two
//   loops with a transposing load, 32 x 32 tiles through shared memory;
// - row (reduce phases): a group of G threads (a warp up to a whole block)
//   per outer index. Each phase walks the row with stride G; a reduce phase
//   ends in a warp-shuffle + shared-memory group reduction whose result
//   every thread of the group reads. When a row fits in G x 8 elements,
//   loads and costly values are kept in registers across phases, so
//   softmax and layer norm read their input from memory once. When the
//   rows lie across memory (x.sum(0) of a row-major x:
//   ir::rows_lie_across_memory), the groups are columns instead: a warp
//   holds one thread of each of 32 adjacent rows, so its loads are
//   adjacent, and a group's partials are folded through shared memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/kernel.h"
#include "ir/local_kernel.h"
#include "jit/cuda/gemm.h"

namespace loom::jit::cuda {

// How one kernel is launched; derived from its loop shape and accesses.
struct KernelPlan {
  bool pointwise = true;
  // pointwise over two loops with a load contiguous along loop 0 (a
  // transpose): 32 x 32 tiles of the loops, that load staged through shared
  // memory so both it and the stores walk memory contiguously (tiled_load)
  bool tiled = false;
  int64_t tiles = 0;       // tiled: kTile x kTile tiles of the loops, a block each
  int lanes = 1;           // elements per thread step (1, or 4 with 16-byte accesses)
  int64_t threads = 0;     // pointwise: threads' worth of work (elements / lanes)
  int steps = 1;           // pointwise: steps of `lanes` elements per thread, their loads issued together
  int block = 256;         // pointwise: threads a block
  int group = 32;          // row: threads per row (G)
  int rows_per_block = 1;  // row: RB
  int per_thread = 0;      // row: steps (of `lanes` elements) per thread if the row stays in registers, else 0
  int64_t rows = 0;        // row: outer iterations
  int64_t row_length = 0;  // row: elements per row
  // row: the group's threads are rows_per_block apart (thread = member *
  // RB + row within the block) instead of G consecutive threads.
  bool columns = false;
  bool empty = false;      // nothing to do: the launch is skipped
  // pointwise, sizes as arguments: whether 4 lanes fit depends on numbers
  // that are arguments (lanes_at_run_time), so the text holds both forms
  // and picks by the run's numbers; `lanes` is this size's, `steps` and
  // `block` the same for both.
  bool lanes_at_run_time = false;
};
// `sizes`: the kernel's numbers that are arguments, where it is localized
// with them (the plan of its text and of its launch at this size).
KernelPlan plan_kernel(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs* sizes = nullptr);
// Pointwise kernels of at least this ir::Kernel::cost_per_element and
// kCostlyMinThreads threads take kCostlySteps steps a thread
// (KernelPlan::steps) in blocks of kCostlyBlock (see plan_kernel).
constexpr double kCostlyElement = 16;
constexpr int64_t kCostlyMinThreads = int64_t{1} << 20;
constexpr int kCostlySteps = 4;
constexpr int kCostlyBlock = 128;

// Grid and block of a planned kernel (the same on every GPU).
struct LaunchDims {
  uint32_t grid = 1, block = 1;
};
LaunchDims launch_dims(const KernelPlan& plan);

// A single-block program: a program of two or more steps, each a
// generated pointwise kernel or float/double product over at most
// kSingleBlockMaxElements elements, kSingleBlockMaxWork elements (times K
// for a product) in all, and no thread summing more than
// kSingleBlockMaxChain terms of a product, with at most
// kSingleBlockMaxAccesses memory accesses. It runs as one kernel, kSingleBlockSymbol, of one
// block of kSingleBlockThreads: the steps in program order, a barrier
// between them. A whole step of such a program computes in less time than
// launching one more kernel takes (W5 on an H100: a captured graph of one
// empty kernel launched and waited for, 7.4 us; of two, 8.6 us; the tiled
// GEMM template's 64x64x1 product ~5 us of GPU time), so one launch serves
// all of them. No GEMM tuning: each product is one sum per element.
inline constexpr int kSingleBlockThreads = 256;
inline constexpr int64_t kSingleBlockMaxElements = 4096;
inline constexpr int64_t kSingleBlockMaxWork = int64_t{1} << 17;
inline constexpr int64_t kSingleBlockMaxChain = 64;  // terms of K one thread sums
// The one kernel's body stays small: NVRTC's time grows faster than its
// loads and stores (600 in-place updates of [8] tensors, ~1,200 accesses
// in one single-block kernel: 10.6 s to compile on an H200's host), and
// within ir::kMaxKernelExprs expressions in all.
inline constexpr size_t kSingleBlockMaxAccesses = 128;
inline constexpr const char* kSingleBlockSymbol = "loom_program";
bool single_block(const ir::KernelProgram& p);

// The parameter list of every generated kernel (library kernels add `meta`):
//   (void* const* bufs, const double* fs, const long long* is, long long* err)
// bufs[b]: device address of buffer b; fs/is: runtime scalars; err[0] = error
// code, err[1] = node (canonical index) of the first kernel that failed; for
// a generated index check, err[2] = the index, err[3] = its bound.
inline constexpr long long kErrorIntegerDivisionByZero = 1;
inline constexpr long long kErrorIndexOutOfRange = 2;

// Kernels alike share one function, shared_symbol(j) (a split GEMM's
// reduce kernel: shared_symbol(j)_reduce): equal ir::LocalKernel keys, the
// same 32-byte alignment of each temporary (what can_use_lanes and
// gemm_problem read) and, for GEMM kernels, the same tile configuration
// (gemm[i], else the heuristic). A shared function's launch gets the
// kernel's own tables (runtime/cuda/cuda_executable.cpp): `bufs` points at
// its local buffer addresses, followed by its node table (the canonical
// node of each local node number, for the error word), and `fs` / `is` at
// its local scalars. Unused by a single-block program (one kernel in all).
// Per access of k, whether its buffer is a temporary that starts off a
// 32-byte boundary ('u') or not ('a'): what can_use_lanes and gemm_problem
// read of the buffer plan, so part of a function's sharing key.
std::string alignment_key(const ir::KernelProgram& p, const ir::Kernel& k);

// `lift`: each kernel localized with those sizes as arguments
// (ir::SizeArgs): the text then serves every size at which the kernel
// plans alike (KernelPlan's choices are in the text and in the key);
// `history` notes the numbers (ir::SizeHistory).
ir::SharedKernels share_kernels(const ir::KernelProgram& p, const std::vector<GemmConfig>& gemm = {},
                                ir::Lift lift = ir::Lift::None, ir::SizeHistory* history = nullptr);

// The CUDA C of the functions of `shared`, shared_symbol(j) each, emitted
// from the first kernel each runs. A GEMM kernel i (ir::Kernel::contraction)
// uses gemm[i] (runtime/cuda/gemm_tune.h picks it); without one,
// gemm_heuristic for 132 SMs. Its launch is gemm_threads / gemm_grid /
// gemm_shared_bytes, not launch_dims. With `allow_single_block` (and
// single_block(p)), the single-block form, each kernel a step
// kernel_symbol(i).
std::string emit_source(const ir::KernelProgram& p, const ir::SharedKernels& shared,
                        const std::vector<GemmConfig>& gemm = {}, bool allow_single_block = true);
// The same with share_kernels(p, gemm).
std::string emit_source(const ir::KernelProgram& p, const std::vector<GemmConfig>& gemm = {},
                        bool allow_single_block = true);
std::string kernel_symbol(size_t i);
std::string shared_symbol(size_t j);

// Function f of `shared` as a program of its own: the prelude it needs and
// the one function, named function_symbol(shared.keys[f]) (a split GEMM's
// reduce kernel: that name with _reduce). The same code in another graph
// gives the same text, which keys its cubin (runtime/cuda/function_modules.h):
// compiled once per process (or from the disk cache), beside the others.
std::string emit_function_source(const ir::KernelProgram& p, const ir::SharedKernels& shared,
                                 const std::vector<GemmConfig>& gemm, size_t f);
// A function's symbol, named by its key's 128-bit hash.
std::string function_symbol(const std::string& key);
// ir::codegen_source_id: changes with any byte of ir/, jit/ or kernels/;
// part of the disk-cache keys (cubins, tuned tiles).
std::string build_id();

}  // namespace loom::jit::cuda
