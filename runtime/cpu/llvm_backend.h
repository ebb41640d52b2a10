// The llvm backend: lowers a graph (ir/lower/lower.h), compiles its kernels with
// LLVM (jit/llvm/) or loads them from the disk cache, and runs them on all
// cores with TBB next to the library kernels (kernels/cpu/).
#pragma once
#include "ir/local_kernel.h"
#include "runtime/backend.h"

namespace loom::runtime::cpu {

class LlvmBackend final : public Backend {
 public:
  const char* name() const override { return "llvm"; }
  DeviceType device_type() const override { return kCPU; }
  std::unique_ptr<Executable> compile(const ir::Graph& g, const CompileHints& hints) override;
  bool takes_sizes_as_args() const override { return true; }

 private:
  ir::SizeHistory sizes_seen_;  // every compile's numbers, for ir::Lift::Seen
};

}  // namespace loom::runtime::cpu
