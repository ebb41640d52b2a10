#include "runtime/cpu/cpu_executable.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>

#include "kernels/cpu/library.h"
#include "runtime/log.h"

namespace loom::runtime::cpu {

namespace {
// Below this much work (elements x cost) a kernel runs on the calling
// thread: handing it to TBB would cost more than it saves.
constexpr double kParallelWork = 1 << 16;
}  // namespace

CpuExecutable::CpuExecutable(ir::KernelProgram program, jit::llvm_cpu::KernelFunctions functions,
                             std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels)
    : program_(std::move(program)),
      functions_(std::move(functions)),
      kernels_(std::move(kernels)),
      outputs_(program_, /*library_stops_on_failure=*/true) {
  for (const ir::LocalKernel& l : functions_.local) {
    launches_.push_back(plan_launch(l.program, l.kernel(), l.sizes));
    gemms_.push_back(l.kernel().contraction ? plan_gemm(l.program, l.kernel(), &l.sizes) : GemmPlan{});
  }
}

int64_t CpuExecutable::bytes() const {
  size_t arenas;
  {
    std::lock_guard lock(arena_mu_);
    arenas = std::max<size_t>(arenas_.size(), 1);  // the first run makes one
  }
  return ir::description_bytes(program_) + (kernels_ ? kernels_->bytes() : 0) +
         static_cast<int64_t>(arenas) * program_.arena_bytes;
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

CpuExecutable::Launch CpuExecutable::plan_launch(const ir::KernelProgram& p, const ir::Kernel& k,
                                                 const ir::SizeArgs& sizes) {
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
  l.block = jit::llvm_cpu::parallel_unit(p, k, jit::llvm_cpu::host_target(), &sizes);
  return l;
}

namespace {
// A kernel's buffers and scalars under its function's local names
// (ir::LocalKernel), then `extra` (the int scalars: its sizes, when they
// are arguments): a few entries, on the stack unless there are many.
template <class T>
class LocalTable {
 public:
  LocalTable(const std::vector<uint32_t>& map, const T* global, const std::vector<T>& extra = {}) {
    const size_t n = map.size() + extra.size();
    T* out = n <= kInline ? inline_ : (heap_.resize(n), heap_.data());
    for (size_t i = 0; i < map.size(); ++i) out[i] = global[map[i]];
    std::copy(extra.begin(), extra.end(), out + map.size());
    data_ = out;
  }
  const T* data() const { return data_; }

 private:
  static constexpr size_t kInline = 16;
  T inline_[kInline];
  std::vector<T> heap_;
  const T* data_;
};
}  // namespace

void CpuExecutable::run_kernel(size_t ki, void* const* global_bufs, const double* global_fs, const int64_t* global_is) {
  const Launch& l = launches_[ki];
  const ir::LocalKernel& local = functions_.local[ki];
  const LocalTable<void*> local_bufs(local.buffers, global_bufs);
  const LocalTable<double> local_fs(local.scalars, global_fs);
  const LocalTable<int64_t> local_is(local.scalars, global_is, local.sizes.values);
  void* const* bufs = local_bufs.data();
  const double* fs = local_fs.data();
  const int64_t* is = local_is.data();
  jit::llvm_cpu::KernelError err;
  const size_t function = functions_.function[ki];
  jit::llvm_cpu::KernelFn fn = kernels_->kernel(function);
  if (program_.kernels[ki].contraction) {
    run_gemm(gemms_[ki], kernels_->gemm(function), bufs, fs, is, err);
  } else if (l.serial) {  // small: on this thread, no TBB dispatch
    fn(0, l.extent, bufs, fs, is, &err);
  } else {
    // Bad data is rare: the report of the part that starts first (the
    // first bad index in row-major order) is kept under a lock.
    std::mutex mu;
    int64_t first = l.extent;
    // Split in units of l.block indices of loop 0.
    const int64_t units = (l.extent + l.block - 1) / l.block, grain = std::max<int64_t>(1, l.grain / l.block);
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, units, grain), [&](const tbb::blocked_range<int64_t>& r) {
      jit::llvm_cpu::KernelError e;
      fn(r.begin() * l.block, std::min(r.end() * l.block, l.extent), bufs, fs, is, &e);
      if (e.word == 0) return;
      std::lock_guard lock(mu);
      if (r.begin() * l.block < first) first = r.begin() * l.block, err = e;
    });
  }
  if (err.word == 0) return;
  namespace lc = jit::llvm_cpu;
  const uint32_t node = local.nodes[lc::error_node(err.word, 0)];  // local node 0: the kernel's root
  if (lc::error_code(err.word) == lc::kErrorIntegerDivisionByZero) throw RunError{node, "ZeroDivisionError: integer division by zero"};
  if (lc::error_code(err.word) == lc::kErrorIndexOutOfRange) throw RunError{node, index_out_of_range_message(err.index, err.size)};
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
        owned[b] = outputs_.donated(static_cast<uint32_t>(b), args);
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
  static const bool profile = log_enabled(LogTopic::Profile);
  for (const ir::Step& step : program_.steps) {
    const auto t0 = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    run_step(step, bufs, sc.fs.data(), sc.is.data(), args.scalars, sc.ins);
    if (profile) log_step(step, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  outputs_.results(owned, Device(kCPU, 0), result);
}

namespace {
std::string dims_text(const ir::Dims& d) {  // "1024x784"
  std::string s;
  for (uint8_t i = 0; i < d.n; ++i) {
    if (i) s += 'x';
    s += std::to_string(d[i]);
  }
  return s;
}
}  // namespace

// LOOM_LOG=profile: "k64_matmul_gemm+k86_add [1024x1024] gemm: 6.824 ms",
// the kernel's name (its nodes, ir/lower/kernels.cpp), its loops and its
// wall time, one line per step of every run (kernels run one after another
// on the CPU, so the lines add up to the run).
void CpuExecutable::log_step(const ir::Step& step, double ms) const {
  if (step.kind == ir::Step::Generated) {
    const ir::Kernel& k = program_.kernels[step.index];
    log_line(LogTopic::Profile, "%s [%s]%s: %.3f ms", k.name.c_str(), dims_text(k.loop).c_str(),
             k.contraction ? " gemm" : "", ms);
    return;
  }
  const ir::LibraryCall& call = program_.library_calls[step.index];
  log_line(LogTopic::Profile, "library %s [%s]: %.3f ms", ir::op_name(call.op), dims_text(call.shape).c_str(), ms);
}

void CpuExecutable::run_step(const ir::Step& step, void* const* bufs, const double* fs, const int64_t* is,
                             std::span<const ir::RtScalar> scalars, std::vector<kernels::cpu::View>& ins) {
  if (step.kind == ir::Step::Generated) {
    run_kernel(step.index, bufs, fs, is);
    return;
  }
  const ir::LibraryCall& call = program_.library_calls[step.index];
  ins.clear();
  for (size_t i = 0; i < call.inputs.size(); ++i)
    ins.push_back({static_cast<char*>(bufs[call.inputs[i]]) + call.input_offset(i, scalars.data()) * element_size(call.input_dtypes[i]),
                   call.input_dtypes[i], call.input_shapes[i]});
  kernels::cpu::View out{bufs[call.output], call.dtype, call.shape};
  try {
    kernels::cpu::run_library(call, ins, out, scalars.subspan(call.scalar_begin, call.num_scalars));
  } catch (const kernels::cpu::LibraryError& e) {
    throw RunError{call.node, e.message};
  }
}

}  // namespace loom::runtime::cpu
