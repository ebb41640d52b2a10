// Every op of ir/ops.def through every backend: each CPU backend registered
// (llvm, reference, the example interp) computes each case, in every dtype
// the API takes for it, and must agree with the reference; the CUDA code
// generator emits each case's kernels (and, on a GPU, the cuda backend runs
// them), and the gradients of each case's float32 inputs agree too. The
// cases must hold every op of ops.def between them: an op added
// there without a case here fails OpCoverage, and an op a backend or
// emitter lacks a case for throws (their switches end in a throw, never in
// `default: return x`) and fails its case. docs/ADDING_AN_OP.md step 9.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "api/src/record.h"
#include "ir/graph.h"
#include "ir/lower/lower.h"
#include "jit/cuda/codegen.h"
#include "runtime/backend.h"
#include "tests/internal/lower_util.h"
#include "tests/test_util.h"

namespace {

using loom::Device;
using loom::ScalarType;
using loom::Tensor;
using loom::ir::Op;
using loom_test::ops_of;

constexpr Op kAllOps[] = {
#define X(name, text, family, cost) Op::name,
#include "ir/ops.def"
#undef X
};

// Where an input's values lie: any (negative, zero, halves), or positive
// (log, sqrt, a divisor).
enum class Domain { Any, Positive };

// While set, input() makes floating inputs that require grad and keeps
// them in g_leaves, so a case's gradient can be taken too.
bool g_with_grad = false;
std::vector<Tensor> g_leaves;

// The first input, [3, 37] (a vector body and a tail on every CPU width);
// k picks other values for the second and third.
Tensor input(ScalarType dt, Device dev, int k = 0, Domain domain = Domain::Any, std::vector<int64_t> shape = {3, 37}) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = (i * (7 + 2 * k) + 3 * k) % 17;  // 0..16
    double x = dt == loom::kBool ? static_cast<double>(j % 2)
               : loom::is_floating_point(dt) ? (j - 8) * 0.375 : static_cast<double>(j - 8);
    if (domain == Domain::Positive) x = loom::is_floating_point(dt) ? 0.25 + j * 0.375 : 1 + j % 5;
    v[static_cast<size_t>(i)] = x;
  }
  Tensor t = loom::tensor(v, loom::kFloat64).reshape(shape).to(dt).to(dev);
  if (g_with_grad && loom::is_floating_point(dt)) {
    t = t.detach();
    t.requires_grad_();
    g_leaves.push_back(t);
  }
  return t;
}

Tensor index_input(Device dev, std::vector<int64_t> shape, int64_t below) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 5 + 2) % below;
  return loom::tensor(v, loom::kLong).reshape(shape).to(dev);
}

struct Case {
  std::string name;
  std::function<Tensor(ScalarType, Device)> make;
};

using loom::kBFloat16, loom::kBool, loom::kByte, loom::kChar, loom::kDouble, loom::kFloat, loom::kHalf, loom::kInt,
    loom::kLong, loom::kShort;
constexpr ScalarType kDtypes[] = {kFloat, kDouble, kBFloat16, kHalf, kInt, kLong, kByte, kChar, kShort, kBool};

