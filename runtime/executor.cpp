#include "runtime/executor.h"

#include <loom/error.h>

#include "runtime/backend.h"
#include "runtime/dump.h"
#include "runtime/executable_cache.h"
#include "runtime/log.h"
#include "runtime/metrics.h"

namespace loom::runtime {

void execute(const ir::Graph& g, Device device, std::span<const BufferPtr> targets, std::vector<BufferPtr>& out) {
  Backend& backend = backend_for(device);
  Counters& c = counters();
  bool collided = false;
  std::shared_ptr<Executable> exe = executable_cache().find(backend, g, collided);
  if (collided) bump(c.hash_collisions);
  if (exe) {
    bump(c.cache_hits);
    if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "hit  key=%016llx nodes=%zu backend=%s",
                                               static_cast<unsigned long long>(g.hash), g.size(), backend.name());
  } else {
    bump(c.cache_misses);
    // The graph's text only when dumping is on: printing a 1,000-node graph
    // costs more than the reference backend's compile.
    if (std::string folder = dump_folder(g, backend.name()); !folder.empty())
      dump_file(folder, "graph.txt", ir::to_string(g));
    int64_t t0 = now_ns();
    std::shared_ptr<Executable> fresh = backend.compile(g);
    bump(c.compile_ns, now_ns() - t0);
    exe = executable_cache().insert(backend, g, std::move(fresh));
    if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "miss key=%016llx nodes=%zu backend=%s compiled in %.3f ms",
                                               static_cast<unsigned long long>(g.hash), g.size(), backend.name(),
                                               (now_ns() - t0) / 1e6);
  }
  if (log_enabled(LogTopic::Graph)) log_block(LogTopic::Graph, ir::to_string(g));

  // The input buffers: on the stack for the usual few, else on the heap.
  constexpr size_t kFew = 16;
  const Buffer* few[kFew];
  std::vector<const Buffer*> many;
  const size_t n_in = g.input_nodes.size();
  if (n_in > kFew) many.resize(n_in);
  const Buffer** inputs = n_in > kFew ? many.data() : few;
  for (size_t k = 0; k < n_in; ++k) inputs[k] = static_cast<const Buffer*>(g.nodes[g.input_nodes[k]]->data.get());

  int64_t t0 = now_ns();
  try {
    exe->run(RunArgs{std::span<const Buffer* const>(inputs, n_in), g.scalars, targets}, out);
  } catch (const RunError& e) {
    const ir::Node& n = *g.nodes[e.node];
    std::string where = n.line ? std::string(" (called from ") + n.file + ":" + std::to_string(n.line) + ")" : "";
    throw NodeError("loom: " + std::string(ir::op_name(n.op)) + ": " + e.message + where, e.node);
  }
  bump(c.execute_ns, now_ns() - t0);
  bump(c.graphs_materialized);
  bump(c.graph_nodes, static_cast<int64_t>(g.size()));
  bump(c.kernels_launched, exe->kernel_count());
}

}  // namespace loom::runtime
