#include "runtime/cpu/cpu_executable.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/cpu/library.h"

namespace loom::runtime::cpu {

namespace {
// Below this much work (elements x cost) a kernel runs on the calling
// thread: handing it to TBB would cost more than it saves.
constexpr double kParallelWork = 1 << 16;
}  // namespace

CpuExecutable::CpuExecutable(ir::KernelProgram program, std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels)
    : program_(std::move(program)), kernels_(std::move(kernels)) {
  for (const ir::LibraryCall& c : program_.library_calls)
    can_fail_ = can_fail_ || c.op == ir::Op::IndexSelect || c.op == ir::Op::Gather || c.op == ir::Op::ScatterAdd;
  for (const ir::Kernel& k : program_.kernels)
    for (const ir::Expr& e : k.exprs)
      can_fail_ = can_fail_ || (e.kind == ir::ExprKind::Op && (e.op == ir::Op::Fmod || e.op == ir::Op::Remainder) &&
                                !is_floating_point(e.dtype));
  for (const ir::Kernel& k : program_.kernels) launches_.push_back(plan_launch(k));
  for (uint32_t o = 0; o < program_.buffers.size(); ++o)
    if (program_.buffers[o].kind == ir::BufferKind::Output)
      for (uint32_t i = 0; i < program_.buffers.size(); ++i)
        if (program_.buffers[i].kind == ir::BufferKind::Input && can_write_in_place(o, i)) in_place_ok_.push_back({o, i});
}

// Safe when nothing but the kernel that writes `out` reads `in`, and it
// reads each element exactly where it writes it (x.add_(1), an optimizer
// update); or when a scatter updates its own base.
bool CpuExecutable::can_write_in_place(uint32_t out, uint32_t in) const {
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

BufferPtr CpuExecutable::take_arena() {
  if (program_.arena_bytes == 0) return nullptr;
  {
    std::lock_guard lock(arena_mu_);
    if (!arenas_.empty()) {
      BufferPtr a = std::move(arenas_.back());
      arenas_.pop_back();
      return a;
    }
  }
  return Buffer::allocate(Device(kCPU, 0), program_.arena_bytes);
}

void CpuExecutable::give_arena(BufferPtr a) {
  if (!a) return;
  std::lock_guard lock(arena_mu_);
  arenas_.push_back(std::move(a));
}

CpuExecutable::Launch CpuExecutable::plan_launch(const ir::Kernel& k) {
  Launch l;
  // Empty loops still run: a reduction over nothing stores its identity.
  int64_t total = 1;
  for (uint8_t d = 0; d < k.loop.n; ++d) total *= k.loop[d];
  l.extent = k.loop.n ? k.loop[0] : 1;
  // A reduction over everything folds one row: it cannot be split.
  const bool full_reduction = k.outer == 0 && std::any_of(k.phases.begin(), k.phases.end(),
                                               [](const ir::Phase& ph) { return ph.kind == ir::Phase::Reduce; });
  const double work = static_cast<double>(total) * k.cost_per_element;
  l.serial = full_reduction || l.extent == 1 || work < kParallelWork;
  // Chunks of ~kParallelWork, at least a few per core for balance.
  const int64_t per_index = std::max<int64_t>(1, total / std::max<int64_t>(l.extent, 1));
  l.grain = std::max<int64_t>(1, static_cast<int64_t>(kParallelWork / (per_index * k.cost_per_element)));
  return l;
}

void CpuExecutable::run_kernel(size_t ki, void* const* bufs, const double* fs, const int64_t* is) {
  const Launch& l = launches_[ki];
  jit::llvm_cpu::KernelFn fn = kernels_->kernel(ki);
  int32_t err = 0;
  if (l.serial) {  // small: on this thread, no TBB dispatch
    fn(0, l.extent, bufs, fs, is, &err);
  } else {
    std::atomic<int32_t> shared_err{0};
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, l.extent, l.grain), [&](const tbb::blocked_range<int64_t>& r) {
      int32_t e = 0;
      fn(r.begin(), r.end(), bufs, fs, is, &e);
      if (e) shared_err.store(e, std::memory_order_relaxed);
    });
    err = shared_err.load();
  }
  if (err == jit::llvm_cpu::kErrorIntegerDivisionByZero)
    throw RunError{program_.kernels[ki].root, "ZeroDivisionError: integer division by zero"};
}

