// loom::compile (api/include/loom/compile.h): trace a function once per
// argument signature, then replay the executable its trace ran.
//
// The trace is an ordinary lazy run of the function (api/src/lazy.cpp's
// begin_trace / finish_trace), whose final sync reports what it ran: the
// executable, the data of each graph input, the storage each graph output
// computed. From that the trace works out where each piece comes from at a
// later call, as a small table (Trace below):
//
//   graph input k   <- argument i's buffer, or a buffer captured at the trace
//   graph output j  -> argument i's storage (in place), a storage from before
//                      the call (in place), or a new storage for a result
//   result r        =  a view of output j, of argument i, or of a kept storage
//
// A replay fills the executable's RunArgs from that table and runs it
// (runtime::replay): no node is recorded, no graph built or hashed.
#include <loom/compile.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>

#include <loom/autograd.h>
#include <loom/error.h>
#include <loom/runtime.h>

#include "api/src/late_checks.h"
#include "api/src/lazy.h"
#include "api/src/record.h"
#include "runtime/executable_cache.h"
#include "runtime/executor.h"

namespace loom {

namespace {

using detail::Storage;
using detail::ViewSpec;

[[noreturn]] void fail(const SourceLoc& loc, const std::string& what) {
  throw Error("loom::compile: " + what + " (called from " + loc.file_name() + ":" + std::to_string(loc.line()) + ")");
}

// What a trace depends on about one argument.
struct ArgKey {
  ScalarType dtype;
  Device device;
  int64_t storage_numel;
  ir::Dims sizes, strides;
  int64_t offset;
  bool requires_grad;
  int alias;  // the first earlier argument with the same storage, or -1
  bool operator==(const ArgKey&) const = default;
};

struct Signature {
  std::vector<ArgKey> args;
  bool grad_mode;
  bool operator==(const Signature&) const = default;
};

Signature signature_of(const std::vector<Tensor>& args, const SourceLoc& loc) {
  Signature s{{}, GradMode::is_enabled()};
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].defined()) fail(loc, "argument " + std::to_string(i) + " is an undefined tensor");
    const detail::TensorImpl& t = *args[i].impl();
    int alias = -1;
    for (size_t e = 0; e < i && alias < 0; ++e)
      if (args[e].impl()->storage == t.storage) alias = static_cast<int>(e);
    s.args.push_back({t.storage->dtype, t.storage->device, t.storage->numel, t.view.sizes, t.view.strides,
                      t.view.offset, t.requires_grad, alias});
  }
  return s;
}

// Where a graph input's data comes from at a call.
struct InputSource {
  int arg = -1;                                // an argument's buffer, or
  std::shared_ptr<const ir::DataRef> captured;  // the buffer the trace read
};

// What becomes of a graph output at a call.
struct OutputSink {
  enum Kind { InPlaceArg, InPlaceKept, New } kind = New;
  int arg = -1;                    // InPlaceArg
  std::shared_ptr<Storage> kept;   // InPlaceKept: a storage from before the trace
  ScalarType dtype = kFloat;       // New: the storage to make
  Device device{kCPU, 0};
  int64_t numel = 0;
  ir::Dims leaf_shape;             // its Input node's shape, as the trace left it
};

// A result of the function: a view of one of these.
struct ResultSource {
  enum Kind { Output, Arg, Kept } kind = Output;
  int index = -1;                  // Output: graph output; Arg: argument
  std::shared_ptr<Storage> kept;   // Kept: a storage the function returned untouched
  ViewSpec view;
};