std::vector<Case> cases() {
  std::vector<Case> c;
  auto unary = [&](const std::string& name, Tensor (*f)(const Tensor&, loom::SourceLoc), Domain d = Domain::Any) {
    c.push_back({name, [f, d](ScalarType dt, Device dev) { return f(input(dt, dev, 0, d), loom::SourceLoc::current()); }});
  };
  unary("neg", loom::neg);
  unary("abs", loom::abs);
  unary("exp", loom::exp);
  unary("log", loom::log, Domain::Positive);
  unary("log1p", loom::log1p, Domain::Positive);
  unary("expm1", loom::expm1);
  unary("sqrt", loom::sqrt, Domain::Positive);
  unary("rsqrt", loom::rsqrt, Domain::Positive);
  unary("sin", loom::sin);
  unary("cos", loom::cos);
  unary("tanh", loom::tanh);
  unary("sigmoid", loom::sigmoid);
  unary("relu", loom::relu);
  unary("silu", loom::silu);
  unary("erf", loom::erf);
  unary("atan", loom::atan);
  // Inside [-1, 1]: values in [-0.9, 0.9].
  c.push_back({"asin", [](ScalarType dt, Device dev) { return loom::asin(input(dt, dev) * 0.3); }});
  c.push_back({"acos", [](ScalarType dt, Device dev) { return loom::acos(input(dt, dev) * 0.3); }});
  unary("floor", loom::floor);
  unary("ceil", loom::ceil);
  unary("round", loom::round);
  unary("trunc", loom::trunc);
  unary("sign", loom::sign);
  unary("reciprocal", loom::reciprocal, Domain::Positive);
  unary("logical_not", loom::logical_not);
  c.push_back({"gelu", [](ScalarType dt, Device dev) { return loom::gelu(input(dt, dev)); }});
  c.push_back({"gelu_tanh", [](ScalarType dt, Device dev) { return loom::gelu(input(dt, dev), "tanh"); }});
  c.push_back({"clamp", [](ScalarType dt, Device dev) { return loom::clamp(input(dt, dev), -2, 1); }});
  for (ScalarType to : kDtypes)
    c.push_back({"cast to " + std::string(loom::to_string(to)),
                 [to](ScalarType dt, Device dev) { return input(dt, dev).to(to); }});

  using Binary = Tensor (*)(const Tensor&, const Tensor&, loom::SourceLoc);
  auto binary = [&](const std::string& name, Binary f, Domain second = Domain::Any) {
    // Same shapes, and a row broadcast along the first dim.
    c.push_back({name, [f, second](ScalarType dt, Device dev) {
                   return f(input(dt, dev), input(dt, dev, 1, second), loom::SourceLoc::current());
                 }});
    c.push_back({name + " broadcast", [f, second](ScalarType dt, Device dev) {
                   return f(input(dt, dev), input(dt, dev, 2, second, {37}), loom::SourceLoc::current());
                 }});
  };
  binary("add", [](const Tensor& a, const Tensor& b, loom::SourceLoc l) { return loom::add(a, b, 1, l); });
  binary("sub", [](const Tensor& a, const Tensor& b, loom::SourceLoc l) { return loom::sub(a, b, 1, l); });
  binary("mul", loom::mul);
  binary("div", loom::div, Domain::Positive);
  binary("pow", loom::pow, Domain::Positive);
  binary("maximum", loom::maximum);
  binary("minimum", loom::minimum);
  binary("fmod", loom::fmod, Domain::Positive);
  binary("remainder", loom::remainder, Domain::Positive);
  binary("atan2", loom::atan2);
  binary("eq", loom::eq);
  binary("ne", loom::ne);
  binary("lt", loom::lt);
  binary("le", loom::le);
  binary("gt", loom::gt);
  binary("ge", loom::ge);
  binary("logical_and", loom::logical_and);
  binary("logical_or", loom::logical_or);
  // A runtime scalar as the second operand (ir::has_scalar_operand), and as the first.
  c.push_back({"add scalar", [](ScalarType dt, Device dev) { return input(dt, dev) + 3; }});
  c.push_back({"mul scalar", [](ScalarType dt, Device dev) { return input(dt, dev) * 3; }});
  c.push_back({"div scalar", [](ScalarType dt, Device dev) { return input(dt, dev) / 3; }});
  c.push_back({"pow scalar", [](ScalarType dt, Device dev) { return loom::pow(input(dt, dev), 2); }});
  c.push_back({"scalar pow", [](ScalarType dt, Device dev) { return loom::pow(2, input(dt, dev)); }});
  c.push_back({"fmod scalar", [](ScalarType dt, Device dev) { return loom::fmod(input(dt, dev), 3); }});
  c.push_back({"remainder scalar", [](ScalarType dt, Device dev) { return loom::remainder(input(dt, dev), 3); }});
  c.push_back({"where", [](ScalarType dt, Device dev) {
                 return loom::where(input(kBool, dev), input(dt, dev, 1), input(dt, dev, 2));
               }});

  // Reductions: along the rows, and of everything.
  c.push_back({"sum", [](ScalarType dt, Device dev) { return loom::sum(input(dt, dev), {1}); }});
  c.push_back({"sum all", [](ScalarType dt, Device dev) { return loom::sum(input(dt, dev)); }});
  c.push_back({"prod", [](ScalarType dt, Device dev) { return input(dt, dev, 0, Domain::Positive).prod(1); }});
  c.push_back({"max", [](ScalarType dt, Device dev) { return input(dt, dev).amax({1}); }});
  c.push_back({"min", [](ScalarType dt, Device dev) { return std::get<0>(input(dt, dev).min(1)); }});
  c.push_back({"argmax", [](ScalarType dt, Device dev) { return loom::argmax(input(dt, dev), 1); }});
  c.push_back({"argmin", [](ScalarType dt, Device dev) { return loom::argmin(input(dt, dev), 0); }});
  c.push_back({"all", [](ScalarType dt, Device dev) { return input(dt, dev).all(1); }});
  c.push_back({"any", [](ScalarType dt, Device dev) { return input(dt, dev).any(); }});

  // Leaves: factories computed where they are used.
  c.push_back({"full", [](ScalarType dt, Device dev) { return loom::full({3, 37}, 2, loom::TensorOptions(dt).device(dev)) * input(dt, dev); }});
  c.push_back({"arange", [](ScalarType dt, Device dev) { return loom::arange(0, 37, loom::TensorOptions(dt).device(dev)) + input(dt, dev); }});
  c.push_back({"linspace", [](ScalarType dt, Device dev) { return loom::linspace(-1, 1, 37, loom::TensorOptions(dt).device(dev)) + input(dt, dev); }});
  c.push_back({"rand", [](ScalarType dt, Device dev) {
                 loom::manual_seed(7);
                 return loom::rand({3, 37}, loom::TensorOptions(dt).device(dev)) + input(dt, dev);
               }});
  c.push_back({"randn", [](ScalarType dt, Device dev) {
                 loom::manual_seed(7);
                 return loom::randn({3, 37}, loom::TensorOptions(dt).device(dev)) * input(dt, dev);
               }});

  // Data movement.
  c.push_back({"as_strided", [](ScalarType dt, Device dev) { return input(dt, dev).slice(1, 1, 30, 3).t() * 1; }});
  c.push_back({"scatter_strided", [](ScalarType dt, Device dev) {
                 Tensor y = input(dt, dev) * 1;
                 y.narrow(1, 4, 10).copy_(input(dt, dev, 1, Domain::Any, {3, 10}));
                 return y;
               }});
  c.push_back({"cat", [](ScalarType dt, Device dev) { return loom::cat({input(dt, dev), input(dt, dev, 1)}, 1); }});
  c.push_back({"index_select", [](ScalarType dt, Device dev) {
                 return loom::index_select(input(dt, dev), 1, index_input(dev, {11}, 37));
               }});
  c.push_back({"gather", [](ScalarType dt, Device dev) {
                 return loom::gather(input(dt, dev), 1, index_input(dev, {3, 9}, 37));
               }});
  c.push_back({"scatter_add", [](ScalarType dt, Device dev) {
                 return loom::scatter_add(input(dt, dev), 1, index_input(dev, {3, 9}, 37), input(dt, dev, 1, Domain::Any, {3, 9}));
               }});
  c.push_back({"argsort", [](ScalarType dt, Device dev) { return loom::argsort(input(dt, dev), 1); }});
  c.push_back({"sort descending, values", [](ScalarType dt, Device dev) {
                 return std::get<0>(loom::sort(input(dt, dev), 0, true));
               }});
  c.push_back({"cumsum", [](ScalarType dt, Device dev) { return loom::cumsum(input(dt, dev), 1); }});
  c.push_back({"cumprod", [](ScalarType dt, Device dev) { return loom::cumprod(input(dt, dev, 1, Domain::Positive), 0); }});
  c.push_back({"cummax, values", [](ScalarType dt, Device dev) { return std::get<0>(loom::cummax(input(dt, dev), 1)); }});
  c.push_back({"cummin, positions", [](ScalarType dt, Device dev) { return std::get<1>(loom::cummin(input(dt, dev), 1)); }});
  // scatter_reduce: each ScatterKind (exclude_self scatters the identity
  // with assign first).
  for (const char* r : {"prod", "amax", "amin"})
    c.push_back({std::string("scatter_reduce ") + r, [r](ScalarType dt, Device dev) {
                   return loom::scatter_reduce(input(dt, dev), 1, index_input(dev, {3, 9}, 37),
                                               input(dt, dev, 1, Domain::Any, {3, 9}), r, std::string(r) != "amin");
                 }});
  // Attention: the fused op where scaled_dot_product_attention takes it
  // (a CPU device, or 16-bit inputs on a GPU), and its two gradients.
  c.push_back({"attention causal", [](ScalarType dt, Device dev) {
                 return loom::scaled_dot_product_attention(input(dt, dev, 0, Domain::Any, {2, 5, 8}),
                                                           input(dt, dev, 1, Domain::Any, {2, 7, 8}),
                                                           input(dt, dev, 2, Domain::Any, {2, 7, 8}), std::nullopt, 0.0, true);
               }});
  c.push_back({"attention backward", [](ScalarType dt, Device dev) {
                 Tensor q = input(dt, dev, 0, Domain::Any, {2, 5, 8}).detach(), k = input(dt, dev, 1, Domain::Any, {2, 7, 8}).detach();
                 q.requires_grad_();
                 k.requires_grad_();
                 loom::scaled_dot_product_attention(q, k, input(dt, dev, 2, Domain::Any, {2, 7, 8}).detach()).sum().backward();
                 return loom::cat({q.grad().reshape({-1}), k.grad().reshape({-1})}, 0);
               }});
  // Convolution: the fused Conv2d op (stride, padding, groups) and both of
  // its gradients (asked for on the CPU, where it is not the default).
  struct FusedConvOnCpu {
    FusedConvOnCpu() { loom::backends::enable_fused_conv_on_cpu(true); }
    ~FusedConvOnCpu() { loom::backends::enable_fused_conv_on_cpu(false); }
  };
  c.push_back({"conv2d", [](ScalarType dt, Device dev) {
                 FusedConvOnCpu fused;
                 return loom::nn::functional::conv2d(
                     input(dt, dev, 0, Domain::Any, {2, 4, 6, 5}), input(dt, dev, 1, Domain::Any, {6, 2, 3, 2}),
                     loom::nn::functional::Conv2dFuncOptions().stride({2, 1}).padding(1).groups(2));
               }});
  c.push_back({"conv2d backward", [](ScalarType dt, Device dev) {
                 FusedConvOnCpu fused;
                 Tensor x = input(dt, dev, 0, Domain::Any, {2, 3, 5, 5}).detach(), w = input(dt, dev, 1, Domain::Any, {4, 3, 3, 3}).detach();
                 x.requires_grad_();
                 w.requires_grad_();
                 loom::nn::functional::conv2d(x, w, loom::nn::functional::Conv2dFuncOptions().padding(1)).sum().backward();
                 return loom::cat({x.grad().reshape({-1}), w.grad().reshape({-1})}, 0);
               }});
  c.push_back({"matmul", [](ScalarType dt, Device dev) {
                 return loom::matmul(input(dt, dev), input(dt, dev, 1, Domain::Any, {37, 5}));
               }});
  c.push_back({"matmul epilogue", [](ScalarType dt, Device dev) {
                 return loom::relu(loom::matmul(input(dt, dev), input(dt, dev, 1, Domain::Any, {37, 5}))) + 1;
               }});
  // The gradient of a gather with one index per row checks the index in
  // the kernel that selects g (index_check, api/src/autograd/rules_index.cpp).
  c.push_back({"gather backward", [](ScalarType dt, Device dev) {
                 Tensor x = input(dt, dev).detach();
                 x.requires_grad_();
                 loom::gather(x, 1, index_input(dev, {3, 1}, 37)).sum().backward();
                 return x.grad();
               }});
  return c;
}

