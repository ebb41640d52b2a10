// The CUDA code generator's entry points (jit/cuda/codegen.h): launch plans,
// single-block programs, kernels alike sharing one function, and the
// program's CUDA C source; each kernel's text is emitted by KernelEmitter
// (jit/cuda/kernel_emitter.h).
#include "jit/cuda/codegen.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "ir/lower/lower.h"
#include "jit/cuda/gemm.h"
#include "jit/cuda/kernel_emitter.h"

namespace loom::kernels::cuda::detail {
extern const char kPhiloxSource[];  // ir/philox.h, embedded at build time (embed_source.cmake)
extern const char kBf16Source[];    // kernels/cuda/bfloat16.cuh, the same way
}  // namespace loom::kernels::cuda::detail

namespace loom::jit::cuda {

using namespace detail;  // the emitter and the helpers it shares with the plans below

namespace {

const char* kPrelude =
#include "jit/cuda/prelude.cu.inc"
    ;

}  // namespace


KernelPlan plan_kernel(const ir::KernelProgram& program, const ir::Kernel& k, const ir::SizeArgs* sizes) {
  KernelPlan p;
  const int n = k.loop.n;
  if (is_pointwise(k)) {
    p.pointwise = true;
    p.lanes = can_use_lanes(program, k) ? kLanes : 1;
    p.threads = prod(k.loop, 0, n) / p.lanes;
    p.empty = p.threads == 0;
    // Lanes by the run's numbers: steps and block as for 4 lanes, in both.
    p.lanes_at_run_time = sizes && lanes_at_run_time(program, k, *sizes);
    const int64_t threads = p.lanes_at_run_time ? prod(k.loop, 0, n) / kLanes : p.threads;
    // Costly elementwise work (W1's tanh and sigmoid): four steps a thread,
    // the loads of all first, so one step's arithmetic does not hold back
    // the next step's loads, in blocks of 128. W1 (2^24 floats), 20 calls
    // queued between two events, steps/block: on an H200 2/256 41.8-42.0
    // us, 2/128 40.0, 4/256 38.5, 4/128 37.3-37.6, 8/128 38.8, 16/128 53.8;
    // on an H100 2/256 49.7-49.8, 2/128 48.6-48.8, 4/128 49.6-50.1, 8/128
    // 51.2. The H200's faster memory wants more loads in flight for the
    // same arithmetic; 4/128 is the best of both. A plain copy keeps one
    // step in blocks of 256 (2^26 floats on an H100: 184 us, 188 with two
    // steps), and small grids keep their blocks.
    if (k.cost_per_element >= kCostlyElement && threads >= kCostlyMinThreads) {
      p.steps = kCostlySteps;
      p.block = kCostlyBlock;
    }
    // A transposing load: tiles, when there are whole tiles to fill.
    if (n == 2 && k.loop[0] >= kTile && k.loop[1] >= kTile)
      for (const ir::Expr& x : k.exprs)
        if (x.kind == ExprKind::Load && tiled_load(k, k.accesses[x.a])) p.tiled = true;
    if (p.tiled) {
      p.lanes = 1, p.steps = 1, p.block = kTile * 8, p.lanes_at_run_time = false;
      p.threads = prod(k.loop, 0, n);
      p.tiles = ((k.loop[0] + kTile - 1) / kTile) * ((k.loop[1] + kTile - 1) / kTile);
    }
    return p;
  }
  p.pointwise = false;
  p.rows = prod(k.loop, 0, k.outer);
  p.row_length = prod(k.loop, k.outer, n);
  const bool arg = std::any_of(k.phases.begin(), k.phases.end(), [](const ir::Phase& ph) {
    return ph.kind == ir::Phase::Reduce && (ph.reduce_op == Op::ArgMax || ph.reduce_op == Op::ArgMin);
  });
  // An arg phase reduces one dim (ir/ops.def), its last: lane l of a step
  // at i is element i + l, so 16-byte loads serve it too.
  p.lanes = n > k.outer && (!arg || n == k.outer + 1) && can_use_lanes(program, k) ? kLanes : 1;
  const int64_t steps = p.row_length / p.lanes;  // lane groups per row
  // Column groups: each thread of a warp reads its own row's element, the
  // 32 rows adjacent in memory. Up to 32 threads a row, a block of at least
  // 256 (32 rows at 32 threads; more rows for shorter ones). For fewer than
  // kColumnMinRows rows that is too few blocks: the usual groups, up to
  // 1024 threads a row, measured faster there (H100, [8192, 64].sum(0):
  // 12.4 against 13.6-15.2 us).
  // A row of one element (a sum over a dim of size 1, as a weight
  // gradient's one batch split) is one thread's: a warp per row would leave
  // 31 of its 32 threads idle (W10 on an H200: three such kernels over
  // layer 4's 2.4M weights took 375 us each, the update they carry 4).
  p.columns = !arg && k.loop[k.outer - 1] >= 32 && p.rows >= kColumnMinRows &&
              (p.row_length == 1 || ir::rows_lie_across_memory(k));
  if (p.columns) {
    p.group = static_cast<int>(std::clamp<int64_t>(pow2_at_least((steps + kColumnSteps - 1) / kColumnSteps), 1, 32));
    p.rows_per_block = std::max(32, 256 / p.group);
  } else {
    p.group = static_cast<int>(std::clamp<int64_t>(pow2_at_least((steps + kMaxPerThread - 1) / kMaxPerThread), 32, 1024));
    p.rows_per_block = p.group < 256 ? 256 / p.group : 1;
  }
  p.per_thread = steps <= int64_t(p.group) * kMaxPerThread
                     ? static_cast<int>(std::max<int64_t>(1, (steps + p.group - 1) / p.group))
                     : 0;
  p.empty = p.rows == 0;
  return p;
}

LaunchDims launch_dims(const KernelPlan& plan) {
  LaunchDims d;
  if (plan.tiled) {  // a block per tile, as many as there are (the kernel loops past the grid limit)
    d.block = static_cast<uint32_t>(plan.block);
    d.grid = static_cast<uint32_t>(std::clamp<int64_t>(plan.tiles, 1, int64_t(0x7fffffff)));
    return d;
  }
  if (plan.pointwise) {
    // One thread per step of `lanes` elements, as many blocks as that takes:
    // each thread issues its loads at once and the block scheduler keeps
    // every SM full to the end. Measured on an H100 (W1, 2^24 floats, kernel
    // time): 52.1 us this way, 54.0 us with the grid capped at 32 blocks per
    // SM and threads looping; a 2^26 copy 184 vs 192 us. The kernel still
    // loops (grid-stride), for grids past the hardware's limit.
    d.block = static_cast<uint32_t>(plan.block);
    const int64_t blocks = (plan.threads + d.block * plan.steps - 1) / (d.block * plan.steps);
    d.grid = static_cast<uint32_t>(std::clamp<int64_t>(blocks, 1, int64_t(0x7fffffff)));
    return d;
  }
  d.block = static_cast<uint32_t>(plan.group * plan.rows_per_block);
  d.grid = static_cast<uint32_t>(std::clamp<int64_t>((plan.rows + plan.rows_per_block - 1) / plan.rows_per_block, 1,
                                                    int64_t(0x7fffffff)));
  return d;
}

std::string kernel_symbol(size_t i) { return "loom_k" + std::to_string(i); }

bool single_block(const ir::KernelProgram& p) {
  if (p.steps.size() < 2) return false;
  int64_t work = 0;
  size_t accesses = 0, exprs = 0;
  for (const ir::Step& st : p.steps) {
    if (st.kind != ir::Step::Generated) return false;
    const ir::Kernel& k = p.kernels[st.index];
    if (!is_pointwise(k)) return false;
    accesses += k.accesses.size(), exprs += k.exprs.size();
    if (accesses > kSingleBlockMaxAccesses || exprs > ir::kMaxKernelExprs) return false;
    const int64_t numel = prod(k.loop, 0, k.loop.n);
    if (numel > kSingleBlockMaxElements) return false;
    int64_t per_element = 1;
    if (k.contraction) {
      const GemmProblem g = gemm_problem(p, k, false);
      if (g.dtype != kFloat && g.dtype != kDouble) return false;
      // Operands stored as they are summed (a bfloat16 product keeps its template).
      if (p.buffers[g.a_buffer].dtype != g.dtype || p.buffers[g.b_buffer].dtype != g.dtype) return false;
      per_element = g.k;
      // Each thread's chain of sums stays short (its loads wait in turn).
      const int lanes = block_product_lanes(numel);
      if ((g.k + lanes - 1) / lanes > kSingleBlockMaxChain) return false;
    }
    work += numel * per_element;
  }
  return work <= kSingleBlockMaxWork;
}

std::string build_id() { return "cuda " + ir::codegen_source_id(); }

namespace {
// The tile configuration GEMM kernel i is emitted with.
GemmConfig config_of(const ir::KernelProgram& p, const std::vector<GemmConfig>& gemm, size_t i) {
  GemmConfig c = i < gemm.size() ? gemm[i] : GemmConfig{};
  return c.valid() ? c : gemm_heuristic(gemm_problem(p, p.kernels[i], false), 132);
}
}  // namespace

std::string alignment_key(const ir::KernelProgram& p, const ir::Kernel& k) {
  std::string key;
  for (const ir::Access& a : k.accesses) {
    const ir::BufferInfo& b = p.buffers[a.buffer];
    key += b.kind == ir::BufferKind::Temp && b.arena_offset % 32 != 0 ? 'u' : 'a';
  }
  return key;
}

ir::SharedKernels share_kernels(const ir::KernelProgram& p, const std::vector<GemmConfig>& gemm, ir::Lift lift,
                                ir::SizeHistory* history) {
  return ir::share_kernels(p, [&](const ir::Kernel& k, const ir::LocalKernel& l) {
    std::string key = alignment_key(p, k);
    if (k.contraction) {
      const GemmConfig c = config_of(p, gemm, static_cast<size_t>(&k - p.kernels.data()));
      for (uint64_t w : c.key()) key += ";" + std::to_string(w);
      // The operands' layout the tile is instantiated for (gemm_instance):
      // with sizes as arguments two products of one key may have strides
      // that allow 16-byte copies in one and not in the other.
      const GemmProblem g = gemm_problem(p, k, c.mma);
      for (bool f : {g.a_kmajor, g.a_vec, g.b_kmajor, g.b_vec}) key += f ? 'T' : 'F';
    }
    // The plan's choices, which the text holds: kernels of one key at other
    // sizes (sizes as arguments) may plan otherwise, and must not share;
    // lanes picked at run time (0 here) are both forms, whichever this size takes.
    const KernelPlan plan = plan_kernel(p, k, &l.sizes);
    for (int64_t w : {int64_t{plan.pointwise}, int64_t{plan.tiled}, int64_t{plan.lanes_at_run_time ? 0 : plan.lanes}, int64_t{plan.steps},
                      int64_t{plan.block}, int64_t{plan.group}, int64_t{plan.rows_per_block}, int64_t{plan.per_thread},
                      int64_t{plan.columns}, int64_t{plan.threads * plan.lanes < (int64_t{1} << 31)}})
      key += "," + std::to_string(w);
    return key;
  }, {}, lift, history);
}

std::string shared_symbol(size_t j) { return "loom_f" + std::to_string(j); }

std::string emit_source(const ir::KernelProgram& p, const ir::SharedKernels& shared, const std::vector<GemmConfig>& gemm,
                        bool allow_single_block) {
  std::ostringstream out;
  out << kPrelude << kernels::cuda::detail::kBf16Source;
  const bool any_random = std::any_of(p.kernels.begin(), p.kernels.end(), [](const ir::Kernel& k) {
    return std::any_of(k.exprs.begin(), k.exprs.end(), [](const ir::Expr& x) {
      return x.kind == ExprKind::Op && (x.op == Op::RandUniform || x.op == Op::RandNormal);
    });
  });
  if (any_random) out << kernels::cuda::detail::kPhiloxSource;
  if (allow_single_block && single_block(p)) {
    // Each kernel a __device__ step, then the one kernel that runs them in
    // program order, each after a barrier: a step reads what earlier steps
    // of the block wrote to global memory, which __syncthreads() makes
    // visible; after a failed step the error word stops the rest.
    for (size_t i = 0; i < p.kernels.size(); ++i) KernelEmitter(p, p.kernels[i], i, out, {}, true).emit();
    // The buffer addresses are read once, into registers (`bp`), not by
    // each step after its barrier (__restrict__ on the argument block
    // instead measured 1 us slower on W5). The error word is read only
    // after a step that can fail: no earlier kernel of the run can have
    // failed, and each read is a round trip to memory.
    out << "\nextern \"C\" __global__ void __launch_bounds__(" << kSingleBlockThreads << ") " << kSingleBlockSymbol
        << "(" << kKernelParams << ") {\n";
    out << "  void* bp[" << std::max<size_t>(p.buffers.size(), 1) << "];\n";
    for (size_t b = 0; b < p.buffers.size(); ++b) out << "  bp[" << b << "] = bufs[" << b << "];\n";
    bool first = true, check = false;
    for (const ir::Step& st : p.steps) {
      if (plan_kernel(p, p.kernels[st.index]).empty) continue;
      if (!first) out << "  __syncthreads();\n" << (check ? "  if (err[0] != 0) return;\n" : "");
      out << "  " << kernel_symbol(st.index) << "(bp, fs, is, err);\n";
      first = false;
      check = ir::can_fail(p, st);
    }
    out << "}\n";
    return out.str();
  }
  const bool any_gemm = std::any_of(p.kernels.begin(), p.kernels.end(), [](const ir::Kernel& k) { return k.contraction.has_value(); });
  if (any_gemm) out << gemm_template_source();
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const uint32_t f = shared.function[i];
    const ir::LocalKernel& l = shared.local[i];
    if (shared.first[f] != i) continue;  // emitted with the first kernel it runs
    const GemmConfig c = p.kernels[i].contraction ? config_of(p, gemm, i) : GemmConfig{};
    KernelEmitter(l.program, l.kernel(), f, out, c, false, {}, l.sizes).emit();
  }
  return out.str();
}

