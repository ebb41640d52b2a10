// Loop IR -> LLVM IR: one LLVM function per ir::Kernel, explicitly
// vectorized for the host (the innermost loop runs several vectors of
// `vector_width` lanes per step, then one vector, then a scalar tail), math
// from jit/llvm/math.h (no libm in loops).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/kernel.h"
#include "ir/local_kernel.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace loom::jit::llvm_cpu {

// The host as LLVM names it, and how many lanes a kernel's inner loop uses.
struct Target {
  std::string triple;
  std::string cpu;       // e.g. "znver4"
  std::string features;  // e.g. "+avx512f,+avx2,..."
  int vector_width;      // lanes per inner-loop step: 16 with AVX-512, 8 with AVX2, 4 otherwise
};
const Target& host_target();

// What a kernel reports of bad data: a nonzero error word (error_word: the
// code and the node) and, for an index out of range, the first bad index of
// the elements it ran and the size it must lie below.
struct KernelError {
  int32_t word = 0;
  int32_t unused = 0;
  int64_t index = 0, size = 0;
};

// Every generated kernel has this signature. It runs loop 0 over
// [begin, end) and every other loop over its full extent; `error` is set
// only if the data was bad.
using KernelFn = void (*)(int64_t begin, int64_t end, void* const* buffers, const double* fscalars,
                          const int64_t* iscalars, KernelError* error);
inline constexpr int32_t kErrorIntegerDivisionByZero = 1;
inline constexpr int32_t kErrorIndexOutOfRange = 2;  // an index_check failed
// An error word: the code in the low byte, above it the canonical index + 1
// of the node whose op failed (0: unknown, the kernel's root is named).
inline int32_t error_word(int32_t code, uint32_t node) {
  return node < (1u << 22) ? static_cast<int32_t>(code | ((node + 1) << 8)) : code;
}
inline int32_t error_code(int32_t word) { return word & 0xff; }
inline uint32_t error_node(int32_t word, uint32_t fallback) {
  const uint32_t n = static_cast<uint32_t>(word) >> 8;
  return n ? n - 1 : fallback;
}

// The LLVM version and ir::codegen_source_id (a hash of ir/, jit/ and
// kernels/): part of the disk-cache key, so objects made by a build whose
// code generators differ in any byte are never loaded.
std::string build_id();

// A pure pointwise kernel that reads or writes some operand across its rows
// (a transpose: x.t().contiguous(), a + b.t(), a permute of the last two
// dims) runs its last two loops in blocks: `rows` of loop n-2, and within
// them column strips `cols` wide (one 64-byte line of that operand's
// elements), each strip row by row. The strip reads `cols` rows of the
// operand as that many sequential streams, where one output row at a time
// would touch a new line, and past 4 KiB a new page, for every element.
// rows == 0: not blocked. With two loops, loop 0's [begin, end) ranges are
// multiples of `rows` (runtime/cpu/cpu_executable.cpp).
//
// These schedules, like every choice a function's code makes, depend only
// on what its key holds: with sizes as arguments (`sizes`, ir::SizeArgs) a
// lifted extent is unknown, and the plain schedule is taken.
struct LoopBlock {
  int64_t rows = 0, cols = 0;
};
LoopBlock transpose_block(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs* sizes = nullptr);

// A reduction kernel (Reduce and Store phases, no argmax, no random
// numbers) whose rows lie across memory, each step a different memory row
// (x.sum(0), x.var(0), softmax(x, 0) of a row-major x:
// ir::rows_lie_across_memory), runs that many rows of its last outer loop
// at once, one vector lane each: each step then reads adjacent elements.
// 0: the usual order. With one outer loop, loop 0's [begin, end) ranges are
// multiples of it.
int64_t column_lanes(const ir::Kernel& k, int vector_width, const ir::SizeArgs* sizes = nullptr);

// The loop-0 indices a parallel range of kernel k must hold a multiple of,
// for the two schedules above (1 for every other kernel).
int64_t parallel_unit(const ir::KernelProgram& p, const ir::Kernel& k, const Target& t,
                      const ir::SizeArgs* sizes = nullptr);

// The functions a program compiles to. Kernels alike (equal
// ir::LocalKernel keys and memory hints: the same code on other buffers)
// share one, each running it with its own buffer and scalar tables.
// `lift`: which extents, strides and offsets (other than 0 and +-1) are
// arguments (ir::SizeArgs), so the functions serve the program's structure
// at other sizes; `history` notes the numbers (ir::SizeHistory).
using KernelFunctions = ir::SharedKernels;
KernelFunctions share_functions(const ir::KernelProgram& p, ir::Lift lift = ir::Lift::None,
                                ir::SizeHistory* history = nullptr);

// The symbol of the function whose key (KernelFunctions::keys) is `key`:
// named by the key's 128-bit hash, so the same code has the same name in
// every program, and its object, compiled once, loads into any of them.
std::string function_symbol(const std::string& key);

// One function per entry of f.first, named function_symbol(f.keys[i]); or
// only the functions `which` (one function, or a part of a program).
std::unique_ptr<llvm::Module> emit_module(const ir::KernelProgram& p, const KernelFunctions& f, llvm::LLVMContext& ctx,
                                          const Target& t);
std::unique_ptr<llvm::Module> emit_module(const ir::KernelProgram& p, const KernelFunctions& f,
                                          std::span<const uint32_t> which, llvm::LLVMContext& ctx, const Target& t);

// The functions `which` of `f` in at most `parts` groups of about equal
// work to compile (each group compiled beside the others, one module per
// function). Indices into `which` are not returned: the functions' own.
std::vector<std::vector<uint32_t>> compile_parts(const KernelFunctions& f, std::span<const uint32_t> which,
                                                 size_t parts);

}  // namespace loom::jit::llvm_cpu
