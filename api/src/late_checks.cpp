// Late bad-data checks of GPU graphs: see late_checks.h.
#include "api/src/late_checks.h"

#include <array>
#include <atomic>
#include <optional>
#include <string>

#include "api/src/lazy.h"
#include "runtime/executor.h"
#include "runtime/metrics.h"
#include "runtime/poison.h"

namespace loom::detail {

struct LateSlot {
  std::mutex mu;
  std::atomic<bool> left{false};  // run.check is set: lets a read skip the lock when there is none
  LateRun run;
  // The nodes of a run whose check was read, released when the turn ends:
  // after the turn's own graph is launched, not between the GPU finishing
  // the last graph and starting the next.
  std::vector<ir::NodePtr> retired;
};

namespace {

constexpr int kMaxDevices = 16;  // as runtime/cuda/context.cpp

LateSlot& slot_of(Device device) {
  // Never destroyed: a check left at exit would wait on a GPU whose driver
  // may be gone by then.
  static auto* slots = new std::array<LateSlot, kMaxDevices>;
  const int index = device.index() < 0 ? 0 : device.index();
  if (index >= kMaxDevices) throw Error("loom: invalid CUDA device index " + std::to_string(index));
  return (*slots)[static_cast<size_t>(index)];
}

// Empties `run`, keeping its vectors' capacity for the next one. Its nodes
// are released here: a deferred check moves a graph's release from its own
// sync to the one that reads its check.
void clear(LateRun& run) {
  run.check.reset();
  run.exe.reset();
  run.out_nodes.clear();
  run.outs.clear();
  run.leaves.clear();
  run.held.clear();
  run.written.clear();
}

// The failure handling of a sync (lazy.cpp), done late. The GPU skipped
// the graph's work after the bad node, so every value it handed out is
// poisoned (runtime/poison.h): what was recorded on them since fails when it
// runs, with this message. Outputs computed from the bad node keep the
// error; the others get their pending nodes back and are listed again (as
// on the CPU), unless a copy after the run overwrote their own buffer or
// something was written into them since: those keep the error too.
[[noreturn]] void report(LateRun& run, const runtime::RunError& err) {
  using Written = LateRun::Written;
  const std::string message = runtime::node_error_message(run.graph, err);
  const std::vector<bool> failed = depends_on(run.graph, err.node);
  for (size_t i = 0; i < run.outs.size(); ++i) {
    runtime::BufferPtr b = run.held[i].lock();
    const Written w = run.written[i];
    // A donated buffer still holds the value before the update, which the
    // leaves made before it read: only the run's own leaf is wrong.
    if (w == Written::Donated) {
      if (ir::NodePtr leaf = run.leaves[i].lock()) runtime::poison_leaf(leaf, message);
    } else if (b) {
      b->poison(message);
    }
    std::shared_ptr<Storage> s = run.outs[i].lock();
    if (!s) continue;
    if (!failed[run.graph.outputs[i]] && w != Written::CopiedIn && b &&
        s->restore_pending(b.get(), run.out_nodes[i], /*drop_buffer=*/w == Written::Fresh))
      list_pending(s);
    else
      s->set_error(message);
  }
  clear(run);
  throw LateRunError(message);
}

// Reads the check left in `s` (its lock held), if any.
void read_left(LateSlot& s) {
  if (!s.run.check) return;
  const int64_t t0 = runtime::now_ns();
  std::optional<runtime::RunError> err;
  try {
    err = s.run.check->wait();
  } catch (const Error& e) {  // the driver failed: no output of the graph can be trusted
    s.left.store(false, std::memory_order_relaxed);
    for (auto& w : s.run.outs)
      if (std::shared_ptr<Storage> st = w.lock()) st->set_error(e.what());
    clear(s.run);
    throw;
  }
  const int64_t waited = runtime::now_ns() - t0;
  runtime::bump(runtime::counters().late_check_wait_ns, waited);
  runtime::bump(runtime::counters().execute_ns, waited);  // waiting for kernels, as a synchronous run does
  s.left.store(false, std::memory_order_relaxed);
  if (err) report(s.run, *err);
  std::swap(s.run.out_nodes, s.retired);
  clear(s.run);
}

}  // namespace

DeviceTurn::DeviceTurn(Device device) : slot_(slot_of(device)), lock_(slot_.mu) { read_left(slot_); }

DeviceTurn::~DeviceTurn() { slot_.retired.clear(); }

void DeviceTurn::leave(std::unique_ptr<runtime::LateCheck> check, std::shared_ptr<runtime::Executable> exe,
                       ir::Graph& graph, std::vector<ir::NodePtr>& out_nodes,
                       const std::vector<std::shared_ptr<Storage>>& outs,
                       const std::vector<runtime::BufferPtr>& targets,
                       const std::vector<runtime::BufferPtr>& results) {
  LateRun& r = slot_.run;  // empty: the constructor read what was left
  r.check = std::move(check);
  r.exe = std::move(exe);
  std::swap(r.graph, graph);
  std::swap(r.out_nodes, out_nodes);
  for (size_t i = 0; i < outs.size(); ++i) {
    r.outs.emplace_back(outs[i]);
    r.leaves.emplace_back(outs[i]->node());
    r.held.emplace_back(outs[i]->owned_buffer());
    const bool own = i < targets.size() && targets[i] != nullptr;
    r.written.push_back(!own ? LateRun::Written::Fresh
                             : targets[i] == results[i] ? LateRun::Written::Donated : LateRun::Written::CopiedIn);
  }
  runtime::bump(runtime::counters().late_checks);
  slot_.left.store(true, std::memory_order_release);
}

void wait_for_late_check(Device device) {
  if (!device.is_cuda() || !slot_of(device).left.load(std::memory_order_acquire)) return;
  DeviceTurn turn(device);  // reads it
}

}  // namespace loom::detail
