// Differential test: seeded random programs run on the llvm backend and on
// the reference backend (the oracle) must agree.
//
// A program is 1-4 random inputs (randn / randint / from_blob with padded or
// permuted strides; rank 0-4, sizes 1-9 with many 1s so that they broadcast,
// one graph in six with a long dim; every dtype; some NaN/inf/-0 and some
// huge integers) and 3-25 random ops over the public API: unary and binary
// pointwise ops (scalars on either side, broadcasting), casts, views,
// in-place writes through views, reductions (also of row-normalized values),
// softmax, matmul/linear/addmm, conv2d, cat/stack, gathers and scatters, factories,
// mid-program syncs and automatic graph cuts. Several values stay alive as
// outputs, so one sync computes several (multi-output and horizontally fused
// kernels). The llvm run first records the program with other scalars and
// random inputs, so the real run replays cached executables with new
// runtime scalars.
//
// The generator decides everything from std::mt19937_64(seed) and the shapes
// and dtypes it has built, never from data, so the same seed records the same
// program on each backend; loom::manual_seed(seed) makes the random inputs
// equal too. Each value carries a noise class:
//   exact  ints, bools, and floats that only went through correctly rounded
//          ops (+ - * / sqrt, casts, views, max/min, floor ...): both
//          backends must give equal values.
//   noisy  floats that went through a transcendental, a float reduction or
//          a float matmul: |llvm - ref| <= atol + rtol*|ref| + K*|ref - pert|,
//          where `pert` is the reference run of the same program with every
//          noisy op's operands/results multiplied by 1 +- delta (a few ulp
//          times a safety margin): the term measures how much the program
//          amplifies rounding noise, so ill-conditioned outputs (cancellation)
//          get the slack they need and well-conditioned ones none.
// Discontinuous ops (comparisons, floor/round/sign, float->int/bool casts,
// remainder, argmax, logical ops) only ever see exact values, so a 1-ulp
// difference can never flip them. The perturbed run doubles as a self-check:
// an output the generator calls exact must not move under perturbation.
//
// LOOM_DIFF_GRAPHS (default 300) and LOOM_DIFF_SEED (default 1) choose the
// graphs, LOOM_DIFF_PRINT=1 prints each program; a failure prints its seed,
// the program and loom::explain() of the failing output, and
// LOOM_DIFF_SEED=<seed> LOOM_DIFF_GRAPHS=1 replays it (tests/README.md).
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using loom::Scalar;
using loom::ScalarType;
using loom::Tensor;
using loom::kBool;
using loom::kDouble;
using loom::kFloat;
using loom::kInt;
using loom::kLong;
using Shape = std::vector<int64_t>;

constexpr int64_t kMaxRank = 6;
constexpr double kDelta32 = 2e-6, kDelta64 = 4e-15;  // relative perturbation of noisy values

bool is_float(ScalarType t) { return t == kFloat || t == kDouble; }

