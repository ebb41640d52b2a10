#include "runtime/cuda/cuda_executable.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include <loom/error.h>

#include "jit/cuda/codegen.h"
#include "kernels/cuda/library.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/launch_graph.h"
#include "runtime/cuda/library_module.h"
#include "runtime/metrics.h"

namespace loom::runtime::cuda {

namespace {

// LOOM_CUDA_KERNEL_TIMES=1: every run launches its kernels directly (no
// graph replay), each between two CUDA events, and the time of each launch
// is summed per label; the table goes to stderr at exit.
bool kernel_times_on() {
  static const bool on = [] {
    const char* e = std::getenv("LOOM_CUDA_KERNEL_TIMES");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return on;
}

struct KernelTimes {
  std::mutex mu;
  std::map<std::string, std::pair<double, int64_t>> ms;  // label -> (total ms, launches)
  ~KernelTimes() {
    if (ms.empty()) return;
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto& [k, v] : ms) rows.emplace_back(v.first, k), total += v.first;
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "loom: kernel times (LOOM_CUDA_KERNEL_TIMES), total %.3f ms\n", total);
    for (auto& [t, k] : rows)
      std::fprintf(stderr, "  %10.3f ms %6.1f%%  %8.2f us/launch  %s\n", t, 100 * t / total, 1000 * t / ms[k].second,
                   k.c_str());
  }
};
KernelTimes& kernel_times() {
  static KernelTimes t;
  return t;
}

// LOOM_CUDA_GRAPH_SERIAL=1: the replayed graph is a chain in program order,
// as the first run launches it (to compare against, or to rule out an
// ordering bug).
bool serial_graph() {
  static const bool on = [] {
    const char* e = std::getenv("LOOM_CUDA_GRAPH_SERIAL");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return on;
}

// Split-K products take turns over this many workspace slots, so that two
// products that do not depend on each other can run at once.
constexpr int kWorkspaceSlots = 2;

}  // namespace

CudaExecutable::CudaExecutable(ir::KernelProgram program, int device, LoadedModule module)
    : program_(std::move(program)), device_(device), module_(std::move(module)), outputs_(program_, /*library_stops_on_failure=*/false) {
  offset_guards = program_.offset_guards;
  const Device dev(kCUDA, static_cast<int8_t>(device_));
  // Argument block: buffer addresses, then the scalars as double, then as
  // int64, then the two-word error block.
  const size_t nb = program_.buffers.size();
  size_t ns = 0;
  for (const ir::Kernel& k : program_.kernels) {
    for (const ir::Expr& e : k.exprs)
      if (e.kind == ir::ExprKind::Scalar) ns = std::max<size_t>(ns, e.a + 1);
    for (const ir::Access& a : k.accesses)
      if (a.has_runtime_offset()) ns = std::max<size_t>(ns, a.offset_scalar + 1);
  }
  for (const ir::LibraryCall& c : program_.library_calls) {
    ns = std::max<size_t>(ns, c.scalar_begin + c.num_scalars);
    for (uint32_t s : c.input_offset_scalars)
      if (s != ir::Access::kNoScalar) ns = std::max<size_t>(ns, s + 1);
  }
  scalar_at_ = nb;
  err_at_ = nb + 2 * ns;
  arg_words_ = err_at_ + kErrorWords;
  // Then each kernel's local tables, for the shared function it runs
  // (jit/cuda/codegen.h share_kernels).
  tables_at_.assign(program_.kernels.size(), -1);
  for (size_t i = 0; i < module_.shared.local.size(); ++i) {
    const ir::LocalKernel& l = module_.shared.local[i];
    tables_at_[i] = static_cast<int64_t>(arg_words_);
    arg_words_ += l.buffers.size() + l.nodes.size() + 2 * l.scalars.size() + l.sizes.values.size();
  }
  for (Slot& s : slots_) {
    check(driver().cuMemHostAlloc(&s.host, arg_words_ * 8, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc",
          "argument block");
    check(driver().cuEventCreate(&s.done, CU_EVENT_DISABLE_TIMING), "cuEventCreate", "argument block");
  }
  for (ArgSet& set : sets_) set.block = Buffer::allocate(dev, arg_words_ * 8);
  if (program_.arena_bytes > 0) arena_ = Buffer::allocate(dev, static_cast<size_t>(program_.arena_bytes));
  plan_launches();
}

int64_t CudaExecutable::bytes() const {
  int64_t code = module_.cubin_bytes;
  for (const FunctionModulePtr& f : module_.functions) code += f->bytes();  // shared: counted by each user
  int64_t n = ir::description_bytes(program_) + code + program_.arena_bytes +
              static_cast<int64_t>(kWorkspaceSlots) * workspace_slot_bytes_;
  n += 4 * static_cast<int64_t>(arg_words_) * 8;  // two device argument sets, two pinned host blocks
  if (meta_) n += static_cast<int64_t>(meta_->bytes());
  return n;
}

CudaExecutable::~CudaExecutable() {
  // Errors are ignored: at process exit the driver may already be gone.
  const DriverApi& d = driver();
  // An evicted executable may still have launches in flight (a sync returns
  // once they are queued): its code is unloaded only after they ran.
  if (module_.module) {
    d.cuStreamSynchronize(context(device_).stream);
    d.cuModuleUnload(module_.module);
  }
  for (Slot& s : slots_) {
    if (s.in_flight) d.cuEventSynchronize(s.done);
    if (s.done) d.cuEventDestroy(s.done);
    if (s.host) d.cuMemFreeHost(s.host);
  }
  for (ArgSet& set : sets_) drop_graph(set);
  if (err_copy_.done) {
    d.cuEventSynchronize(err_copy_.done);
    d.cuEventDestroy(err_copy_.done);
  }
  if (err_copy_.host) d.cuMemFreeHost(err_copy_.host);
}

// The launch sequence of one run, fixed at compile time: generated kernels
// with their planned grids, library calls with their meta uploaded once.
void CudaExecutable::plan_launches() {
  const DeviceContext& ctx = context(device_);
  std::vector<int64_t> meta;
  int split_gemms = 0;
  if (module_.single_block) {
    Launch l;
    l.function = module_.single_block;
    l.block[0] = jit::cuda::kSingleBlockThreads;
    l.label = "single block: " + std::to_string(program_.steps.size()) + " steps";
    for (const ir::Step& step : program_.steps) l.label += " " + program_.kernels[step.index].name;
    launches_.push_back(l);
    return;
  }
  for (const ir::Step& step : program_.steps) {
    const auto step_at = static_cast<uint32_t>(&step - program_.steps.data());
    if (step.kind == ir::Step::Generated && program_.kernels[step.index].contraction) {
      // A GEMM: one block per output tile (grid.x), the batch in grid.z,
      // dynamic shared memory for the pipeline's stages.
      const jit::cuda::GemmConfig& c = module_.gemm.at(step.index);
      const jit::cuda::GemmProblem g = jit::cuda::gemm_problem(program_, program_.kernels[step.index], c.mma);
      if (g.m == 0 || g.n == 0 || g.batch == 0) continue;
      if (g.batch > 65535) throw Error("loom: a batched matrix product of " + std::to_string(g.batch) +
                                       " matrices exceeds the 65535 a CUDA launch takes");
      Launch l;
      l.function = module_.kernels.at(step.index);
      l.grid[0] = jit::cuda::gemm_grid(c, g);
      l.grid[1] = static_cast<uint32_t>(std::max(c.split, 1));
      l.grid[2] = static_cast<uint32_t>(g.batch);
      l.workspace = c.split > 1 ? split_gemms++ % kWorkspaceSlots : -1;
      l.step = step_at;
      l.tables = tables_at_[step.index];
      l.block[0] = static_cast<uint32_t>(jit::cuda::gemm_threads(c));
      l.shared = static_cast<uint32_t>(jit::cuda::gemm_shared_bytes(c, g));
      if (jit::cuda::gemm_takes_args(c, g)) {
        l.shape = jit::cuda::gemm_args(g);
        l.a_buffer = g.a_buffer;
        l.b_buffer = g.b_buffer;
      }
      // Always: the kernel's static shared memory counts against the same
      // 48 KB default, so a pipeline of exactly 48 KB (64x64x32 tiles as
      // swizzled rows) failed to launch without it.
      check(driver().cuFuncSetAttribute(l.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(l.shared)),
            "cuFuncSetAttribute", program_.kernels[step.index].name);
      l.label = program_.kernels[step.index].name + " gemm " + std::to_string(g.batch) + "x" + std::to_string(g.m) + "x" +
                std::to_string(g.n) + "x" + std::to_string(g.k) + " " + c.str();
      launches_.push_back(l);
      if (c.split > 1) {
        // Split-K: partial sums in a workspace slot, then the reduce kernel.
        workspace_slot_bytes_ = std::max<int64_t>(workspace_slot_bytes_, jit::cuda::gemm_workspace_elems(c, g) *
                                                                             jit::cuda::gemm_accumulator_size(g));
        Launch r;
        r.function = module_.reduce.at(step.index);
        r.grid[0] = jit::cuda::gemm_reduce_grid(g, ctx.multiprocessors);
        r.block[0] = jit::cuda::kGemmReduceThreads;
        r.workspace = l.workspace;
        r.step = step_at;
        r.tables = l.tables;
        r.label = l.label + " (reduce)";
        launches_.push_back(r);
      }
      continue;
    }
    if (step.kind == ir::Step::Generated) {
      // Launched as its function was emitted: from the kernel's local form.
      const ir::LocalKernel& local = module_.shared.local[step.index];
      const jit::cuda::KernelPlan plan = jit::cuda::plan_kernel(local.program, local.kernel(), &local.sizes);
      if (plan.empty) continue;
      const jit::cuda::LaunchDims dims = jit::cuda::launch_dims(plan);
      Launch l;
      l.function = module_.kernels.at(step.index);
      l.grid[0] = dims.grid;
      l.block[0] = dims.block;
      l.step = step_at;
      l.tables = tables_at_[step.index];
      l.label = program_.kernels[step.index].name;
      launches_.push_back(l);
      continue;
    }
    const ir::LibraryCall& call = program_.library_calls[step.index];
    for (const kernels::cuda::Launch& lib : kernels::cuda::plan_library(call, program_, step.index)) {
      Launch l;
      l.function = library_function(device_, lib.function);
      std::copy(lib.grid, lib.grid + 3, l.grid);
      std::copy(lib.block, lib.block + 3, l.block);
      l.shared = lib.shared_bytes;
      if (l.shared > 48 * 1024)  // above the default: the kernel must be allowed it (attention's tiles)
        check(driver().cuFuncSetAttribute(l.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(l.shared)),
              "cuFuncSetAttribute", lib.function);
      l.meta = static_cast<int64_t>(meta.size());
      l.step = step_at;
      l.label = lib.function;
      meta.insert(meta.end(), lib.meta.begin(), lib.meta.end());
      launches_.push_back(l);
    }
  }
  if (kernel_times_on()) {
    timing_events_.resize(launches_.size() + 1);
    for (CUevent& e : timing_events_) check(driver().cuEventCreate(&e, 0), "cuEventCreate", "kernel times");
  }
  if (split_gemms > 0)
    workspace_ = Buffer::allocate(Device(kCUDA, static_cast<int8_t>(device_)),
                                  workspace_slot_bytes_ * std::min(split_gemms, kWorkspaceSlots));
  if (!meta.empty()) {
    meta_ = Buffer::allocate(Device(kCUDA, static_cast<int8_t>(device_)), meta.size() * 8);
    copy_to_device(meta_->data(), meta.data(), meta.size() * 8, device_);
  }
}

// Every kernel takes five pointers: the set's buffer addresses, its scalars
// as double and as int64, its error words, and the launch's own meta or
// workspace slot; an FFMA GEMM then its shape and its operands' addresses
// (Launch::shape), from the set's words.
void CudaExecutable::kernel_params(const ArgSet& set, const Launch& l, Params& out) const {
  CUdeviceptr(&values)[5] = out.values;
  for (int i = 0; i < 5; ++i) out.params[i] = &values[i];
  out.params[5] = out.params[6] = out.params[7] = nullptr;
  if (l.shape) {
    out.shape = *l.shape;
    out.operands[0] = static_cast<CUdeviceptr>(set.uploaded.at(l.a_buffer));
    out.operands[1] = static_cast<CUdeviceptr>(set.uploaded.at(l.b_buffer));
    out.params[5] = &out.shape;
    out.params[6] = &out.operands[0];
    out.params[7] = &out.operands[1];
  }
  const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(set.block->data());
  const size_t ns = (err_at_ - scalar_at_) / 2;
  values[0] = base;
  values[1] = base + scalar_at_ * 8;
  values[2] = base + (scalar_at_ + ns) * 8;
  values[3] = base + err_at_ * 8;
  if (l.tables >= 0) {  // a shared function: the kernel's own tables (the node table follows its buffers)
    const ir::LocalKernel& local = module_.shared.local[program_.steps[l.step].index];
    const size_t scalars_at = static_cast<size_t>(l.tables) + local.buffers.size() + local.nodes.size();
    values[0] = base + static_cast<size_t>(l.tables) * 8;
    values[1] = base + scalars_at * 8;
    values[2] = base + (scalars_at + local.scalars.size()) * 8;
  }
  values[4] = l.workspace >= 0 ? reinterpret_cast<CUdeviceptr>(workspace_->data()) + l.workspace * workspace_slot_bytes_
              : l.meta >= 0    ? reinterpret_cast<CUdeviceptr>(meta_->data()) + l.meta * 8
                               : 0;
}

// A failed launch names the kernel and its launch shape.
std::string CudaExecutable::launch_description(const Launch& l) const {
  return (l.label.empty() ? std::string("a kernel") : l.label) + " on cuda:" + std::to_string(device_) + ", grid " +
         std::to_string(l.grid[0]) + "x" + std::to_string(l.grid[1]) + "x" + std::to_string(l.grid[2]) + ", block " +
         std::to_string(l.block[0]) + ", " + std::to_string(l.shared) + " bytes of shared memory";
}

void CudaExecutable::launch_all(const ArgSet& set) {
  const DeviceContext& ctx = context(device_);
  const DriverApi& d = driver();
  const bool timed = kernel_times_on() && !timing_events_.empty();
  for (const Launch& l : launches_) {
    Params p;
    kernel_params(set, l, p);
    const size_t at = static_cast<size_t>(&l - launches_.data());
    if (timed) check(d.cuEventRecord(timing_events_[at], ctx.stream), "cuEventRecord", "kernel times");
    // The message only on failure: building it is a string's allocations.
    if (CUresult r = d.cuLaunchKernel(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                                      l.shared, ctx.stream, p.params, nullptr))
      check(r, "cuLaunchKernel", launch_description(l));
  }
  if (timed) {
    check(d.cuEventRecord(timing_events_.back(), ctx.stream), "cuEventRecord", "kernel times");
    check(d.cuEventSynchronize(timing_events_.back()), "cuEventSynchronize", "kernel times");
    KernelTimes& kt = kernel_times();
    std::lock_guard lock(kt.mu);
    for (size_t i = 0; i < launches_.size(); ++i) {
      float ms = 0;
      check(d.cuEventElapsedTime(&ms, timing_events_[i], timing_events_[i + 1]), "cuEventElapsedTime", "kernel times");
      auto& row = kt.ms[launches_[i].label];
      row.first += ms;
      row.second += 1;
    }
  }
}

// What each launch reads and writes (launch_memory in launch_graph.h), and
// so which launches each must wait for.
std::vector<std::vector<uint32_t>> CudaExecutable::dependencies(const ArgSet& set,
                                                                const std::vector<int32_t>& written_into) const {
  if (launches_.size() <= 1) return std::vector<std::vector<uint32_t>>(launches_.size());  // a single-block program too
  if (serial_graph()) {
    std::vector<std::vector<uint32_t>> chain(launches_.size());
    for (size_t i = 1; i < chain.size(); ++i) chain[i] = {static_cast<uint32_t>(i - 1)};
    return chain;
  }
  std::vector<LaunchSite> sites;
  for (const Launch& l : launches_) sites.push_back({l.step, l.workspace});
  auto address = [](const BufferPtr& b) { return b ? reinterpret_cast<uintptr_t>(b->data()) : uintptr_t{0}; };
  return launch_dependencies(launch_memory(program_, written_into, sites, address(arena_), address(workspace_),
                                           workspace_slot_bytes_, address(set.block) + err_at_ * 8));
}

// The kernel node of launch `l` with parameters `kp` (kernel_params).
CudaKernelNodeParams CudaExecutable::node_params(const Launch& l, Params& kp) {
  return {l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared, kp.params,
          nullptr,    nullptr,   nullptr};
}

// Destroys the set's graph (in stream order: a launched graph finishes
// first) and the graph it was instantiated from.
void CudaExecutable::drop_graph(ArgSet& set) {
  const DriverApi& d = driver();
  if (set.graph) d.cuGraphExecDestroy(set.graph);
  if (set.source) d.cuGraphDestroy(set.source);
  set.graph = nullptr;
  set.source = nullptr;
  set.gemm_nodes.clear();
}

// After an upload: the set's block holds the run's addresses, which every
// kernel reads there, except a GEMM's operands (Launch::shape), which its
// graph node holds as parameters. Nodes whose operands moved are given the
// new ones; the update applies from the next launch of the graph on, not
// to launches already queued. An update the driver refuses drops the
// graph (run() builds it again from this run's words): a graph left half
// updated would run some products on the old operands.
void CudaExecutable::update_gemm_nodes(ArgSet& set) {
  const DriverApi& d = driver();
  for (ArgSet::GemmNode& n : set.gemm_nodes) {
    const Launch& l = launches_[n.launch];
    Params kp;
    kernel_params(set, l, kp);
    if (kp.operands[0] == n.operands[0] && kp.operands[1] == n.operands[1]) continue;
    const CudaKernelNodeParams p = node_params(l, kp);
    if (d.cuGraphExecKernelNodeSetParams(set.graph, n.node, &p) != CUDA_SUCCESS) {
      drop_graph(set);
      return;
    }
    n.operands[0] = kp.operands[0];
    n.operands[1] = kp.operands[1];
    bump(counters().cuda_graph_node_updates);
  }
}

// Builds the set's CUDA graph: one kernel node per launch, each after the
// launches it must follow (launch_graph.h), no more.
void CudaExecutable::build_graph(ArgSet& set, const std::vector<int32_t>& written_into) {
  const DriverApi& d = driver();
  const std::vector<std::vector<uint32_t>> deps = dependencies(set, written_into);
  CUgraph graph = nullptr;
  check(d.cuGraphCreate(&graph, 0), "cuGraphCreate", "replay");
  std::vector<CUgraphNode> nodes(launches_.size());
  CUresult r = CUDA_SUCCESS;
  const char* failed = "";
  set.gemm_nodes.clear();
  for (size_t i = 0; i < launches_.size() && r == CUDA_SUCCESS; ++i) {
    const Launch& l = launches_[i];
    Params kp;
    kernel_params(set, l, kp);
    const CudaKernelNodeParams p = node_params(l, kp);
    std::vector<CUgraphNode> after;
    for (uint32_t j : deps[i]) after.push_back(nodes[j]);
    r = d.cuGraphAddKernelNode(&nodes[i], graph, after.data(), after.size(), &p);
    failed = "cuGraphAddKernelNode";
    if (l.shape) set.gemm_nodes.push_back({i, nodes[i], {kp.operands[0], kp.operands[1]}});
  }
  if (r == CUDA_SUCCESS) {
    r = d.cuGraphInstantiate(&set.graph, graph, 0);
    failed = "cuGraphInstantiate";
  }
  if (r == CUDA_SUCCESS) {
    set.source = graph;  // kept: update_gemm_nodes names its nodes
  } else {
    d.cuGraphDestroy(graph);
    set.gemm_nodes.clear();
  }
  check(r, failed, "replay");
  set.graph_written_into = written_into;
  bump(counters().cuda_graphs_built);
  bump(counters().cuda_graph_kernels, static_cast<int64_t>(launches_.size()));
  bump(counters().cuda_graph_depth, static_cast<int64_t>(longest_chain(deps)));
}

void CudaExecutable::run(const RunArgs& args, std::vector<BufferPtr>& result) {
  std::lock_guard lock(mu_);
  const Device dev(kCUDA, static_cast<int8_t>(device_));
  const DeviceContext& ctx = context(device_);
  const DriverApi& d = driver();
  Slot& slot = slots_[next_slot_];
  if (slot.in_flight) check(d.cuEventSynchronize(slot.done), "cuEventSynchronize", "argument block");
  slot.in_flight = false;

  auto* words = static_cast<int64_t*>(slot.host);
  std::vector<BufferPtr> owned(program_.buffers.size());
  std::vector<int32_t> written_into(program_.buffers.size(), -1);  // per output buffer: the input it is donated into
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    const ir::BufferInfo& info = program_.buffers[b];
    void* p = nullptr;
    switch (info.kind) {
      case ir::BufferKind::Input: {
        const Buffer* in = args.inputs[info.index];
        if (!in->device().is_cuda() || in->device().index() != device_)
          throw Error("loom: internal error: a graph on cuda:" + std::to_string(device_) + " got an input on " +
                      in->device().str());
        p = in->data();
        break;
      }
      case ir::BufferKind::Output:
        owned[b] = outputs_.donated(static_cast<uint32_t>(b), args, &written_into[b]);
        if (!owned[b]) owned[b] = Buffer::allocate(dev, info.numel * element_size(info.dtype));
        p = owned[b]->data();
        break;
      case ir::BufferKind::Temp:
        p = arena_ ? static_cast<char*>(arena_->data()) + info.arena_offset : nullptr;
        break;
    }
    words[b] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p));
  }
  const size_t ns = (err_at_ - scalar_at_) / 2;
  for (size_t s = 0; s < ns && s < args.scalars.size(); ++s) {
    std::memcpy(&words[scalar_at_ + s], &args.scalars[s].f, 8);
    words[scalar_at_ + ns + s] = args.scalars[s].i;
  }
  words[err_at_] = 0;
  words[err_at_ + 1] = -1;
  words[err_at_ + 2] = words[err_at_ + 3] = 0;
  for (size_t i = 0; i < tables_at_.size(); ++i) {
    if (tables_at_[i] < 0) continue;
    const ir::LocalKernel& l = module_.shared.local[i];
    int64_t* t = words + tables_at_[i];
    for (uint32_t b : l.buffers) *t++ = words[b];
    for (uint32_t n : l.nodes) *t++ = n;
    for (uint32_t sl : l.scalars) *t++ = words[scalar_at_ + sl];
    for (uint32_t sl : l.scalars) *t++ = words[scalar_at_ + ns + sl];
    for (int64_t v : l.sizes.values) *t++ = v;  // its sizes, when they are arguments: after its int scalars
  }

  if (!launches_.empty()) {
    // The set already holding these words, else the least recently used.
    ArgSet* set = nullptr;
    for (ArgSet& a : sets_)
      if (a.uploaded.size() == arg_words_ && std::memcmp(a.uploaded.data(), words, arg_words_ * 8) == 0) set = &a;
    // A program that can fail resets its error words unless they are clean.
    const bool upload = !set || (outputs_.can_fail() && !set->errors_clean);
    if (!set) set = sets_[0].last_run <= sets_[1].last_run ? &sets_[0] : &sets_[1];
    if (upload) {
      check(d.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(set->block->data()), slot.host, arg_words_ * 8, ctx.stream),
            "cuMemcpyHtoDAsync", "argument block");
      check(d.cuEventRecord(slot.done, ctx.stream), "cuEventRecord", "argument block");
      slot.in_flight = true;
      next_slot_ ^= 1;
      set->uploaded.assign(words, words + arg_words_);
      bump(counters().cuda_argument_uploads);
    }
    set->last_run = runs_;
    set->errors_clean = false;  // until this run's words are read back (error_of)
    last_set_ = set;
    // The first run launches directly (it also proves every launch valid);
    // later runs replay the set's graph, built on its first replay, and
    // again when outputs are written into other inputs' buffers than the
    // graph's dependencies assumed (a loop keeps one pattern).
    if (set->graph && set->graph_written_into != written_into) drop_graph(*set);
    if (set->graph && upload) update_gemm_nodes(*set);
    if (!set->graph && runs_ > 0 && !kernel_times_on()) build_graph(*set, written_into);
    if (set->graph) {
      if (CUresult r = d.cuGraphLaunch(set->graph, ctx.stream))  // every replay: the message only on failure
        check(r, "cuGraphLaunch", "replay on cuda:" + std::to_string(device_));
      bump(counters().cuda_graph_launches);
    } else {
      launch_all(*set);
    }
  }
  ++runs_;
  if (outputs_.can_fail() && !launches_.empty()) {
    if (args.late) *args.late = check_later();  // the host goes on recording while the GPU works
    else check_errors();
  }
  outputs_.results(owned, dev, result);
}

