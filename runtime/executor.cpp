#include "runtime/executor.h"

#include <loom/error.h>

#include "runtime/backend.h"
#include "runtime/dump.h"
#include "runtime/executable_cache.h"
#include "runtime/log.h"
#include "runtime/metrics.h"
#include "runtime/poison.h"
#include "runtime/recompile.h"

namespace loom::runtime {

namespace {
// The executable this thread ran last, tried before the shared cache: a loop
// that replays one step skips the cache's lock, map and shared_ptr copy. It
// is reused only for the same backend, an unchanged cache (generation) and
// equal canonical words, compared in full as the cache compares them.
// `busy`: a run nested in this one on the same thread (TBB can run a stolen
// task that syncs while waiting inside a kernel) leaves it alone.
struct LastRun {
  const Backend* backend = nullptr;
  uint64_t generation = 0;
  uint64_t hash = 0;
  ir::Words canonical;
  std::shared_ptr<Executable> exe;
  bool busy = false;
};
}  // namespace

namespace {
// Runs `exe` and counts the run (time inside it, graphs, kernels).
void run_counted(Executable& exe, const RunArgs& args, std::vector<BufferPtr>& out) {
  Counters& c = counters();
  const int64_t t0 = now_ns();
  exe.run(args, out);
  bump(c.execute_ns, now_ns() - t0);
  bump(c.graphs_materialized);
  bump(c.kernels_launched, exe.kernel_count());
}
}  // namespace

namespace {
// The metrics' counter of compiles for `r`.
std::atomic<int64_t>& reason_counter(Counters& c, CompileReason r) {
  switch (r) {
    case CompileReason::NewGraph: return c.compiles_new_graph;
    case CompileReason::Shape: return c.recompiles_shape;
    case CompileReason::Dtype: return c.recompiles_dtype;
    case CompileReason::Attribute: return c.recompiles_attribute;
    case CompileReason::Alignment: return c.recompiles_alignment;
    case CompileReason::Evicted: return c.recompiles_evicted;
  }
  return c.compiles_new_graph;  // unreachable: every reason is listed
}
}  // namespace

std::string node_error_message(const ir::Graph& g, const RunError& e) {
  const ir::Node& n = *g.nodes[e.node];
  std::string where = n.line ? std::string(" (called from ") + n.file + ":" + std::to_string(n.line) + ")" : "";
  return "loom: " + std::string(ir::op_name(n.op)) + ": " + e.message + where;
}

void execute(const ir::Graph& g, Device device, std::span<const BufferPtr> targets, std::vector<BufferPtr>& out,
             std::shared_ptr<Executable>* ran, std::unique_ptr<LateCheck>* late) {
  Backend& backend = backend_for(device);
  Counters& c = counters();
  ExecutableCache& cache = executable_cache();
  thread_local LastRun last;
  const bool use_last = !last.busy;
  Executable* run_exe = nullptr;
  std::shared_ptr<Executable> exe;
  if (use_last && last.exe && last.backend == &backend && last.hash == g.hash &&
      last.generation == cache.generation() && last.canonical == g.canonical && last.exe->fits(g.scalars)) {
    run_exe = last.exe.get();  // `last` keeps it alive through the run
    cache.touch(*run_exe);
    bump(c.cache_hits);
    if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "hit  key=%016llx nodes=%zu backend=%s",
                                               static_cast<unsigned long long>(g.hash), g.size(), backend.name());
  } else {
    const uint64_t generation = cache.generation();
    bool collided = false;
    exe = cache.find(backend, g, collided);
    if (collided) bump(c.hash_collisions);
    // The code compiled first may rely on the alignment its first run's view
    // offsets had (Executable::fits); a run whose offsets lack it takes the
    // variant that assumes nothing, compiled once (ExecutableCache::Entry).
    uint8_t variant = 0;
    if (exe && !exe->fits(g.scalars)) {
      variant = 1;
      exe = cache.find(backend, g, collided, variant);
    }
    if (exe) {
    bump(c.cache_hits);
    if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "hit  key=%016llx nodes=%zu backend=%s",
                                               static_cast<unsigned long long>(g.hash), g.size(), backend.name());
    } else {
      bump(c.cache_misses);
      const CompileWhy why = explain_compile(g, backend.name(), variant == 1);
      bump(reason_counter(c, why.reason));
      const ir::Lift lift = backend.takes_sizes_as_args() ? runtime::sizes_as_args(g) : ir::Lift::None;
      // The graph's text only when dumping is on: printing a 1,000-node graph
      // costs more than the reference backend's compile.
      if (std::string folder = dump_folder(g, backend.name()); !folder.empty())
        dump_file(folder, "graph.txt", ir::to_string(g));
      int64_t t0 = now_ns();
      // Whether this compile generated code: the process's count of LLVM
      // and NVRTC compiles (made on TBB's threads too) before and after. A
      // compile on another thread meanwhile would count as this one's.
      const int64_t code_before = c.jit_compiles.load(std::memory_order_relaxed);
      std::shared_ptr<Executable> fresh =
          backend.compile(g, CompileHints{variant == 1, lift, why.reason == CompileReason::NewGraph});
      bump(c.compile_ns, now_ns() - t0);
      const bool sizes_as_args = fresh->sizes_as_args;
      if (why.reason != CompileReason::NewGraph && log_enabled(LogTopic::Recompiles))
        log_line(LogTopic::Recompiles, "key=%016llx nodes=%zu backend=%s %s: %s%s",
                 static_cast<unsigned long long>(g.hash), g.size(), backend.name(), compile_reason_name(why.reason),
                 why.text.c_str(), sizes_as_args ? " [sizes as arguments]" : "");
      const bool resized = sizes_as_args && c.jit_compiles.load(std::memory_order_relaxed) == code_before;
      if (sizes_as_args) bump(c.compiles_sizes_as_args);
      if (resized) bump(c.executables_resized);
      exe = cache.insert(backend, g, std::move(fresh), variant);
      if (log_enabled(LogTopic::Cache))
        log_line(LogTopic::Cache, "miss key=%016llx nodes=%zu backend=%s compiled in %.3f ms%s%s",
                 static_cast<unsigned long long>(g.hash), g.size(), backend.name(), (now_ns() - t0) / 1e6,
                 variant ? " (the variant for view offsets the first compile's code could not take)" : "",
                 resized         ? " (sizes as arguments: every kernel compiled before, lowered anew only)"
                 : sizes_as_args ? " (sizes as arguments)"
                                 : "");
    }
    run_exe = exe.get();
    if (use_last) {  // remembered as it was found: a clear() since then makes it stale at once
      last.backend = &backend;
      last.generation = generation;
      last.hash = g.hash;
      last.canonical.assign(g.canonical.begin(), g.canonical.end());
      last.exe = exe;
    }
  }
  if (ran) *ran = exe ? exe : last.exe;
  if (use_last) last.busy = true;
  struct Unbusy {
    LastRun& l;
    bool on;
    ~Unbusy() {
      if (on) l.busy = false;
    }
  } unbusy{last, use_last};
  if (log_enabled(LogTopic::Graph)) log_block(LogTopic::Graph, ir::to_string(g));

  // The input buffers: on the stack for the usual few, else on the heap.
  constexpr size_t kFew = 16;
  const Buffer* few[kFew];
  std::vector<const Buffer*> many;
  const size_t n_in = g.input_nodes.size();
  if (n_in > kFew) many.resize(n_in);
  const Buffer** inputs = n_in > kFew ? many.data() : few;
  for (size_t k = 0; k < n_in; ++k) {
    const ir::Node& leaf = *g.nodes[g.input_nodes[k]];
    inputs[k] = static_cast<const Buffer*>(leaf.data.get());
    // A value a GPU graph failed to compute (runtime/poison.h): what reads it fails as that graph did.
    if (const std::string* why = inputs[k]->poisoned()) [[unlikely]]
      throw NodeError(*why, g.input_nodes[k]);
    if (leaf.poisoned.load(std::memory_order_relaxed)) [[unlikely]]
      throw NodeError(poison_message(leaf), g.input_nodes[k]);
  }

  try {
    run_counted(*run_exe, RunArgs{std::span<const Buffer* const>(inputs, n_in), g.scalars, targets, late}, out);
  } catch (const RunError& e) {
    throw NodeError(node_error_message(g, e), e.node);
  }
  bump(c.graph_nodes, static_cast<int64_t>(g.size()));
}

void replay(Executable& exe, const RunArgs& args, std::vector<BufferPtr>& out) {
  Counters& c = counters();
  executable_cache().touch(exe);
  bump(c.cache_hits);
  bump(c.compiled_replays);
  run_counted(exe, args, out);
}

}  // namespace loom::runtime
