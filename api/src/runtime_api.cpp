// The explicitly lazy parts of the public API that are not sync itself:
// explain(), backend selection.
#include <loom/runtime.h>

#include "api/src/lazy.h"
#include "api/src/record.h"
#include "ir/graph.h"
#include "runtime/backend.h"
#include "runtime/buffer.h"
#include "runtime/recompile.h"

namespace loom {

std::string explain(const Tensor& t, SourceLoc loc) {
  const detail::TensorImpl& im = detail::impl_of(t, "explain", loc);
  // A pending tensor: the graph its next sync runs, every live pending
  // tensor of its device included, numbered as that sync numbers it. A
  // materialized one: its own graph (an Input leaf, or a view of one).
  std::vector<ir::NodePtr> outs;
  if (im.storage->pending_node()) outs = detail::pending_outputs(im.storage->device);
  const bool sync_graph = !outs.empty();
  if (!sync_graph) outs.push_back(detail::read(t, loc));
  std::vector<const ir::Node*> raw;
  for (const ir::NodePtr& n : outs) raw.push_back(n.get());
  ir::Graph g;
  ir::build_graph(raw, g);
  char key[32];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(g.hash));
  return "graph key " + std::string(key) + ", " + std::to_string(g.size()) + " nodes" +
         (sync_graph ? " (the next sync's: every live pending tensor of " + im.storage->device.str() + ")" : "") + "\n" +
         ir::to_string(g);
}

std::string set_backend(const std::string& name) { return runtime::select_cpu_backend(name); }

DynamicShapes set_dynamic_shapes(DynamicShapes mode) {
  using M = runtime::SizesAsArgs;
  const M to = mode == DynamicShapes::Always ? M::Always : mode == DynamicShapes::Never ? M::Never : M::Automatic;
  const M was = runtime::set_sizes_as_args_mode(to);
  return was == M::Always ? DynamicShapes::Always : was == M::Never ? DynamicShapes::Never : DynamicShapes::Automatic;
}

void mark_dynamic(const Tensor& t, SourceLoc loc) {
  const detail::TensorImpl& im = detail::impl_of(t, "mark_dynamic", loc);
  detail::materialize(im.storage);
  runtime::BufferPtr b = im.storage->buffer();
  LOOM_CHECK(b != nullptr, "mark_dynamic", loc, "internal error: storage not materialized after sync");
  b->mark_dynamic();
}

std::string backend_name(DeviceType device) {
  if (device == kCUDA) return "none";
  return runtime::backend_for(Device(kCPU, 0)).name();
}

}  // namespace loom