std::string dt_name(ScalarType t) {
  switch (t) {
    case kBool: return "Bool";
    case kInt: return "Int";
    case kLong: return "Long";
    case kFloat: return "Float";
    case kDouble: return "Double";
  }
  return "?";
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

std::string list_str(const std::vector<int64_t>& v) {
  std::string r = "{";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + std::to_string(v[i]);
  return r + "}";
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// NumPy broadcast of two shapes; false if they do not broadcast.
bool broadcast(const Shape& a, const Shape& b, Shape* out) {
  const size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    r[i] = x == 1 ? y : x;
  }
  if (out) *out = r;
  return true;
}

// The noise class of a value of dtype `dt` whose inputs had class `in`:
// 0 exact, 1 float64 rounding, 2 float32 rounding. Non-floats are exact.
int noise_class(ScalarType dt, int in) {
  if (!is_float(dt) || in == 0) return 0;
  return dt == kFloat ? 2 : in;
}
// ... for an op that itself rounds differently on the two backends.
int noisy_op(ScalarType dt, int in) { return noise_class(dt, std::max(in, dt == kFloat ? 2 : 1)); }

// A random number as it appears in a program: either side of an op.
struct Num {
  bool integral;
  int64_t i;
  double f;
  Scalar scalar() const { return integral ? Scalar(i) : Scalar(f); }
  std::string str() const {
    if (integral) return std::to_string(i);
    std::ostringstream os;
    os << std::setprecision(17) << f;
    std::string s = os.str();
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
  }
};

struct Var {
  Tensor t;
  std::string name;
  int noise = 0;
  int id = 0;
  Shape shape() const { return t.sizes().vec(); }
  ScalarType dtype() const { return t.dtype(); }
  bool exact() const { return noise == 0; }
};

// Builds one random program. `perturb` records the perturbed variant (see
// the top comment); it never draws from the program's generator, so the
// program is the same.
class Generator {
 public:
  // `variant` records the same ops with other runtime scalars and random
  // inputs: the graphs hash alike, so the real run replays its executables.
  // contiguous_blobs: from_blob inputs are made contiguous, as copying them
  // to a GPU does (a reference run beside a cuda run).
  // `grow`: every base dim above 1 is that much longer (1s stay 1, so
  // what broadcasts still does): the program at other sizes, as far as
  // the generator's later draws do not depend on them.
  Generator(uint64_t seed, bool perturb, bool variant = false, bool contiguous_blobs = false, int64_t grow = 0)
      : rng_(seed), jrng_(seed ^ 0x9e3779b97f4a7c15ull), drng_(seed * 31 + (variant ? 17 : 0)),
        later_(seed ^ 0x5851f42d4c957f2dull), perturb_(perturb),
        variant_(variant), contiguous_blobs_(contiguous_blobs), grow_(grow) {}

  std::vector<std::unique_ptr<double[]>> blobs_;  // memory behind from_blob inputs: outlives every tensor below
  std::vector<Var> outputs;
  std::string listing;

  void build(uint64_t seed) {
    loom::manual_seed(variant_ ? seed + 7919 : seed);
    if (coin(1.0 / 8)) {  // automatic graph cuts in the middle of the program
      const int64_t bound = uniform(6, 40);
      loom::set_max_pending_nodes(bound);
      listing += "set_max_pending_nodes(" + std::to_string(bound) + ")\n";
    }
    make_inputs();
    const int ops = static_cast<int>(uniform(3, 25));
    for (int i = 0; i < ops; ++i) {
      for (int attempt = 0; attempt < 50; ++attempt)
        if (one_op()) break;
    }
    // A few live outputs: the last value and up to five others, mostly
    // values nothing else read (so that most of the program is live).
    std::vector<size_t> chosen = {pool_.size() - 1}, sinks;
    for (size_t k = 0; k + 1 < pool_.size(); ++k)
      if (!used_[static_cast<size_t>(pool_[k].id)]) sinks.push_back(k);
    std::shuffle(sinks.begin(), sinks.end(), rng_);
    const int extra = static_cast<int>(uniform(1, 5));
    for (int i = 0; i < extra; ++i) {
      size_t k = i < static_cast<int>(sinks.size()) ? sinks[static_cast<size_t>(i)]
                                                     : static_cast<size_t>(uniform(0, static_cast<int64_t>(pool_.size()) - 1));
      if (std::find(chosen.begin(), chosen.end(), k) == chosen.end()) chosen.push_back(k);
    }
    listing += "outputs:";
    for (size_t k : chosen) {
      outputs.push_back(pool_[k]);
      listing += " " + pool_[k].name;
    }
    listing += "\n";
    pool_.clear();  // only the outputs stay alive: everything else is fused or dropped
  }

 private:
  // ---------------------------------------------------------------- randomness
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  const T& choose(const std::vector<T>& v) { return v[static_cast<size_t>(uniform(0, static_cast<int64_t>(v.size()) - 1))]; }
  // A dim index for rank r, sometimes negative.
  int64_t dim_arg(int64_t d, int64_t r) { return coin(0.3) ? d - r : d; }

  // The variant moves every number away from 0 (a divisor stays nonzero).
  Num int_num(std::vector<int64_t> from) {
    int64_t i = choose(from);
    return Num{true, variant_ ? i + (i > 0) - (i < 0) : i, 0};
  }
  Num float_num(std::vector<double> from) {
    double f = choose(from);
    return Num{false, 0, variant_ ? f * 1.25 : f};
  }
  Num any_num() { return coin(0.5) ? int_num({-3, -2, -1, 1, 2, 3, 5}) : float_num({-2.5, -1.0, -0.75, 0.1, 0.5, 1.5, 3.0}); }

  // ---------------------------------------------------------------- the pool
  Var& add(Tensor t, int noise, const std::string& expr) {
    const ScalarType dt = t.dtype();
    note_uses(expr);
    Var v{std::move(t), "t" + std::to_string(next_), noise_class(dt, noise), next_};
    ++next_;
    used_.push_back(false);
    listing += v.name + " = " + expr + "  # " + dt_name(v.dtype()) + shape_str(v.shape()) +
               (v.noise ? " noisy" : "") + "\n";
    pool_.push_back(std::move(v));
    return pool_.back();
  }
  // Marks the values an expression reads (its tN tokens) as used.
  void note_uses(const std::string& expr) {
    for (size_t i = 0; i < expr.size(); ++i) {
      if (expr[i] != 't' || (i > 0 && (std::isalnum(static_cast<unsigned char>(expr[i - 1])) || expr[i - 1] == '_'))) continue;
      size_t j = i + 1;
      while (j < expr.size() && std::isdigit(static_cast<unsigned char>(expr[j]))) ++j;
      if (j > i + 1) used_[static_cast<size_t>(std::stoi(expr.substr(i + 1, j - i - 1)))] = true;
    }
  }
  // Values nothing has read yet (most of the program stays live) and recent
  // ones (longer chains, more fusion) more often than the rest.
  const Var& any_var() {
    const int64_t how = uniform(0, 9);
    if (how < 4) {
      std::vector<size_t> unused;
      for (size_t k = 0; k < pool_.size(); ++k)
        if (!used_[static_cast<size_t>(pool_[k].id)]) unused.push_back(k);
      if (!unused.empty()) return pool_[choose(unused)];
    }
    if (how < 7 && pool_.size() > 4) return pool_[pool_.size() - 1 - static_cast<size_t>(uniform(0, 3))];
    return choose(pool_);
  }
  template <class P>
  std::vector<const Var*> vars_where(P pred) {
    std::vector<const Var*> r;
    for (const Var& v : pool_)
      if (pred(v)) r.push_back(&v);
    return r;
  }

  // A noisy value as the perturbed run sees it: times (1 + delta * u), u in
  // [-1, 1] from the perturbation's own generator. Identity otherwise.
  Tensor jitter(const Tensor& t) {
    if (!perturb_ || !is_float(t.dtype())) return t;
    return t * jitter_factor(t);
  }
  // A noisy value whose error is also absolute: `ulps` ulp of 1 (times
  // `scale` where given) more, of either sign, in the perturbed run.
  //  - gelu(x) = x/2 (1 + erf(x/sqrt 2)), or with tanh: for x < 0 the
  //    1 + erf cancels, and erf, within an ulp or two of -1 on every
  //    backend, leaves about |x|/2 times a few ulp of 1, most of the value
  //    near x = -5 (seed 105185: cuda and the reference 6% apart; PyTorch's
  //    formula, so its too): scale x, 2 ulps (x/2 times 4).
  //  - the log of a float sum of n terms near 1 (logsumexp, log_softmax
  //    where one term dominates): the sum's rounding, a few ulp of 1 for
  //    each level of a pairwise or vector-lane sum, all of a log_softmax
  //    near 0 (seed 201637: -2.08e-4, llvm and the reference 4 ulp of 1
  //    apart): log_sum_ulps(n).
  Tensor jitter_absolute(const Tensor& v, double ulps, const Tensor& scale = {}) {
    if (!perturb_ || !is_float(v.dtype())) return v;
    const double ulp1 = v.dtype() == kFloat ? 0x1p-23 : 0x1p-52;
    const double delta = v.dtype() == kFloat ? kDelta32 : kDelta64;
    const Tensor relative = jitter(v);
    const Tensor error = (jitter_factor(v) - 1) * (ulps * ulp1 / delta);  // ulps ulp of 1 times u in [-1, 1]
    return relative + (scale.defined() ? scale * error : error);
  }
  static double log_sum_ulps(int64_t n) {
    return 2 * (1 + std::ceil(std::log2(static_cast<double>(std::max<int64_t>(n, 1)))));
  }
  Tensor jitter_factor(const Tensor& t) {
    const double delta = t.dtype() == kFloat ? kDelta32 : kDelta64;
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> f(static_cast<size_t>(t.numel()));
    for (double& x : f) x = 1 + delta * u(jrng_);
    return loom::tensor(f, t.dtype()).reshape(t.sizes());
  }

  // Host memory borrowed through from_blob, laid out with permuted and
  // padded strides; values from their own generator.
  Tensor blob(const Shape& s, ScalarType dt, std::string& e) {
    const size_t r = s.size();
    std::vector<size_t> order(r);  // memory order, outermost first
    for (size_t i = 0; i < r; ++i) order[i] = i;
    if (coin()) std::shuffle(order.begin(), order.end(), rng_);
    Shape strides(r);
    int64_t acc = 1;
    for (size_t j = r; j-- > 0;) {
      strides[order[j]] = acc;
      acc *= s[order[j]] + (coin(0.3) ? uniform(1, 2) : 0);  // padding between rows
    }
    int64_t extent = 1;
    for (size_t i = 0; i < r; ++i) extent += (s[i] - 1) * strides[i];
    auto mem = std::make_unique<double[]>(static_cast<size_t>(extent));  // 8-byte aligned, big enough for any dtype
    std::normal_distribution<double> nd(0, 2);
    for (int64_t i = 0; i < extent; ++i) {
      const double v = nd(drng_);
      switch (dt) {
        case kFloat: reinterpret_cast<float*>(mem.get())[i] = static_cast<float>(v); break;
        case kDouble: mem[static_cast<size_t>(i)] = v; break;
        case kInt: reinterpret_cast<int32_t*>(mem.get())[i] = static_cast<int32_t>(std::floor(v * 3)); break;
        case kLong: reinterpret_cast<int64_t*>(mem.get())[i] = static_cast<int64_t>(std::floor(v * 3)); break;
        case kBool: reinterpret_cast<bool*>(mem.get())[i] = v > 0; break;
      }
    }
    // On a GPU run the borrowed host memory is copied to the default device,
    // contiguous; the reference run beside it makes the same contiguous
    // copy. Otherwise a reshape is a view on one side and a copy on the
    // other, and a write into the input afterwards shows through only the
    // view (seed 121890: cuda and reference both right, and different).
    Tensor t = loom::from_blob(mem.get(), s, strides, dt).to(loom::default_device());
    if (contiguous_blobs_) t = t.contiguous();
    blobs_.push_back(std::move(mem));
    e = "from_blob(" + shape_str(s) + ", strides " + list_str(strides) + ", " + dt_name(dt) + ")";
    return t;
  }

  void make_inputs() {
    // Sizes 1-9; one graph in six has one long dim (10-64) so that vector
    // bodies and their scalar tails both run inside a row.
    // Wide graphs are also large enough for kernels to split across threads.
    const bool wide = coin(1.0 / 6);
    const int64_t rank = wide ? uniform(1, 4) : uniform(0, 4);
    Shape base;
    for (int64_t d = 0; d < rank; ++d) base.push_back(uniform(1, 9));
    if (wide) base[static_cast<size_t>(uniform(0, rank - 1))] = uniform(10, 64);
    for (int64_t& d : base)
      if (d > 1) d += grow_;
    max_numel_ = std::max<int64_t>(8192, numel_of(base));  // ops never grow values past this
    const int n = static_cast<int>(uniform(1, 4));
    for (int i = 0; i < n; ++i) {
      // A suffix of the base shape with some dims set to 1: inputs broadcast.
      const int64_t drop = coin(0.4) ? uniform(0, rank) : 0;
      Shape s(base.begin() + drop, base.end());
      for (int64_t& d : s)
        if (coin(0.3)) d = 1;
      const ScalarType dt = choose(std::vector<ScalarType>{kFloat, kFloat, kDouble, kInt, kLong, kBool});
      const std::string ss = shape_str(s);
      const int kind = static_cast<int>(uniform(0, 7));
      if (kind == 7) {
        std::string e;
        Tensor t = blob(s, dt, e);
        add(t, 0, e);
      } else if (dt == kBool) {
        add(loom::randint(0, 2, s).to(kBool), 0, "randint(0, 2, " + ss + ").to(Bool)");
      } else if (!is_float(dt)) {
        if (kind == 0) {  // large values: integer arithmetic wraps around
          const int64_t big = dt == kInt ? 200000000 : 900000000000000000;
          add(loom::randint(-10, 10, s, dt) * big, 0, "randint(-10, 10, " + ss + ", " + dt_name(dt) + ") * " + std::to_string(big));
        } else {
          add(loom::randint(-10, 10, s, dt), 0, "randint(-10, 10, " + ss + ", " + dt_name(dt) + ")");
        }
      } else if (kind <= 1) {  // halves: exercises round-half-to-even and exact ties
        add(loom::randint(-12, 12, s, dt) / 2, 0, "randint(-12, 12, " + ss + ", " + dt_name(dt) + ") / 2");
      } else if (kind == 2) {  // NaN, +-inf and -0.0 among the values
        const double inf = std::numeric_limits<double>::infinity();
        const double special = choose(std::vector<double>{std::nan(""), inf, -inf, -0.0});
        Tensor v = loom::where(loom::randint(0, 6, s) == 0, Scalar(special), loom::randn(s, dt) * 2);
        std::ostringstream os;
        os << "where(randint(0, 6, " << ss << ") == 0, " << special << ", randn(" << ss << ", " << dt_name(dt) << ") * 2)";
        add(v, 0, os.str());
      } else {
        add(loom::randn(s, dt) * 2, 0, "randn(" + ss + ", " + dt_name(dt) + ") * 2");
      }
    }
  }

  // ---------------------------------------------------------------- operand helpers
  // Each returns a tensor and appends its expression to `e`.
  static Tensor nonbool(const Var& v, std::string& e) {
    e = v.name;
    if (v.dtype() == kBool) {
      e += ".to(Int)";
      return v.t.to(kInt);
    }
    return v.t;
  }
  static Tensor floating(const Var& v, std::string& e) {
    e = v.name;
    if (!is_float(v.dtype())) {
      e += ".to(Float)";
      return v.t.to(kFloat);
    }
    return v.t;
  }
  // |x| + 1 (or + 0.5 for floats): a divisor that is never 0.
  static Tensor divisor(const Var& v, std::string& e) {
    std::string s;
    Tensor x = nonbool(v, s);
    if (is_float(x.dtype())) {
      e = "(abs(" + s + ") + 0.5)";
      return x.abs() + 0.5;
    }
    e = "(abs(" + s + ") + 1)";
    return x.abs() + 1;
  }

  // A pool value whose shape broadcasts with `s` (result within the size
  // cap) and that satisfies pred; nullptr if none.
  template <class P>
  const Var* partner(const Shape& s, P pred) {
    auto c = vars_where([&](const Var& v) {
      Shape out;
      return pred(v) && broadcast(s, v.shape(), &out) && numel_of(out) <= max_numel_ && out.size() <= kMaxRank;
    });
    return c.empty() ? nullptr : c[static_cast<size_t>(uniform(0, static_cast<int64_t>(c.size()) - 1))];
  }
  // A value that broadcasts *to* exactly `s` (for in-place writes).
  template <class P>
  const Var* fits_into(const Shape& s, P pred) {
    auto c = vars_where([&](const Var& v) {
      Shape out;
      return pred(v) && broadcast(s, v.shape(), &out) && out == s;
    });
    return c.empty() ? nullptr : c[static_cast<size_t>(uniform(0, static_cast<int64_t>(c.size()) - 1))];
  }

  std::vector<int64_t> random_dims(int64_t rank) {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      if (coin(0.4)) dims.push_back(dim_arg(d, rank));
    if (dims.empty() && rank > 0) {
      int64_t d = uniform(0, rank - 1);
      dims.push_back(dim_arg(d, rank));
    }
    return dims;
  }

  // ---------------------------------------------------------------- ops
  bool one_op() {
    const int64_t r = uniform(0, 99);
    if (r < 3) {  // materialize everything live: later graphs read Input leaves and write into their buffers
      loom::sync();
      listing += "sync()\n";
      return true;
    }
    if (r < 10) return op_factory();
    if (r < 20) return op_unary();
    if (r < 39) return op_binary();
    if (r < 44) return op_cast();
    if (r < 58) return op_view();
    if (r < 65) return op_inplace();
    if (r < 78) return op_reduce();
    if (r < 81) return op_softmax();
    if (r < 86) return op_matmul();
    if (r < 92) return op_join();
    return op_index();
  }

  // Leaves and composites made of them: arange, linspace, full, eye,
  // tril/triu, more random tensors, one_hot, embedding. Their shapes follow
  // a pool value, so they broadcast with it.
  bool op_factory() {
    const Var x = any_var();
    const Shape s = x.shape();
    const int64_t last = s.empty() ? uniform(1, 9) : s.back();
    const int k = static_cast<int>(uniform(0, 9));
    const ScalarType dt = choose(std::vector<ScalarType>{kFloat, kDouble, kInt, kLong});
    switch (k) {
      case 0: case 1: {
        // n elements from start by step; integer dtypes with float start or
        // step take PyTorch's rule (start and step truncated first).
        const int64_t n = coin(0.7) ? last : uniform(1, 9);
        const Num start = any_num();
        const Num step = coin() ? int_num({1, 2, 3, -1, -2}) : float_num({0.5, 1.5, -0.5, -2.5, 0.25, 3.0});
        Scalar end;
        std::string es;
        if (start.integral && step.integral) {
          end = Scalar(start.i + n * step.i);
          es = std::to_string(start.i + n * step.i);
        } else {
          const double e = (start.integral ? static_cast<double>(start.i) : start.f) +
                           (static_cast<double>(n) - 0.5) * (step.integral ? static_cast<double>(step.i) : step.f);
          end = Scalar(e);
          es = Num{false, 0, e}.str();
        }
        add(loom::arange(start.scalar(), end, step.scalar(), dt), 0,
            "arange(" + start.str() + ", " + es + ", " + step.str() + ", " + dt_name(dt) + ")");
        return true;
      }
      case 2: {
        const int64_t n = coin(0.7) ? last : uniform(1, 9);
        const Num a = any_num(), b = any_num();
        add(loom::linspace(a.scalar(), b.scalar(), n, dt), 0,
            "linspace(" + a.str() + ", " + b.str() + ", " + std::to_string(n) + ", " + dt_name(dt) + ")");
        return true;
      }
      case 3: {
        const Num v = any_num();
        const ScalarType fdt = coin(0.2) ? kBool : dt;
        add(loom::full(s, v.scalar(), fdt), 0, "full(" + shape_str(s) + ", " + v.str() + ", " + dt_name(fdt) + ")");
        return true;
      }
      case 4: {
        const bool one = coin();
        add(one ? loom::ones_like(x.t) : loom::zeros_like(x.t, dt), 0,
            one ? "ones_like(" + x.name + ")" : "zeros_like(" + x.name + ", " + dt_name(dt) + ")");
        return true;
      }
      case 5: {
        const int64_t n = s.size() >= 2 ? s[s.size() - 2] : uniform(1, 9);
        add(loom::eye(n, last, dt), 0, "eye(" + std::to_string(n) + ", " + std::to_string(last) + ", " + dt_name(dt) + ")");
        return true;
      }
      case 6: {
        if (s.size() < 2) return false;
        const int64_t diag = uniform(-3, 3);
        const bool lower = coin();
        add(lower ? x.t.tril(diag) : x.t.triu(diag), x.noise,
            x.name + (lower ? ".tril(" : ".triu(") + std::to_string(diag) + ")");
        return true;
      }
      case 7: {
        const int r = static_cast<int>(uniform(0, 2));
        const ScalarType fdt = coin() ? kFloat : kDouble;
        if (r == 0) add(loom::rand(s, fdt), 0, "rand(" + shape_str(s) + ", " + dt_name(fdt) + ")");
        else if (r == 1) add(loom::randn_like(x.t, fdt), 0, "randn_like(" + x.name + ", " + dt_name(fdt) + ")");
        else add(loom::randint(-5, 5, s, dt), 0, "randint(-5, 5, " + shape_str(s) + ", " + dt_name(dt) + ")");
        return true;
      }
      case 8: {
        const int64_t c = uniform(1, 6);
        Shape is(s.begin(), s.end());
        if (is.size() >= 3) is.erase(is.begin());  // the result gains a dim
        if (numel_of(is) * c > max_numel_) return false;
        add(loom::one_hot(loom::randint(0, c, is), c), 0,
            "one_hot(randint(0, " + std::to_string(c) + ", " + shape_str(is) + "), " + std::to_string(c) + ")");
        return true;
      }
      default: {
        if (s.size() != 2) return false;
        const Shape is = {uniform(1, 4), uniform(1, 3)};
        if (numel_of(is) * s[1] > max_numel_) return false;
        add(loom::embedding(x.t, loom::randint(0, s[0], is)), x.noise,
            "embedding(" + x.name + ", randint(0, " + std::to_string(s[0]) + ", " + shape_str(is) + "))");
        return true;
      }
    }
  }

  bool op_unary() {
    const Var x = any_var();  // a copy: add() may grow the pool
    std::string s;
    const Tensor xb = nonbool(x, s);  // x, or x.to(Int) for ops that refuse bool; s names it
    const int k = static_cast<int>(uniform(0, 24));
    switch (k) {
      case 0: {
        Tensor v = xb.clamp(-8.0, 4.0).exp();
        add(jitter(v), noisy_op(v.dtype(), x.noise), "exp(clamp(" + s + ", -8.0, 4.0))");
        return true;
      }
      case 1: {
        Tensor v = (xb.abs() + 1).log();
        add(jitter(v), noisy_op(v.dtype(), x.noise), "log(abs(" + s + ") + 1)");
        return true;
      }
      case 2: case 3: case 4: {
        static const char* names[] = {"tanh", "sigmoid", "erf"};
        const bool atan = k == 4 && later_coin();
        Tensor v = atan ? x.t.atan() : k == 2 ? x.t.tanh() : k == 3 ? x.t.sigmoid() : x.t.erf();
        add(jitter(v), noisy_op(v.dtype(), x.noise), std::string(atan ? "atan" : names[k - 2]) + "(" + x.name + ")");
        return true;
      }
      case 5: case 6: {
        std::string sf;
        Tensor f = floating(x, sf);
        const bool tanh = coin(0.3);
        Tensor v = k == 5 ? loom::gelu(f, tanh ? "tanh" : "none") : loom::silu(f);
        add(k == 5 ? jitter_absolute(v, 2, f) : jitter(v), noisy_op(v.dtype(), x.noise),
            k == 5 ? "gelu(" + sf + (tanh ? ", \"tanh\")" : ")") : "silu(" + sf + ")");
        return true;
      }
      case 7: case 8: {
        if (later_coin()) {  // the inverse: asin or acos of tanh(x) * 0.9, inside their domain
          Tensor u = x.t.tanh() * 0.9;
          Tensor v = k == 7 ? u.asin() : u.acos();
          add(jitter(v), noisy_op(v.dtype(), x.noise), std::string(k == 7 ? "asin" : "acos") + "(tanh(" + x.name + ") * 0.9)");
          return true;
        }
        Tensor c = xb.clamp(-20.0, 20.0);
        Tensor v = k == 7 ? c.sin() : c.cos();
        add(jitter(v), noisy_op(v.dtype(), x.noise), std::string(k == 7 ? "sin" : "cos") + "(clamp(" + s + ", -20.0, 20.0))");
        return true;
      }
      case 9: {
        Tensor v = xb.abs().log1p();
        add(jitter(v), noisy_op(v.dtype(), x.noise), "log1p(abs(" + s + "))");
        return true;
      }
      case 10: {
        Tensor v = xb.clamp(-8.0, 4.0).expm1();
        add(jitter(v), noisy_op(v.dtype(), x.noise), "expm1(clamp(" + s + ", -8.0, 4.0))");
        return true;
      }
      // Correctly rounded: they keep an exact value exact.
      case 11: add(xb.abs().sqrt(), x.noise, "sqrt(abs(" + s + "))"); return true;
      case 12: add((xb.abs() + 0.5).rsqrt(), x.noise, "rsqrt(abs(" + s + ") + 0.5)"); return true;
      case 13: add((xb.abs() + 1).reciprocal(), x.noise, "reciprocal(abs(" + s + ") + 1)"); return true;
      case 14: add(xb.abs(), x.noise, "abs(" + s + ")"); return true;
      case 15: add(-xb, x.noise, "-" + s); return true;
      case 16: add(xb.relu(), x.noise, "relu(" + s + ")"); return true;
      case 17: add(x.t.square(), x.noise, "square(" + x.name + ")"); return true;
      case 18: {
        Num lo = any_num(), hi = lo;
        hi.f = lo.f + 2.0;
        hi.i = lo.i + 3;
        Tensor v = xb.clamp(lo.scalar(), hi.scalar());
        add(v, x.noise, "clamp(" + s + ", " + lo.str() + ", " + hi.str() + ")");
        return true;
      }
      // Discontinuous: exact inputs only.
      case 19: case 20: case 21: case 22: {
        if (!x.exact()) return false;
        static const char* names[] = {"floor", "round", "ceil", "sign"};
        Tensor b = k == 22 ? x.t : xb;
        if (k == 22) s = x.name;  // sign accepts bool
        const bool trunc = k == 19 && later_coin();
        Tensor v = trunc ? b.trunc() : k == 19 ? b.floor() : k == 20 ? b.round() : k == 21 ? b.ceil() : b.sign();
        add(v, 0, std::string(trunc ? "trunc" : names[k - 19]) + "(" + s + ")");
        return true;
      }
      case 23: {
        if (!x.exact()) return false;
        add(x.t.logical_not(), 0, "logical_not(" + x.name + ")");
        return true;
      }
      default: {
        if (!x.exact()) return false;
        add(~(x.t.to(kBool)), 0, "~" + x.name + ".to(Bool)");
        return true;
      }
    }
  }

  // One binary op: the second operand is a pool value, a keepdim reduction
  // of the first (row-broadcast patterns), or a scalar on either side.
  bool op_binary() {
    const Var a = any_var();  // the pool may grow below
    enum { Add, Sub, Mul, Div, Max, Min, Pow, Rem, Fmod, Cmp, Logic, Where, kOps };
    const int op = static_cast<int>(uniform(0, kOps - 1));
    const bool discontinuous = op == Rem || op == Fmod || op == Cmp || op == Logic;
    if (discontinuous && !a.exact()) return false;
    auto ok = [&](const Var& v) { return !discontinuous || v.exact(); };
    // The partner: 0 pool tensor, 1 keepdim reduction of a, 2 scalar right, 3 scalar left.
    int mode = static_cast<int>(uniform(0, 9));
    mode = mode < 5 ? 0 : mode < 6 ? 1 : mode < 8 ? 2 : 3;
    const bool scalar_ok = op != Max && op != Min && op != Logic;
    const bool left_ok = op == Add || op == Sub || op == Mul || op == Div || op == Pow;
    if (mode == 2 && !scalar_ok) mode = 0;
    if (mode == 3 && !left_ok) mode = scalar_ok ? 2 : 0;
    if (mode == 1 && a.shape().empty()) mode = 0;
    Var b;
    if (mode == 1) {
      // Reductions of the same value broadcast back over it (softmax-like fusion).
      std::vector<int64_t> dims = random_dims(static_cast<int64_t>(a.shape().size()));
      const bool exact_red = coin(0.5);
      if (exact_red || a.dtype() == kBool) {
        b = add(a.t.amax(dims, true), a.noise, a.name + ".amax(" + list_str(dims) + ", true)");
      } else {
        std::string s;
        Tensor x = nonbool(a, s);
        b = add(jitter(x).sum(dims, true), is_float(x.dtype()) ? noisy_op(x.dtype(), a.noise) : 0,
                s + ".sum(" + list_str(dims) + ", true)");
      }
      if (!ok(b)) return true;  // the reduction was recorded; the op is skipped
    } else if (mode == 0) {
      const Var* p = partner(a.shape(), ok);
      if (!p) return false;
      b = *p;
    }
    Num n = any_num();
    std::string sa, sb, e;
    switch (op) {
      case Add: case Sub: case Mul: {
        const char* sym = op == Add ? " + " : op == Sub ? " - " : " * ";
        Tensor x = op == Sub ? nonbool(a, sa) : (sa = a.name, a.t);
        if (mode <= 1) {
          Tensor y = op == Sub ? nonbool(b, sb) : (sb = b.name, b.t);
          if (op == Add && coin(0.2)) {  // alpha scales the second operand
            const bool int_result = !is_float(loom::result_type(x, y));
            Num alpha = int_result ? int_num({-2, 2, 3}) : float_num({-0.5, 2.0, 0.25});
            Tensor v = x.add(y, alpha.scalar());
            add(v, std::max(a.noise, b.noise), sa + ".add(" + sb + ", alpha=" + alpha.str() + ")");
            return true;
          }
          Tensor v = op == Add ? x + y : op == Sub ? x - y : x * y;
          add(v, std::max(a.noise, b.noise), sa + sym + sb);
        } else if (mode == 2) {
          Tensor v = op == Add ? x.add(n.scalar()) : op == Sub ? x.sub(n.scalar()) : x.mul(n.scalar());
          add(v, a.noise, sa + sym + n.str());
        } else {
          Tensor v = n.integral ? (op == Add ? n.i + x : op == Sub ? n.i - x : n.i * x)
                                : (op == Add ? n.f + x : op == Sub ? n.f - x : n.f * x);
          add(v, a.noise, n.str() + sym + sa);
        }
        return true;
      }
      case Div: {
        if (mode <= 1) {
          Tensor y = divisor(b, sb);
          if (later_coin()) {  // the angle of (y, a): a divisor keeps it away from atan2's 0/0
            Tensor v = loom::atan2(a.t, y);
            add(jitter(v), noisy_op(v.dtype(), std::max(a.noise, b.noise)), "atan2(" + a.name + ", " + sb + ")");
            return true;
          }
          add(a.t / y, std::max(a.noise, b.noise), a.name + " / " + sb);
        } else if (mode == 2) {
          Num d = coin() ? int_num({-4, -2, 2, 3, 7}) : float_num({-1.5, 0.5, 2.5, 0.1});
          add(a.t / d.scalar(), a.noise, a.name + " / " + d.str());
        } else {
          Tensor y = divisor(a, sa);
          add(n.integral ? n.i / y : n.f / y, a.noise, n.str() + " / " + sa);
        }
        return true;
      }
      case Max: case Min: {
        Tensor v = op == Max ? loom::maximum(a.t, b.t) : loom::minimum(a.t, b.t);
        add(v, std::max(a.noise, b.noise), std::string(op == Max ? "maximum(" : "minimum(") + a.name + ", " + b.name + ")");
        return true;
      }
      case Pow: return binary_pow(a, b, mode);
      case Rem: case Fmod: {
        const char* name = op == Rem ? "remainder" : "fmod";
        Tensor v;
        if (mode <= 1) {
          Tensor y = divisor(b, sb);
          if (coin(0.4)) {
            y = -y;
            sb = "-" + sb;
          }
          v = op == Rem ? a.t.remainder(y) : a.t.fmod(y);
        } else {
          Num d = coin() ? int_num({-3, -2, -1, 2, 3, 5}) : float_num({-2.5, -0.75, 1.5, 0.5});
          sb = d.str();
          v = op == Rem ? a.t.remainder(d.scalar()) : a.t.fmod(d.scalar());
        }
        add(v, 0, std::string(name) + "(" + a.name + ", " + sb + ")");
        return true;
      }
      case Cmp: {
        static const char* names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
        const int c = static_cast<int>(uniform(0, 5));
        auto cmp = [&](const Tensor& x, const auto& y) {
          switch (c) {
            case 0: return x.eq(y);
            case 1: return x.ne(y);
            case 2: return x.lt(y);
            case 3: return x.le(y);
            case 4: return x.gt(y);
            default: return x.ge(y);
          }
        };
        if (mode <= 1) add(cmp(a.t, b.t), 0, a.name + "." + names[c] + "(" + b.name + ")");
        else add(cmp(a.t, n.scalar()), 0, a.name + "." + names[c] + "(" + n.str() + ")");
        return true;
      }
      case Logic: {
        const bool conj = coin();
        add(conj ? (a.t.to(kBool) & b.t.to(kBool)) : loom::logical_or(a.t, b.t), 0,
            conj ? a.name + ".to(Bool) & " + b.name + ".to(Bool)" : "logical_or(" + a.name + ", " + b.name + ")");
        return true;
      }
      default: {  // where(cond, a, b)
        const Var* c = partner(a.shape(), [](const Var& v) { return v.dtype() == kBool; });
        Tensor cond;
        std::string sc;
        if (c) {
          cond = c->t;
          sc = c->name;
        } else {
          const Shape s = a.shape();
          cond = loom::randint(0, 2, s).to(kBool);
          sc = "randint(0, 2, " + shape_str(s) + ").to(Bool)";
        }
        if (mode <= 1) {
          Shape out;
          if (!broadcast(cond.sizes().vec(), b.shape(), &out) || numel_of(out) > max_numel_) return false;
          add(loom::where(cond, a.t, b.t), std::max(a.noise, b.noise), "where(" + sc + ", " + a.name + ", " + b.name + ")");
        } else if (mode == 2) {
          add(loom::where(cond, a.t, n.scalar()), a.noise, "where(" + sc + ", " + a.name + ", " + n.str() + ")");
        } else {
          add(loom::where(cond, n.scalar(), a.t), a.noise, "where(" + sc + ", " + n.str() + ", " + a.name + ")");
        }
        return true;
      }
    }
  }

  // pow with a safe base: |a| + 0.5 for float results; integer powers with
  // small exponents (negative ones from a tensor give PyTorch's 0/1/-1).
  bool binary_pow(const Var& a, const Var& b, int mode) {
    std::string sa, sb;
    if (mode <= 1) {
      Tensor x = nonbool(a, sa), y = nonbool(b, sb);
      if (is_float(loom::result_type(x, y))) {
        Tensor v = (x.abs() + 0.5).pow(y.clamp(-3, 3));
        add(jitter(v), noisy_op(v.dtype(), std::max(a.noise, b.noise)), "pow(abs(" + sa + ") + 0.5, clamp(" + sb + ", -3, 3))");
      } else {
        add(x.pow(y.clamp(-2, 3)), 0, "pow(" + sa + ", clamp(" + sb + ", -2, 3))");
      }
      return true;
    }
    if (mode == 2) {
      Tensor x = nonbool(a, sa);
      if (coin(0.5) && !is_float(x.dtype())) {
        Num e = int_num({0, 1, 2, 3});
        add(x.pow(e.scalar()), 0, "pow(" + sa + ", " + e.str() + ")");
        return true;
      }
      Num e = coin(0.3) ? int_num({0, 1, 2, 3}) : float_num({0.5, 1.5, 2.0, 3.0, -1.0, -0.5, 2.5});
      Tensor v = (x.abs() + 0.5).pow(e.scalar());
      add(jitter(v), noisy_op(v.dtype(), a.noise), "pow(abs(" + sa + ") + 0.5, " + e.str() + ")");
      return true;
    }
    Tensor y = nonbool(a, sa);
    if (!is_float(y.dtype()) && coin(0.4)) {
      Num base = int_num({-2, 2, 3});
      add(loom::pow(base.scalar(), y.clamp(0, 5)), 0, "pow(" + base.str() + ", clamp(" + sa + ", 0, 5))");
      return true;
    }
    Num base = float_num({0.5, 1.5, 2.0, 3.0});
    Tensor v = loom::pow(base.scalar(), y.clamp(-6, 6));
    add(jitter(v), noisy_op(v.dtype(), a.noise), "pow(" + base.str() + ", clamp(" + sa + ", -6, 6))");
    return true;
  }

  bool op_cast() {
    const Var x = any_var();  // a copy: add() may grow the pool
    ScalarType to = choose(std::vector<ScalarType>{kFloat, kDouble, kInt, kLong, kBool});
    if (to == x.dtype()) return false;
    if (!is_float(to) && is_float(x.dtype())) {
      if (!x.exact()) return false;  // a 1-ulp difference must not flip a truncation
      if (to == kBool) {
        add(x.t.to(kBool), 0, x.name + ".to(Bool)");
        return true;
      }
      // NaN and out-of-range floats have no defined integer: keep them out.
      Tensor g = loom::where(x.t.eq(x.t), x.t, Scalar(0)).clamp(-1000, 1000);
      add(g.to(to), 0, "where(" + x.name + " == " + x.name + ", " + x.name + ", 0).clamp(-1000, 1000).to(" + dt_name(to) + ")");
      return true;
    }
    if (to == kBool && !x.exact()) return false;
    Tensor v = x.t.to(to);
    // A noisy double rounded to float32 may land on either neighbour.
    add(to == kFloat && x.noise ? jitter(v) : v, x.noise, x.name + ".to(" + dt_name(to) + ")");
    return true;
  }

  bool op_view() {
    const Var x = any_var();  // a copy: add() may grow the pool
    const Shape s = x.shape();
    const int64_t r = static_cast<int64_t>(s.size());
    const int k = static_cast<int>(uniform(0, 12));
    switch (k) {
      case 12: {
        const bool c = coin();
        add(c ? x.t.contiguous() : x.t.clone(), x.noise, x.name + (c ? ".contiguous()" : ".clone()"));
        return true;
      }
      case 0: {
        if (r < 2) return false;
        int64_t d0 = uniform(0, r - 1), d1 = uniform(0, r - 1);
        if (d0 == d1) d1 = (d0 + 1) % r;
        d0 = dim_arg(d0, r);
        d1 = dim_arg(d1, r);
        add(x.t.transpose(d0, d1), x.noise, x.name + ".transpose(" + std::to_string(d0) + ", " + std::to_string(d1) + ")");
        return true;
      }
      case 1: {
        if (r < 2) return false;
        std::vector<int64_t> p(static_cast<size_t>(r));
        for (int64_t i = 0; i < r; ++i) p[static_cast<size_t>(i)] = i;
        std::shuffle(p.begin(), p.end(), rng_);
        add(x.t.permute(p), x.noise, x.name + ".permute(" + list_str(p) + ")");
        return true;
      }
      case 2: {
        if (r < 1) return false;
        const int64_t d = uniform(0, r - 1), n = s[static_cast<size_t>(d)];
        int64_t start = uniform(0, n - 1), end = uniform(start + 1, n), step = choose(std::vector<int64_t>{1, 1, 2, 3});
        const int64_t sarg = coin(0.2) ? start - n : start;
        add(x.t.slice(dim_arg(d, r), sarg, end, step), x.noise,
            x.name + ".slice(" + std::to_string(d) + ", " + std::to_string(sarg) + ", " + std::to_string(end) + ", " +
                std::to_string(step) + ")");
        return true;
      }
      case 3: {
        if (r < 1) return false;
        const int64_t d = uniform(0, r - 1), n = s[static_cast<size_t>(d)];
        const int64_t i = uniform(-n, n - 1);
        add(x.t.select(d, i), x.noise, x.name + ".select(" + std::to_string(d) + ", " + std::to_string(i) + ")");
        return true;
      }
      case 4: {
        if (r < 1) return false;
        const int64_t d = uniform(0, r - 1), n = s[static_cast<size_t>(d)];
        const int64_t start = uniform(0, n - 1), len = uniform(1, n - start);
        add(x.t.narrow(d, start, len), x.noise,
            x.name + ".narrow(" + std::to_string(d) + ", " + std::to_string(start) + ", " + std::to_string(len) + ")");
        return true;
      }
      case 5: {
        Shape to;
        if (r < kMaxRank && coin(0.3)) to.push_back(uniform(1, 3));
        for (int64_t d : s) to.push_back(d == 1 ? uniform(1, 4) : (coin(0.2) ? -1 : d));
        Shape real = to;
        for (size_t i = 0; i < real.size(); ++i)
          if (real[i] == -1) real[i] = s[i - (real.size() - s.size())];
        if (numel_of(real) > max_numel_) return false;
        add(x.t.expand(to), x.noise, x.name + ".expand(" + list_str(to) + ")");
        return true;
      }
      case 6: {
        if (r >= kMaxRank) return false;
        const int64_t d = uniform(0, r);
        const int64_t arg = coin(0.3) ? d - r - 1 : d;
        add(x.t.unsqueeze(arg), x.noise, x.name + ".unsqueeze(" + std::to_string(arg) + ")");
        return true;
      }
      case 7: {
        if (coin(0.5) || r == 0) {
          add(x.t.squeeze(), x.noise, x.name + ".squeeze()");
        } else {
          const int64_t d = uniform(0, r - 1);
          add(x.t.squeeze(d), x.noise, x.name + ".squeeze(" + std::to_string(d) + ")");
        }
        return true;
      }
      case 8: case 9: {
        // A random factorization of numel into up to 4 dims, 1s included.
        int64_t n = numel_of(s);
        std::vector<int64_t> primes;
        for (int64_t p = 2; n > 1; ++p)
          while (n % p == 0) {
            primes.push_back(p);
            n /= p;
          }
        const int64_t rank = uniform(primes.empty() ? 0 : 1, 4);
        Shape to(static_cast<size_t>(rank), 1);
        for (int64_t p : primes) to[static_cast<size_t>(uniform(0, rank - 1))] *= p;
        if (rank > 0 && coin(0.3)) to[static_cast<size_t>(uniform(0, rank - 1))] = -1;
        add(x.t.reshape(to), x.noise, x.name + ".reshape(" + list_str(to) + ")");
        return true;
      }
      case 10: {
        if (r < 1) return false;
        const int64_t a = uniform(0, r - 1), b = uniform(a, r - 1);
        add(x.t.flatten(a, b), x.noise, x.name + ".flatten(" + std::to_string(a) + ", " + std::to_string(b) + ")");
        return true;
      }
      default: {
        if (r > 2) return false;
        add(x.t.t(), x.noise, x.name + ".t()");
        return true;
      }
    }
  }

  // add_/sub_/mul_/copy_/fill_ through a view of a pool value: the write
  // reaches every alias of its storage.
  bool op_inplace() {
    auto targets = vars_where([](const Var& v) {
      const Shape s = v.shape();
      for (size_t d = 0; d < s.size(); ++d)
        if (v.t.stride(static_cast<int64_t>(d)) == 0 && s[d] > 1) return false;  // expanded: not writable
      return true;
    });
    if (targets.empty()) return false;
    const Var x = *targets[static_cast<size_t>(uniform(0, static_cast<int64_t>(targets.size()) - 1))];
    const Shape s = x.shape();
    const int64_t r = static_cast<int64_t>(s.size());
    Tensor v = x.t;
    std::string sv = x.name;
    const int view = static_cast<int>(uniform(0, 4));
    if (r >= 1 && view == 1) {
      const int64_t d = uniform(0, r - 1), n = s[static_cast<size_t>(d)];
      const int64_t start = uniform(0, n - 1), step = uniform(1, 3);
      v = v.slice(d, start, n, step);
      sv += ".slice(" + std::to_string(d) + ", " + std::to_string(start) + ", " + std::to_string(n) + ", " + std::to_string(step) + ")";
    } else if (r >= 1 && view == 2) {
      const int64_t d = uniform(0, r - 1), i = uniform(0, s[static_cast<size_t>(d)] - 1);
      v = v.select(d, i);
      sv += ".select(" + std::to_string(d) + ", " + std::to_string(i) + ")";
    } else if (r >= 2 && view == 3) {
      v = v.transpose(0, r - 1);
      sv += ".transpose(0, " + std::to_string(r - 1) + ")";
    } else if (r >= 1 && view == 4) {
      const int64_t d = uniform(0, r - 1), n = s[static_cast<size_t>(d)];
      const int64_t start = uniform(0, n - 1);
      v = v.narrow(d, start, uniform(1, n - start));
      sv += ".narrow(" + std::to_string(d) + ", " + std::to_string(start) + ", " + std::to_string(v.size(d)) + ")";
    }
    const Shape vs = v.sizes().vec();
    const ScalarType dt = x.dtype();
    int value_noise = 0;
    std::string e;
    const int op = static_cast<int>(uniform(0, 5));
    // What may be written into dtype dt: no category above it (PyTorch's
    // rule), and nothing noisy into an integer.
    auto fits = [&](const Var& o) {
      const int cat = o.dtype() == kBool ? 0 : is_float(o.dtype()) ? 2 : 1;
      const int dcat = dt == kBool ? 0 : is_float(dt) ? 2 : 1;
      return cat <= dcat && (op != 1 || o.dtype() != kBool);
    };
    if (op <= 2 && dt != kBool) {  // add_, sub_, mul_
      static const char* names[] = {"add_", "sub_", "mul_"};
      const Var* o = coin(0.7) ? fits_into(vs, fits) : nullptr;
      if (o) {
        if (op == 0) v.add_(o->t);
        else if (op == 1) v.sub_(o->t);
        else v.mul_(o->t);
        value_noise = o->noise;
        e = sv + "." + names[op] + "(" + o->name + ")";
      } else {
        Num n = is_float(dt) ? any_num() : int_num({-2, -1, 2, 3});
        if (op == 0) v.add_(n.scalar());
        else if (op == 1) v.sub_(n.scalar());
        else v.mul_(n.scalar());
        e = sv + "." + names[op] + "(" + n.str() + ")";
      }
    } else if (op == 3) {  // copy_: casts to dt
      const Var* o = fits_into(vs, [&](const Var& c) { return is_float(dt) || !is_float(c.dtype()) || c.exact(); });
      if (!o) return false;
      if (is_float(o->dtype()) && !is_float(dt)) {
        // float -> int/bool: exact values only, NaN and range kept out as in op_cast.
        if (dt == kBool) v.copy_(o->t);
        else v.copy_(loom::where(o->t.eq(o->t), o->t, Scalar(0)).clamp(-1000, 1000));
      } else {
        v.copy_(o->t);
      }
      value_noise = o->noise;
      e = sv + ".copy_(" + o->name + ")";
    } else if (op == 4) {
      Num n = is_float(dt) ? any_num() : dt == kBool ? int_num({0, 1}) : int_num({-7, 0, 4});
      v.fill_(n.scalar());
      e = sv + ".fill_(" + n.str() + ")";
    } else {  // unary in place
      if (dt == kBool) return false;
      const int u = static_cast<int>(uniform(0, 7));
      static const char* names[] = {"relu_", "abs_", "neg_", "clamp_", "floor_", "round_", "exp_", "tanh_"};
      if (u >= 4 && !is_float(dt)) return false;
      if ((u == 4 || u == 5) && !x.exact()) return false;  // discontinuous
      switch (u) {
        case 0: v.relu_(); break;
        case 1: v.abs_(); break;
        case 2: v.neg_(); break;
        case 3: v.clamp_(-2, 3); break;
        case 4: v.floor_(); break;
        case 5: v.round_(); break;
        case 6: v.clamp_(-8.0, 4.0).exp_(); break;
        default: v.tanh_(); break;
      }
      e = sv + "." + (u == 6 ? "clamp_(-8.0, 4.0).exp_" : names[u]) + (u == 3 ? "(-2, 3)" : "()");
      if (u >= 6) {
        value_noise = noisy_op(dt, x.noise);
        if (perturb_) v.mul_(jitter_factor(v));
      } else {
        value_noise = x.noise;
      }
    }
    // Every alias of the storage now holds (part of) the written value.
    const int nn = noise_class(dt, value_noise);
    for (Var& p : pool_)
      if (p.t.is_alias_of(x.t)) p.noise = std::max(p.noise, nn);
    note_uses(e);
    listing += e + "\n";
    add(v, std::max(x.noise, nn), sv + "  (after the write)");
    return true;
  }

  bool op_reduce() {
    const Var x = any_var();
    const Shape s = x.shape();
    const int64_t r = static_cast<int64_t>(s.size());
    const bool keep = coin(0.4);
    const std::string ks = keep ? "true" : "false";
    std::vector<int64_t> dims = coin(0.15) ? std::vector<int64_t>{} : random_dims(r);
    const std::string ds = list_str(dims);
    std::string sx;
    const int k = static_cast<int>(uniform(0, 14));
    switch (k) {
      case 0: {  // sum, or (from later_) cumsum along the first of the dims
        const bool fl = is_float(x.dtype());
        if (r > 0 && later_coin()) {
          const int64_t d = dims.empty() ? r - 1 : dims[0];
          Tensor out = jitter(x.t).cumsum(d);
          add(out, fl ? noisy_op(out.dtype(), x.noise) : 0, x.name + ".cumsum(" + std::to_string(d) + ")");
          return true;
        }
        Tensor out = jitter(x.t).sum(dims, keep);
        add(out, fl ? noisy_op(out.dtype(), x.noise) : 0, x.name + ".sum(" + ds + ", " + ks + ")");
        return true;
      }
      case 1: {  // mean
        Tensor f = floating(x, sx);
        Tensor out = jitter(f).mean(dims, keep);
        add(out, noisy_op(out.dtype(), x.noise), sx + ".mean(" + ds + ", " + ks + ")");
        return true;
      }
      case 2: case 3: {  // amax / amin: exact
        Tensor out = k == 2 ? x.t.amax(dims, keep) : x.t.amin(dims, keep);
        add(out, x.noise, x.name + (k == 2 ? ".amax(" : ".amin(") + ds + ", " + ks + ")");
        return true;
      }
      case 4: {  // argmax / argmin of exact values
        if (!x.exact() || x.dtype() == kBool) return false;
        const bool mx = coin();
        if (r == 0 || coin(0.2)) {
          add(mx ? x.t.argmax() : x.t.argmin(), 0, x.name + (mx ? ".argmax()" : ".argmin()"));
        } else {
          const int64_t d = dim_arg(uniform(0, r - 1), r);
          add(mx ? x.t.argmax(d, keep) : x.t.argmin(d, keep), 0,
              x.name + (mx ? ".argmax(" : ".argmin(") + std::to_string(d) + ", " + ks + ")");
        }
        return true;
      }
      case 5: {  // prod over one dim or all
        // Float products are taken of values clamped to [-2, 2] over at most
        // 64 elements: where a partial product overflows or underflows, the
        // result depends on the order and width of accumulation (the
        // reference accumulates in double, llvm and PyTorch in float32 lanes).
        const bool fl = is_float(x.dtype());
        Tensor v = fl ? jitter(x.t).clamp(-2.0, 2.0) : x.t;
        const std::string sv = fl ? "clamp(" + x.name + ", -2.0, 2.0)" : x.name;
        if (r == 0 || (coin(0.2) && numel_of(s) <= 64)) {
          Tensor out = v.prod();
          add(out, fl ? noisy_op(out.dtype(), x.noise) : 0, sv + ".prod()");
        } else {
          const int64_t d = uniform(0, r - 1);
          if (s[static_cast<size_t>(d)] > 64) return false;
          const int64_t darg = dim_arg(d, r);
          Tensor out = v.prod(darg, keep);
          add(out, fl ? noisy_op(out.dtype(), x.noise) : 0, sv + ".prod(" + std::to_string(darg) + ", " + ks + ")");
        }
        return true;
      }
      case 6: {  // var
        Tensor f = floating(x, sx);
        const bool unbiased = coin();
        Tensor out = jitter(f).var(dims, unbiased, keep);
        add(jitter(out), noisy_op(out.dtype(), x.noise),
            sx + ".var(" + ds + ", unbiased=" + (unbiased ? "true" : "false") + ", " + ks + ")");
        return true;
      }
      case 7: {  // logsumexp, or (from later_) self-attention over the last two dims
        Tensor f = floating(x, sx);
        if (r >= 2 && f.numel() > 0 && later_coin()) {
          // q = k = v = tanh(x): the scores stay within the head dim, and the
          // output is a weighted mean of values in [-1, 1], whose error is the
          // dot products' and sums' rounding: a few ulp of 1 per level of each.
          // Half the causal draws (by the row length's parity, so no draw
          // is added) give a band |i - j| <= w as a bool mask tensor instead.
          const bool causal = later_coin(), banded = causal && s[r - 1] % 2 == 1;
          const Tensor q = jitter(f).tanh();
          const int64_t n = s[r - 2], w = 1 + s[r - 1] % 3;
          const Tensor band = banded ? loom::arange(n, loom::TensorOptions(loom::kLong).device(q.device()))
                                           .unsqueeze(1)
                                           .sub(loom::arange(n, loom::TensorOptions(loom::kLong).device(q.device())))
                                           .abs()
                                           .le(w)
                                     : Tensor();
          Tensor out = banded ? loom::scaled_dot_product_attention(q, q, q, band)
                              : loom::scaled_dot_product_attention(q, q, q, std::nullopt, 0.0, causal);
          add(jitter_absolute(out, 4 * log_sum_ulps(s[r - 2] * s[r - 1])), noisy_op(out.dtype(), x.noise),
              banded ? "scaled_dot_product_attention(tanh(" + sx + ") x3, (arange(" + std::to_string(n) +
                           ")[:, None] - arange(" + std::to_string(n) + ")).abs() <= " + std::to_string(w) + ")"
                     : "scaled_dot_product_attention(tanh(" + sx + "), tanh(" + sx + "), tanh(" + sx + "), {}, 0.0, " +
                           (causal ? "true" : "false") + ")");
          return true;
        }
        Tensor out = jitter(f).logsumexp(dims, keep);
        add(jitter_absolute(out, log_sum_ulps(f.numel() / std::max<int64_t>(out.numel(), 1))), noisy_op(out.dtype(), x.noise),
            sx + ".logsumexp(" + ds + ", " + ks + ")");
        return true;
      }
      case 10: {  // max/min(dim): values and indices together
        if (!x.exact() || r == 0) return false;
        const int64_t d = dim_arg(uniform(0, r - 1), r);
        const bool mx = coin();
        if (later_coin()) {  // a stable sort of exact values: the same positions everywhere
          auto [values, indices] = x.t.sort(d, mx);
          const std::string call = x.name + ".sort(" + std::to_string(d) + ", " + (mx ? "true" : "false") + ")";
          add(values, 0, call + ".values");
          add(indices, 0, call + ".indices");
          return true;
        }
        auto [values, indices] = mx ? x.t.max(d, keep) : x.t.min(d, keep);
        const std::string call = x.name + (mx ? ".max(" : ".min(") + std::to_string(d) + ", " + ks + ")";
        add(values, 0, call + ".values");
        add(indices, 0, call + ".indices");
        return true;
      }
      case 11: {  // std and norm
        Tensor f = floating(x, sx);
        if (coin()) {
          const bool unbiased = coin();
          Tensor out = jitter(f).std(dims, unbiased, keep);
          add(jitter(out), noisy_op(out.dtype(), x.noise),
              sx + ".std(" + ds + ", unbiased=" + (unbiased ? "true" : "false") + ", " + ks + ")");
        } else {
          const double p = choose(std::vector<double>{1, 2, 3, std::numeric_limits<double>::infinity()});
          Tensor out = jitter(f).norm(p, dims, keep);
          std::ostringstream os;
          os << sx << ".norm(" << p << ", " << ds << ", " << ks << ")";
          add(jitter(out), noisy_op(out.dtype(), x.noise), os.str());
        }
        return true;
      }
      case 13: case 14: {
        // A row-normalized value reduced again (over its rows, other dims or
        // everything): reductions fused into reductions.
        if (r == 0) return false;
        Tensor f = floating(x, sx);
        const int64_t d = dim_arg(uniform(0, r - 1), r);
        const std::string dstr = std::to_string(d);
        const int how = static_cast<int>(uniform(0, 3));
        Tensor in = jitter(f), norm;
        std::string e;
        if (how == 0) {
          norm = in.softmax(d);
          e = "softmax(" + sx + ", " + dstr + ")";
        } else if (how == 1) {
          norm = in - in.amax(d, true);
          e = "(" + sx + " - " + sx + ".amax(" + dstr + ", true))";
        } else if (how == 2) {
          norm = in / (in.abs().sum(d, true) + 1);
          e = "(" + sx + " / (abs(" + sx + ").sum(" + dstr + ", true) + 1))";
        } else {
          norm = (in - in.mean(d, true)).clamp(-30.0, 30.0).exp();
          e = "exp(clamp(" + sx + " - " + sx + ".mean(" + dstr + ", true), -30.0, 30.0))";
        }
        const bool mx = coin(0.3);
        Tensor out = mx ? norm.amax(dims, keep) : norm.sum(dims, keep);
        add(jitter(out), noisy_op(out.dtype(), x.noise), e + (mx ? ".amax(" : ".sum(") + ds + ", " + ks + ")");
        return true;
      }
      case 12: {  // sum into another dtype
        const ScalarType to = choose(std::vector<ScalarType>{kDouble, kLong, kFloat});
        if (!is_float(to) && is_float(x.dtype()) && !x.exact()) return false;
        if (!is_float(to) && is_float(x.dtype())) return false;  // a float cast to int first: not this op's point
        Tensor out = jitter(x.t).sum(dims, keep, to);
        add(out, is_float(to) ? noisy_op(to, x.noise) : 0,
            x.name + ".sum(" + ds + ", " + ks + ", dtype=" + dt_name(to) + ")");
        return true;
      }
      default: {  // all / any of exact values
        if (!x.exact()) return false;
        const bool all = coin();
        if (r == 0 || coin(0.3)) {
          add(all ? x.t.all() : x.t.any(), 0, x.name + (all ? ".all()" : ".any()"));
        } else {
          const int64_t d = dim_arg(uniform(0, r - 1), r);
          add(all ? x.t.all(d, keep) : x.t.any(d, keep), 0,
              x.name + (all ? ".all(" : ".any(") + std::to_string(d) + ", " + ks + ")");
        }
        return true;
      }
    }
  }

  bool op_softmax() {
    const Var x = any_var();
    const int64_t r = x.t.dim();
    if (r == 0) return false;
    const int64_t d = dim_arg(uniform(0, r - 1), r);
    const bool log = coin();
    std::string extra;
    Tensor in = jitter(x.t);
    Tensor out;
    if (is_float(x.dtype())) {
      out = log ? in.log_softmax(d) : in.softmax(d);
    } else {
      const ScalarType to = coin() ? kFloat : kDouble;
      out = log ? in.log_softmax(d, to) : in.softmax(d, to);
      extra = ", dtype=" + dt_name(to);
    }
    // The rounding of x_i - max x itself, an ulp or two of the largest |x|
    // along d, goes whole into log_softmax's output, and times the output
    // into softmax's (besides, for log_softmax, the sum's rounding in ulp
    // of 1). Values near 2^64 that tie in one backend's sum order and are
    // an ulp apart in another's give -ln 2 against -2^41 (seed 372861); the
    // relative jitter of x breaks such a tie only one way. A non-finite
    // largest |x|, where the output is NaN anyway, counts as 1.
    Tensor scale;
    if (perturb_) {
      const Tensor m = x.t.to(out.dtype()).abs().amax({d}, true);
      scale = loom::where(m < std::numeric_limits<double>::infinity(), m, 1.0).clamp_min(1);
      if (!log) scale = scale * out;
    }
    add(jitter_absolute(out, log ? log_sum_ulps(x.t.size(d)) + 2 : 2, scale), noisy_op(out.dtype(), x.noise),
        std::string(log ? "log_softmax(" : "softmax(") + x.name + ", " + std::to_string(d) + extra + ")");
    return true;
  }

  // torch.matmul's shape rule; the result shape or false.
  static bool matmul_shape(const Shape& a, const Shape& b, Shape* out) {
    const size_t da = a.size(), db = b.size();
    if (da == 0 || db == 0) return false;
    const int64_t k1 = a.back(), k2 = db > 1 ? b[db - 2] : b[0];
    if (k1 != k2) return false;
    Shape ba(a.begin(), a.end() - std::min<size_t>(da, 2)), bb(b.begin(), b.end() - std::min<size_t>(db, 2));
    Shape batch;
    if (!broadcast(ba, bb, &batch)) return false;
    if (da > 1) batch.push_back(a[da - 2]);
    if (db > 1) batch.push_back(b.back());
    *out = batch;
    return true;
  }

  // linear(a, w, bias) = a @ w^T + bias, or addmm(self, a, w^T, beta, alpha):
  // w is a pool matrix of a's dtype with w.size(1) == a.size(1), else a itself.
  bool linear_or_addmm(const Var& a) {
    const Shape sa = a.shape();
    auto ws = vars_where([&](const Var& v) {
      return v.dtype() == a.dtype() && v.shape().size() == 2 && v.shape()[1] == sa[1] && sa[0] * v.shape()[0] <= max_numel_;
    });
    const Var& w = ws.empty() ? a : *ws[static_cast<size_t>(uniform(0, static_cast<int64_t>(ws.size()) - 1))];
    const Shape out = {sa[0], w.shape()[0]};
    const bool fl = is_float(a.dtype());
    const int noise = fl ? noisy_op(a.dtype(), std::max(a.noise, w.noise)) : 0;
    auto bias = vars_where([&](const Var& v) {
      Shape o;
      return v.dtype() == a.dtype() && broadcast(out, v.shape(), &o) && o == out;
    });
    const Var* b = bias.empty() || coin(0.2) ? nullptr : bias[static_cast<size_t>(uniform(0, static_cast<int64_t>(bias.size()) - 1))];
    if (coin()) {
      if (b && b->shape().size() > 1) b = nullptr;  // linear's bias is a vector (or a scalar)
      Tensor v = loom::linear(jitter(a.t), jitter(w.t), b ? b->t : Tensor());
      add(fl ? jitter(v) : v, b ? std::max(noise, b->noise) : noise,
          "linear(" + a.name + ", " + w.name + (b ? ", " + b->name : std::string()) + ")");
      return true;
    }
    if (!b) return false;
    const Num beta = fl ? float_num({1.0, 0.5, -2.0, 0.0}) : int_num({1, 2, -1, 0});
    const Num alpha = fl ? float_num({1.0, -0.5, 2.0}) : int_num({1, 3, -2});
    Tensor v = loom::addmm(b->t, jitter(a.t), jitter(w.t).t(), beta.scalar(), alpha.scalar());
    add(fl ? jitter(v) : v, std::max(noise, b->noise),
        "addmm(" + b->name + ", " + a.name + ", " + w.name + ".t(), beta=" + beta.str() + ", alpha=" + alpha.str() + ")");
    return true;
  }

  // conv2d (from later_) of tanh(x), x viewed as [N, C, H, W], against a
  // weight of sines: groups, stride, padding and dilation drawn from the
  // shapes, so every backend's implicit GEMM meets ragged edges.
  bool op_conv(const Var& a) {
    std::string sx;
    Tensor x = floating(a, sx).tanh();
    sx = "tanh(" + sx + ")";
    if (x.dim() == 3) {
      x = x.unsqueeze(0);
      sx += ".unsqueeze(0)";
    }
    const int64_t c = x.size(1), h = x.size(2), w = x.size(3);
    if (x.numel() == 0) return false;
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= c; ++d)
      if (c % d == 0) divisors.push_back(d);
    const int64_t groups = divisors[static_cast<size_t>(uniform(0, static_cast<int64_t>(divisors.size()) - 1))];
    const int64_t o = groups * uniform(1, 3), pad_h = uniform(0, 1), pad_w = uniform(0, 1);
    const int64_t dil_h = uniform(1, 2), dil_w = uniform(1, 2), stride_h = uniform(1, 2), stride_w = uniform(1, 2);
    const int64_t kh = uniform(1, 3), kw = uniform(1, 3);
    if (dil_h * (kh - 1) + 1 > h + 2 * pad_h || dil_w * (kw - 1) + 1 > w + 2 * pad_w) return false;
    const int64_t oh = (h + 2 * pad_h - dil_h * (kh - 1) - 1) / stride_h + 1, ow = (w + 2 * pad_w - dil_w * (kw - 1) - 1) / stride_w + 1;
    if (x.size(0) * o * oh * ow > max_numel_) return false;
    const int64_t wn = o * (c / groups) * kh * kw;
    const Tensor weight = loom::arange(0, wn).to(x.dtype()).mul(0.37).sin().reshape({o, c / groups, kh, kw});
    const std::string sw = "arange(0, " + std::to_string(wn) + ").to(" + dt_name(x.dtype()) + ").mul(0.37).sin().reshape({" +
                           std::to_string(o) + ", " + std::to_string(c / groups) + ", " + std::to_string(kh) + ", " +
                           std::to_string(kw) + "})";
    const auto opts = loom::nn::functional::Conv2dFuncOptions()
                          .stride({stride_h, stride_w})
                          .padding({pad_h, pad_w})
                          .dilation({dil_h, dil_w})
                          .groups(groups);
    // The CPU's fused kernels (asked for) or im2col and a product, each half the time.
    const bool fused = later_coin();
    loom::backends::enable_fused_conv_on_cpu(fused);
    Tensor v = loom::nn::functional::conv2d(jitter(x), jitter(weight), opts);
    loom::backends::enable_fused_conv_on_cpu(false);
    add(jitter(v), noisy_op(v.dtype(), a.noise),
        "conv2d(" + sx + ", " + sw + ", stride {" + std::to_string(stride_h) + ", " + std::to_string(stride_w) +
            "}, padding {" + std::to_string(pad_h) + ", " + std::to_string(pad_w) + "}, dilation {" +
            std::to_string(dil_h) + ", " + std::to_string(dil_w) + "}, groups " + std::to_string(groups) + ")");
    return true;
  }

  bool op_matmul() {
    const Var a = any_var();
    if (a.dtype() == kBool || a.t.dim() == 0) return false;
    if (a.t.dim() >= 3 && a.t.dim() <= 4 && later_coin()) return op_conv(a);
    const Shape sa = a.shape();
    if (sa.size() == 2 && coin(0.3)) return linear_or_addmm(a);
    auto c = vars_where([&](const Var& v) {
      Shape out;
      if (!matmul_shape(sa, v.shape(), &out) || numel_of(out) > max_numel_ || out.size() > kMaxRank) return false;
      if (v.dtype() == kBool) return false;
      // The partner is cast to a's dtype: never a noisy float into an integer.
      return v.dtype() == a.dtype() || is_float(a.dtype()) || !is_float(v.dtype());
    });
    Tensor b;
    std::string sb;
    int bn = a.noise;
    if (!c.empty() && coin(0.8)) {
      const Var& v = *c[static_cast<size_t>(uniform(0, static_cast<int64_t>(c.size()) - 1))];
      b = v.t;
      sb = v.name;
      bn = v.noise;
      if (v.dtype() != a.dtype()) {
        if (!is_float(a.dtype()) && is_float(v.dtype())) {  // exact floats only (checked above)
          b = loom::where(b.eq(b), b, Scalar(0)).clamp(-1000, 1000);
          sb = "where(" + sb + " == " + sb + ", " + sb + ", 0).clamp(-1000, 1000)";
        }
        b = b.to(a.dtype());
        sb += ".to(" + dt_name(a.dtype()) + ")";
      }
    } else if (sa.size() == 1) {
      b = a.t;
      sb = a.name;
    } else {
      b = a.t.transpose(-1, -2);
      sb = a.name + ".transpose(-1, -2)";
    }
    Shape out;
    if (!matmul_shape(sa, b.sizes().vec(), &out) || numel_of(out) > max_numel_) return false;
    const bool fl = is_float(a.dtype());
    Tensor v = (fl ? jitter(a.t) : a.t).matmul(fl ? jitter(b) : b);
    add(fl ? jitter(v) : v, fl ? noisy_op(v.dtype(), std::max(a.noise, bn)) : 0, "matmul(" + a.name + ", " + sb + ")");
    return true;
  }

  bool op_join() {
    const Var a = any_var();
    const Shape s = a.shape();
    const int64_t r = static_cast<int64_t>(s.size());
    std::vector<Tensor> parts = {a.t};
    std::string names = a.name;
    int noise = a.noise;
    if (coin(0.5) && r >= 1) {  // cat along d: the others match elsewhere
      const int64_t d = uniform(0, r - 1);
      auto c = vars_where([&](const Var& v) {
        const Shape t = v.shape();
        if (t.size() != s.size()) return false;
        for (int64_t i = 0; i < r; ++i)
          if (i != d && t[static_cast<size_t>(i)] != s[static_cast<size_t>(i)]) return false;
        return true;
      });
      int64_t total = s[static_cast<size_t>(d)];
      const int extra = static_cast<int>(uniform(1, 2));
      for (int i = 0; i < extra; ++i) {
        if (!c.empty() && coin(0.7)) {
          const Var& v = *c[static_cast<size_t>(uniform(0, static_cast<int64_t>(c.size()) - 1))];
          parts.push_back(v.t);
          names += ", " + v.name;
          noise = std::max(noise, v.noise);
          total += v.t.size(d);
        } else {  // a piece of itself
          const int64_t len = uniform(1, s[static_cast<size_t>(d)]);
          parts.push_back(a.t.narrow(d, 0, len));
          names += ", " + a.name + ".narrow(" + std::to_string(d) + ", 0, " + std::to_string(len) + ")";
          total += len;
        }
      }
      if (total * (numel_of(s) / s[static_cast<size_t>(d)]) > max_numel_) return false;
      const int64_t darg = dim_arg(d, r);
      add(loom::cat(parts, darg), noise, "cat({" + names + "}, " + std::to_string(darg) + ")");
      return true;
    }
    if (r + 1 > kMaxRank) return false;
    auto c = vars_where([&](const Var& v) { return v.shape() == s; });
    const int extra = static_cast<int>(uniform(1, 2));
    for (int i = 0; i < extra; ++i) {
      const Var& v = *c[static_cast<size_t>(uniform(0, static_cast<int64_t>(c.size()) - 1))];
      parts.push_back(v.t);
      names += ", " + v.name;
      noise = std::max(noise, v.noise);
    }
    if (numel_of(s) * static_cast<int64_t>(parts.size()) > max_numel_) return false;
    const int64_t d = uniform(0, r);
    add(loom::stack(parts, d), noise, "stack({" + names + "}, " + std::to_string(d) + ")");
    return true;
  }

  bool op_index() {
    const Var x = any_var();
    const Shape s = x.shape();
    const int64_t r = static_cast<int64_t>(s.size());
    if (r == 0) return false;
    const int64_t d = uniform(0, r - 1), n = s[static_cast<size_t>(d)];
    if (coin(0.5)) {  // index_select
      const int64_t k = uniform(1, 6);
      if (numel_of(s) / n * k > max_numel_) return false;
      // Indices computed from an exact integer value, or drawn at random.
      auto ints = vars_where([&](const Var& v) { return (v.dtype() == kInt || v.dtype() == kLong) && v.t.numel() <= 12; });
      if (!ints.empty() && coin(0.4)) {
        const Var& iv = *ints[static_cast<size_t>(uniform(0, static_cast<int64_t>(ints.size()) - 1))];
        Tensor idx = iv.t.flatten().remainder(n);
        add(x.t.index_select(d, idx), x.noise,
            x.name + ".index_select(" + std::to_string(d) + ", remainder(" + iv.name + ".flatten(), " + std::to_string(n) + "))");
        return true;
      }
      const ScalarType it = coin() ? kLong : kInt;
      Tensor idx = loom::randint(0, n, {k}, it);
      add(x.t.index_select(d, idx), x.noise,
          x.name + ".index_select(" + std::to_string(d) + ", randint(0, " + std::to_string(n) + ", {" + std::to_string(k) +
              "}, " + dt_name(it) + "))");
      return true;
    }
    if (coin(0.35)) {
      // scatter_add(d, index, src): src is x itself or a value of its dtype
      // and rank; the index fits both. A float one is a sum whose order
      // varies (cuda adds with atomics: seed 100415 differed in the last
      // bits), so it is noisy; an integer one is exact.
      auto srcs = vars_where([&](const Var& v) {
        if (v.dtype() != x.dtype() || v.shape().size() != s.size()) return false;
        return true;
      });
      const Var& src = srcs.empty() || coin(0.3) ? x : *srcs[static_cast<size_t>(uniform(0, static_cast<int64_t>(srcs.size()) - 1))];
      Shape is = s;
      for (int64_t i = 0; i < r; ++i) {
        const int64_t lim = std::min(src.shape()[static_cast<size_t>(i)], i == d ? int64_t{6} : s[static_cast<size_t>(i)]);
        is[static_cast<size_t>(i)] = uniform(1, lim);
      }
      Tensor idx = loom::randint(0, n, is);
      const bool fl = is_float(x.dtype());
      // Half of them a scatter_reduce of another kind instead (from later_):
      // folded in index order on every backend, so exact.
      if (later_coin()) {
        static const char* const kinds[] = {"prod", "amax", "amin"};
        const char* kind = kinds[std::uniform_int_distribution<int>(0, 2)(later_)];
        const bool inc = later_coin();
        const int in = std::max(x.noise, src.noise);
        const bool product = fl && std::string(kind) == "prod";  // compounds its inputs' relative noise
        add(x.t.scatter_reduce(d, idx, src.t, kind, inc), product ? noisy_op(x.dtype(), in) : in,
            x.name + ".scatter_reduce(" + std::to_string(d) + ", randint(0, " + std::to_string(n) + ", " + shape_str(is) +
                "), " + src.name + ", \"" + kind + "\", " + (inc ? "true" : "false") + ")");
        return true;
      }
      Tensor out = x.t.scatter_add(d, idx, src.t);
      add(fl ? jitter(out) : out, fl ? noisy_op(x.dtype(), std::max(x.noise, src.noise)) : std::max(x.noise, src.noise),
          x.name + ".scatter_add(" + std::to_string(d) + ", randint(0, " + std::to_string(n) + ", " + shape_str(is) + "), " +
              src.name + ")");
      return true;
    }
    Shape is = s;
    for (int64_t i = 0; i < r; ++i)
      is[static_cast<size_t>(i)] = i == d ? uniform(1, 6) : uniform(1, s[static_cast<size_t>(i)]);
    if (numel_of(is) > max_numel_) return false;
    Tensor idx = loom::randint(0, n, is);
    add(x.t.gather(dim_arg(d, r), idx), x.noise,
        x.name + ".gather(" + std::to_string(d) + ", randint(0, " + std::to_string(n) + ", " + shape_str(is) + "))");
    return true;
  }

  std::mt19937_64 rng_;   // every decision of the program
  std::mt19937_64 jrng_;  // perturbation values only
  std::mt19937_64 drng_;  // from_blob data only
  // Ops added to the generator later are drawn from here, as an alternative
  // to an op of their kind (trunc for floor), so no draw of rng_ moves and
  // the seeds recorded above (SeedsThatOnceFailed*) still build the programs
  // they once failed on. docs/ADDING_AN_OP.md.
  std::mt19937_64 later_;
  bool later_coin() { return std::uniform_int_distribution<int>(0, 1)(later_) == 1; }
  const bool perturb_, variant_, contiguous_blobs_;
  const int64_t grow_;
  std::vector<Var> pool_;
  int next_ = 0;
  int64_t max_numel_ = 8192;
  std::vector<bool> used_;  // by value id: read by a later op
};

