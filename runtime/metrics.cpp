// loom::metrics(): a snapshot of runtime::Counters, printable as a table.
#include "runtime/metrics.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <vector>
#include <sstream>

#include <loom/runtime.h>

#include "ir/graph.h"
#include "runtime/executable_cache.h"
#include "runtime/log.h"

namespace loom {

namespace runtime {
Counters& counters() {
  static Counters c;
  return c;
}
}  // namespace runtime

namespace runtime {
namespace node_count_internal {
constinit __attribute__((tls_model("initial-exec"))) thread_local std::atomic<int64_t>* t_count = nullptr;

namespace {
struct Registry {
  std::mutex mu;
  std::vector<std::atomic<int64_t>*> live;  // one per thread that recorded
  int64_t base = 0;                         // the total at the last reset
};
// Never destroyed: threads may exit after static destructors ran.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}
// At thread exit: the thread's count moves to Counters::nodes_recorded.
struct Retire {
  ~Retire() {
    std::atomic<int64_t>* c = t_count;
    if (!c) return;
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    counters().nodes_recorded.fetch_add(c->load(), std::memory_order_relaxed);
    std::erase(r.live, c);
    delete c;
    t_count = nullptr;
  }
};
}  // namespace

std::atomic<int64_t>* register_thread() {
  thread_local Retire retire;
  (void)retire;
  auto* c = new std::atomic<int64_t>(0);
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.live.push_back(c);
  t_count = c;
  return c;
}
}  // namespace node_count_internal

int64_t nodes_recorded() {
  auto& r = node_count_internal::registry();
  std::lock_guard lock(r.mu);
  int64_t total = counters().nodes_recorded.load();
  for (auto* c : r.live) total += c->load(std::memory_order_relaxed);
  return total - r.base;
}

void reset_nodes_recorded() {
  auto& r = node_count_internal::registry();
  std::lock_guard lock(r.mu);
  int64_t total = counters().nodes_recorded.load();
  for (auto* c : r.live) total += c->load(std::memory_order_relaxed);
  r.base = total;
}

namespace {
std::mutex g_compile_mu;
std::vector<int64_t> g_per_kernel_ns;  // one entry per compile: its time / its kernels
}  // namespace

void record_compile(int64_t kernels, int64_t ns) {
  Counters& c = counters();
  bump(c.jit_compiles);
  bump(c.kernels_compiled, kernels);
  bump(c.jit_compile_ns, ns);
  std::lock_guard lock(g_compile_mu);
  g_per_kernel_ns.push_back(ns / std::max<int64_t>(kernels, 1));
}

int64_t median_compile_ns_per_kernel() {
  std::lock_guard lock(g_compile_mu);
  if (g_per_kernel_ns.empty()) return 0;
  std::vector<int64_t> v = g_per_kernel_ns;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

void reset_compile_records() {
  std::lock_guard lock(g_compile_mu);
  g_per_kernel_ns.clear();
}
}  // namespace runtime

Metrics metrics() {
  const runtime::Counters& c = runtime::counters();
  Metrics m;
  m.nodes_recorded = runtime::nodes_recorded();
  m.graphs_materialized = c.graphs_materialized.load();
  m.graph_nodes = c.graph_nodes.load();
  m.graph_cuts = c.graph_cuts.load();
  m.cache_hits = c.cache_hits.load();
  m.cache_misses = c.cache_misses.load();
  m.compiles_new_graph = c.compiles_new_graph.load();
  m.recompiles_shape = c.recompiles_shape.load();
  m.recompiles_dtype = c.recompiles_dtype.load();
  m.recompiles_attribute = c.recompiles_attribute.load();
  m.recompiles_alignment = c.recompiles_alignment.load();
  m.recompiles_evicted = c.recompiles_evicted.load();
  m.hash_collisions = c.hash_collisions.load();
  m.compile_ns = c.compile_ns.load();
  m.execute_ns = c.execute_ns.load();
  m.kernels_launched = c.kernels_launched.load();
  m.bytes_allocated = c.bytes_allocated.load();
  m.buffers_allocated = c.buffers_allocated.load();
  m.bytes_copied_back = c.bytes_copied_back.load();
  m.disk_cache_hits = c.disk_cache_hits.load();
  m.disk_cache_misses = c.disk_cache_misses.load();
  m.disk_cache_writes = c.disk_cache_writes.load();
  m.disk_cache_rejected = c.disk_cache_rejected.load();
  m.jit_compiles = c.jit_compiles.load();
  m.kernels_compiled = c.kernels_compiled.load();
  m.jit_compile_ns = c.jit_compile_ns.load();
  m.jit_compile_ns_per_kernel_median = runtime::median_compile_ns_per_kernel();
  m.nvrtc_compiles = c.nvrtc_compiles.load();
  m.nvrtc_compile_ns = c.nvrtc_compile_ns.load();
  m.cuda_graph_launches = c.cuda_graph_launches.load();
  m.cuda_graphs_built = c.cuda_graphs_built.load();
  m.cuda_graph_kernels = c.cuda_graph_kernels.load();
  m.cuda_graph_depth = c.cuda_graph_depth.load();
  m.cuda_argument_uploads = c.cuda_argument_uploads.load();
  m.cuda_graph_node_updates = c.cuda_graph_node_updates.load();
  m.late_checks = c.late_checks.load();
  m.late_check_wait_ns = c.late_check_wait_ns.load();
  m.compiled_replays = c.compiled_replays.load();
  m.executables_evicted = c.executables_evicted.load();
  m.compiles_sizes_as_args = c.compiles_sizes_as_args.load();
  m.executables_resized = c.executables_resized.load();
  m.executable_cache_bytes = runtime::executable_cache().bytes();
  m.executables_cached = static_cast<int64_t>(runtime::executable_cache().size());
  return m;
}

void set_log(const std::string& topics) { runtime::set_log_topics(topics.c_str()); }

void reset_metrics() {
  runtime::reset_compile_records();
  runtime::reset_nodes_recorded();  // per-thread counts: zeroed by moving the base
  runtime::Counters& c = runtime::counters();
  for (auto* a : {&c.graphs_materialized, &c.graph_nodes, &c.graph_cuts, &c.cache_hits,
                  &c.cache_misses, &c.hash_collisions, &c.compile_ns, &c.execute_ns, &c.kernels_launched,
                  &c.bytes_allocated, &c.buffers_allocated, &c.bytes_copied_back, &c.disk_cache_hits, &c.disk_cache_misses,
                  &c.disk_cache_writes, &c.disk_cache_rejected, &c.jit_compiles, &c.kernels_compiled,
                  &c.jit_compile_ns, &c.nvrtc_compiles, &c.nvrtc_compile_ns, &c.cuda_graph_launches, &c.cuda_argument_uploads, &c.cuda_graph_node_updates,
                  &c.cuda_graphs_built, &c.cuda_graph_kernels, &c.cuda_graph_depth, &c.late_checks,
                  &c.late_check_wait_ns, &c.compiled_replays, &c.executables_evicted, &c.compiles_sizes_as_args,
                  &c.executables_resized, &c.compiles_new_graph,
                  &c.recompiles_shape, &c.recompiles_dtype, &c.recompiles_attribute, &c.recompiles_alignment,
                  &c.recompiles_evicted})
    a->store(0);
}

std::string Metrics::to_string() const {
  std::ostringstream os;
  auto row = [&](const char* name, const std::string& value) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%-22s %16s\n", name, value.c_str());
    os << buf;
  };
  auto ms = [](int64_t ns) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f ms", ns / 1e6);
    return std::string(b);
  };
  row("nodes recorded", std::to_string(nodes_recorded));
  row("graphs materialized", std::to_string(graphs_materialized));
  row("graph nodes", std::to_string(graph_nodes));
  row("graph cuts", std::to_string(graph_cuts));
  row("cache hits", std::to_string(cache_hits));
  row("cache misses", std::to_string(cache_misses));
  row("  new graphs", std::to_string(compiles_new_graph));
  for (const auto& [name, n] : {std::pair{"  recompiles: shape", recompiles_shape}, {"  recompiles: dtype", recompiles_dtype},
                                {"  recompiles: attribute", recompiles_attribute},
                                {"  recompiles: alignment", recompiles_alignment},
                                {"  recompiles: evicted", recompiles_evicted}})
    if (n) row(name, std::to_string(n));
  if (compiles_sizes_as_args) {
    row("  with sizes as args", std::to_string(compiles_sizes_as_args));
    row("    resized, no code", std::to_string(executables_resized));
  }
  row("hash collisions", std::to_string(hash_collisions));
  row("compile time", ms(compile_ns));
  row("execute time", ms(execute_ns));
  row("kernels launched", std::to_string(kernels_launched));
  if (compiled_replays) row("compiled replays", std::to_string(compiled_replays));
  row("bytes allocated", std::to_string(bytes_allocated));
  row("buffers allocated", std::to_string(buffers_allocated));
  row("bytes copied back", std::to_string(bytes_copied_back));
  row("disk cache hits", std::to_string(disk_cache_hits));
  row("disk cache misses", std::to_string(disk_cache_misses));
  row("disk cache writes", std::to_string(disk_cache_writes));
  row("disk cache rejected", std::to_string(disk_cache_rejected));
  row("executables cached", std::to_string(executables_cached));
  row("executable cache bytes", std::to_string(executable_cache_bytes));
  row("executables evicted", std::to_string(executables_evicted));
  row("jit compiles", std::to_string(jit_compiles));
  row("kernels compiled", std::to_string(kernels_compiled));
  row("jit compile time", ms(jit_compile_ns));
  if (kernels_compiled) row("per kernel (median)", ms(jit_compile_ns_per_kernel_median));
  if (nvrtc_compiles || cuda_graph_launches) {
    row("nvrtc compiles", std::to_string(nvrtc_compiles));
    row("nvrtc compile time", ms(nvrtc_compile_ns));
    row("cuda graph launches", std::to_string(cuda_graph_launches));
    row("cuda graphs built", std::to_string(cuda_graphs_built));
    row("cuda graph kernels", std::to_string(cuda_graph_kernels));
    row("cuda graph depth", std::to_string(cuda_graph_depth));
    row("cuda argument uploads", std::to_string(cuda_argument_uploads));
    row("cuda graph node updates", std::to_string(cuda_graph_node_updates));
    row("late checks", std::to_string(late_checks));
    row("late check wait", ms(late_check_wait_ns));
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Metrics& m) { return os << m.to_string(); }

void clear_executable_cache() { runtime::executable_cache().clear(); }
size_t executable_cache_size() { return runtime::executable_cache().size(); }
void set_executable_cache_limit(int64_t bytes) { runtime::executable_cache().set_limit(bytes); }
int64_t executable_cache_limit() { return runtime::executable_cache().limit(); }

namespace testing {
void force_graph_hash(uint64_t value) { ir::testing::force_hash(value); }
}  // namespace testing

}  // namespace loom
