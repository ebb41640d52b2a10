// The few explicitly lazy parts of the API: sync, metrics, explain, and the
// runtime's switches (backend, graph-size bound).
#pragma once
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include <loom/device.h>
#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom {

// Computes every live pending tensor of this thread on `device` in one graph
// (PyTorch Lazy Tensors' mark_step). On the CPU it returns once the results
// are valid; on a GPU the graph is queued on loom's stream and the call
// returns at once: reading a value (item, to_vector, printing, to(kCPU))
// waits for it, and loom::cuda::synchronize() waits for everything. A GPU
// graph that fails on bad data (an index or label out of range, an integer
// division by zero) is reported by the next of those, or by the next sync
// on that GPU, before anything else runs there; on the CPU, by this call.
void sync(Device device);
// Syncs every device this thread has pending work on, one graph per device.
void sync();
void sync_all();

// Counters since process start (or reset_metrics). Thread-safe snapshot.
struct Metrics {
  int64_t nodes_recorded = 0;      // ops recorded by the API
  int64_t graphs_materialized = 0; // graphs executed (hits + misses)
  int64_t graph_nodes = 0;         // nodes in those graphs, summed
  int64_t graph_cuts = 0;          // automatic syncs because a graph grew past the bound
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;        // each one is a compile, counted by reason below
  // Why each compile happened (LOOM_LOG=recompiles prints the others'
  // differences): the first graph of its structure (ops, wiring, ranks,
  // backend), or one like a graph compiled before whose inputs' shape or
  // dtype, or an op's attributes, differ; the same graph again with view
  // offsets its code could not take, or after it was evicted.
  int64_t compiles_new_graph = 0;
  int64_t recompiles_shape = 0;
  int64_t recompiles_dtype = 0;
  int64_t recompiles_attribute = 0;
  int64_t recompiles_alignment = 0;
  int64_t recompiles_evicted = 0;
  int64_t hash_collisions = 0;     // equal hashes whose canonical forms differed
  int64_t compile_ns = 0;          // time in Backend::compile
  int64_t execute_ns = 0;          // time in Executable::run
  int64_t kernels_launched = 0;    // kernels (or reference nodes) executed
  int64_t bytes_allocated = 0;     // buffer bytes allocated
  int64_t buffers_allocated = 0;
  int64_t bytes_copied_back = 0;   // results copied into a tensor's existing buffer after a run: an
                                   // in-place update the executable could not write in place
  int64_t disk_cache_hits = 0;     // compiled artifacts loaded from LOOM_CACHE_DIR
  int64_t disk_cache_misses = 0;
  int64_t disk_cache_writes = 0;
  int64_t disk_cache_rejected = 0; // corrupt or stale files found, deleted, never loaded
  int64_t jit_compiles = 0;        // graphs compiled by LLVM or NVRTC (0 when all came from the disk cache)
  int64_t kernels_compiled = 0;    // generated kernels in those graphs (kernels alike share one function and count once)
  int64_t jit_compile_ns = 0;      // time inside LLVM (optimize + codegen + link) or NVRTC
  int64_t jit_compile_ns_per_kernel_median = 0;  // median over compiles of time / kernels
  int64_t nvrtc_compiles = 0;      // CUDA programs compiled by NVRTC (0 when all came from the disk cache)
  int64_t nvrtc_compile_ns = 0;
  int64_t cuda_graph_launches = 0; // cache-hit replays on a GPU, each one CUDA graph launch
  int64_t cuda_graphs_built = 0;   // CUDA graphs built (one per argument set of a program)
  int64_t cuda_graph_kernels = 0;  // kernel nodes in those graphs
  int64_t cuda_graph_depth = 0;    // their longest chains of kernels that wait for each other, summed:
                                   // equal to cuda_graph_kernels when every kernel waits for the one before
  int64_t cuda_argument_uploads = 0;  // runs whose buffer addresses or scalars differed from both cached
                                      // argument blocks, so they were copied to the GPU first
  int64_t cuda_graph_node_updates = 0;  // matrix-product kernels of a cached CUDA graph given other operand
                                        // buffers (their addresses are launch parameters, not in the block)
  int64_t late_checks = 0;         // GPU graphs that can fail on bad data (an index out of range) whose
                                   // check was read at the next sync, read or cuda::synchronize
                                   // instead of when they were launched
  int64_t late_check_wait_ns = 0;  // host time spent waiting for those checks (part of execute_ns)
  int64_t compiled_replays = 0;       // calls of loom::compile'd functions that ran their executable
                                      // without recording (also counted as cache hits)
  int64_t executables_cached = 0;     // executables in the in-memory cache now
  int64_t executable_cache_bytes = 0; // what they hold now (code, arenas, argument blocks), host and device
  int64_t executables_evicted = 0;    // dropped, least recently used first, to stay within the bound
  // Sizes as arguments (loom::set_dynamic_shapes): compiles whose kernels
  // take sizes as arguments (those that changed, or all), and of those the
  // ones that generated no code because every kernel's function was
  // compiled before (at other sizes, or on disk): a lowering only.
  int64_t compiles_sizes_as_args = 0;
  int64_t executables_resized = 0;
  std::string to_string() const;   // an aligned two-column table
};
Metrics metrics();
void reset_metrics();