// ---------------------------------------------------------------- running and comparing

struct OutValues {
  ScalarType dtype;
  Shape shape;
  std::vector<double> f;   // floats
  std::vector<int64_t> i;  // ints and bools
  int noise = 0;
  std::string name;
};

struct Run {
  std::vector<OutValues> outs;
  std::string listing;
  std::string error;  // a loom::Error while recording or running
};

// `backend` "cuda" runs the program on the GPU (tensors made there by
// default); the others select that CPU backend.
// `contiguous_blobs`: see Generator (true for every run of a cuda check).
Run run_program(uint64_t seed, const std::string& backend, bool perturb, bool variant = false,
                bool contiguous_blobs = false, int64_t grow = 0) {
  const bool gpu = backend == "cuda";
  loom::set_backend(gpu ? "llvm" : backend);
  loom::set_default_device(gpu ? loom::Device(loom::kCUDA) : loom::Device(loom::kCPU));
  struct DefaultDevice {
    ~DefaultDevice() { loom::set_default_device(loom::kCPU); }
  } default_device;
  Run r;
  Generator g(seed, perturb, variant, contiguous_blobs, grow);
  const int64_t bound = loom::max_pending_nodes();
  struct Restore {
    int64_t bound;
    ~Restore() { loom::set_max_pending_nodes(bound); }
  } restore{bound};
  try {
    g.build(seed);
    r.listing = g.listing;
    for (const Var& v : g.outputs) {
      OutValues o{v.dtype(), v.shape(), {}, {}, v.noise, v.name};
      if (is_float(v.dtype())) o.f = v.t.to_vector<double>();
      else o.i = v.t.to_vector<int64_t>();
      r.outs.push_back(std::move(o));
    }
  } catch (const loom::Error& e) {
    r.listing = g.listing;
    r.error = e.what();
  }
  return r;
}

