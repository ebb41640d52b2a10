// The CUDA code generator without a GPU: the launch plans it picks, and the
// CUDA C it emits for a spread of graphs compiles with NVRTC for sm_90
// (skipped, with the reason, where NVRTC is not installed). The numbers are
// checked on a GPU by the op suite and the differential test (cuda runs).
#include <gtest/gtest.h>
#include <loom/loom.h>

#include "tests/internal/lower_util.h"
#include "ir/graph.h"
#include "ir/lower/lower.h"
#include "jit/cuda/codegen.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nvrtc_compile.h"

namespace {

using loom::ir::KernelProgram;
namespace jc = loom::jit::cuda;

using loom_test::lower_outputs;

std::string nvrtc_missing() {
  try {
    loom::runtime::cuda::nvrtc();
    return "";
  } catch (const loom::Error& e) {
    return e.what();
  }
}

// Compiles the program's kernels as the cuda backend does: a single-block
// program as one source, any other one program per function
// (emit_function_source); fails the test with NVRTC's log.
void expect_compiles(const KernelProgram& p, const std::string& what) {
  std::vector<std::string> sources;
  if (jc::single_block(p)) {
    sources.push_back(jc::emit_source(p));
  } else {
    const loom::ir::SharedKernels shared = jc::share_kernels(p);
    for (size_t f = 0; f < shared.first.size(); ++f) {
      sources.push_back(jc::emit_function_source(p, shared, {}, f));
      EXPECT_NE(sources.back().find(jc::function_symbol(shared.keys[f])), std::string::npos) << what;
    }
  }
  for (const std::string& src : sources) {
    if (std::getenv("LOOM_TEST_PRINT")) std::cerr << loom::ir::to_string(p) << src;
    try {
      loom::runtime::cuda::compile_cubin(src, "sm_90", what);
    } catch (const loom::Error& e) {
      ADD_FAILURE() << what << ": " << e.what() << "\n--- source ---\n" << src;
    }
  }
}

TEST(CudaCodegen, PointwiseChainUsesFourLanes) {
  auto x = loom::randn({1 << 12});
  loom::sync();
  KernelProgram p = lower_outputs({loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x});
  ASSERT_EQ(p.kernels.size(), 1u);
  jc::KernelPlan plan = jc::plan_kernel(p, p.kernels[0]);
  EXPECT_TRUE(plan.pointwise);
  EXPECT_EQ(plan.lanes, 4);
  EXPECT_EQ(plan.threads, 1 << 10);
  EXPECT_NE(jc::emit_source(p).find("loom_vload4"), std::string::npos);
}

// A pointwise kernel gets a thread per step of its lanes (W1: 2^22 threads
// of 4 floats), however many blocks that is: no grid-stride loop in
// practice (measured faster on an H100; see launch_dims).
TEST(CudaCodegen, PointwiseGridCoversEveryStep) {
  jc::KernelPlan plan;
  plan.pointwise = true;
  plan.threads = int64_t{1} << 22;
  EXPECT_EQ(jc::launch_dims(plan).grid, 16384u);
  EXPECT_EQ(jc::launch_dims(plan).block, 256u);
  plan.threads = int64_t{1} << 40;  // past the grid limit: the kernel's loop takes the rest
  EXPECT_EQ(jc::launch_dims(plan).grid, 0x7fffffffu);
}

TEST(CudaCodegen, OddSizesAndTransposesUseOneLane) {
  auto x = loom::randn({7, 5});
  loom::sync();
  KernelProgram p = lower_outputs({x.t() * 2});
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(jc::plan_kernel(p, p.kernels[0]).lanes, 1);
}

// A pointwise kernel over two loops with a load that walks memory along
// the outer loop (a transpose) is tiled: 32 x 32 elements a block through
// shared memory; a tile-less one (a row of 7) or one with no such load is
// not. Odd sizes leave partial tiles; the source compiles with NVRTC.
TEST(CudaCodegen, TransposingLoadsAreTiled) {
  auto x = loom::randn({1000, 65}), y = loom::randn({65, 1000}), small = loom::randn({7, 1000});
  loom::sync();
  KernelProgram t = lower_outputs({x.t() + y});
  ASSERT_EQ(t.kernels.size(), 1u);
  jc::KernelPlan plan = jc::plan_kernel(t, t.kernels[0]);
  EXPECT_TRUE(plan.tiled);
  EXPECT_EQ(plan.tiles, 3 * 32);  // 65 rows: 3 tiles; 1000 columns: 32
  EXPECT_EQ(jc::launch_dims(plan).grid, 96u);
  EXPECT_EQ(jc::launch_dims(plan).block, 256u);
  const std::string src = jc::emit_source(t);
  EXPECT_NE(src.find("__shared__ float tile"), std::string::npos) << src;
  KernelProgram plain = lower_outputs({y * 2 + 1});
  EXPECT_FALSE(jc::plan_kernel(plain, plain.kernels[0]).tiled);
  KernelProgram thin = lower_outputs({small.t() * 2});
  EXPECT_FALSE(jc::plan_kernel(thin, thin.kernels[0]).tiled);
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  expect_compiles(t, "a tiled transpose");
}

TEST(CudaCodegen, SoftmaxRowStaysInRegisters) {
  auto x = loom::randn({64, 4096});
  loom::sync();
  KernelProgram p = lower_outputs({loom::softmax(x, -1)});
  ASSERT_EQ(p.kernels.size(), 1u);
  jc::KernelPlan plan = jc::plan_kernel(p, p.kernels[0]);
  EXPECT_FALSE(plan.pointwise);
  EXPECT_EQ(plan.rows, 64);
  EXPECT_EQ(plan.row_length, 4096);
  EXPECT_EQ(plan.lanes, 4);  // 16-byte loads: 1024 steps of 4 per row
  EXPECT_EQ(plan.group, 128);
  EXPECT_EQ(plan.per_thread, 8);
  EXPECT_EQ(plan.rows_per_block, 2);
  const std::string src = jc::emit_source(p);
  EXPECT_NE(src.find("s0[j * 4 + l]"), std::string::npos) << src;  // the row's loads are stashed
  EXPECT_NE(src.find("loom_vstore4"), std::string::npos) << src;
  jc::LaunchDims d = jc::launch_dims(plan);
  EXPECT_EQ(d.grid, 32u);
  EXPECT_EQ(d.block, 256u);
}

// W3's weight and bias are read only by its store phase; they are loaded
// with the row in phase 0 (plan_early_loads), so every load of the kernel
// comes before its first reduction.
TEST(CudaCodegen, LaterPhasesLoadsIssueWithTheRow) {
  auto x = loom::randn({64, 4096}), g = loom::randn({4096}), b = loom::randn({4096});
  loom::sync();
  auto mu = x.mean({-1}, true);
  auto var = (x - mu).pow(2).mean({-1}, true);
  KernelProgram p = lower_outputs({(x - mu) * loom::rsqrt(var + 1e-5) * g + b});
  ASSERT_EQ(p.kernels.size(), 1u);
  const std::string src = jc::emit_source(p);
  const size_t first_reduce = src.find("loom_group_reduce(acc");
  ASSERT_NE(first_reduce, std::string::npos) << src;
  size_t loads = 0;
  for (size_t at = src.find("loom_vload4(ld"); at != std::string::npos; at = src.find("loom_vload4(ld", at + 1)) {
    EXPECT_LT(at, first_reduce) << src;
    ++loads;
  }
  EXPECT_EQ(loads, 3u) << src;  // x, g and b, each once
}

TEST(CudaCodegen, ShortRowsShareABlock) {
  auto x = loom::randn({1000, 10});
  loom::sync();
  KernelProgram p = lower_outputs({x.sum({1})});
  ASSERT_GE(p.kernels.size(), 1u);
  jc::KernelPlan plan = jc::plan_kernel(p, p.kernels[0]);
  EXPECT_EQ(plan.group, 32);
  EXPECT_EQ(plan.rows_per_block, 8);
  EXPECT_EQ(jc::launch_dims(plan).grid, 125u);
}

TEST(CudaCodegen, LongRowsLoop) {
  auto x = loom::randn({2, 100000});
  loom::sync();
  KernelProgram p = lower_outputs({x.amax({1})});
  jc::KernelPlan plan = jc::plan_kernel(p, p.kernels[0]);
  EXPECT_EQ(plan.group, 1024);
  EXPECT_EQ(plan.per_thread, 0);
}

// x.sum(0) of a row-major x: each output is a column, read down memory
// rows. A warp then takes 32 adjacent columns, one thread each, so each of
// its loads is 128 contiguous bytes; a column's threads are 32 apart and
// fold their partials through shared memory (KernelPlan::columns).
// Costly pointwise kernels over many elements take four steps a thread in
// blocks of 128, the loads of all steps issued first; cheap or small ones
// one step in blocks of 256.
TEST(CudaCodegen, CostlyLargePointwiseKernelsTakeFourStepsAThread) {
  auto x = loom::randn({1 << 22});
  auto small = loom::randn({1 << 12});
  loom::sync();
  KernelProgram costly = lower_outputs({loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x});
  jc::KernelPlan plan = jc::plan_kernel(costly, costly.kernels.front());
  EXPECT_TRUE(plan.pointwise);
  EXPECT_EQ(plan.steps, jc::kCostlySteps);
  EXPECT_EQ(plan.threads, (1 << 22) / 4);
  EXPECT_EQ(jc::launch_dims(plan).block, static_cast<uint32_t>(jc::kCostlyBlock));
  EXPECT_EQ(jc::launch_dims(plan).grid, static_cast<uint32_t>((1 << 20) / (jc::kCostlySteps * jc::kCostlyBlock)));
  const std::string src = jc::emit_source(costly);
  if (std::getenv("LOOM_TEST_PRINT")) std::cerr << src;
  EXPECT_NE(src.find("[4][4]"), std::string::npos) << src;  // every step's loads held at once
  EXPECT_NE(src.find("__launch_bounds__(128)"), std::string::npos) << src;
  KernelProgram cheap = lower_outputs({x * 2});
  EXPECT_EQ(jc::plan_kernel(cheap, cheap.kernels.front()).steps, 1);
  EXPECT_EQ(jc::launch_dims(jc::plan_kernel(cheap, cheap.kernels.front())).block, 256u);
  KernelProgram few = lower_outputs({loom::sigmoid(loom::tanh(small * 1.5 + 0.5) * small) + small * small});
  EXPECT_EQ(jc::plan_kernel(few, few.kernels.front()).steps, 1);
}

// An argmax along rows reads 4 elements a step (16-byte loads) and records
// lane l of the step at i as element i + l.
TEST(CudaCodegen, ArgReductionsAlongRowsUseLanes) {
  auto x = loom::randn({64, 4096});
  loom::sync();
  KernelProgram p = lower_outputs({x.argmax(1)});
  jc::KernelPlan plan = jc::plan_kernel(p, p.kernels.front());
  EXPECT_FALSE(plan.pointwise);
  EXPECT_EQ(plan.lanes, 4);
  const std::string src = jc::emit_source(p);
  EXPECT_NE(src.find("at = i1 + l;"), std::string::npos) << src;
  EXPECT_NE(src.find("loom_vload4"), std::string::npos) << src;
}

TEST(CudaCodegen, ColumnReductionsPutAWarpAcrossColumns) {
  auto x = loom::randn({512, 256});
  auto d = loom::randn({64, 3000, 40}, loom::kDouble);
  loom::sync();
  KernelProgram p = lower_outputs({x.sum({0})});
  ASSERT_GE(p.kernels.size(), 1u);  // (and a copy: the test reads the result through a view)
  jc::KernelPlan plan = jc::plan_kernel(p, p.kernels[0]);
  EXPECT_FALSE(plan.pointwise);
  EXPECT_TRUE(plan.columns);
  EXPECT_EQ(plan.rows, 256);
  EXPECT_EQ(plan.row_length, 512);
  EXPECT_EQ(plan.group, 32);  // 128 steps of 4 rows: 32 threads a column, 4 steps each
  EXPECT_EQ(plan.rows_per_block, 32);
  EXPECT_EQ(jc::launch_dims(plan).grid, 8u);
  EXPECT_EQ(jc::launch_dims(plan).block, 1024u);
  const std::string src = jc::emit_source(p);
  if (std::getenv("LOOM_TEST_PRINT")) std::cerr << src;
  EXPECT_NE(src.find("loom_column_reduce"), std::string::npos) << src;
  EXPECT_NE(src.find("threadIdx.x % 32"), std::string::npos) << src;  // row: the thread's place in its warp
  // The middle dim of [64, 3000, 40] (rows of 40 adjacent outputs): double
  // partials, 8 bytes a thread.
  jc::KernelPlan mid = jc::plan_kernel(lower_outputs({d.sum({1})}), lower_outputs({d.sum({1})}).kernels[0]);
  EXPECT_TRUE(mid.columns);
  EXPECT_EQ(mid.rows, 64 * 40);
  // Along memory rows, or an argmax, or too few adjacent outputs, or too
  // few outputs for the blocks a GPU needs: the usual groups.
  for (const loom::Tensor& t : {x.sum({1}), x.argmax(0), x.t().contiguous().view({256, 512}).sum({0}),
                                loom::randn({512, 8}).sum({0}), loom::randn({8192, 64}).sum({0})}) {
    KernelProgram q = lower_outputs({t});
    EXPECT_FALSE(jc::plan_kernel(q, q.kernels.front()).columns) << loom::ir::to_string(q);
  }
}

TEST(CudaCodegen, EmptyKernelsAreSkipped) {
  auto x = loom::randn({0, 4});
  loom::sync();
  KernelProgram p = lower_outputs({x + 1});
  for (const auto& k : p.kernels) EXPECT_TRUE(jc::plan_kernel(p, k).empty);
}

// One NVRTC compile of many kernels at once: every expression kind (random
// numbers in place too), every dtype, both kernel shapes, the reduce operators and the error paths.
TEST(CudaCodegen, EmittedSourceCompilesWithNvrtc) {
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  auto f = loom::randn({8, 12});
  auto d = loom::randn({8, 12}, loom::kDouble);
  auto i = loom::randint(-5, 5, {8, 12});
  auto i32 = loom::randint(-5, 5, {8, 12}, loom::kInt);
  auto b = loom::randn({8, 12}) > 0;
  auto w = loom::randn({30, 64});
  loom::sync();
  std::vector<loom::Tensor> outs = {
      loom::sigmoid(loom::tanh(f * 1.5 + 0.5) * f) + f * f,
      loom::softmax(f, -1), loom::log_softmax(d, 0),
      (f - f.mean({-1}, true)) * loom::rsqrt(f.var({-1}, false, true) + 1e-5),
      f.argmax(1), d.argmin(0), i.sum({1}), i32.prod({0}), b.all(), b.any(1), b.sum(), f.amax({0}), i.amin({1}),
      loom::fmod(i, i32 + 7), loom::remainder(i32, i), loom::remainder(f, d), loom::pow(i, i32.abs()),
      loom::pow(f, 2.5), loom::where(b, f, d), loom::clamp(d, -0.5, 0.5), (i / 3).to(loom::kFloat),
      loom::gelu(f), loom::gelu(d, "tanh"), loom::silu(f), loom::erf(d), loom::expm1(f), loom::log1p(d.abs()),
      loom::sin(f) + loom::cos(d), loom::round(f * 3), loom::floor(d) + loom::ceil(f), loom::sign(i), loom::sign(f),
      loom::relu(i32), -i, i.abs(), loom::logical_not(b), loom::logical_and(b, f > 0), loom::logical_or(b, i > 0),
      loom::maximum(f, d), loom::minimum(i, i32), b.to(loom::kFloat), f.to(loom::kBool), d.to(loom::kInt),
      loom::arange(96).view({8, 12}) * i, f.t().contiguous(), f.expand({3, 8, 12}) + 1, loom::reciprocal(d),
      f.logsumexp({1}), d.std({0}), f.sum(), (f * d).mean(), b.to(loom::kLong).sum({0}),
      loom::rand({8, 12}) * f, loom::randn({12, 8}, loom::kDouble).t() + d, loom::randn({8, 12}).sum({1}),
      (loom::tanh(f.to(loom::kBFloat16) * 1.5) + 1).sum({1}), f.to(loom::kBFloat16).softmax(1),
      f.to(loom::kBFloat16).t().contiguous(), f.to(loom::kBFloat16).amax({0}), loom::rand({8, 12}, loom::kBFloat16) * 2,
      // Column groups (rows across memory, 32 or more side by side).
      w.sum({0}), w.to(loom::kDouble).var({0}), w.softmax(0), (w > 0).any(0), w.to(loom::kInt).amin({0}),
      w.to(loom::kBFloat16).sum({0}), w.view({5, 6, 64}).mean({1}),
  };
  KernelProgram p = lower_outputs(outs);
  EXPECT_GE(p.kernels.size(), 10u);
  expect_compiles(p, "the mixed program");
}

TEST(CudaCodegen, WorkloadsCompileWithNvrtc) {
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  auto x = loom::randn({1 << 12});
  auto r = loom::randn({256, 4096});
  auto g = loom::randn({4096});
  auto bias = loom::randn({4096});
  loom::sync();
  auto mu = r.mean({-1}, true);
  auto var = (r - mu).pow(2).mean({-1}, true);
  KernelProgram p = lower_outputs({loom::sigmoid(loom::tanh(x * 1.5 + 0.5) * x) + x * x, loom::softmax(r, -1),
                                   (r - mu) * loom::rsqrt(var + 1e-5) * g + bias});
  expect_compiles(p, "W1-W3");
  // W4's logits as the cuda backend lowers them: a narrow product as a row
  // kernel, then the loss's row kernel.
  auto h = loom::randn({256, 1024}), w = loom::randn({10, 1024}), wb = loom::randn({10}), b = loom::randn({1024, 7});
  loom::sync();
  auto dz = loom::randn({256, 10});
  loom::sync();
  loom::ir::LowerOptions narrow;
  narrow.gemm_kernels = narrow.narrow_products_as_rows = narrow.short_products_inline = true;
  expect_compiles(lower_outputs({loom::log_softmax(loom::matmul(h, w.t()) + wb, -1), loom::matmul(h, b),
                                 loom::where(h > 0, loom::matmul(dz, w), loom::zeros({}))},
                                narrow),
                  "narrow and short products");
}

// GEMM kernels (jit/cuda/gemm.h): every candidate configuration of every
// operand layout compiles for sm_90, with its epilogue fused.
loom::ir::LowerOptions gemm_on() {
  loom::ir::LowerOptions o;
  o.gemm_kernels = true;
  o.offset_alignment_bytes = 16;  // as the cuda backend lowers
  return o;
}

// wgmma: the candidates of a device that runs sm_90a code, compiled for it.
void expect_gemm_compiles(const KernelProgram& p, bool tf32, const std::string& what, const char* instance = "LoomGemm<",
                          bool wgmma = false) {
  auto problem = [&](const loom::ir::Kernel& k) {
    jc::GemmProblem g = jc::gemm_problem(p, k, tf32);
    g.wgmma = wgmma;
    return g;
  };
  size_t most = 0;
  for (const auto& k : p.kernels)
    if (k.contraction) most = std::max(most, jc::gemm_candidates(problem(k)).size());
  ASSERT_GT(most, 0u) << what << ": no GEMM kernel\n" << loom::ir::to_string(p);
  for (size_t c = 0; c < most; ++c) {
    std::vector<jc::GemmConfig> configs(p.kernels.size());
    for (size_t i = 0; i < p.kernels.size(); ++i)
      if (p.kernels[i].contraction) {
        auto cs = jc::gemm_candidates(problem(p.kernels[i]));
        configs[i] = cs[std::min(c, cs.size() - 1)];
      }
    const std::string src = jc::emit_source(p, configs, /*allow_single_block=*/false);
    if (std::getenv("LOOM_TEST_PRINT")) std::cerr << loom::ir::to_string(p) << src;
    if (c == 0) EXPECT_NE(src.find(instance), std::string::npos) << what;
    try {
      loom::runtime::cuda::compile_cubin(src, wgmma ? "sm_90a" : "sm_90", what);
    } catch (const loom::Error& e) {
      ADD_FAILURE() << what << " (candidate " << c << "): " << e.what();
    }
  }
}

// A GEMM function as the cuda backend compiles it: a program of its own
// with the template (and its split-K reduce kernel, named after it).
TEST(CudaCodegen, AGemmFunctionCompilesAloneWithItsTemplate) {
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  auto x = loom::randn({64, 2048}), w = loom::randn({2048, 48});
  loom::sync();
  KernelProgram p = lower_outputs({loom::relu(loom::matmul(x, w) + 1)}, gemm_on());
  std::vector<jc::GemmConfig> configs(p.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i)
    if (p.kernels[i].contraction) configs[i] = jc::GemmConfig{32, 32, 32, 4, 4, 3, false, true, 0, 4};  // split-K
  const loom::ir::SharedKernels shared = jc::share_kernels(p, configs);
  bool gemm = false;
  for (size_t f = 0; f < shared.first.size(); ++f) {
    if (!p.kernels[shared.first[f]].contraction) continue;
    gemm = true;
    const std::string src = jc::emit_function_source(p, shared, configs, f);
    const std::string symbol = jc::function_symbol(shared.keys[f]);
    EXPECT_NE(src.find(symbol + "("), std::string::npos);
    EXPECT_NE(src.find(symbol + "_reduce("), std::string::npos);
    try {
      loom::runtime::cuda::compile_cubin(src, "sm_90", "a split-K GEMM function");
    } catch (const loom::Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
  EXPECT_TRUE(gemm);
}

TEST(CudaCodegen, GemmLayoutsAndPlans) {
  auto x = loom::randn({65, 63}), w = loom::randn({63, 33}), xt = loom::randn({63, 65});
  loom::sync();
  KernelProgram nn = lower_outputs({loom::matmul(x, w)}, gemm_on());
  ASSERT_EQ(nn.kernels.size(), 1u);
  jc::GemmProblem g = jc::gemm_problem(nn, nn.kernels[0], false);
  EXPECT_EQ(g.m, 65);
  EXPECT_EQ(g.n, 33);
  EXPECT_EQ(g.k, 63);
  EXPECT_FALSE(g.a_kmajor);  // A contiguous along k: its tile is [BM][BK]
  EXPECT_FALSE(g.a_vec);     // 63 floats a row: rows are not 16-byte aligned
  EXPECT_TRUE(g.b_kmajor);
  EXPECT_FALSE(g.b_vec);
  KernelProgram tn = lower_outputs({loom::matmul(xt.t(), w)}, gemm_on());
  EXPECT_TRUE(jc::gemm_problem(tn, tn.kernels[0], false).a_kmajor);  // x.t(): contiguous along m
  auto a = loom::randn({256, 784}), b = loom::randn({784, 1024});
  loom::sync();
  KernelProgram w4 = lower_outputs({loom::matmul(a, b)}, gemm_on());
  g = jc::gemm_problem(w4, w4.kernels[0], false);
  EXPECT_TRUE(g.a_vec && g.b_vec);
  // Small products take small tiles: at least one block per SM of an H100.
  const jc::GemmConfig c = jc::gemm_heuristic(g, 132);
  EXPECT_GE(jc::gemm_grid(c, g) * c.split, 132u) << c.str();
  // Few output tiles and a long K: split-K candidates, K chunks of whole slices.
  auto h = loom::randn({256, 1024}), v = loom::randn({1024, 10});
  loom::sync();
  KernelProgram sk = lower_outputs({loom::matmul(h, v)}, gemm_on());
  const jc::GemmProblem gs = jc::gemm_problem(sk, sk.kernels[0], false);
  bool any_split = false;
  for (const jc::GemmConfig& k : jc::gemm_candidates(gs))
    if (k.split > 1) {
      any_split = true;
      EXPECT_EQ(jc::gemm_split_chunk(k, gs) % k.bk, 0);
      EXPECT_GE(jc::gemm_split_chunk(k, gs) * k.split, gs.k);
      EXPECT_EQ(jc::gemm_workspace_elems(k, gs), k.split * gs.m * gs.n);
    }
  EXPECT_TRUE(any_split);
  EXPECT_FALSE(c.mma);
  EXPECT_TRUE(jc::gemm_heuristic(jc::gemm_problem(w4, w4.kernels[0], true), 132).mma);
  // K split inside the block: kg groups of threads, each with its own stages.
  bool any_groups = false;
  for (const jc::GemmConfig& k : jc::gemm_candidates(g))
    if (k.kg > 1) {
      any_groups = true;
      jc::GemmConfig one = k;
      one.kg = 1;
      EXPECT_EQ(jc::gemm_threads(k), k.kg * jc::gemm_threads(one)) << k.str();
      EXPECT_EQ(jc::gemm_shared_bytes(k, g), k.kg * jc::gemm_shared_bytes(one, g)) << k.str();
      EXPECT_NE(jc::gemm_instance(k, g).find(", " + std::to_string(k.kg) + ">"), std::string::npos);
    }
  EXPECT_TRUE(any_groups);
  // Every candidate fits a block's shared memory on the GPUs loom tunes for.
  for (const jc::GemmProblem& p : {g, gs, jc::gemm_problem(nn, nn.kernels[0], false)})
    for (const jc::GemmConfig& k : jc::gemm_candidates(p))
      EXPECT_LE(jc::gemm_shared_bytes(k, p), jc::kGemmMaxSharedBytes) << k.str();
}

TEST(CudaCodegen, GemmKernelsCompileWithNvrtc) {
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  auto x = loom::randn({64, 32}), w = loom::randn({32, 48}), b = loom::randn({48});
  auto xo = loom::randn({65, 63}), wo = loom::randn({63, 33}), r = loom::randn({65, 33});
  auto bx = loom::randn({3, 64, 32}), xt = loom::randn({32, 64});
  auto d = loom::randn({40, 24}, loom::kDouble), dw = loom::randn({24, 16}, loom::kDouble);
  loom::sync();
  // Aligned (16-byte copies) and odd (element copies) layouts, transposed
  // and broadcast-batch operands, epilogues with bias, GELU, a residual, a
  // scale and a cast.
  const std::vector<loom::Tensor> outs = {
      loom::gelu(loom::matmul(x, w) + b),
      (loom::matmul(xo, wo) + r) * 0.5,
      loom::matmul(xt.t(), w).to(loom::kDouble),
      loom::matmul(x, xo.narrow(0, 0, 32).narrow(1, 0, 48) + 0).t().contiguous(),
      loom::matmul(bx, w.expand({3, 32, 48})),
      loom::matmul(x, w.t().contiguous().t()),
      loom::matmul(x, xt) ,
  };
  KernelProgram p = lower_outputs(outs, gemm_on());
  expect_gemm_compiles(p, false, "float32 GEMMs");
  expect_gemm_compiles(p, true, "TF32 GEMMs");
  expect_gemm_compiles(lower_outputs({loom::relu(loom::matmul(d, dw)), loom::matmul(dw.t(), d.t())}, gemm_on()), false,
                       "float64 GEMMs");
  // The large-product candidates (128x128 and 128x256 warp tiles) and the
  // split-K ones (with their reduce kernels), with an epilogue.
  auto big = loom::randn({2048, 64}), bigw = loom::randn({2048, 64}), h = loom::randn({256, 1024});
  auto v = loom::randn({10, 1024}), vb = loom::randn({10});
  loom::sync();
  auto w2 = loom::randn({1024, 512});
  loom::sync();
  KernelProgram split = lower_outputs({loom::gelu(loom::linear(big, bigw)), loom::linear(h, v, vb),
                                       loom::relu(loom::matmul(h, w2)) * 2},
                                      gemm_on());
  expect_gemm_compiles(split, false, "large, split-K and K-group GEMMs");
  // The tuner's module (every candidate, split-K ones included) for the
  // same products.
  for (const auto& k : split.kernels) {
    if (!k.contraction) continue;
    const jc::GemmProblem g = jc::gemm_problem(split, k, false);
    try {
      loom::runtime::cuda::compile_cubin(jc::gemm_tuning_source(g, jc::gemm_candidates(g)), "sm_90", "tuning kernels");
    } catch (const loom::Error& e) {
      ADD_FAILURE() << "tuning kernels: " << e.what();
    }
  }
}

// Operands with fused producers (ir::Contraction::a_value): every
// candidate applies them to its shared-memory tiles (LoomGemm::prepare),
// split-K and TF32 included; a single-block product applies them to each
// element it reads.
loom::ir::LowerOptions producers_on() {
  loom::ir::LowerOptions o = gemm_on();
  o.operand_producers_min_work = 0;
  return o;
}

TEST(CudaCodegen, GemmOperandProducersCompileWithNvrtc) {
  auto x = loom::randn({64, 32}), w = loom::randn({32, 48}), b = loom::randn({48});
  auto xo = loom::randn({65, 63}), wo = loom::randn({63, 33});
  auto h = loom::randn({256, 1024}), v = loom::randn({10, 1024}), vb = loom::randn({10});
  auto d = loom::randn({40, 24}, loom::kDouble), dw = loom::randn({24, 16}, loom::kDouble);
  loom::sync();
  KernelProgram p = lower_outputs({loom::matmul(loom::relu(x), w * 0.5) + b, loom::matmul(loom::clamp(xo, -1, 1) * 2, wo)},
                                  producers_on());
  for (const auto& k : p.kernels) {
    ASSERT_TRUE(k.contraction) << loom::ir::to_string(p);
    EXPECT_TRUE(k.contraction->fused_operand(0)) << loom::ir::to_string(k);
  }
  const std::string src = jc::emit_source(p, {}, false);
  EXPECT_NE(src.find("auto op_a = "), std::string::npos);
  EXPECT_NE(src.find("auto op_b = "), std::string::npos);
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  expect_gemm_compiles(p, false, "float32 GEMMs with operand producers");
  expect_gemm_compiles(p, true, "TF32 GEMMs with operand producers");
  expect_gemm_compiles(lower_outputs({loom::linear(loom::relu(h), v, vb)}, producers_on()), false, "split-K with producers");
  expect_gemm_compiles(lower_outputs({loom::matmul(-d, dw * 3.0)}, producers_on()), false, "float64 with producers");
  auto s0 = loom::randn({1, 64}), w1 = loom::randn({64, 64});
  loom::sync();
  loom::Tensor a = loom::tanh(loom::matmul(loom::relu(s0), w1 * 0.1));
  KernelProgram one = lower_outputs({loom::matmul(a, w1) + 1}, producers_on());
  ASSERT_TRUE(jc::single_block(one)) << loom::ir::to_string(one);
  const std::string sb = jc::emit_source(one);
  EXPECT_NE(sb.find("fmaf(op_a(pa["), std::string::npos) << sb;
  EXPECT_NE(sb.find("op_b(pb["), std::string::npos) << sb;
  expect_compiles(one, "a single-block product with producers");
}

// The program of float32 products, retyped to bfloat16 (a CPU graph never
// holds a bfloat16 product: the api widens it there): every candidate of
// the tensor-core path, epilogues and split-K included, compiles.
KernelProgram as_bf16(KernelProgram p) {
  for (auto& b : p.buffers)
    if (b.dtype == loom::kFloat) b.dtype = loom::kBFloat16;
  for (auto& k : p.kernels) {
    for (auto& e : k.exprs)
      if (e.dtype == loom::kFloat) e.dtype = loom::kBFloat16;
    // A runtime offset 16-byte aligned as float is as bfloat16 where it is 0,
    // which the views of these tests' stored tensors all are.
    for (auto& a : k.accesses)
      if (a.has_runtime_offset() && a.offset_align == 4) a.offset_align = 8;
  }
  return p;
}

TEST(CudaCodegen, Bf16GemmKernelsCompileWithNvrtc) {
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  auto x = loom::randn({64, 32}), w = loom::randn({32, 48}), b = loom::randn({48});
  auto xo = loom::randn({65, 63}), wo = loom::randn({63, 33}), xt = loom::randn({32, 64});
  auto big = loom::randn({2048, 64}), bigw = loom::randn({2048, 64}), h = loom::randn({256, 1024});
  auto v = loom::randn({10, 1024});
  loom::sync();
  KernelProgram p = as_bf16(lower_outputs({loom::gelu(loom::matmul(x, w) + b), loom::matmul(xo, wo) * 0.5,
                                           loom::matmul(xt.t(), w), loom::linear(big, bigw), loom::linear(h, v)},
                                          gemm_on()));
  for (const auto& k : p.kernels)
    if (k.contraction) EXPECT_TRUE(jc::gemm_candidates(jc::gemm_problem(p, k, false))[0].mma);
  expect_gemm_compiles(p, false, "bfloat16 GEMMs", "LoomGemmBf16<");
}

// On a device that runs sm_90a code, bfloat16 products whose operands take
// 16-byte copies have warpgroup (wgmma) candidates first, in every operand
// layout (the transposes are descriptor flags); the others keep mma.sync.
// Every candidate compiles for sm_90a, the tuner's module too.
TEST(CudaCodegen, WgmmaGemmKernelsCompileWithNvrtc) {
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  auto x = loom::randn({64, 32}), w = loom::randn({32, 48}), b = loom::randn({48}), xt = loom::randn({32, 64});
  auto big = loom::randn({2048, 64}), bigw = loom::randn({2048, 64}), bigt = loom::randn({64, 2048});
  auto xo = loom::randn({65, 63}), wo = loom::randn({63, 33});
  loom::sync();
  KernelProgram p = as_bf16(lower_outputs({loom::gelu(loom::matmul(x, w) + b), loom::matmul(xt.t(), w),
                                           loom::linear(big, bigw), loom::matmul(bigt.t(), bigt) * 0.5,
                                           loom::matmul(xt.t(), w.t().contiguous().t())},
                                          gemm_on()));
  for (const auto& k : p.kernels) {
    if (!k.contraction) continue;
    jc::GemmProblem g = jc::gemm_problem(p, k, false);
    ASSERT_TRUE(g.a_vec && g.b_vec) << k.name;
    g.wgmma = true;
    const jc::GemmConfig c = jc::gemm_candidates(g)[0];
    EXPECT_TRUE(c.wgmma) << k.name;
    EXPECT_EQ(jc::gemm_threads(c), 2 * c.bm);
    EXPECT_EQ(jc::gemm_shared_bytes(c, g), c.stages * (c.bm + c.bn) * 128 + 1024);
    g.wgmma = false;
    EXPECT_FALSE(jc::gemm_candidates(g)[0].wgmma) << "a device without sm_90a";
  }
  expect_gemm_compiles(p, false, "bfloat16 GEMMs on sm_90a", "LoomGemmWg<", /*wgmma=*/true);
  // TF32: warpgroup tiles only where both operands are contiguous along K
  // (x W^T), mma.sync otherwise.
  KernelProgram f = lower_outputs({loom::linear(big, bigw) * 2, loom::matmul(bigt.t(), bigt)}, gemm_on());
  for (const auto& k : f.kernels) {
    if (!k.contraction) continue;
    jc::GemmProblem g = jc::gemm_problem(f, k, /*tf32=*/true);
    g.wgmma = true;
    EXPECT_EQ(jc::gemm_candidates(g)[0].wgmma, !g.a_kmajor && !g.b_kmajor) << k.name;
  }
  expect_gemm_compiles(f, true, "TF32 GEMMs on sm_90a", "LoomGemmWg<float", /*wgmma=*/true);
  // Element copies (rows of 63): mma.sync only.
  KernelProgram odd = as_bf16(lower_outputs({loom::matmul(xo, wo)}, gemm_on()));
  jc::GemmProblem go = jc::gemm_problem(odd, odd.kernels[0], false);
  go.wgmma = true;
  for (const jc::GemmConfig& c : jc::gemm_candidates(go)) EXPECT_FALSE(c.wgmma) << c.str();
  for (const auto& k : p.kernels) {
    if (!k.contraction) continue;
    jc::GemmProblem g = jc::gemm_problem(p, k, false);
    g.wgmma = true;
    try {
      loom::runtime::cuda::compile_cubin(jc::gemm_tuning_source(g, jc::gemm_candidates(g)), "sm_90a", "tuning kernels");
    } catch (const loom::Error& e) {
      ADD_FAILURE() << "tuning kernels: " << e.what();
    }
  }
}

// Pass "operand copies" (ir/lower/operand_copies.cpp), as the cuda backend asks
// for it with TF32 on sm_90a: an operand not contiguous along K (B of x W,
// A of x^T W) is copied so by a kernel of its own just before the product,
// which then takes the warpgroup tiles; an operand already so (x W^T) is
// read in place; a product under the bound is left alone.
TEST(CudaCodegen, Tf32ProductsReadCopiesContiguousAlongK) {
  auto x = loom::randn({256, 128}), w = loom::randn({128, 192}), xt = loom::randn({128, 256}), wn = loom::randn({192, 128});
  auto bias = loom::randn({192});
  loom::sync();
  loom::ir::LowerOptions o = gemm_on();
  o.k_contiguous_operands_min_work = 0;
  std::string passes;
  KernelProgram p = lower_outputs({loom::matmul(x, w) + bias, loom::matmul(xt.t(), w), loom::linear(x, wn)}, o, &passes);
  EXPECT_NE(passes.find("operand copies: 3 GEMM operands copied"), std::string::npos) << passes;
  size_t copies = 0, products = 0;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const auto& k = p.kernels[i];
    if (k.name.find("_along_k") != std::string::npos) {
      ++copies;
      size_t next = i + 1;  // past the product's other copy
      while (next < p.kernels.size() && p.kernels[next].name.find("_along_k") != std::string::npos) ++next;
      ASSERT_LT(next, p.kernels.size());
      EXPECT_TRUE(p.kernels[next].contraction.has_value()) << k.name << " comes just before its product";
      continue;
    }
    if (!k.contraction) continue;
    ++products;
    EXPECT_EQ(k.contraction->a_k, 1) << k.name;
    EXPECT_EQ(k.contraction->b_k, 1) << k.name;
    jc::GemmProblem g = jc::gemm_problem(p, k, /*tf32=*/true);
    g.wgmma = true;
    EXPECT_TRUE(jc::gemm_candidates(g)[0].wgmma) << k.name;
  }
  EXPECT_EQ(copies, 3u);
  EXPECT_EQ(products, 3u);
  o.k_contiguous_operands_min_work = 2.0 * 256 * 192 * 128;  // each product is half of that
  KernelProgram small = lower_outputs({loom::matmul(x, w)}, o);
  EXPECT_EQ(small.kernels.size(), 1u);
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  expect_gemm_compiles(p, true, "TF32 GEMMs of copied operands on sm_90a", "LoomGemmWg<float", /*wgmma=*/true);
}

// The same pass for exact float32 (the FFMA tiles): a B contiguous along
// K (x W^T, a batch of them) is copied contiguous along N, and the product
// reads the copy; B already so (x W) and A are read in place.
TEST(CudaCodegen, FloatProductsReadBContiguousAlongN) {
  auto x = loom::randn({256, 128}), w = loom::randn({192, 128}), wn = loom::randn({128, 192});
  auto bx = loom::randn({3, 64, 128}), bw = loom::randn({3, 96, 128});
  loom::sync();
  loom::ir::LowerOptions o = gemm_on();
  o.n_contiguous_b_min_work = 0;
  KernelProgram p = lower_outputs({loom::linear(x, w), loom::matmul(x, wn), loom::matmul(bx, bw.transpose(1, 2))}, o);
  size_t copies = 0;
  for (const auto& k : p.kernels) {
    if (k.name.find("_b_along_n") != std::string::npos) ++copies;
    if (!k.contraction) continue;
    const jc::GemmProblem g = jc::gemm_problem(p, k, false);
    EXPECT_TRUE(g.b_kmajor) << k.name << ": B contiguous along N";
    EXPECT_FALSE(g.a_kmajor) << k.name << ": A read in place, contiguous along K";
  }
  EXPECT_EQ(copies, 2u) << loom::ir::to_string(p);
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  expect_gemm_compiles(p, false, "float GEMMs of copied operands");
}

// A small program of several steps (W5: two products with tanh, then ten
// clamped updates) is one kernel of one block: each step a __device__
// function, each product one sum per element, no GEMM template; it
// compiles for sm_90. A larger program keeps one kernel per step.
TEST(CudaCodegen, SmallProgramsRunAsOneBlock) {
  auto s0 = loom::randn({1, 64}), w1 = loom::randn({64, 64}), w2 = loom::randn({64, 64});
  auto big = loom::randn({256, 1024}), bw = loom::randn({1024, 1024});
  loom::sync();
  loom::Tensor a = loom::tanh(loom::tanh(loom::matmul(s0, w1)).matmul(w2));
  loom::Tensor s = s0;
  for (int i = 0; i < 10; ++i) s = loom::clamp(s * 0.99 + a * 0.01, -1.0, 1.0);
  KernelProgram p = lower_outputs({s}, gemm_on());
  ASSERT_GE(p.steps.size(), 2u);
  EXPECT_TRUE(jc::single_block(p));
  const std::string src = jc::emit_source(p);
  if (std::getenv("LOOM_TEST_PRINT")) std::cerr << loom::ir::to_string(p) << src;
  EXPECT_NE(src.find(jc::kSingleBlockSymbol), std::string::npos);
  EXPECT_EQ(src.find("LoomGemm<"), std::string::npos);
  EXPECT_EQ(src.find("__global__"), src.rfind("__global__"));  // exactly one kernel
  if (std::string why = nvrtc_missing(); why.empty()) {
    try {
      loom::runtime::cuda::compile_cubin(src, "sm_90", "W5 as one block");
    } catch (const loom::Error& e) {
      ADD_FAILURE() << e.what() << "\n--- source ---\n" << src;
    }
  }
  // Random numbers and several pointwise steps.
  loom::Tensor rx = loom::rand({1000}), ry = loom::randn({1000});
  KernelProgram pr = lower_outputs({rx, ry, rx * 2 + 1, loom::ones({3}) + 1}, gemm_on());
  EXPECT_TRUE(jc::single_block(pr));
  if (std::getenv("LOOM_TEST_PRINT")) std::cerr << loom::ir::to_string(pr) << jc::emit_source(pr);
  if (std::string why = nvrtc_missing(); why.empty()) expect_compiles(pr, "random numbers in one block");
  // Not for: a product past the work bound, a lone step, a reduction.
  EXPECT_FALSE(jc::single_block(lower_outputs({loom::relu(loom::matmul(big, bw)) + 1}, gemm_on())));
  EXPECT_FALSE(jc::single_block(lower_outputs({loom::tanh(s0)}, gemm_on())));
  EXPECT_FALSE(jc::single_block(lower_outputs({loom::tanh(s0).sum() + s0}, gemm_on())));
  // Nor a body of many loads and stores (NVRTC's time grows faster than
  // they do): 40 small independent updates are one block, 200 are not.
  std::vector<loom::Tensor> xs, ys;
  for (int i = 0; i < 200; ++i) xs.push_back(loom::randn({8}));
  loom::sync();
  for (int i = 0; i < 200; ++i) ys.push_back(xs[i] * 2 + 1);
  EXPECT_TRUE(jc::single_block(lower_outputs(std::vector<loom::Tensor>(ys.begin(), ys.begin() + 40), gemm_on())));
  EXPECT_FALSE(jc::single_block(lower_outputs(ys, gemm_on())));
}

}  // namespace

namespace {

// Kernels alike are one function (share_kernels): of four gathers from
// scaled copies of the last result, the middle three (each the last one's
// gather fused into the next scaled sum) are one function, reading its
// failing node from the launch's table; two products of the same shapes
// and tile configuration, one of a temporary and one of an input, are one
// GEMM function.
TEST(CudaCodegen, KernelsAlikeAreOneFunction) {
  auto x = loom::randn({256, 300});
  std::vector<loom::Tensor> idx;
  for (int i = 0; i < 4; ++i) idx.push_back(loom::randint(0, 300, {256, 300}));
  auto w = loom::randn({300, 300});
  loom::sync();
  loom::Tensor h = x;
  for (int i = 0; i < 4; ++i) h = (x + h * (0.5 + i)).gather(1, idx[i]);
  loom::ir::LowerOptions options;
  options.gemm_kernels = true;
  const KernelProgram p = lower_outputs({h, loom::matmul(h, w), loom::matmul(x, w)}, options);
  const loom::ir::SharedKernels shared = jc::share_kernels(p);
  size_t generated = 0, gemms = 0;
  for (const auto& k : p.kernels) (k.contraction ? gemms : generated) += 1;
  EXPECT_EQ(gemms, 2u);
  EXPECT_EQ(generated, 5u);
  EXPECT_EQ(shared.first.size(), 4u);  // the first gather, the middle three, the last, the products
  std::vector<int> runs(shared.first.size(), 0);
  for (size_t i = 0; i < p.kernels.size(); ++i) ++runs[shared.function[i]];
  std::sort(runs.begin(), runs.end());
  EXPECT_EQ(runs, (std::vector<int>{1, 1, 2, 3}));
  const std::string src = jc::emit_source(p, shared, {}, false);
  EXPECT_NE(src.find("loom_index_check("), std::string::npos);
  EXPECT_NE(src.find(", err, nd["), std::string::npos);  // the failing node from the launch's table
  if (std::string why = nvrtc_missing(); why.empty()) {
    try {
      loom::runtime::cuda::compile_cubin(src, "sm_90", "kernels alike");
    } catch (const loom::Error& e) {
      ADD_FAILURE() << e.what() << "\n--- source ---\n" << src;
    }
  }
}

// With sizes as arguments the CUDA C of a program's functions is the same
// text at 48 rows as at 80 (their numbers are read from `is`), given the
// tile configurations the first size chose (the runtime keeps them:
// RememberedGemms), and it compiles; without, the texts differ.
TEST(CudaCodegen, SizesAsArgumentsGiveTheSameTextAtEverySize) {
  auto program = [](int64_t n) {
    loom::manual_seed(3);
    auto x = loom::randn({n, 32});
    auto w = loom::randn({32, 24});
    auto idx = loom::randint(0, 32, {n, 4});
    auto xb = x.to(loom::kBFloat16), wb = w.to(loom::kBFloat16);
    loom::sync();
    return lower_outputs({loom::relu(loom::matmul(x, w) + 1), loom::softmax(x, -1), loom::softmax(x.t(), -1),
                          x.sum({0}), x.t().contiguous() * 2, x.gather(1, idx), loom::matmul(xb, wb) * 3},
                         gemm_on());
  };
  const KernelProgram a = program(48), b = program(80);
  std::vector<jc::GemmConfig> configs(a.kernels.size());
  for (size_t i = 0; i < a.kernels.size(); ++i)
    if (a.kernels[i].contraction) configs[i] = jc::gemm_heuristic(jc::gemm_problem(a, a.kernels[i], false), 132);
  auto texts = [&](const KernelProgram& p, bool lift) {
    const loom::ir::SharedKernels shared = jc::share_kernels(p, configs, lift ? loom::ir::Lift::All : loom::ir::Lift::None);
    std::vector<std::string> out;
    for (size_t f = 0; f < shared.first.size(); ++f) out.push_back(jc::emit_function_source(p, shared, configs, f));
    return out;
  };
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  const std::vector<std::string> ta = texts(a, true), tb = texts(b, true);
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t f = 0; f < ta.size(); ++f) EXPECT_EQ(ta[f], tb[f]) << "function " << f;
  EXPECT_NE(texts(a, false), texts(b, false));
  bool reads_sizes = false;
  for (const std::string& t : ta) reads_sizes = reads_sizes || t.find("is[") != std::string::npos;
  EXPECT_TRUE(reads_sizes);
  if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string& src : ta) {
    try {
      loom::runtime::cuda::compile_cubin(src, "sm_90", "sizes as arguments");
    } catch (const loom::Error& e) {
      ADD_FAILURE() << e.what() << "\n--- source ---\n" << src;
    }
  }
}

