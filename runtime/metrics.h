// Process-wide counters behind loom::metrics(). Relaxed atomics: a counter
// increment costs a few nanoseconds on the recording path.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace loom::runtime {

struct Counters {
  std::atomic<int64_t> nodes_recorded{0};  // by threads that exited (see count_node_recorded)
  std::atomic<int64_t> graphs_materialized{0};
  std::atomic<int64_t> graph_nodes{0};
  std::atomic<int64_t> graph_cuts{0};
  std::atomic<int64_t> cache_hits{0};
  std::atomic<int64_t> cache_misses{0};
  std::atomic<int64_t> compiles_new_graph{0};  // cache misses by runtime::CompileReason
  std::atomic<int64_t> recompiles_shape{0};
  std::atomic<int64_t> recompiles_dtype{0};
  std::atomic<int64_t> recompiles_attribute{0};
  std::atomic<int64_t> recompiles_alignment{0};
  std::atomic<int64_t> recompiles_evicted{0};
  std::atomic<int64_t> hash_collisions{0};
  std::atomic<int64_t> compile_ns{0};
  std::atomic<int64_t> execute_ns{0};
  std::atomic<int64_t> kernels_launched{0};
  std::atomic<int64_t> bytes_allocated{0};
  std::atomic<int64_t> buffers_allocated{0};
  std::atomic<int64_t> bytes_copied_back{0};
  std::atomic<int64_t> disk_cache_hits{0};
  std::atomic<int64_t> disk_cache_misses{0};
  std::atomic<int64_t> disk_cache_writes{0};
  std::atomic<int64_t> disk_cache_rejected{0};
  std::atomic<int64_t> jit_compiles{0};      // graphs compiled by LLVM/NVRTC (not loaded from disk)
  std::atomic<int64_t> kernels_compiled{0};  // generated kernels in those graphs (distinct functions)
  std::atomic<int64_t> jit_compile_ns{0};    // time in LLVM/NVRTC only
  std::atomic<int64_t> nvrtc_compiles{0};    // NVRTC programs compiled (graphs and the library module)
  std::atomic<int64_t> nvrtc_compile_ns{0};
  std::atomic<int64_t> cuda_graph_launches{0};  // cache-hit replays launched as one CUDA graph
  std::atomic<int64_t> cuda_graphs_built{0};
  std::atomic<int64_t> cuda_graph_kernels{0};  // kernel nodes in the graphs built
  std::atomic<int64_t> cuda_graph_depth{0};    // their longest dependency chains (runtime/cuda/launch_graph.h)
  std::atomic<int64_t> cuda_argument_uploads{0};  // runs that copied their argument block to the GPU
  std::atomic<int64_t> cuda_graph_node_updates{0};  // GEMM nodes of a built graph given new operand addresses
  std::atomic<int64_t> late_checks{0};     // GPU runs whose bad-data check was read at a later sync
  std::atomic<int64_t> late_check_wait_ns{0};  // time waiting for those checks (also in execute_ns)
  std::atomic<int64_t> compiled_replays{0};       // loom::compile calls that ran their executable without recording
  std::atomic<int64_t> executables_evicted{0};    // dropped from the executable cache to stay within its bound
  std::atomic<int64_t> compiles_sizes_as_args{0};  // cache misses compiled with sizes as arguments (ir::SizeArgs)
  std::atomic<int64_t> executables_resized{0};     // of those, the ones that compiled no code: every function existed
};

Counters& counters();

// Records one LLVM/NVRTC compile of `kernels` kernels that took `ns`, for
// the median compile time per kernel that loom::metrics() reports.
void record_compile(int64_t kernels, int64_t ns);
int64_t median_compile_ns_per_kernel();
void reset_compile_records();

inline void bump(std::atomic<int64_t>& c, int64_t by = 1) { c.fetch_add(by, std::memory_order_relaxed); }

// Nodes recorded, the one counter of the recording path: counted per thread
// (only its own thread writes it, so a plain add, where a shared counter's
// locked add was a quarter of making a node) and summed by loom::metrics().
// Counters::nodes_recorded holds what exited threads counted.
namespace node_count_internal {
extern constinit __attribute__((tls_model("initial-exec"))) thread_local std::atomic<int64_t>* t_count;
std::atomic<int64_t>* register_thread();
}  // namespace node_count_internal
inline void count_node_recorded() {
  std::atomic<int64_t>* c = node_count_internal::t_count;
  if (!c) [[unlikely]]
    c = node_count_internal::register_thread();
  c->store(c->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
// Every thread's count, exited threads included, minus what reset_metrics() zeroed.
int64_t nodes_recorded();
void reset_nodes_recorded();

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace loom::runtime