// The pending graph of output k of the program, as loom::explain prints it.
std::string explain_output(uint64_t seed, size_t k, int64_t grow = 0) {
  loom::set_backend("llvm");
  const int64_t bound = loom::max_pending_nodes();
  Generator g(seed, false, false, false, grow);
  g.build(seed);
  loom::set_max_pending_nodes(bound);
  return loom::explain(g.outputs.at(k).t);
}

std::string fmt(double v) {
  std::ostringstream os;
  os << std::setprecision(9) << v;
  return os.str();
}

// Empty when `backend` agrees with the reference; otherwise what differs.
std::string compare(const std::string& backend, const OutValues& got, const OutValues& want, const OutValues& pert) {
  std::ostringstream os;
  if (got.dtype != want.dtype || got.shape != want.shape)
    return "dtype/shape " + dt_name(got.dtype) + shape_str(got.shape) + " vs reference " + dt_name(want.dtype) +
           shape_str(want.shape);
  int shown = 0, bad = 0;
  auto report = [&](size_t e, const std::string& g, const std::string& w, const std::string& extra) {
    ++bad;
    if (shown++ < 8) os << "  element " << e << ": " << backend << " " << g << ", reference " << w << extra << "\n";
  };
  if (!is_float(want.dtype)) {
    for (size_t e = 0; e < want.i.size(); ++e)
      if (got.i[e] != want.i[e]) report(e, std::to_string(got.i[e]), std::to_string(want.i[e]), "");
  } else if (want.noise == 0) {
    for (size_t e = 0; e < want.f.size(); ++e) {
      const double g = got.f[e], w = want.f[e];
      if (!(g == w || (std::isnan(g) && std::isnan(w)))) report(e, fmt(g), fmt(w), " (exact value)");
    }
  } else {
    const bool f32 = want.noise == 2;
    const double rtol = f32 ? 1e-4 : 1e-9, atol = f32 ? 1e-5 : 1e-10, k = 8;
    for (size_t e = 0; e < want.f.size(); ++e) {
      const double g = got.f[e], w = want.f[e], p = pert.f[e];
      // The reference accumulates float32 sums and products in double; a
      // float32 backend whose partial products pass FLT_MAX gets an inf, or
      // a nan where infs of both signs meet, as PyTorch would (seed 54942:
      // a matmul of int64 values near 9e18 cast to float, products near
      // 1e38). Where the reference's result is that large or infinite, a
      // non-finite one is float32 arithmetic, not an error. (No generated
      // op overflows otherwise: exp's and pow's operands are clamped.)
      const bool f32_overflow = f32 && !std::isfinite(g) && !std::isnan(w) && std::abs(w) > 0x1p100;
      if (f32_overflow) continue;
      if (std::isnan(w) || std::isnan(g)) {
        if (std::isnan(w) != std::isnan(g)) report(e, fmt(g), fmt(w), "");
        continue;
      }
      if (std::isinf(w) || std::isinf(g)) {
        if (g != w) report(e, fmt(g), fmt(w), "");
        continue;
      }
      const double sens = std::isfinite(p) ? std::abs(w - p) : 0;
      const double tol = atol + rtol * std::abs(w) + k * sens;
      if (!(std::abs(g - w) <= tol))
        report(e, fmt(g), fmt(w), " (|diff| " + fmt(std::abs(g - w)) + " > tol " + fmt(tol) + ")");
    }
  }
  if (bad) os << "  " << bad << " of " << (is_float(want.dtype) ? want.f.size() : want.i.size()) << " elements differ\n";
  return os.str();
}

