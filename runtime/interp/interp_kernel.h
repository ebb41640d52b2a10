// One generated kernel (ir/kernel.h) run by interpretation: what the code
// generators compile, evaluated element by element. The loop IR's meaning
// in plain C++: a reader of jit/llvm or jit/cuda can check here what each
// construct must compute.
#pragma once
#include <span>

#include "ir/kernel.h"

namespace loom::runtime::interp {

// Runs kernel k of program p over the buffers `bufs` (indexed by buffer
// id) with the run's scalars. Throws RunError at the first bad datum (an
// index out of range, an integer division by zero), naming its node.
void run_kernel(const ir::KernelProgram& p, const ir::Kernel& k, void* const* bufs,
                std::span<const ir::RtScalar> scalars);

}  // namespace loom::runtime::interp
