// Pending lists, sync and materialization. See docs/ARCHITECTURE.md, "sync".
#include "api/src/lazy.h"

#include "api/src/block_pool.h"
#include "api/src/late_checks.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <loom/error.h>
#include <loom/runtime.h>

#include "ir/graph.h"
#include "runtime/executor.h"
#include "runtime/metrics.h"

namespace loom::detail {

namespace {
void note_made_in_trace(const runtime::Buffer* b);  // below, beside the pending lists
}  // namespace

// ---------------------------------------------------------------- Storage

void Storage::throw_error() const { throw Error(*error_); }

void Storage::set_node(ir::NodePtr n) {
  std::lock_guard lock(mu_);
  if (error_) throw Error(*error_);
  node_ = std::move(n);
}

runtime::BufferPtr Storage::owned_buffer() const {
  std::lock_guard lock(mu_);
  return buffer_;
}

void Storage::set_result(const runtime::BufferPtr& result) {
  std::lock_guard lock(mu_);
  if (buffer_ && buffer_ != result) {
    // The run wrote a new buffer for an in-place update (the executable
    // could not donate this one): the tensor keeps its own buffer, which
    // other views and raw pointers may alias.
    runtime::copy_bytes(*buffer_, 0, *result, 0, result->bytes());
    runtime::bump(runtime::counters().bytes_copied_back, static_cast<int64_t>(result->bytes()));
  } else {
    buffer_ = result;
  }
  node_ = input_node(buffer_, dtype, device, node_->shape, node_.get());
}

ir::NodePtr input_node(runtime::BufferPtr data, ScalarType dtype, Device device, const ir::Dims& shape,
                       const ir::Node* from) {
  auto input = make_node();
  input->op = ir::Op::Input;
  if (from) input->file = from->file, input->line = from->line;
  input->dtype = dtype;
  input->device = device;
  input->shape = shape;
  input->data = std::move(data);
  return input;
}

void Storage::set_error(const std::string& message) {
  std::lock_guard lock(mu_);
  error_ = std::make_shared<const std::string>(message);
  node_.reset();
}

bool Storage::restore_pending(const runtime::Buffer* held, ir::NodePtr pending, bool drop_buffer) {
  std::lock_guard lock(mu_);
  if (error_ || !node_ || node_->op != ir::Op::Input || node_->data.get() != held) return false;
  node_ = std::move(pending);
  if (drop_buffer) buffer_.reset();  // the failed run's: not this storage's to offer as a target
  return true;
}

bool Storage::pending() const {
  std::lock_guard lock(mu_);
  return !error_ && node_ && node_->op != ir::Op::Input;
}

ir::NodePtr Storage::pending_node() const {
  std::lock_guard lock(mu_);
  if (error_ || !node_ || node_->op == ir::Op::Input) return nullptr;
  return node_;
}

runtime::BufferPtr Storage::buffer() const {
  std::lock_guard lock(mu_);
  if (error_) throw Error(*error_);
  return node_ && node_->op == ir::Op::Input ? buffer_ : nullptr;
}

void Storage::adopt_buffer(runtime::BufferPtr b) {
  note_made_in_trace(b.get());
  std::lock_guard lock(mu_);
  buffer_ = std::move(b);
}

// ---------------------------------------------------------------- pending lists

namespace {

int64_t initial_max_pending() {
  const char* env = std::getenv("LOOM_MAX_PENDING_NODES");
  return env && *env ? std::atoll(env) : 10000;
}
std::atomic<int64_t> g_max_pending{initial_max_pending()};

// The storages recorded on a thread and not yet computed. The list holds
// them: an entry the list alone holds (use_count 1) is a tensor the user has
// dropped, never computed, let go of at the next sync or drop_dead. A weak
// list (as before) made every dropped tensor's storage take shared_ptr's
// slow path twice (the last use with a weak reference left, then the weak
// reference itself): 0.6 K instructions of W5's 61 K a step (callgrind),
// 2% of its time, and O3's sync 10% faster.
constexpr size_t kFirstDrop = 64;
struct PendingList {
  std::vector<std::shared_ptr<Storage>> storages;
  size_t next_drop = kFirstDrop;  // the size at which add_to_list drops dead entries
  int64_t recorded_since_sync = 0;
  // Where the last automatic cut happened: the line that recorded the node
  // that crossed the bound (count_recorded), null before the first; and
  // how many nodes the last cut ran (0 before the second).
  // A sync the program asked for (not a cut) forgets them: the next cut
  // starts afresh (a loop that syncs each iteration cuts at the same place
  // anyway, its count starting from the sync).
  const char* cut_file = nullptr;
  uint32_t cut_line = 0;
  int64_t cut_period = 0;
  bool cutting = false;  // the sync in progress is an automatic cut
  bool syncing = false;
  bool tracing = false;  // loom::compile is tracing a function on this thread
  uint64_t trace_number = 0;
  std::vector<const runtime::Buffer*> made_in_trace;
  std::vector<ReplayGuard> guards;
  std::vector<ReplayScalar> replay_scalars;
};
// The list is reached through a trivially destructible initial-exec pointer:
// one %fs-relative load per recorded op instead of a __tls_get_addr call and
// a TLS init-guard check. ListOwner frees the list when the thread exits.
__attribute__((tls_model("initial-exec"))) thread_local PendingList* t_list = nullptr;
// Only the list holds `s`: its tensors are gone.
bool dropped(const std::shared_ptr<Storage>& s) { return s.use_count() == 1; }
struct ListOwner {
  ~ListOwner() {
    delete t_list;
    t_list = nullptr;
  }
};
[[gnu::noinline]] PendingList& new_thread_list() {
  // The pools' cleanup first, so that it runs after ListOwner's: a list
  // holds its storages, and freeing them at exit releases nodes.
  register_pool_cleanup();
  thread_local ListOwner owner;  // registered once; a list made after it ran (a thread's own
  (void)owner;                   // exit-time destructors recording ops) is leaked, not dangling
  t_list = new PendingList;
  return *t_list;
}
PendingList& pending_list() {
  if (PendingList* l = t_list) [[likely]] return *l;
  return new_thread_list();
}

// A tensor made from host data while tracing owns its buffer from birth: it
// is not an in-place update of a tensor from before the call.
void note_made_in_trace(const runtime::Buffer* b) {
  PendingList* l = t_list;
  if (l && l->tracing && b) l->made_in_trace.push_back(b);
}

}  // namespace

std::vector<bool> depends_on(const ir::Graph& g, uint32_t bad) {
  std::vector<bool> d(g.size(), false);
  if (bad < g.size()) d[bad] = true;
  for (uint32_t i = bad + 1; i < g.size(); ++i)
    for (uint32_t in : g.inputs_of(i))
      if (d[in]) {
        d[i] = true;
        break;
      }
  return d;
}

namespace {

// A sync's working lists, reused per thread so a steady-state sync allocates
// nothing for them. Emptied (not freed) when the sync ends, so the outputs'
// nodes are released then, exactly as when they were locals.
struct SyncScratch {
  std::vector<std::shared_ptr<Storage>> outs;
  std::vector<ir::NodePtr> out_nodes;
  std::vector<const ir::Node*> raw;
  std::vector<runtime::BufferPtr> targets;
  std::vector<runtime::BufferPtr> results;
  ir::Graph graph;
  bool busy = false;  // a sync inside a sync (never today): it gets a fresh scratch
};

// What a trace's final sync ran (TraceCapture), read while its nodes live.
void fill_capture(TraceCapture& cap, const ir::Graph& g, const SyncScratch& sc) {
  cap.outs = sc.outs;
  cap.targets = sc.targets;
  for (uint32_t k : g.input_nodes) cap.inputs.push_back(g.nodes[k]->data);
  cap.scalars.assign(g.scalars.begin(), g.scalars.end());
  std::vector<std::pair<uint64_t, TraceCapture::Random>> randoms;  // by the offset recording took
  for (uint32_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = *g.nodes[i];
    cap.nodes.push_back({n.op, n.file, n.line});
    if ((n.op == ir::Op::RandUniform || n.op == ir::Op::RandNormal) && n.num_scalars == 2)
      randoms.push_back({static_cast<uint64_t>(n.scalar[1].i), {g.scalar_begin[i], n.numel()}});
  }
  std::sort(randoms.begin(), randoms.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& r : randoms) cap.randoms.push_back(r.second);
  // A replay scalar whose node the graph does not hold fed nothing that
  // was computed: it has no slot to refresh.
  if (!cap.replay_scalars.empty()) {
    std::unordered_map<const ir::Node*, uint32_t> index_of;
    for (uint32_t i = 0; i < g.size(); ++i) index_of.emplace(g.nodes[i], i);
    for (ReplayScalar& r : cap.replay_scalars)
      if (auto it = index_of.find(r.node.get()); it != index_of.end())
        cap.live.push_back({g.scalar_begin[it->second] + r.slot, std::move(r.source), r.index});
    cap.replay_scalars.clear();
  }
}

// A CPU run of milliseconds streams megabytes through the caches, evicting
// the graph just recorded; what follows it (each output's set_result, then
// releasing the nodes) would wait on one cache miss at a time, ~20 us of
// W4's step. Requested together first, the misses overlap. The node lines
// are those release touches (ir/node.h's field order: inputs, scalars,
// data, file, attribute count), for writing, and the output storages.
void prefetch_for_release(const ir::Graph& g, const std::vector<std::shared_ptr<Storage>>& outs) {
  constexpr size_t kNodeLines = 4;
  static_assert(offsetof(ir::Node, attr) < kNodeLines * 64, "release touches the attribute count");
  for (const ir::Node* n : g.nodes)
    for (size_t k = 0; k < kNodeLines; ++k) __builtin_prefetch(reinterpret_cast<const char*>(n) + 64 * k, 1);
  for (const auto& s : outs) __builtin_prefetch(s.get(), 1);
}

void sync_device_with(Device device, PendingList& list, SyncScratch& sc, TraceCapture* capture = nullptr) {
  struct Clear {
    SyncScratch& s;
    ~Clear() {
      s.results.clear();
      s.targets.clear();
      s.out_nodes.clear();
      s.outs.clear();
    }
  } clear{sc};
  std::vector<std::shared_ptr<Storage>>& outs = sc.outs;
  std::vector<ir::NodePtr>& out_nodes = sc.out_nodes;
  size_t keep = 0;
  for (auto& entry : list.storages) {
    std::shared_ptr<Storage> s = std::move(entry);
    if (dropped(s)) continue;  // let go of here
    if (s->device != device) {
      list.storages[keep++] = std::move(s);
      continue;
    }
    s->listed.store(false, std::memory_order_relaxed);
    if (ir::NodePtr n = s->pending_node()) {
      outs.push_back(std::move(s));
      out_nodes.push_back(std::move(n));
    }
  }
  list.storages.resize(keep);
  list.next_drop = std::max(kFirstDrop, 2 * keep);
  if (outs.empty()) {
    wait_for_late_check(device);  // a sync reports an earlier GPU graph's failure with nothing to run too
    return;
  }

  sc.raw.resize(out_nodes.size());
  for (size_t i = 0; i < out_nodes.size(); ++i) sc.raw[i] = out_nodes[i].get();
  ir::Graph& graph = sc.graph;
  ir::build_graph(sc.raw, graph);
  // On a GPU, the check an earlier graph left there is read before this one
  // runs (the graph is built meanwhile: the host works while the GPU
  // finishes that graph), and this graph's may be left for the next one
  // (late_checks.h). A trace's graph is checked at once.
  std::optional<DeviceTurn> turn;
  if (device.is_cuda()) {
    try {
      turn.emplace(device);
    } catch (const LateRunError&) {  // this graph did not run: its outputs stay pending
      for (auto& s : outs) list_pending(s);
      throw;
    }
  }
  std::unique_ptr<runtime::LateCheck> late;
  std::shared_ptr<runtime::Executable> ran;
  const bool check_late = turn && !capture;
  std::vector<runtime::BufferPtr>& results = sc.results;
  try {
    // A storage that already owns a buffer (written in place since it was
    // computed) offers it, so the result can land there without a copy.
    sc.targets.resize(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) sc.targets[i] = outs[i]->owned_buffer();
    runtime::execute(graph, device, sc.targets, results, capture ? &capture->exe : check_late ? &ran : nullptr,
                     check_late ? &late : nullptr);
    if (capture) fill_capture(*capture, graph, sc);
  } catch (const runtime::NodeError& e) {
    // One node failed: only the outputs computed from it are poisoned (keep
    // the error, raise it when read; buffers written before stay intact).
    // The others keep their pending values and are listed again, to run on
    // their next sync.
    const std::vector<bool> failed = depends_on(graph, e.node);
    for (size_t i = 0; i < outs.size(); ++i) {
      if (failed[graph.outputs[i]])
        outs[i]->set_error(e.what());
      else
        list_pending(outs[i]);
    }
    throw;
  } catch (const Error& e) {
    for (auto& s : outs) s->set_error(e.what());  // no node to blame: every output failed
    throw;
  }
  if (device.is_cpu()) prefetch_for_release(graph, outs);
  for (size_t i = 0; i < outs.size(); ++i) outs[i]->set_result(results[i]);
  if (late) turn->leave(std::move(late), std::move(ran), graph, out_nodes, outs, sc.targets, results);
}

void sync_device(Device device, PendingList& list) {
  thread_local SyncScratch scratch;
  if (scratch.busy) {
    SyncScratch fresh;
    sync_device_with(device, list, fresh);
    return;
  }
  scratch.busy = true;
  struct Free {
    SyncScratch& s;
    ~Free() { s.busy = false; }
  } free{scratch};
  sync_device_with(device, list, scratch);
}

// A sync in progress on `list`: a cut inside its own bookkeeping is ignored.
struct SyncingScope {
  PendingList& l;
  explicit SyncingScope(PendingList& list) : l(list) {
    l.syncing = true;
    l.recorded_since_sync = 0;
    if (!l.cutting) l.cut_file = nullptr, l.cut_line = 0, l.cut_period = 0;
  }
  ~SyncingScope() { l.syncing = false; }
};

void sync_list(PendingList& list, const Device* only) {
  if (list.syncing) return;  // a cut inside a sync's own bookkeeping
  if (list.tracing) return;  // deferred to the end of the trace
  SyncingScope scope(list);
  if (only) {
    sync_device(*only, list);
    return;
  }
  while (!list.storages.empty()) {
    std::shared_ptr<Storage> first;
    for (auto& s : list.storages)
      if (!dropped(s)) {
        first = s;
        break;
      }
    if (!first) {
      list.storages.clear();
      break;
    }
    sync_device(first->device, list);
  }
}

}  // namespace

namespace {
void drop_dead(PendingList& list) {
  std::erase_if(list.storages, [](const std::shared_ptr<Storage>& s) { return dropped(s); });
}
// Inlined into every recorded op. (Its copy of `s`, written just before by
// wrap() as two 8-byte stores, must not become one 16-byte load, which the
// CPU cannot forward from them: api/src/ is built without SLP
// vectorization, CMakeLists.txt. A gnu::optimize attribute saying so here
// kept GCC from inlining the function: ~18 instructions an op.)
inline void add_to_list(PendingList& list, const std::shared_ptr<Storage>& s) {
  list.storages.emplace_back(s);
  // Dropped tensors are let go of within kFirstDrop ops, and a long unsynced
  // loop stays bounded; the next pass waits until the list has doubled, so
  // a large live list costs O(1) an op.
  if (list.storages.size() >= list.next_drop) [[unlikely]] {
    drop_dead(list);
    list.next_drop = std::max(kFirstDrop, 2 * list.storages.size());
  }
}
// The nodes a sync would run now: what the live pending tensors need.
int64_t live_pending_nodes(PendingList& list) {
  drop_dead(list);
  std::vector<ir::NodePtr> keep;
  std::vector<const ir::Node*> raw;
  for (auto& s : list.storages)
    if (ir::NodePtr n = s->pending_node()) raw.push_back(n.get()), keep.push_back(std::move(n));
  if (raw.empty()) return 0;
  ir::Graph g;
  ir::build_graph(raw, g);
  return static_cast<int64_t>(g.size());
}

// `written`: the storage whose node was just recorded (its line places a cut).
void count_recorded(PendingList& list, int64_t nodes_recorded, const Storage& written) {
  list.recorded_since_sync += nodes_recorded;
  const int64_t most = g_max_pending.load(std::memory_order_relaxed);
  if (list.recorded_since_sync > most && !list.syncing && !list.tracing) [[unlikely]] {
    // A loop that never reads (text generated token after token) is cut
    // where the previous cut was, at the same line of its body and, from
    // the third cut on, after as many nodes as the last cut ran: the cuts
    // then fall at the same place of the loop each time, so they run one
    // graph (or a few, where that line comes more than once an iteration),
    // compiled once and replayed. Cut anyway once twice that was recorded
    // (the line never came).
    const ir::NodePtr newest = written.pending_node();
    if (!newest) return;
    const int64_t due = std::max(most, list.cut_period);
    if (list.recorded_since_sync < due) return;
    const bool at_last_cut = newest->file == list.cut_file && newest->line == list.cut_line;
    if (list.cut_file && !at_last_cut && list.recorded_since_sync <= 2 * due) return;
    // Most of what was recorded may be dead already (a loop of forward
    // passes whose results are dropped): then a cut would only run the
    // current iteration's half-recorded values, and each cut, falling
    // elsewhere in the loop, would compile a new graph. Cut only when what
    // is alive is large.
    const int64_t live = live_pending_nodes(list);
    if (live * 2 <= most) {
      list.recorded_since_sync = live;
      return;
    }
    list.cut_period = list.cut_file ? list.recorded_since_sync : 0;
    list.cut_file = newest->file;
    list.cut_line = newest->line;
    runtime::bump(runtime::counters().graph_cuts);
    list.cutting = true;
    struct Done {
      PendingList& l;
      ~Done() { l.cutting = false; }
    } done{list};
    sync_list(list, nullptr);
  }
}
}  // namespace

void note_pending(const std::shared_ptr<Storage>& s, int64_t nodes_recorded) {
  PendingList& list = pending_list();
  // A plain load first: an in-place loop re-notes a listed storage every op.
  if (!s->listed.load(std::memory_order_relaxed) && !s->listed.exchange(true, std::memory_order_relaxed))
    add_to_list(list, s);
  count_recorded(list, nodes_recorded, *s);
}

void list_pending(const std::shared_ptr<Storage>& s) {
  if (!s->listed.exchange(true, std::memory_order_relaxed)) add_to_list(pending_list(), s);
}

void note_new_pending(const std::shared_ptr<Storage>& s, int64_t nodes_recorded) {
  PendingList& list = pending_list();
  // No other thread can see `s` yet: a plain store, not an atomic exchange.
  s->listed.store(true, std::memory_order_relaxed);
  add_to_list(list, s);
  count_recorded(list, nodes_recorded, *s);
}

std::vector<ir::NodePtr> pending_outputs(Device device) {
  std::vector<ir::NodePtr> out;
  for (const std::shared_ptr<Storage>& s : pending_list().storages)
    if (!dropped(s) && s->device == device)  // sync_device_with's choice, without its bookkeeping
      if (ir::NodePtr n = s->pending_node()) out.push_back(std::move(n));
  return out;
}

void materialize(const std::shared_ptr<Storage>& s) {
  if (!s->pending()) {
    wait_for_late_check(s->device);  // its value may come from a GPU graph whose check is still out
    s->node();  // raises a stored error
    return;
  }
  PendingList& list = pending_list();
  if (list.tracing)
    throw Error("loom::compile: the function reads a tensor's value while it is traced (item, data_ptr, to_vector, "
                "printing); a compiled function's work must not depend on its data: return the tensor instead");
  Device d = s->device;
  try {
    sync_list(list, &d);
  } catch (const LateRunError&) {
    throw;  // an earlier GPU graph failed (late_checks.h): reported here, once
  } catch (const Error&) {
    // The graph failed at a node `s` is not computed from: the failed values
    // are poisoned now, so a second sync computes the rest, `s` included.
    if (!s->pending()) throw;
    sync_list(list, &d);
  }
  if (s->pending()) {  // recorded on another thread's list: compute it here
    list.storages.emplace_back(s);
    sync_list(list, &d);
  }
  try {
    wait_for_late_check(d);  // the graph just launched may have left its check
  } catch (const LateRunError&) {
    // That GPU graph failed at a node `s` is not computed from (as above,
    // found late): `s` is pending again, and computed now.
    if (!s->pending()) throw;
    sync_list(list, &d);
    wait_for_late_check(d);
  }
  s->node();  // raises the error if this storage's sync failed
}

// ---------------------------------------------------------------- tracing

bool tracing() { return pending_list().tracing; }

bool add_replay_scalar(const Tensor& t, double now, std::shared_ptr<const ReplayScalarSource> source, uint32_t index) {
  PendingList& list = pending_list();
  if (!list.tracing) return true;
  ir::NodePtr n = t.impl()->storage->pending_node();
  if (!n) return false;
  for (uint32_t k = 0; k < n->num_scalars; ++k)
    if (n->scalar[k].f == now) {
      list.replay_scalars.push_back({std::move(n), k, std::move(source), index});
      return true;
    }
  return false;
}

void add_replay_guard(ReplayGuard guard) {
  PendingList& list = pending_list();
  if (list.tracing) list.guards.push_back(std::move(guard));
}

uint64_t trace_number() { return pending_list().trace_number; }

void begin_trace() {
  PendingList& list = pending_list();  // not tracing: CompiledFunction refuses a call inside a trace
  sync_list(list, nullptr);  // what was pending before the call is not part of the function
  list.tracing = true;
  ++list.trace_number;
  list.made_in_trace.clear();
  list.guards.clear();
  list.replay_scalars.clear();
}

void abandon_trace() {
  PendingList& list = pending_list();
  list.tracing = false;
  list.made_in_trace.clear();
  list.guards.clear();
  list.replay_scalars.clear();
}

TraceCapture finish_trace() {
  PendingList& list = pending_list();
  TraceCapture cap;
  cap.made_in_trace = std::move(list.made_in_trace);
  cap.guards = std::move(list.guards);
  cap.replay_scalars = std::move(list.replay_scalars);
  abandon_trace();
  // The device of the first pending storage; a second device is an error.
  std::optional<Device> device;
  for (auto& s : list.storages)
    if (!dropped(s) && s->pending()) {
      device = s->device;
      break;
    }
  if (!device) {
    list.storages.clear();
    return cap;
  }
  SyncScratch sc;
  SyncingScope scope(list);
  cap.device = *device;
  sync_device_with(*device, list, sc, &cap);
  for (auto& s : list.storages)
    if (!dropped(s) && s->pending())
      throw Error("loom::compile: the function left work pending on " + device->str() + " and on " + s->device.str() +
                  "; a compiled function runs on one device");
  return cap;
}

}  // namespace loom::detail

namespace loom {

void sync(Device device) {
  if (!device.has_index()) device = Device(device.type(), 0);
  detail::sync_list(detail::pending_list(), &device);
}

void sync_all() { detail::sync_list(detail::pending_list(), nullptr); }
void sync() { sync_all(); }

void set_max_pending_nodes(int64_t n) { detail::g_max_pending.store(n < 1 ? 1 : n); }
int64_t max_pending_nodes() { return detail::g_max_pending.load(); }

}  // namespace loom