// Perturbing noisy values must leave every exact output unchanged: checks the generator's bookkeeping.
std::string check_exact(const OutValues& want, const OutValues& pert) {
  if (want.noise != 0) return "";
  if (is_float(want.dtype)) {
    for (size_t e = 0; e < want.f.size(); ++e)
      if (!(want.f[e] == pert.f[e] || (std::isnan(want.f[e]) && std::isnan(pert.f[e]))))
        return "  element " + std::to_string(e) + " moved under perturbation: " + fmt(want.f[e]) + " vs " + fmt(pert.f[e]) + "\n";
  } else if (want.i != pert.i) {
    return "  an integer/bool output moved under perturbation\n";
  }
  return "";
}

// Returns an empty string when the graph of `seed` passes on `backend`
// ("llvm" or "cuda"). With `grow` (Generator), the program at other sizes,
// run without the warm-up of other scalars: after a run at other sizes its
// graphs are the ones a new size compiles (sizes as arguments: resized).
std::string check_seed(uint64_t seed, const std::string& backend = "llvm", int64_t grow = 0) {
  const bool gpu = backend == "cuda";
  Run ref = run_program(seed, "reference", false, false, gpu, grow);
  Run pert = run_program(seed, "reference", true, false, gpu, grow);
  Run variant;
  if (grow == 0) variant = run_program(seed, backend, false, true, gpu);  // warms the cache with the same keys
  Run got = run_program(seed, backend, false, false, gpu, grow);
  std::ostringstream os;
  if (!ref.error.empty() || !got.error.empty() || !pert.error.empty() || !variant.error.empty()) {
    os << "a run raised an error\n  reference: " << ref.error << "\n  perturbed: " << pert.error << "\n  " << backend
       << ": " << got.error << "\n  " << backend << ", other scalars: " << variant.error
       << "\nprogram:\n" << ref.listing;
    return os.str();
  }
  if (got.listing != ref.listing || pert.listing != ref.listing)
    return "the program differs between runs (the generator read data?)\nreference:\n" + ref.listing + backend + ":\n" +
           got.listing;
  for (size_t k = 0; k < ref.outs.size(); ++k) {
    std::string why = check_exact(ref.outs[k], pert.outs[k]);
    const bool generator_bug = !why.empty();
    if (why.empty()) why = compare(backend, got.outs[k], ref.outs[k], pert.outs[k]);
    if (why.empty()) continue;
    os << (generator_bug ? "generator bookkeeping: " : "") << "output " << ref.outs[k].name << " ("
       << dt_name(ref.outs[k].dtype) << shape_str(ref.outs[k].shape) << (ref.outs[k].noise ? ", noisy" : ", exact")
       << ") differs:\n" << why << "program:\n" << ref.listing;
    try {
      os << "loom::explain(" << ref.outs[k].name << "):\n" << explain_output(seed, k, grow);
    } catch (const loom::Error& e) {
      os << "(explain failed: " << e.what() << ")\n";
    }
    os << "replay: LOOM_DIFF_SEED=" << seed << " LOOM_DIFF_GRAPHS=1 LOOM_LOG=fusion loom_tests --gtest_filter='Differential*'\n";
    return os.str();
  }
  return "";
}