// The caller's buffer for output buffer `b`, if it may be written directly.
BufferPtr CpuExecutable::donated(uint32_t b, const RunArgs& args) const {
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

namespace {
// A run's working arrays, reused per thread: a steady-state run allocates
// nothing but its output buffers. `busy`: a run that starts while another
// is under way on this thread (TBB can run a stolen task that syncs while
// waiting inside a parallel kernel) uses arrays of its own.
struct RunScratch {
  std::vector<void*> bufs;
  std::vector<BufferPtr> owned;
  std::vector<double> fs;
  std::vector<int64_t> is;
  std::vector<kernels::cpu::View> ins;
  bool busy = false;
};
}  // namespace

void CpuExecutable::run(const RunArgs& args, std::vector<BufferPtr>& result) {
  thread_local RunScratch per_thread;
  RunScratch nested;
  RunScratch& sc = per_thread.busy ? nested : per_thread;
  sc.busy = true;
  BufferPtr arena = take_arena();
  struct Done {  // on every way out: the arena goes back, buffers are let go of
    CpuExecutable* self;
    RunScratch& sc;
    BufferPtr& a;
    ~Done() {
      self->give_arena(std::move(a));
      sc.owned.clear();
      sc.busy = false;
    }
  } done{this, sc, arena};
  const auto& bufinfo = program_.buffers;
  const size_t nb = bufinfo.size();
  sc.bufs.assign(nb, nullptr);
  std::vector<BufferPtr>& owned = sc.owned;
  owned.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    const ir::BufferInfo& info = bufinfo[b];
    switch (info.kind) {
      case ir::BufferKind::Input: sc.bufs[b] = args.inputs[info.index]->data(); break;
      case ir::BufferKind::Output:
        owned[b] = donated(static_cast<uint32_t>(b), args);
        if (!owned[b]) owned[b] = Buffer::allocate(Device(kCPU, 0), info.numel * element_size(info.dtype));
        sc.bufs[b] = owned[b]->data();
        break;
      case ir::BufferKind::Temp:  // empty temporaries may leave the arena empty too
        sc.bufs[b] = arena ? static_cast<char*>(arena->data()) + info.arena_offset : nullptr;
        break;
    }
  }
  const size_t ns = args.scalars.size();
  sc.fs.resize(ns);
  sc.is.resize(ns);
  for (size_t s = 0; s < ns; ++s) {
    sc.fs[s] = args.scalars[s].f;
    sc.is[s] = args.scalars[s].i;
  }
  void* const* bufs = sc.bufs.data();
  for (const ir::Step& step : program_.steps) {
    if (step.kind == ir::Step::Generated) {
      run_kernel(step.index, bufs, sc.fs.data(), sc.is.data());
      continue;
    }
    const ir::LibraryCall& call = program_.library_calls[step.index];
    std::vector<kernels::cpu::View>& ins = sc.ins;
    ins.clear();
    for (size_t i = 0; i < call.inputs.size(); ++i)
      ins.push_back({static_cast<char*>(bufs[call.inputs[i]]) + call.input_offsets[i] * element_size(call.input_dtypes[i]),
                     call.input_dtypes[i], call.input_shapes[i]});
    kernels::cpu::View out{bufs[call.output], call.dtype, call.shape};
    try {
      kernels::cpu::run_library(call, ins, out, args.scalars.subspan(call.scalar_begin, call.num_scalars));
    } catch (const kernels::cpu::LibraryError& e) {
      throw RunError{call.node, e.message};
    }
  }
  // One buffer per graph output; an output asked for twice is copied.
  result.clear();
  for (uint32_t b : program_.output_buffers) {
    if (owned[b]) {  // its first use: the buffer itself
      result.push_back(std::move(owned[b]));
      continue;
    }
    size_t bytes = bufinfo[b].numel * element_size(bufinfo[b].dtype);
    BufferPtr copy = Buffer::allocate(Device(kCPU, 0), bytes);
    if (bytes) std::memcpy(copy->data(), bufs[b], bytes);
    result.push_back(std::move(copy));
  }
}

}  // namespace loom::runtime::cpu