// Emits the CUDA C of t's graph as the cuda backend would (its lowering
// options), without compiling it: what a machine without a GPU can check.
void emit_cuda(const Tensor& t) {
  loom::ir::NodePtr node = loom::detail::read(t, loom::SourceLoc::current());
  const loom::ir::Node* raw = node.get();
  loom::ir::Graph g;
  loom::ir::build_graph({&raw, 1}, g);
  loom::ir::LowerOptions options;
  options.gemm_kernels = true;
  options.offset_alignment_bytes = 16;
  options.narrow_products_as_rows = true;
  options.short_products_inline = true;
  options.split_reduction_rows = 1024;
  const loom::ir::KernelProgram p = loom::ir::lower(g, nullptr, options);
  namespace jc = loom::jit::cuda;
  if (p.kernels.empty()) return;
  if (jc::single_block(p)) {
    (void)jc::emit_source(p);
    return;
  }
  const loom::ir::SharedKernels shared = jc::share_kernels(p);
  for (size_t f = 0; f < shared.first.size(); ++f) (void)jc::emit_function_source(p, shared, {}, f);
}

double tolerance(ScalarType dt) {
  switch (dt) {
    case kBFloat16: return 1e-2;
    case kHalf: return 2e-3;  // a float16 ulp: float32 math may round to the neighbour
    case kFloat: return 2e-5;
    case kDouble: return 1e-12;
    default: return 0;
  }
}