std::string function_symbol(const std::string& key) { return ir::key_symbol("loom_g", key); }

std::string emit_function_source(const ir::KernelProgram& p, const ir::SharedKernels& shared,
                                 const std::vector<GemmConfig>& gemm, size_t f) {
  const size_t i = shared.first.at(f);
  const ir::LocalKernel& l = shared.local[i];
  const ir::Kernel& k = l.kernel();
  std::ostringstream out;
  out << kPrelude << kernels::cuda::detail::kBf16Source;
  const bool random = std::any_of(k.exprs.begin(), k.exprs.end(), [](const ir::Expr& x) {
    return x.kind == ExprKind::Op && (x.op == Op::RandUniform || x.op == Op::RandNormal);
  });
  if (random) out << kernels::cuda::detail::kPhiloxSource;
  if (k.contraction) out << gemm_template_source();
  const GemmConfig c = k.contraction ? config_of(p, gemm, i) : GemmConfig{};
  KernelEmitter(l.program, k, f, out, c, false, function_symbol(shared.keys.at(f)), l.sizes).emit();
  return out.str();
}

std::string emit_source(const ir::KernelProgram& p, const std::vector<GemmConfig>& gemm, bool allow_single_block) {
  // A single-block program shares nothing (its steps are one kernel).
  const bool one_block = allow_single_block && single_block(p);
  return emit_source(p, one_block ? ir::SharedKernels{} : share_kernels(p, gemm), gemm, allow_single_block);
}

}  // namespace loom::jit::cuda
