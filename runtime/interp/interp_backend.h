// The example backend (runtime/interp/README.md, docs/ADDING_A_BACKEND.md):
// lowers a graph as the JIT backends do, then interprets the kernels.
#pragma once
#include "runtime/backend.h"

namespace loom::runtime::interp {

class InterpBackend final : public Backend {
 public:
  const char* name() const override { return "interp"; }
  DeviceType device_type() const override { return kCPU; }
  std::unique_ptr<Executable> compile(const ir::Graph& g, const CompileHints& hints) override;
};

}  // namespace loom::runtime::interp
