// The example backend's executable: runs a KernelProgram step by step, a
// generated kernel by interpretation (interp_kernel.h), a library call
// through kernels/cpu.
#pragma once
#include "ir/kernel.h"
#include "runtime/backend.h"
#include "runtime/output_plan.h"

namespace loom::runtime::interp {

class InterpExecutable final : public Executable {
 public:
  explicit InterpExecutable(ir::KernelProgram program)
      : program_(std::move(program)), outputs_(program_, /*library_stops_on_failure=*/true) {}
  void run(const RunArgs& args, std::vector<BufferPtr>& out) override;
  int64_t kernel_count() const override { return static_cast<int64_t>(program_.steps.size()); }
  // Only its description: every run allocates its temporaries and frees them.
  int64_t bytes() const override { return ir::description_bytes(program_); }

 private:
  ir::KernelProgram program_;
  OutputPlan outputs_;  // which outputs may be written into donated buffers; the result list
};

}  // namespace loom::runtime::interp
