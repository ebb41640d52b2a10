// CpuExecutable: a lowered graph with its compiled kernels, replayed on every
// cache hit. A run binds the inputs, allocates the outputs, takes an arena
// for the temporaries (reused across runs) and runs the steps in order.
#pragma once
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "ir/kernel.h"
#include "jit/llvm/orc_jit.h"
#include "kernels/cpu/library.h"
#include "runtime/backend.h"
#include "runtime/cpu/gemm_driver.h"
#include "runtime/output_plan.h"

namespace loom::runtime::cpu {

class CpuExecutable final : public Executable {
 public:
  // `functions`: which compiled function runs each kernel, and the kernel
  // as that function sees it (jit/llvm/codegen.h share_functions).
  CpuExecutable(ir::KernelProgram program, jit::llvm_cpu::KernelFunctions functions,
                std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels);
  void run(const RunArgs& args, std::vector<BufferPtr>& out) override;
  int64_t kernel_count() const override { return static_cast<int64_t>(program_.steps.size()); }
  int64_t bytes() const override;

 private:
  // How a kernel is launched, decided once: inline on the calling thread
  // (small work: a TBB dispatch would cost more than the kernel) or split
  // over loop 0 in chunks of `grain`. GEMM kernels have their own driver
  // (gemm_driver.h), which splits them by tiles.
  struct Launch {
    int64_t extent = 1;
    int64_t grain = 1;
    int64_t block = 1;  // loop 0's ranges are multiples of it (jit/llvm/codegen.h: parallel_unit)
    bool serial = true;
  };
  static Launch plan_launch(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs& sizes);
  void run_kernel(size_t k, void* const* bufs, const double* fs, const int64_t* is);
  // One step of the program: a generated kernel, or a library call (whose
  // input views are built in `ins`, the run's scratch).
  void run_step(const ir::Step& step, void* const* bufs, const double* fs, const int64_t* is,
                std::span<const ir::RtScalar> scalars, std::vector<kernels::cpu::View>& ins);
  void log_step(const ir::Step& step, double ms) const;  // LOOM_LOG=profile
  BufferPtr take_arena();
  void give_arena(BufferPtr a);

  ir::KernelProgram program_;
  jit::llvm_cpu::KernelFunctions functions_;
  std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels_;
  std::vector<Launch> launches_;  // per kernel
  std::vector<GemmPlan> gemms_;   // per kernel, in its local buffer ids; used by GEMM kernels only
  mutable std::mutex arena_mu_;
  std::vector<BufferPtr> arenas_;  // free arenas: one per concurrent run at most
  OutputPlan outputs_;  // donation and result list (runtime/output_plan.h)
};

}  // namespace loom::runtime::cpu