struct Trace {
  Signature key;
  std::shared_ptr<runtime::Executable> exe;  // null: the function computes nothing
  Device device{kCPU, 0};                    // where exe runs
  std::vector<InputSource> inputs;
  std::vector<ir::RtScalar> scalars;
  std::vector<detail::TraceCapture::Random> randoms;
  std::vector<detail::TraceCapture::Where> nodes;
  std::vector<OutputSink> outputs;
  std::vector<ResultSource> results;
  std::vector<detail::ReplayGuard> guards;   // host state the trace depends on (lazy.h)
  std::vector<detail::TraceCapture::Live> live;  // scalars each replay recomputes (lazy.h)
  // The executable cache's generation before the trace: exe is remembered
  // outside the cache, so it is replayed only while no clear() dropped it
  // (loom::clear_executable_cache, a change of TF32 mode).
  uint64_t cache_generation = 0;
  // Reused by every replay (the State's mutex serializes them).
  std::vector<const runtime::Buffer*> input_buffers;
  std::vector<runtime::BufferPtr> targets, produced;
};

std::shared_ptr<Storage> storage_of(const Tensor& t) { return t.impl()->storage; }

// A materialized storage holding `buffer` (what Storage::set_result leaves).
std::shared_ptr<Storage> new_storage(const OutputSink& o, runtime::BufferPtr buffer) {
  auto s = std::make_shared<Storage>(detail::input_node(buffer, o.dtype, o.device, o.leaf_shape), o.dtype, o.device,
                                     o.numel);
  s->adopt_buffer(std::move(buffer));
  return s;
}

Tensor view_of(std::shared_ptr<Storage> s, const ViewSpec& v) {
  return Tensor(std::make_shared<detail::TensorImpl>(std::move(s), v.sizes, v.strides, v.offset));
}

// Runs `fn` as a trace and works out the replay table.
std::vector<Tensor> trace(const TensorFunction& fn, const std::vector<Tensor>& args, Signature key, Trace& t,
                          const SourceLoc& loc) {
  t.cache_generation = runtime::executable_cache().generation();
  detail::begin_trace();  // syncs what was pending: every argument now has its buffer
  // An error inside the function or its graph names the call it came from.
  auto in_trace = [&](const Error& e) {
    return Error(std::string(e.what()) + " (in the trace of a compiled function called from " + loc.file_name() + ":" +
                 std::to_string(loc.line()) + ")");
  };
  std::vector<const runtime::Buffer*> arg_buffers;
  for (const Tensor& a : args) arg_buffers.push_back(storage_of(a)->owned_buffer().get());
  std::vector<Tensor> results;
  try {
    results = fn(args);
  } catch (const Error& e) {
    detail::abandon_trace();
    throw in_trace(e);
  } catch (...) {
    detail::abandon_trace();
    throw;
  }
  for (size_t r = 0; r < results.size(); ++r) {
    const char* bad = !results[r].defined() ? "is undefined" : results[r].grad_fn() ? "has a grad_fn" : nullptr;
    if (!bad) continue;
    detail::abandon_trace();
    fail(loc, "result " + std::to_string(r) + " of the function " + bad +
                  (results[r].defined() ? " (" + results[r].grad_fn()->name() +
                                              "); a replay records no history: return it detached (.detach())"
                                        : std::string()));
  }
  detail::TraceCapture cap;
  try {
    cap = detail::finish_trace();  // ends the trace, also when it throws
  } catch (const Error& e) {
    throw in_trace(e);
  }
  t.key = std::move(key);
  t.exe = cap.exe;
  t.device = cap.device;
  t.scalars = std::move(cap.scalars);
  t.randoms = std::move(cap.randoms);
  t.nodes = std::move(cap.nodes);
  t.guards = std::move(cap.guards);
  t.live = std::move(cap.live);
  for (auto& data : cap.inputs) {
    InputSource src;
    for (size_t i = 0; i < args.size() && src.arg < 0; ++i)
      if (arg_buffers[i] && static_cast<const ir::DataRef*>(arg_buffers[i]) == data.get()) src.arg = static_cast<int>(i);
    if (src.arg < 0) src.captured = std::move(data);
    t.inputs.push_back(std::move(src));
  }
  for (size_t j = 0; j < cap.outs.size(); ++j) {
    const std::shared_ptr<Storage>& s = cap.outs[j];
    OutputSink o;
    for (size_t i = 0; i < args.size() && o.arg < 0; ++i)
      if (storage_of(args[i]) == s) o.arg = static_cast<int>(i);
    const runtime::Buffer* before = cap.targets[j].get();
    const bool made_here = std::find(cap.made_in_trace.begin(), cap.made_in_trace.end(), before) != cap.made_in_trace.end();
    if (o.arg >= 0) {
      o.kind = OutputSink::InPlaceArg;
    } else if (before && !made_here) {
      o.kind = OutputSink::InPlaceKept;
      o.kept = s;
    } else {
      o.kind = OutputSink::New;
      o.dtype = s->dtype;
      o.device = s->device;
      o.numel = s->numel;
      o.leaf_shape = s->node()->shape;
    }
    t.outputs.push_back(std::move(o));
  }
  std::vector<bool> returned(cap.outs.size(), false);
  for (const Tensor& r : results) {
    ResultSource src;
    src.view = r.impl()->view;
    const std::shared_ptr<Storage> s = storage_of(r);
    for (size_t j = 0; j < cap.outs.size() && src.index < 0; ++j)
      if (cap.outs[j] == s) src.index = static_cast<int>(j), returned[j] = true;
    if (src.index < 0) {
      for (size_t i = 0; i < args.size() && src.index < 0; ++i)
        if (storage_of(args[i]) == s) src.kind = ResultSource::Arg, src.index = static_cast<int>(i);
    }
    if (src.index < 0) src.kind = ResultSource::Kept, src.kept = s;
    t.results.push_back(std::move(src));
  }
  for (size_t j = 0; j < t.outputs.size(); ++j)
    if (t.outputs[j].kind == OutputSink::New && !returned[j])
      fail(loc, "the function left a tensor it made (" + std::string(to_string(t.outputs[j].dtype)) + ", " +
                    std::to_string(t.outputs[j].numel) + " elements) alive outside its results, which a replay "
                    "would not update: return it, or update an existing tensor in place (gradients: "
                    "zero_grad(/*set_to_none=*/false) before backward())");
  return results;
}

}  // namespace

