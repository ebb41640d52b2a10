// The lazy core: each thread's pending list of storages, and the sync that
// turns every live pending storage of a device into one graph, runs it, and
// hands each storage its buffer.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include <loom/device.h>
#include <loom/tensor.h>

#include "api/src/tensor_impl.h"
#include "ir/graph.h"
#include "runtime/backend.h"

namespace loom::detail {

// Adds a storage that just became pending to this thread's list, and cuts
// the graph (syncs) once more nodes than max_pending_nodes() were recorded.
void note_pending(const std::shared_ptr<Storage>& s, int64_t nodes_recorded);
// The same for a storage created just now by this thread (wrap()), which no
// other thread can have listed yet.
void note_new_pending(const std::shared_ptr<Storage>& s, int64_t nodes_recorded);
// The references pending lists hold on `s`: 1 while it is listed (a list
// holds what it lists until its sync), else 0. For code that reasons about
// who else can reach a storage (AccumulateGrad adopting a gradient).
inline long pending_list_refs(const Storage& s) { return s.listed.load(std::memory_order_relaxed) ? 1 : 0; }
// Lists a storage that is pending again (after a failed run, late_checks.cpp
// too) on this thread's list; never syncs.
void list_pending(const std::shared_ptr<Storage>& s);

// The Input node of a materialized storage: `data` holds its value.
// An Input leaf over `data`; `from` (if any): the node whose value it now
// holds, whose file:line it keeps (LOOM_LOG=recompiles names where an input
// was recorded).
ir::NodePtr input_node(runtime::BufferPtr data, ScalarType dtype, Device device, const ir::Dims& shape,
                       const ir::Node* from = nullptr);

// Materializes `s` (and with it everything pending on its device).
void materialize(const std::shared_ptr<Storage>& s);
// The nodes the next sync of `device` on this thread would make its graph's
// outputs, in its order (so loom::explain numbers nodes as the sync's
// graph, LOOM_LOG=fusion and the dumps do). Nothing runs.
std::vector<ir::NodePtr> pending_outputs(Device device);

// For each node of g: whether its value is computed from node `bad`.
std::vector<bool> depends_on(const ir::Graph& g, uint32_t bad);

// Host state that a traced function reads and moves on, and that a replay,
// which runs no host code, would leave behind: an optimizer's step counts,
// and the numbers (learning rate, bias corrections) it records as runtime
// scalars, which a replay takes from the trace (api/src/optim/optimizer.cpp).
// Registered while tracing (ignored otherwise). Before each replay
// loom::compile asks every guard of the trace whether the traced code would
// record the same graph with the same numbers now; if one says no, it traces
// the function again (the same graph: no compile), else it advances them all.
struct ReplayGuard {
  std::function<bool()> unchanged;
  std::function<void()> advance;  // moves the host state on as one run of the traced code would
};
// Runtime scalars of a trace that each replay recomputes instead of taking
// the traced values (an optimizer's learning rate and bias corrections):
// value(i) is the i-th number a source registered, as of the replay about
// to run (called before the guards advance). One source per registrant and
// trace, so a replay reads what they depend on from one place.
struct ReplayScalarSource {
  virtual ~ReplayScalarSource() = default;
  virtual double value(uint32_t i) const = 0;
};
struct ReplayScalar {
  ir::NodePtr node;   // kept alive until the trace's sync finds its slot
  uint32_t slot = 0;  // which of the node's scalars
  std::shared_ptr<const ReplayScalarSource> source;
  uint32_t index = 0;
};
// While tracing: registers the scalar slot of t's node that holds `now` as
// source->value(index). False (nothing registered) if no slot of that node
// holds it, or t is not pending: the caller then makes the trace refuse
// replays (a ReplayGuard). True and nothing done outside a trace.
bool add_replay_scalar(const Tensor& t, double now, std::shared_ptr<const ReplayScalarSource> source, uint32_t index);

// Tracing, for loom::compile (api/src/compile.cpp). Between begin_trace and
// finish_trace the thread records as usual, but a sync is deferred to the
// end of the trace (an optimizer's step() syncs; it is one graph anyway)
// and reading a value is an error: a traced function's graph must not
// depend on its data. finish_trace runs everything pending as one graph
// and says what it ran, so the caller can run it again without recording.
struct TraceCapture {
  std::shared_ptr<runtime::Executable> exe;         // null: nothing was pending
  Device device{kCPU, 0};                           // where exe runs
  std::vector<std::shared_ptr<Storage>> outs;       // per graph output, the storage it computed
  std::vector<runtime::BufferPtr> targets;          // per output, the buffer the storage owned before (or null)
  std::vector<std::shared_ptr<const ir::DataRef>> inputs;  // per graph input node, its data
  std::vector<ir::RtScalar> scalars;
  struct Random {           // a random node: its two scalars are (seed, offset) of numel counters
    uint32_t scalar = 0;    // index of the seed in `scalars`
    int64_t numel = 0;
  };
  std::vector<Random> randoms;  // in the order their counters were taken while recording
  struct Where {            // per node, for the messages of a failed replay
    ir::Op op;
    const char* file;
    uint32_t line;
  };
  std::vector<Where> nodes;
  std::vector<const runtime::Buffer*> made_in_trace;  // buffers of tensors made from host data while tracing
  std::vector<ReplayGuard> guards;                  // add_replay_guard's, in the order they came
  struct Live {              // a replay scalar (above), found in the graph
    uint32_t scalar = 0;     // index in `scalars`
    std::shared_ptr<const ReplayScalarSource> source;
    uint32_t index = 0;
  };
  std::vector<Live> live;
  std::vector<ReplayScalar> replay_scalars;  // add_replay_scalar's, until the sync finds them
};
void add_replay_guard(ReplayGuard guard);
// Counts begin_trace calls on this thread: tells one trace from the next.
uint64_t trace_number();
void begin_trace();
TraceCapture finish_trace();  // also ends the trace; throws (and ends it) if the graph fails
void abandon_trace();         // ends a trace whose function threw
bool tracing();

}  // namespace loom::detail
