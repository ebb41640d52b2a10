#include "runtime/output_plan.h"

#include <algorithm>

namespace loom::runtime {

OutputPlan::OutputPlan(const ir::KernelProgram& program) : program_(program) {
  for (const ir::LibraryCall& c : program_.library_calls)
    can_fail_ = can_fail_ || c.op == ir::Op::IndexSelect || c.op == ir::Op::Gather || c.op == ir::Op::ScatterAdd;
  for (const ir::Kernel& k : program_.kernels)
    for (const ir::Expr& e : k.exprs)
      can_fail_ = can_fail_ || (e.kind == ir::ExprKind::Op && (e.op == ir::Op::Fmod || e.op == ir::Op::Remainder) &&
                                !is_floating_point(e.dtype));
  for (uint32_t o = 0; o < program_.buffers.size(); ++o)
    if (program_.buffers[o].kind == ir::BufferKind::Output)
      for (uint32_t i = 0; i < program_.buffers.size(); ++i)
        if (program_.buffers[i].kind == ir::BufferKind::Input && can_write_in_place(o, i)) in_place_ok_.push_back({o, i});
}

// Safe when nothing but the kernel that writes `out` reads `in`, and it
// reads each element exactly where it writes it (x.add_(1), an optimizer
// update); or when a scatter updates its own base.
bool OutputPlan::can_write_in_place(uint32_t out, uint32_t in) const {
  for (const ir::Step& step : program_.steps) {
    if (step.kind == ir::Step::Library) {
      const ir::LibraryCall& c = program_.library_calls[step.index];
      for (size_t j = 0; j < c.inputs.size(); ++j) {
        if (c.inputs[j] != in) continue;
        const bool own_base = j == 0 && c.output == out && (c.op == ir::Op::ScatterStrided || c.op == ir::Op::ScatterAdd);
        if (!own_base) return false;
      }
      continue;
    }
    const ir::Kernel& k = program_.kernels[step.index];
    const ir::Access* store = nullptr;
    for (const ir::Phase& ph : k.phases)
      for (auto [a, e] : ph.stores)
        if (k.accesses[a].buffer == out && !ph.per_row) store = &k.accesses[a];
    for (const ir::Access& a : k.accesses) {
      if (a.buffer != in) continue;
      if (!store || a.offset != store->offset || !(a.strides == store->strides)) return false;
    }
  }
  return true;
}

BufferPtr OutputPlan::donated(uint32_t b, const RunArgs& args) const {
  const ir::BufferInfo& info = program_.buffers[b];
  if (can_fail_ || info.index >= args.targets.size() || !args.targets[info.index]) return nullptr;
  const BufferPtr& t = args.targets[info.index];
  if (t->bytes() != static_cast<size_t>(info.numel) * element_size(info.dtype)) return nullptr;
  for (uint32_t i = 0; i < program_.buffers.size(); ++i) {
    const ir::BufferInfo& in = program_.buffers[i];
    if (in.kind != ir::BufferKind::Input || args.inputs[in.index] != t.get()) continue;
    if (std::find(in_place_ok_.begin(), in_place_ok_.end(), std::make_pair(b, i)) == in_place_ok_.end()) return nullptr;
  }
  return t;
}

std::vector<BufferPtr> OutputPlan::results(const std::vector<BufferPtr>& owned, Device device) const {
  std::vector<BufferPtr> result;
  std::vector<bool> taken(program_.buffers.size(), false);
  for (uint32_t b : program_.output_buffers) {
    if (!taken[b]) {
      taken[b] = true;
      result.push_back(owned[b]);
      continue;
    }
    const size_t bytes = program_.buffers[b].numel * element_size(program_.buffers[b].dtype);
    BufferPtr copy = Buffer::allocate(device, bytes);
    copy_bytes(*copy, 0, *owned[b], 0, bytes);
    result.push_back(std::move(copy));
  }
  return result;
}

}  // namespace loom::runtime
