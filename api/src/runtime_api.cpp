// The explicitly lazy parts of the public API that are not sync itself:
// explain(), backend selection.
#include <loom/runtime.h>

#include "api/src/record.h"
#include "ir/graph.h"
#include "runtime/backend.h"

namespace loom {

std::string explain(const Tensor& t, SourceLoc loc) {
  detail::impl_of(t, "explain", loc);
  ir::NodePtr n = detail::read(t, loc);
  const ir::Node* raw = n.get();
  ir::Graph g;
  ir::build_graph(std::span<const ir::Node* const>(&raw, 1), g);
  char key[32];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(g.hash));
  return "graph key " + std::string(key) + ", " + std::to_string(g.size()) + " nodes\n" + ir::to_string(g);
}

std::string set_backend(const std::string& name) { return runtime::select_cpu_backend(name); }

std::string backend_name(DeviceType device) {
  if (device == kCUDA) return "none";
  return runtime::backend_for(Device(kCPU, 0)).name();
}

}  // namespace loom