struct CompiledFunction::State {
  TensorFunction fn;
  std::mutex mu;
  std::vector<std::unique_ptr<Trace>> traces;
};

CompiledFunction::CompiledFunction(TensorFunction fn) : state_(std::make_shared<State>()) {
  state_->fn = std::move(fn);
}

size_t CompiledFunction::traces() const {
  std::lock_guard lock(state_->mu);
  return state_->traces.size();
}

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& args, SourceLoc loc) const {
  if (detail::tracing()) fail(loc, "a compiled function was called inside another one's trace");
  State& st = *state_;
  std::lock_guard lock(st.mu);
  Signature key = signature_of(args, loc);
  std::unique_ptr<Trace>* t_slot = nullptr;
  for (auto& c : st.traces)
    if (c->key == key) t_slot = &c;
  // A new signature, or host state the trace read has changed (a number an
  // optimizer's replay keeps, a module's training mode, a cleared
  // executable cache): trace the function again. Unless the cache was
  // cleared, its graph is cached already, so nothing compiles.
  const bool stale = t_slot && ((*t_slot)->cache_generation != runtime::executable_cache().generation() ||
                                !std::all_of((*t_slot)->guards.begin(), (*t_slot)->guards.end(),
                                             [](const detail::ReplayGuard& g) { return g.unchanged(); }));
  if (!t_slot || stale) {
    auto fresh = std::make_unique<Trace>();
    std::vector<Tensor> results = trace(st.fn, args, std::move(key), *fresh, loc);
    if (t_slot) *t_slot = std::move(fresh);
    else st.traces.push_back(std::move(fresh));
    return results;
  }
  Trace* t = t_slot->get();
  // The scalars this replay recomputes read the host state as the traced
  // code would have: before the guards move it on.
  for (const detail::TraceCapture::Live& l : t->live) {
    const double v = l.source->value(l.index);
    t->scalars[l.scalar] = ir::RtScalar{v, static_cast<int64_t>(v)};
  }
  for (const detail::ReplayGuard& g : t->guards) g.advance();

  // Replay. Work pending from before the call (an argument computed lazily,
  // a captured weight updated outside) is computed first, as a trace would.
  sync_all();
  if (t->exe) {
    t->input_buffers.clear();
    for (const InputSource& in : t->inputs) {
      const runtime::Buffer* b = in.arg >= 0 ? storage_of(args[in.arg])->buffer().get()
                                             : static_cast<const runtime::Buffer*>(in.captured.get());
      if (const std::string* why = b->poisoned()) [[unlikely]]  // a value a GPU graph failed to compute
        fail(loc, *why);
      t->input_buffers.push_back(b);
    }
    // The trace's scalars, with fresh counters for its random nodes: they
    // are the only scalars a replay changes.
    for (const detail::TraceCapture::Random& r : t->randoms) {
      auto [seed, offset] = detail::take_random(r.numel);
      t->scalars[r.scalar] = ir::RtScalar{0, static_cast<int64_t>(seed)};
      t->scalars[r.scalar + 1] = ir::RtScalar{0, static_cast<int64_t>(offset)};
    }
    t->targets.clear();
    for (const OutputSink& o : t->outputs)
      t->targets.push_back(o.kind == OutputSink::InPlaceArg    ? storage_of(args[o.arg])->owned_buffer()
                           : o.kind == OutputSink::InPlaceKept ? o.kept->owned_buffer()
                                                               : nullptr);
    try {
      // On a GPU, a plain sync's check left there is read first: nothing
      // runs on the device before it (late_checks.h). The replay's own check
      // is read at once.
      std::optional<detail::DeviceTurn> turn;
      if (t->device.is_cuda()) turn.emplace(t->device);
      runtime::replay(*t->exe, runtime::RunArgs{t->input_buffers, t->scalars, t->targets}, t->produced);
    } catch (const runtime::RunError& e) {
      const detail::TraceCapture::Where& w = t->nodes.at(e.node);
      std::string where = w.line ? std::string(" (recorded at ") + w.file + ":" + std::to_string(w.line) + ")" : "";
      fail(loc, std::string(ir::op_name(w.op)) + ": " + e.message + where);
    }
  }
  std::vector<std::shared_ptr<Storage>> made(t->outputs.size());
  for (size_t j = 0; j < t->outputs.size(); ++j) {
    const OutputSink& o = t->outputs[j];
    if (o.kind == OutputSink::New) {
      made[j] = new_storage(o, t->produced[j]);
      continue;
    }
    // Written in place into the buffer the storage holds (the usual case:
    // the executable donates it): nothing changed that the storage records.
    const std::shared_ptr<Storage>& s = o.kind == OutputSink::InPlaceArg ? storage_of(args[o.arg]) : o.kept;
    if (s->buffer() != t->produced[j]) s->set_result(t->produced[j]);
    s->version.fetch_add(1, std::memory_order_relaxed);  // as write_through: saved tensors see the change
  }
  t->produced.clear();
  std::vector<Tensor> results;
  for (const ResultSource& r : t->results) {
    switch (r.kind) {
      case ResultSource::Output: {
        const OutputSink& o = t->outputs[r.index];
        std::shared_ptr<Storage> s = o.kind == OutputSink::New         ? made[r.index]
                                     : o.kind == OutputSink::InPlaceArg ? storage_of(args[o.arg])
                                                                        : o.kept;
        results.push_back(view_of(std::move(s), r.view));
        break;
      }
      case ResultSource::Arg: results.push_back(view_of(storage_of(args[r.index]), r.view)); break;
      case ResultSource::Kept: results.push_back(view_of(r.kept, r.view)); break;
    }
  }
  return results;
}

}  // namespace loom