// ---------------------------------------------------------------- regressions
// Each bug the random graphs found, reduced to a few lines, on every backend.
class DifferentialRegression : public loom_test::BackendTest {};

// Found by seed 5: an integer arange with a fractional start or step took
// start + i * step in double; PyTorch (and the reference) truncate start and
// step to integers first.
TEST_P(DifferentialRegression, IntegerArangeTruncatesStartAndStep) {
  EXPECT_EQ(loom::arange(-2.5, 3, 1.5, kInt).to_vector<int32_t>(), (std::vector<int32_t>{-2, -1, 0, 1}));
  EXPECT_EQ(loom::arange(0, 5, 0.5, kLong).to_vector<int64_t>(), std::vector<int64_t>(10, 0));
  EXPECT_EQ(loom::arange(0.1, -2.65, -0.5, kLong).to_vector<int64_t>(), std::vector<int64_t>(6, 0));
  EXPECT_EQ((loom::arange(-2, 18.25, 1.5, kInt) * 2).to_vector<int32_t>(),
            (std::vector<int32_t>{-4, -2, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22}));
}

// Found by seed 2718: a reduction over every dim of a value that contains a
// row reduction (softmax(x, -1).sum()) let the inner reduction redefine the
// kernel's rows, so the outer sum covered one row only.
TEST_P(DifferentialRegression, FullReductionOfRowReducedValue) {
  std::vector<float> v(20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 % 11) - 5) / 3;
  Tensor x = loom::tensor(v).reshape({4, 5});
  EXPECT_TRUE(loom_test::all_close(x.softmax(-1).sum(), {4.0}));
  double want = 0;  // sum |x - rowmax|
  for (int r = 0; r < 4; ++r) {
    float mx = v[r * 5];
    for (int c = 1; c < 5; ++c) mx = std::max(mx, v[r * 5 + c]);
    for (int c = 0; c < 5; ++c) want += mx - v[r * 5 + c];
  }
  EXPECT_TRUE(loom_test::all_close((x - x.amax({1}, true)).abs().sum(), {want}));
  EXPECT_TRUE(loom_test::all_close(x.log_softmax(-1).exp().sum({0, 1}, true), {4.0}));
}


