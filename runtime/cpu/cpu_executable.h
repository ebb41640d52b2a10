// CpuExecutable: a lowered graph with its compiled kernels, replayed on every
// cache hit. A run binds the inputs, allocates the outputs, takes an arena
// for the temporaries (reused across runs) and runs the steps in order.
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "ir/kernel.h"
#include "jit/llvm/orc_jit.h"
#include "runtime/backend.h"
#include "runtime/output_plan.h"

namespace loom::runtime::cpu {

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(ir::KernelProgram program, std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels);
  std::vector<BufferPtr> run(const RunArgs& args) override;
  int64_t kernel_count() const override { return static_cast<int64_t>(program_.steps.size()); }

 private:
  void run_kernel(size_t k, void* const* bufs, const double* fs, const int64_t* is);
  BufferPtr take_arena();
  void give_arena(BufferPtr a);

  ir::KernelProgram program_;
  std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels_;
  std::mutex arena_mu_;
  std::vector<BufferPtr> arenas_;  // free arenas: one per concurrent run at most
  OutputPlan outputs_;  // donation and result list (runtime/output_plan.h)
};

}  // namespace loom::runtime::cpu
