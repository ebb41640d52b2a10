#include "runtime/output_plan.h"

#include <algorithm>

#include "runtime/log.h"

namespace loom::runtime {

namespace {

// Where each buffer is used and stored, for the in-place checks of one
// program: built by OutputPlan's constructor, dropped after it.
struct BufferUses {
  // Per buffer, where steps use it, in step order: a kernel's access index
  // or a library call's input index (slot).
  struct Use {
    size_t step;
    uint32_t slot;
  };
  std::vector<std::vector<Use>> uses;
  // Per buffer, where its writer stores it (the last store's access and
  // phase), and whether it stores it at two positions.
  struct Store {
    const ir::Access* access = nullptr;
    uint32_t phase = 0;
    bool two_positions = false;
  };
  std::vector<Store> store;
};

// Whether `out`, written by step `writer` alone, may be written over input
// `in`: no step after `writer` reads `in`, and `writer` reads each element
// of `in` exactly where it writes it (x.add_(1), an optimizer update; the
// forward pass read the parameter in an earlier step); or a scatter
// updates its own base. A per-row store qualifies too (a bias updated after
// its gradient's sum, in the same row kernel): its access does not move
// along the row, so each row reads and writes its own element, and its
// earlier phases read it before the row's store. Only the steps that use
// `in` are looked at, so checking every output stays linear in the
// program (4,000 outputs of x_i * 2 + 1: 30 s when each pair walked every
// step).
bool can_write_in_place(const ir::KernelProgram& program, const BufferUses& bu, size_t writer, uint32_t out,
                        uint32_t in) {
  for (const BufferUses::Use& u : bu.uses[in]) {
    if (u.step < writer) continue;
    const ir::Step& step = program.steps[u.step];
    if (step.kind == ir::Step::Library) {
      const ir::LibraryCall& c = program.library_calls[step.index];
      const bool scatter = c.op == ir::Op::ScatterStrided || c.op == ir::Op::ScatterAdd || c.op == ir::Op::ScatterReduce;
      const bool own_base = u.slot == 0 && c.output == out && scatter;
      if (!own_base) return false;
      continue;
    }
    const ir::Kernel& k = program.kernels[step.index];
    // Only the writer may read `in`, and only where it stores `out`.
    const BufferUses::Store& st = bu.store[out];
    if (u.step != writer || st.two_positions) return false;
    const ir::Access& a = k.accesses[u.slot];
    if (a.offset != st.access->offset || !(a.strides == st.access->strides)) return false;
    if (k.contraction && (k.contraction->a == u.slot || k.contraction->b == u.slot))
      return false;  // a GEMM reads whole rows and columns of its operands
    // A later phase of the writer must not read `in` again: it would see
    // the new value (code generators evaluate each phase's exprs anew).
    for (size_t p = st.phase + 1; p < k.phases.size(); ++p) {
      const std::vector<bool> need = ir::phase_exprs(k, k.phases[p]);
      for (size_t e = 0; e < k.exprs.size(); ++e)
        if (need[e] && ir::reads_memory(k.exprs[e]) && k.exprs[e].a == u.slot) return false;
    }
  }
  return true;
}

}  // namespace

OutputPlan::OutputPlan(const ir::KernelProgram& program, bool library_stops_on_failure)
    : program_(program), library_stops_on_failure_(library_stops_on_failure) {
  const auto& steps = program_.steps;
  const size_t nb = program_.buffers.size();
  writer_.assign(nb, kNoStep);
  BufferUses bu;
  bu.uses.resize(nb);
  bu.store.assign(nb, BufferUses::Store{});
  for (size_t s = 0; s < steps.size(); ++s) {
    auto wrote = [&](uint32_t b) { writer_[b] = writer_[b] == kNoStep ? s : kTwoWriters; };
    if (steps[s].kind == ir::Step::Library) {
      const ir::LibraryCall& c = program_.library_calls[steps[s].index];
      wrote(c.output);
      for (uint32_t j = 0; j < c.inputs.size(); ++j) bu.uses[c.inputs[j]].push_back({s, j});
    } else {
      const ir::Kernel& k = program_.kernels[steps[s].index];
      for (uint32_t a = 0; a < k.accesses.size(); ++a) bu.uses[k.accesses[a].buffer].push_back({s, a});
      std::vector<uint32_t> stored;
      for (uint32_t p = 0; p < k.phases.size(); ++p)
        for (auto [a, e] : k.phases[p].stores) {
          const uint32_t b = k.accesses[a].buffer;
          stored.push_back(b);
          BufferUses::Store& st = bu.store[b];
          const ir::Access& at = k.accesses[a];
          if (st.access && (st.access->offset != at.offset || !(st.access->strides == at.strides)))
            st.two_positions = true;
          st.access = &at, st.phase = p;
        }
      std::sort(stored.begin(), stored.end());
      stored.erase(std::unique(stored.begin(), stored.end()), stored.end());
      for (uint32_t b : stored) wrote(b);
    }
    if (ir::can_fail(program_, steps[s])) last_failing_step_ = static_cast<int64_t>(s);
  }
  last_use_.assign(nb, -1);
  for (uint32_t i = 0; i < nb; ++i) {
    if (!bu.uses[i].empty()) last_use_[i] = static_cast<int64_t>(bu.uses[i].back().step);
    if (program_.buffers[i].kind == ir::BufferKind::Input) inputs_.push_back(i);
  }
  // An input no step uses from an output's writer on may always take that
  // output (donated() checks last_use_); one used there, only if the writer
  // itself reads it (can_write_in_place), so only the inputs each writer
  // reads are checked here, not every output against every input (4,000
  // outputs of x_i * 2 + 1: 16 million pairs).
  for (uint32_t o = 0; o < nb; ++o) {
    if (program_.buffers[o].kind != ir::BufferKind::Output || writer_[o] >= kTwoWriters) continue;
    for (uint32_t i : ir::step_buffers(program_, steps[writer_[o]]).reads)
      if (program_.buffers[i].kind == ir::BufferKind::Input && can_write_in_place(program_, bu, writer_[o], o, i))
        in_place_ok_.push_back({o, i});
  }
  std::sort(in_place_ok_.begin(), in_place_ok_.end());
  in_place_ok_.erase(std::unique(in_place_ok_.begin(), in_place_ok_.end()), in_place_ok_.end());
}

BufferPtr OutputPlan::donated(uint32_t b, const RunArgs& args, int32_t* input) const {
  if (input) *input = -1;
  const ir::BufferInfo& info = program_.buffers[b];
  if (info.index >= args.targets.size() || !args.targets[info.index]) return nullptr;
  const BufferPtr& t = args.targets[info.index];
  const char* refused = nullptr;
  const size_t writer = writer_[b];
  if (writer == kNoStep || writer == kTwoWriters)
    refused = "not written by exactly one step";
  else if (static_cast<int64_t>(writer) <= last_failing_step_)
    refused = "written before a step that can fail on bad data";
  else if (!library_stops_on_failure_ && last_failing_step_ >= 0 && program_.steps[writer].kind == ir::Step::Library)
    refused = "written by a library kernel after a step that can fail";
  else if (t->bytes() != static_cast<size_t>(info.numel) * element_size(info.dtype))
    refused = "the tensor's buffer has another size";
  for (uint32_t i : inputs_) {
    if (refused) break;
    if (args.inputs[program_.buffers[i].index] != t.get()) continue;
    if (last_use_[i] >= static_cast<int64_t>(writer) &&
        !std::binary_search(in_place_ok_.begin(), in_place_ok_.end(), std::make_pair(b, i)))
      refused = "its old value is read after the write, or elsewhere than where it is written";
    else if (input)
      *input = static_cast<int32_t>(i);
  }
  if (!refused) return t;
  // LOOM_LOG=donation: why an output gets a new buffer (then copied back
  // into the tensor's own after the run: Metrics::bytes_copied_back).
  if (log_enabled(LogTopic::Donation))
    log_line(LogTopic::Donation, "output %zu (buffer %u, %lld elements, step %lld of %zu): new buffer: %s",
             static_cast<size_t>(info.index), b, static_cast<long long>(info.numel),
             writer >= kTwoWriters ? -1LL : static_cast<long long>(writer), program_.steps.size(), refused);
  return nullptr;
}

void OutputPlan::results(std::vector<BufferPtr>& owned, Device device, std::vector<BufferPtr>& result) const {
  result.clear();
  const auto& outs = program_.output_buffers;
  for (size_t k = 0; k < outs.size(); ++k) {
    const uint32_t b = outs[k];
    if (owned[b]) {  // its first use: the buffer itself
      result.push_back(std::move(owned[b]));
      continue;
    }
    const BufferPtr& first = result[static_cast<size_t>(std::find(outs.begin(), outs.end(), b) - outs.begin())];
    const size_t bytes = program_.buffers[b].numel * element_size(program_.buffers[b].dtype);
    BufferPtr copy = Buffer::allocate(device, bytes);
    copy_bytes(*copy, 0, *first, 0, bytes);
    result.push_back(std::move(copy));
  }
}

}  // namespace loom::runtime