// A pointwise kernel whose innermost extent is a size argument takes 4
// lanes where the run's length is a multiple of 4 and 1 elsewhere, in one
// text (KernelPlan::lanes_at_run_time): lengths 157 and 708 share it, and
// each plans its launch for the form it takes.
TEST(CudaCodegen, LanesByTheRunsLengthAreOneText) {
  auto program = [](int64_t n) {
    auto x = loom::randn({n});
    loom::sync();
    return lower_outputs({loom::arange(n, loom::TensorOptions(loom::kLong)) * 3, x * 2 + 1});
  };
  const KernelProgram odd = program(157), four = program(708);
  auto shared = [](const KernelProgram& p) { return jc::share_kernels(p, {}, loom::ir::Lift::All); };
  const loom::ir::SharedKernels so = shared(odd), sf = shared(four);
  ASSERT_EQ(so.keys, sf.keys);
  ASSERT_FALSE(so.local.empty());
  for (size_t i = 0; i < so.local.size(); ++i) {
    const jc::KernelPlan po = jc::plan_kernel(so.local[i].program, so.local[i].kernel(), &so.local[i].sizes);
    const jc::KernelPlan pf = jc::plan_kernel(sf.local[i].program, sf.local[i].kernel(), &sf.local[i].sizes);
    EXPECT_TRUE(po.lanes_at_run_time && pf.lanes_at_run_time) << i;
    EXPECT_EQ(po.lanes, 1) << i;
    EXPECT_EQ(pf.lanes, 4) << i;
    EXPECT_EQ(po.block, pf.block);
    EXPECT_EQ(po.steps, pf.steps);
  }
  for (size_t f = 0; f < so.first.size(); ++f) {
    const std::string text = jc::emit_function_source(odd, so, {}, f);
    EXPECT_EQ(text, jc::emit_function_source(four, sf, {}, f)) << "function " << f;
    EXPECT_NE(text.find("% 4 == 0"), std::string::npos) << text;
    if (std::string why = nvrtc_missing(); !why.empty()) GTEST_SKIP() << why;
    try {
      loom::runtime::cuda::compile_cubin(text, "sm_90", "lanes at run time");
    } catch (const loom::Error& e) {
      ADD_FAILURE() << e.what() << "\n--- source ---\n" << text;
    }
  }
}

}  // namespace