// The gradients of sum(case) for the case's float32 inputs, concatenated
// (its rule on the graph's ops through each backend); empty where the
// result does not require grad (comparisons, argmax, ...).
std::vector<double> gradients(const Case& c, Device dev) {
  g_with_grad = true;
  g_leaves.clear();
  struct Reset {
    ~Reset() { g_with_grad = false; }
  } reset;
  Tensor y = c.make(kFloat, dev);
  std::vector<double> all;
  if (!y.requires_grad()) return all;
  loom::sum(y.to(kFloat) * 1.0).backward();
  for (const Tensor& x : g_leaves)
    if (x.grad().defined())
      for (double v : x.grad().to_vector<double>()) all.push_back(v);
  g_leaves.clear();
  return all;
}

// Runs one case on one CPU backend; nullopt where the API does not take
// the dtype (an error at record time, before any backend is involved).
std::optional<Tensor> record(const Case& c, ScalarType dt, Device dev, std::string* why) {
  try {
    return c.make(dt, dev);
  } catch (const loom::Error& e) {
    *why = e.what();
    return std::nullopt;
  }
}

class EveryOp : public ::testing::Test {
 protected:
  void TearDown() override { loom::set_backend("llvm"); }
};

TEST_F(EveryOp, EveryBackendAgreesWithTheReference) {
  const std::vector<std::string> backends = loom::runtime::backend_names(loom::kCPU);
  ASSERT_GE(backends.size(), 3u) << "llvm, reference and the example interp backend";
  const bool gpu = loom::cuda::is_available();
  std::set<Op> covered;
  int checked = 0, differentiated = 0;
  for (const Case& c : cases()) {
    for (ScalarType dt : kDtypes) {
      SCOPED_TRACE(c.name + " " + std::string(loom::to_string(dt)));
      loom::set_backend("reference");
      std::string why;
      std::optional<Tensor> want = record(c, dt, loom::kCPU, &why);
      if (!want) continue;  // the API rejects this dtype: nothing for a backend to do
      const std::set<Op> ops = ops_of(*want);
      covered.insert(ops.begin(), ops.end());
      try {
        emit_cuda(*want);
      } catch (const loom::Error& e) {
        ADD_FAILURE() << "the CUDA code generator: " << e.what();
      }
      const std::vector<double> ref = want->to_vector<double>();
      const ScalarType out = want->scalar_type();
      for (const std::string& b : backends) {
        if (b == "reference") continue;
        loom::set_backend(b);
        try {
          EXPECT_TRUE(loom_test::all_close(c.make(dt, loom::kCPU), ref, tolerance(out), tolerance(out)))
              << "backend " << b;
        } catch (const loom::Error& e) {
          ADD_FAILURE() << "backend " << b << ": " << e.what();
        }
      }
      if (gpu) {
        try {
          Tensor got = c.make(dt, Device(loom::kCUDA));
          covered.insert(Op::ToDevice);
          EXPECT_TRUE(loom_test::all_close(got, ref, tolerance(out), tolerance(out))) << "backend cuda";
        } catch (const loom::Error& e) {
          ADD_FAILURE() << "backend cuda: " << e.what();
        }
      }
      ++checked;
    }
    // The gradient rules of the case's ops, in float32, on every backend.
    SCOPED_TRACE(c.name + " gradient");
    loom::set_backend("reference");
    std::vector<double> ref;
    try {
      ref = gradients(c, loom::kCPU);
      differentiated += !ref.empty();
    } catch (const loom::Error& e) {
      ADD_FAILURE() << "reference: " << e.what();
      continue;
    }
    for (const std::string& b : backends) {
      if (b == "reference") continue;
      loom::set_backend(b);
      try {
        EXPECT_TRUE(loom_test::all_close(gradients(c, loom::kCPU), ref, 2e-5, 2e-5)) << "backend " << b;
      } catch (const loom::Error& e) {
        ADD_FAILURE() << "backend " << b << ": " << e.what();
      }
    }
    if (gpu) {
      try {
        EXPECT_TRUE(loom_test::all_close(gradients(c, Device(loom::kCUDA)), ref, 2e-5, 2e-5)) << "backend cuda";
      } catch (const loom::Error& e) {
        ADD_FAILURE() << "backend cuda: " << e.what();
      }
    }
  }
  EXPECT_GT(checked, 300);
  EXPECT_GT(differentiated, 50);
  // Every op of ops.def is in some case's graph. ToDevice only appears
  // where there is a device to move to.
  for (Op op : kAllOps) {
    if (op == Op::ToDevice && !gpu) continue;
    EXPECT_TRUE(covered.count(op)) << "no case above records " << loom::ir::op_name(op)
                                   << ": add one (docs/ADDING_AN_OP.md)";
  }
}

}  // namespace
