// The reference backend: evaluates a graph node by node in plain C++.
// It is the test oracle and LOOM_BACKEND=reference.
#pragma once
#include "runtime/backend.h"

namespace loom::runtime::reference {

class ReferenceBackend final : public Backend {
 public:
  const char* name() const override { return "reference"; }
  DeviceType device_type() const override { return kCPU; }
  std::unique_ptr<Executable> compile(const ir::Graph& g, const CompileHints& hints) override;
};

}  // namespace loom::runtime::reference