// The log topics, as LOOM_LOG names them ("recompiles", "cache,graph",
// "all"; "" for none), set from code: replaces what LOOM_LOG said, as
// torch._logging.set_logs does. Lines go to stderr.
void set_log(const std::string& topics);
std::ostream& operator<<(std::ostream& os, const Metrics& m);

// When a graph's sizes are arguments of its kernels instead of constants
// in them (torch.compile's `dynamic=`; docs/ARCHITECTURE.md, "Sizes that
// change"). A size that is an argument is read at run time instead of
// being a constant of the code (0 and 1 never are: they decide code, a
// broadcast, a size-1 loop), so the same compiled kernels run the graph at
// other sizes: a new size costs a lowering (milliseconds), not a compile.
//   Automatic (the default): a kernel compiles with constant sizes; once a
//     kernel of the same shape comes with other sizes (the same graph at
//     another batch or length, or another graph with that kernel: a
//     model's first call that also casts its weights for autocast), the
//     sizes that changed (the batch, the length; not the model's widths)
//     are arguments from then on, as torch.compile's automatic dynamic.
//     A graph reading a tensor marked by mark_dynamic takes all its sizes
//     as arguments from its first compile.
//   Always: every compile, all sizes (the benchmark rows beside the static ones).
//   Never: every shape compiles its own constant-size kernels.
// LOOM_DYNAMIC=auto|always|never sets the default. Returns the previous mode.
enum class DynamicShapes { Automatic, Always, Never };
DynamicShapes set_dynamic_shapes(DynamicShapes mode);

// Marks t (a data set, a batch, a prompt) as one whose sizes change between
// calls, as torch._dynamo.mark_dynamic: every graph that reads it compiles
// with sizes as arguments from its first compile, so the next size (a short
// last batch, a longer prompt) compiles no code. loom lifts all of such a
// graph's sizes, not one dimension. Materializes t.
void mark_dynamic(const Tensor& t, SourceLoc loc = SourceLoc::current());

// The graph the next sync of t's device would run (t's pending value and
// every other live pending tensor of this thread on that device), one node
// per line with its source line, numbered as that sync, LOOM_LOG=fusion and
// LOOM_DUMP_DIR number them; nothing runs. For a materialized t, its own
// one-node graph.
std::string explain(const Tensor& t, SourceLoc loc = SourceLoc::current());

// Backend used for CPU graphs: "llvm" (fused kernels compiled in-process,
// the default) or "reference" (node-by-node C++, the test oracle);
// LOOM_BACKEND sets the default. Returns the previous name.
std::string set_backend(const std::string& name);
std::string backend_name(DeviceType device = kCPU);

// A thread's pending graph is synced automatically once this many nodes have
// been recorded since its last sync (LOOM_MAX_PENDING_NODES, default 10000)
// and more than half of that many are still pending and alive (values
// recorded and dropped do not count).
void set_max_pending_nodes(int64_t n);
int64_t max_pending_nodes();

// Drops every cached executable (tests and benchmarks of cold starts).
void clear_executable_cache();
size_t executable_cache_size();
// The in-memory executable cache's bound in bytes (Metrics::
// executable_cache_bytes): past it, the executables used least recently are
// evicted and their code, arenas and GPU modules released once no run uses
// them; the disk cache keeps their objects, so a graph that comes back is
// loaded, not compiled. Default 4 GiB, or LOOM_EXECUTABLE_CACHE_BYTES
// (e.g. 512M, 8G); 0 for no bound. Lowering it evicts at once.
void set_executable_cache_limit(int64_t bytes);
int64_t executable_cache_limit();

namespace testing {
// Makes every graph hash to `value` (0 turns it off), to prove that a hash
// collision is detected by comparing canonical forms. Tests only.
void force_graph_hash(uint64_t value);
// Builds the canonical form and XXH3 key of the pending graph behind `t`
// exactly as a sync would (same code, same reused per-thread buffers), but
// runs nothing. `nodes` (if given) receives the graph's node count. For the
// O2 benchmark (bench/) and for hash tests.
uint64_t graph_key(const Tensor& t, size_t* nodes = nullptr);
// A weak reference to the node that holds `t`'s value now (pending or an
// Input leaf), to prove that a sync releases the graph it ran. Tests only.
std::weak_ptr<const void> node_ref(const Tensor& t);
}  // namespace testing

}  // namespace loom
#pragma GCC visibility pop