// Bad data is found on the GPU; the message is made here, after a sync.
void CudaExecutable::check_errors() {
  int64_t err[kErrorWords] = {0, -1, 0, 0};
  copy_to_host(err, static_cast<char*>(last_set_->block->data()) + err_at_ * 8, sizeof(err), device_);
  if (std::optional<RunError> e = error_of(err)) throw *e;
}

// Reads a run's error words once its work is done. The caller keeps the
// executable alive and runs it again only after wait() (RunArgs::late), so
// the words, the argument set and the inputs out_of_range_message reads
// are still this run's.
class CudaExecutable::Late final : public LateCheck {
 public:
  explicit Late(CudaExecutable& exe) : exe_(exe) {}
  std::optional<RunError> wait() override {
    std::lock_guard lock(exe_.mu_);
    check(driver().cuEventSynchronize(exe_.err_copy_.done), "cuEventSynchronize", "error words");
    int64_t err[kErrorWords];
    std::copy(exe_.err_copy_.host, exe_.err_copy_.host + kErrorWords, err);
    return exe_.error_of(err);
  }

 private:
  CudaExecutable& exe_;
};

std::unique_ptr<LateCheck> CudaExecutable::check_later() {
  const DriverApi& d = driver();
  if (!err_copy_.host) {
    void* p = nullptr;
    check(d.cuMemHostAlloc(&p, kErrorWords * sizeof(int64_t), CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc", "error words");
    err_copy_.host = static_cast<int64_t*>(p);
    check(d.cuEventCreate(&err_copy_.done, CU_EVENT_DISABLE_TIMING), "cuEventCreate", "error words");
  }
  const CUstream stream = context(device_).stream;
  check(d.cuMemcpyDtoHAsync(err_copy_.host, reinterpret_cast<CUdeviceptr>(last_set_->block->data()) + err_at_ * 8,
                            kErrorWords * sizeof(int64_t), stream),
        "cuMemcpyDtoHAsync", "error words");
  check(d.cuEventRecord(err_copy_.done, stream), "cuEventRecord", "error words");
  return std::make_unique<Late>(*this);
}

std::optional<RunError> CudaExecutable::error_of(const int64_t (&err)[kErrorWords]) {
  last_set_->errors_clean = err[0] == 0 && err[1] == -1;
  if (err[0] == 0) return std::nullopt;
  const auto node = static_cast<uint32_t>(err[1]);
  if (err[0] == jit::cuda::kErrorIntegerDivisionByZero) return RunError{node, "ZeroDivisionError: integer division by zero"};
  for (const ir::LibraryCall& call : program_.library_calls)
    if (call.node == node) return RunError{node, out_of_range_message(call)};
  if (err[0] == jit::cuda::kErrorIndexOutOfRange) return RunError{node, index_out_of_range_message(err[2], err[3])};
  return RunError{node, "bad data (error code " + std::to_string(err[0]) + ")"};
}

// The first out-of-range index in row-major order, as the CPU reports it.
std::string CudaExecutable::out_of_range_message(const ir::LibraryCall& call) {
  const int64_t* words = last_set_->uploaded.data();  // this run's buffer addresses
  const int64_t dim_size = call.input_shapes[0][static_cast<size_t>(call.attr[0])];
  const int64_t n = call.input_shapes[1].numel();
  std::vector<int64_t> index(static_cast<size_t>(n));
  const char* base = reinterpret_cast<const char*>(static_cast<uintptr_t>(words[call.inputs[1]]));
  const uint32_t slot = call.input_offset_scalar(1);  // the index is a view of a stored tensor at a runtime offset
  const size_t ns = (err_at_ - scalar_at_) / 2;
  const int64_t offset = call.input_offsets[1] + (slot == ir::Access::kNoScalar ? 0 : words[scalar_at_ + ns + slot]);
  copy_to_host(index.data(), base + offset * 8, index.size() * 8, device_);
  for (int64_t v : index)
    if (v < 0 || v >= dim_size)
      return index_out_of_range_message(v, dim_size);
  return "index out of bounds";
}

}  // namespace loom::runtime::cuda