// Found by seed 20990: in a kernel whose root is broadcast from a full
// reduction ((x / (|x|.sum(0) + 1)).sum() - z over [1, 9, 1]), the sum over
// the size-1 dim 0 nested in the full sum's value set the kernel's rows
// before the full sum's phase existed, so the full sum covered one element.
TEST_P(DifferentialRegression, ReductionNestedInAFullReductionKeepsItsRows) {
  std::vector<float> v = {1, -2, 3, -4, 5, -6, 7, -8, 9};
  Tensor x = loom::tensor(v).reshape({1, 9, 1});
  Tensor z = loom::arange(9, loom::kFloat).reshape({1, 9, 1});
  double total = 0;
  for (float e : v) total += e / (std::fabs(e) + 1);
  std::vector<double> want(9);
  for (int i = 0; i < 9; ++i) want[i] = total - i;
  EXPECT_TRUE(loom_test::all_close((x / (x.abs().sum(0, true) + 1)).sum() - z, want));
}
LOOM_INSTANTIATE_BACKENDS(DifferentialRegression);

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

// Runs LOOM_DIFF_GRAPHS seeded programs on `backend` against the reference.
void run_random_graphs(const std::string& backend) {
  const int64_t graphs = env_int("LOOM_DIFF_GRAPHS", 300);
  const uint64_t first = static_cast<uint64_t>(env_int("LOOM_DIFF_SEED", 1));
  const bool print = env_int("LOOM_DIFF_PRINT", 0) != 0;  // print every program
  const std::string previous = loom::set_backend("reference");
  const auto t0 = std::chrono::steady_clock::now();
  int64_t passed = 0, failed = 0;
  for (int64_t g = 0; g < graphs; ++g) {
    const uint64_t seed = first + static_cast<uint64_t>(g);
    if (print) std::printf("seed %llu:\n%s", static_cast<unsigned long long>(seed), run_program(seed, "reference", false).listing.c_str());
    std::string why = check_seed(seed, backend);
    if (why.empty()) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << "seed " << seed << " (" << backend << "): " << why;
      if (failed >= 5) break;
    }
    if (g % 200 == 199) loom::clear_executable_cache();  // bounded memory over long runs
  }
  loom::set_backend(previous);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ differential ] %s, seeds %llu..%llu: %lld graphs passed, %lld failed, %.1f s\n", backend.c_str(),
              static_cast<unsigned long long>(first), static_cast<unsigned long long>(first + graphs - 1),
              static_cast<long long>(passed), static_cast<long long>(failed), secs);
  EXPECT_EQ(failed, 0);
}

