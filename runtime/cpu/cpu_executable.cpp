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
    : program_(std::move(program)), kernels_(std::move(kernels)), outputs_(program_, /*library_stops_on_failure=*/true) {}

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

void CpuExecutable::run_kernel(size_t ki, void* const* bufs, const double* fs, const int64_t* is) {
  const ir::Kernel& k = program_.kernels[ki];
  jit::llvm_cpu::KernelFn fn = kernels_->kernel(ki);
  // Empty loops still run: a reduction over nothing stores its identity.
  int64_t total = 1;
  for (uint8_t d = 0; d < k.loop.n; ++d) total *= k.loop[d];
  const int64_t extent = k.loop.n ? k.loop[0] : 1;
  // A reduction over everything folds one row: it cannot be split.
  const bool full_reduction = k.outer == 0 && std::any_of(k.phases.begin(), k.phases.end(),
                                               [](const ir::Phase& ph) { return ph.kind == ir::Phase::Reduce; });
  int32_t err = 0;
  const double work = static_cast<double>(total) * k.cost_per_element;
  if (full_reduction || extent == 1 || work < kParallelWork) {
    fn(0, extent, bufs, fs, is, &err);
  } else {
    // Chunks of ~kParallelWork, at least a few per core for balance.
    const int64_t per_index = std::max<int64_t>(1, total / std::max<int64_t>(extent, 1));
    const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kParallelWork / (per_index * k.cost_per_element)));
    std::atomic<int32_t> shared_err{0};
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, extent, grain), [&](const tbb::blocked_range<int64_t>& r) {
      int32_t e = 0;
      fn(r.begin(), r.end(), bufs, fs, is, &e);
      if (e) shared_err.store(e, std::memory_order_relaxed);
    });
    err = shared_err.load();
  }
  if (err == jit::llvm_cpu::kErrorIntegerDivisionByZero)
    throw RunError{k.root, "ZeroDivisionError: integer division by zero"};
}

std::vector<BufferPtr> CpuExecutable::run(const RunArgs& args) {
  const auto& bufinfo = program_.buffers;
  std::vector<void*> bufs(bufinfo.size(), nullptr);
  BufferPtr arena = take_arena();
  struct ArenaReturn {
    CpuExecutable* self;
    BufferPtr& a;
    ~ArenaReturn() { self->give_arena(std::move(a)); }
  } give_back{this, arena};
  std::vector<BufferPtr> owned(bufinfo.size());
  for (size_t b = 0; b < bufinfo.size(); ++b) {
    const ir::BufferInfo& info = bufinfo[b];
    switch (info.kind) {
      case ir::BufferKind::Input: bufs[b] = args.inputs[info.index]->data(); break;
      case ir::BufferKind::Output:
        owned[b] = outputs_.donated(b, args);
        if (!owned[b]) owned[b] = Buffer::allocate(Device(kCPU, 0), info.numel * element_size(info.dtype));
        bufs[b] = owned[b]->data();
        break;
      case ir::BufferKind::Temp:  // empty temporaries may leave the arena empty too
        bufs[b] = arena ? static_cast<char*>(arena->data()) + info.arena_offset : nullptr;
        break;
    }
  }
  std::vector<double> fs(args.scalars.size());
  std::vector<int64_t> is(args.scalars.size());
  for (size_t s = 0; s < args.scalars.size(); ++s) {
    fs[s] = args.scalars[s].f;
    is[s] = args.scalars[s].i;
  }
  for (const ir::Step& step : program_.steps) {
    if (step.kind == ir::Step::Generated) {
      run_kernel(step.index, bufs.data(), fs.data(), is.data());
      continue;
    }
    const ir::LibraryCall& call = program_.library_calls[step.index];
    std::vector<kernels::cpu::View> ins;
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
  return outputs_.results(owned, Device(kCPU, 0));
}

}  // namespace loom::runtime::cpu
