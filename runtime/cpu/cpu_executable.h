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

namespace loom::runtime::cpu {

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(ir::KernelProgram program, std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels);
  std::vector<BufferPtr> run(const RunArgs& args) override;
  int64_t kernel_count() const override { return static_cast<int64_t>(program_.steps.size()); }

 private:
  void run_kernel(size_t k, void* const* bufs, const double* fs, const int64_t* is);
  // Whether output buffer `out` may be written into the memory of input
  // buffer `in` (a donated buffer) without changing any value read.
  bool can_write_in_place(uint32_t out, uint32_t in) const;
  BufferPtr donated(uint32_t b, const RunArgs& args) const;
  BufferPtr take_arena();
  void give_arena(BufferPtr a);

  ir::KernelProgram program_;
  std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels_;
  std::mutex arena_mu_;
  std::vector<BufferPtr> arenas_;  // free arenas: one per concurrent run at most
  std::vector<std::pair<uint32_t, uint32_t>> in_place_ok_;  // (output buffer, input buffer)
  // Per buffer, the step that writes it (kNoStep: none, kTwoWriters: more than one).
  static constexpr size_t kNoStep = ~size_t{0}, kTwoWriters = ~size_t{0} - 1;
  std::vector<size_t> writer_;
  // The last step that can fail on bad data (an index out of range, an
  // integer division by zero), -1 if none: only outputs written after it
  // may go into donated buffers, so that a failed run leaves every existing
  // tensor as it was.
  int64_t last_failing_step_ = -1;
};

}  // namespace loom::runtime::cpu