TEST(Differential, RandomGraphsLlvmVsReference) { run_random_graphs("llvm"); }

// The same programs at three sizes each (every dim above 1 grown by 0, 3
// and 7), every compile with sizes as arguments: the second and third
// sizes of a graph run the kernels compiled for the first (counted: some
// must), and each size agrees with the reference. LOOM_DIFF_SIZE_GRAPHS
// (default 40) programs from LOOM_DIFF_SEED.
void run_at_changing_sizes(const std::string& backend) {
  const int64_t graphs = env_int("LOOM_DIFF_SIZE_GRAPHS", 40);
  const uint64_t first = static_cast<uint64_t>(env_int("LOOM_DIFF_SEED", 1));
  const std::string previous = loom::set_backend("reference");
  const loom::DynamicShapes mode = loom::set_dynamic_shapes(loom::DynamicShapes::Always);
  const int64_t resized_before = loom::metrics().executables_resized;
  int64_t failed = 0;
  for (int64_t g = 0; g < graphs && failed < 5; ++g) {
    const uint64_t seed = first + static_cast<uint64_t>(g);
    for (int64_t grow : {0, 3, 7}) {
      const std::string why = check_seed(seed, backend, grow);
      if (why.empty()) continue;
      ++failed;
      ADD_FAILURE() << "seed " << seed << " grown by " << grow << ": " << why;
      break;
    }
  }
  const int64_t resized = loom::metrics().executables_resized - resized_before;
  loom::set_dynamic_shapes(mode);
  loom::set_backend(previous);
  std::printf("[ differential ] %s at three sizes, %lld programs: %lld executables resized with no code compiled\n",
              backend.c_str(), static_cast<long long>(graphs), static_cast<long long>(resized));
  EXPECT_EQ(failed, 0);
  EXPECT_GT(resized, graphs / 4) << "too few runs reused the kernels of another size: the test tests little";
}

TEST(Differential, ProgramsAtChangingSizesLlvmVsReference) { run_at_changing_sizes("llvm"); }

TEST(Differential, ProgramsAtChangingSizesCudaVsReference) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  run_at_changing_sizes("cuda");
}

// Seeds that once failed on llvm, run whatever the slice above covers: 130
// (a kernel left with no store after its only reader joined it, merged
// anyway), 20990 (ReductionNestedInAFullReductionKeepsItsRows), 24614 (an
// absorbed temporary stored into a buffer never assigned: absorbed
// temporaries now have theirs from the start).
TEST(Differential, SeedsThatOnceFailedOnLlvm) {
  const std::string previous = loom::set_backend("reference");
  for (uint64_t seed : {130, 20990, 24614}) EXPECT_EQ(check_seed(seed, "llvm"), "") << "seed " << seed;
  loom::set_backend(previous);
}

// The same for cuda: 100415 (a float scatter_add, whose atomics add in no
// fixed order, held to exact), 105185 (gelu's 1 + erf cancelling), 121890
// (a reshape that is a view of a GPU copy of a from_blob input and a copy
// of the strided original: the reference now copies it contiguous too).
TEST(Differential, SeedsThatOnceFailedOnCuda) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  const std::string previous = loom::set_backend("reference");
  for (uint64_t seed : {100415, 105185, 121890}) EXPECT_EQ(check_seed(seed, "cuda"), "") << "seed " << seed;
  loom::set_backend(previous);
}

TEST(Differential, RandomGraphsCudaVsReference) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU here: " << loom::cuda::unavailable_reason();
  run_random_graphs("cuda");
}

}  // namespace
