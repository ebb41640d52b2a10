// The CPU library kernels (kernels/cpu) against the reference backend's
// evaluators on the same inputs: bit-equal for data movement, random numbers
// and linspace, integer and bool matmul.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/library.h"
#include "runtime/reference/eval.h"

namespace {

using loom::ScalarType;
using loom::ir::Attrs;
using loom::ir::Dims;
using loom::ir::Op;
using loom::ir::RtScalar;
namespace cpu = loom::kernels::cpu;
namespace ref = loom::runtime::reference;

constexpr ScalarType kAll[] = {ScalarType::Bool, ScalarType::Int, ScalarType::Long, ScalarType::Float,
                               ScalarType::Double};

Dims dims(std::initializer_list<int64_t> v) { return Dims(v.begin(), v.size()); }
Attrs attrs(std::initializer_list<int64_t> v) { return Attrs(v.begin(), v.size()); }

struct Data {
  ScalarType dtype;
  Dims shape;
  std::vector<unsigned char> bytes;
  Data(ScalarType t, Dims s) : dtype(t), shape(s), bytes(s.numel() * loom::element_size(t) + 1) {}
  void* data() { return bytes.data(); }
  template <class T> T* as() { return reinterpret_cast<T*>(bytes.data()); }
  cpu::View view() { return {data(), dtype, shape}; }
  bool same_bits(const Data& o) const {
    const size_t n = shape.numel() * loom::element_size(dtype);
    return shape == o.shape && dtype == o.dtype && std::memcmp(bytes.data(), o.bytes.data(), n) == 0;
  }
};

std::mt19937_64 rng(1234);

// Random values of any dtype; `lo..hi` bounds integers, floats are in [-1, 1).
Data random_data(ScalarType t, Dims s, int64_t lo = -100, int64_t hi = 100) {
  Data d(t, s);
  const int64_t n = s.numel();
  std::uniform_int_distribution<int64_t> ints(lo, hi);
  std::uniform_real_distribution<double> reals(-1, 1);
  ref::dispatch_dtype(t, [&]<class T>() {
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, bool>) d.as<T>()[i] = (rng() & 1) != 0;
      else if constexpr (std::is_integral_v<T>) d.as<T>()[i] = static_cast<T>(ints(rng));
      else d.as<T>()[i] = static_cast<T>(reals(rng));
    }
  });
  return d;
}

Data indices(Dims s, int64_t size) { return random_data(ScalarType::Long, s, 0, size - 1); }

struct Result {
  Data out;
  std::string error;  // empty: no error
};

// The reference evaluator on one hand-built step.
Result run_reference(Op op, ScalarType t, Dims shape, Attrs attr, std::vector<Data*> ins,
                     std::vector<RtScalar> scalars = {}) {
  Result r{Data(t, shape), {}};
  ref::Step step{op, t, shape, attr, {}, 0, -1};
  std::vector<ref::Value> values;
  values.reserve(ins.size());
  for (Data* d : ins) values.push_back({d->data(), d->dtype, &d->shape});
  std::vector<const ref::Value*> ptrs;
  for (auto& v : values) ptrs.push_back(&v);
  ref::EvalContext c{step, ptrs, scalars, r.out.data(), 0};
  try {
    if (loom::ir::op_family(op) == loom::ir::Family::Leaf) ref::eval_leaf(c);
    else ref::eval_move(c);
  } catch (const loom::runtime::RunError& e) {
    r.error = e.message;
  }
  return r;
}

Result run_library(Op op, ScalarType t, Dims shape, Attrs attr, std::vector<Data*> ins,
                   std::vector<RtScalar> scalars = {}) {
  Result r{Data(t, shape), {}};
  loom::ir::LibraryCall call{op, 0, {}, 0, t, shape, {}, {}, attr, 0, static_cast<uint32_t>(scalars.size())};
  std::vector<cpu::View> views;
  for (Data* d : ins) {
    views.push_back(d->view());
    call.input_shapes.push_back(d->shape);
    call.input_dtypes.push_back(d->dtype);
  }
  try {
    cpu::run_library(call, views, r.out.view(), scalars);
  } catch (const cpu::LibraryError& e) {
    r.error = e.message;
  }
  return r;
}

// Runs both and expects identical bits (or the same error message).
void expect_same(Op op, ScalarType t, Dims shape, Attrs attr, std::vector<Data*> ins, std::vector<RtScalar> scalars = {}) {
  Result want = run_reference(op, t, shape, attr, ins, scalars);
  Result got = run_library(op, t, shape, attr, ins, scalars);
  EXPECT_EQ(got.error, want.error) << loom::ir::op_name(op) << " " << t;
  if (want.error.empty()) {
    EXPECT_TRUE(got.out.same_bits(want.out)) << loom::ir::op_name(op) << " " << t << " numel " << shape.numel();
  }
}

TEST(Library, ToDeviceCopies) {
  for (ScalarType t : kAll)
    for (int64_t n : {0, 1, 7, 65, 300001}) {
      Data x = random_data(t, dims({n}));
      expect_same(Op::ToDevice, t, dims({n}), {}, {&x});
    }
}

TEST(Library, ConcatAlongEachDim) {
  for (ScalarType t : kAll)
    for (int dim = 0; dim < 3; ++dim)
      for (Dims base : {dims({1, 7, 3}), dims({5, 63, 65}), dims({2, 1, 1}), dims({400, 3, 70})}) {
        std::vector<Data> parts;
        Dims out = base;
        out[dim] = 0;
        for (int64_t extra : {1, 0, 6}) {
          Dims s = base;
          s[dim] = base[dim] + extra;
          out[dim] += s[dim];
          parts.push_back(random_data(t, s));
        }
        std::vector<Data*> ins;
        for (Data& p : parts) ins.push_back(&p);
        expect_same(Op::Concat, t, out, attrs({dim}), ins);
      }
}

TEST(Library, ConcatOfLargeVectors) {
  Data a = random_data(ScalarType::Float, dims({100003})), b = random_data(ScalarType::Float, dims({77777}));
  expect_same(Op::Concat, ScalarType::Float, dims({177780}), attrs({0}), {&a, &b});
}

TEST(Library, IndexSelectAlongEachDim) {
  for (ScalarType t : kAll)
    for (int dim = 0; dim < 3; ++dim)
      for (Dims xs : {dims({1, 7, 3}), dims({5, 63, 65}), dims({70, 2, 1000})})
        for (int64_t nidx : {1, 7, 65}) {
          Data x = random_data(t, xs), idx = indices(dims({nidx}), xs[dim]);
          Dims out = xs;
          out[dim] = nidx;
          expect_same(Op::IndexSelect, t, out, attrs({dim}), {&x, &idx});
        }
}

TEST(Library, GatherAlongEachDim) {
  for (ScalarType t : kAll)
    for (int dim = 0; dim < 3; ++dim)
      for (auto [xs, is] : {std::pair{dims({1, 7, 3}), dims({1, 7, 3})}, std::pair{dims({5, 63, 65}), dims({4, 9, 65})},
                            std::pair{dims({9, 8, 7}), dims({9, 3, 5})}, std::pair{dims({64, 40, 30}), dims({60, 40, 30})}}) {
        Data x = random_data(t, xs), idx = indices(is, xs[dim]);
        expect_same(Op::Gather, t, is, attrs({dim}), {&x, &idx});
      }
}

TEST(Library, ScatterAddAlongEachDim) {
  // Index dims other than `dim` may be shorter than self's; src may be
  // longer than the index in any dim.
  std::uniform_int_distribution<int64_t> extra(0, 2);
  for (ScalarType t : kAll)
    for (int dim = 0; dim < 3; ++dim)
      for (Dims xs : {dims({1, 7, 3}), dims({5, 63, 65}), dims({9, 8, 7}), dims({64, 40, 3})}) {
        Dims is = xs, ss = xs;
        for (int d = 0; d < 3; ++d) {
          is[d] = d == dim ? 2 * xs[d] + 1 : std::uniform_int_distribution<int64_t>(1, xs[d])(rng);
          ss[d] = is[d] + extra(rng);
        }
        Data x = random_data(t, xs), idx = indices(is, xs[dim]), src = random_data(t, ss);
        expect_same(Op::ScatterAdd, t, xs, attrs({dim}), {&x, &idx, &src});
      }
}

// Every ScatterKind, with duplicates along dim (the index is longer than
// self there): the fold order, and so assign's last writer, is the
// reference's even when the work is split across cores.
TEST(Library, ScatterReduceEveryKindAlongEachDim) {
  for (int64_t kind = 0; kind < 4; ++kind)
    for (ScalarType t : kAll)
      for (int dim = 0; dim < 3; ++dim)
        for (Dims xs : {dims({1, 7, 3}), dims({9, 8, 7}), dims({64, 40, 3}), dims({3, 200, 90})}) {
          Dims is = xs, ss = xs;
          for (int d = 0; d < 3; ++d) {
            is[d] = d == dim ? 2 * xs[d] + 1 : std::uniform_int_distribution<int64_t>(1, xs[d])(rng);
            ss[d] = is[d] + (d == 2 ? 1 : 0);
          }
          Data x = random_data(t, xs), idx = indices(is, xs[dim]), src = random_data(t, ss);
          expect_same(Op::ScatterReduce, t, xs, attrs({dim, kind}), {&x, &idx, &src});
        }
}

// Many float updates of few slots: bits depend on the order of the sums.
TEST(Library, ScatterAddKeepsSumOrderWhenParallel) {
  for (int dim = 0; dim < 2; ++dim) {
    Dims xs = dim == 0 ? dims({3, 50000}) : dims({50000, 3});
    Dims is = dim == 0 ? dims({40, 50000}) : dims({50000, 40});
    Data x = random_data(ScalarType::Float, xs), idx = indices(is, 3), src = random_data(ScalarType::Float, is);
    expect_same(Op::ScatterAdd, ScalarType::Float, xs, attrs({dim}), {&x, &idx, &src});
  }
  Data x = random_data(ScalarType::Int, dims({5}), INT32_MAX - 5, INT32_MAX), idx = indices(dims({100}), 5),
       src = random_data(ScalarType::Int, dims({100}), INT32_MAX - 5, INT32_MAX);
  expect_same(Op::ScatterAdd, ScalarType::Int, dims({5}), attrs({0}), {&x, &idx, &src});  // wraps
}

TEST(Library, ScatterStridedWritesTheView) {
  struct Case {
    Dims base, value;
    Attrs attr;
  };
  const Case cases[] = {
      {dims({20, 30}), dims({7, 5}), attrs({60, 2, 3})},         // every other row and column
      {dims({20, 30}), dims({30, 20}), attrs({1, 30, 0})},       // transposed: the whole base
      {dims({10}), dims({4, 3}), attrs({0, 1, 2})},              // stride 0: last write wins
      {dims({10}), dims({4, 3}), attrs({1, 1, 0})},              // overlapping windows
      {dims({7}), dims({}), attrs({4})},                         // a 0-d value
      {dims({1, 1}), dims({1, 1}), attrs({1, 1, 0})},
      {dims({600, 700}), dims({300, 350}), attrs({1400, 2, 1})}, // large, parallel
      {dims({63, 65}), dims({65, 63}), attrs({1, 65, 0})},
  };
  for (ScalarType t : kAll)
    for (const Case& c : cases) {
      Data base = random_data(t, c.base), value = random_data(t, c.value);
      expect_same(Op::ScatterStrided, t, c.base, c.attr, {&base, &value});
    }
}

TEST(Library, ScatterStridedInPlace) {
  Data base = random_data(ScalarType::Double, dims({20, 30})), value = random_data(ScalarType::Double, dims({7, 5}));
  Result want = run_reference(Op::ScatterStrided, ScalarType::Double, base.shape, attrs({60, 2, 3}), {&base, &value});
  loom::ir::LibraryCall call{Op::ScatterStrided, 0, {}, 0, ScalarType::Double, base.shape, {}, {}, attrs({60, 2, 3})};
  cpu::View ins[] = {base.view(), value.view()};
  cpu::run_library(call, ins, base.view(), {});
  EXPECT_TRUE(base.same_bits(want.out));
}

TEST(Library, BadIndexThrows) {
  for (int64_t bad : {int64_t{-1}, int64_t{3}, int64_t{7}, INT64_MIN}) {
    for (int64_t n : {int64_t{5}, int64_t{100000}}) {  // sequential and parallel paths
      Data x = random_data(ScalarType::Float, dims({3, n})), idx = indices(dims({3, n}), 3);
      idx.as<int64_t>()[n + 2] = bad;
      idx.as<int64_t>()[2 * n + 1] = 1000 + n;  // a later bad index: not the one named
      Data src = random_data(ScalarType::Float, dims({3, n}));
      Result want = run_reference(Op::Gather, ScalarType::Float, idx.shape, attrs({0}), {&x, &idx});
      Result got = run_library(Op::Gather, ScalarType::Float, idx.shape, attrs({0}), {&x, &idx});
      ASSERT_FALSE(want.error.empty());
      EXPECT_EQ(got.error, want.error);
      EXPECT_EQ(got.error, "index " + std::to_string(bad) + " is out of bounds for dimension of size 3");
      expect_same(Op::ScatterAdd, ScalarType::Float, x.shape, attrs({0}), {&x, &idx, &src});
    }
    Data x = random_data(ScalarType::Int, dims({3, 4})), idx = indices(dims({5}), 3);
    idx.as<int64_t>()[1] = bad;
    Result got = run_library(Op::IndexSelect, ScalarType::Int, dims({5, 4}), attrs({0}), {&x, &idx});
    EXPECT_EQ(got.error, "index " + std::to_string(bad) + " is out of bounds for dimension of size 3");
    expect_same(Op::IndexSelect, ScalarType::Int, dims({5, 4}), attrs({0}), {&x, &idx});
  }
}

// Values with many ties (and, for floating types, NaN, -0.0 and 0.0) in
// every dtype, bfloat16 included.
Data tied_data(ScalarType t, Dims s) {
  Data d(t, s);
  std::uniform_int_distribution<int> pick(0, 8);
  ref::dispatch_dtype(t, [&]<class T>() {
    for (int64_t i = 0; i < s.numel(); ++i) {
      const int k = pick(rng);
      if constexpr (std::is_same_v<T, bool>) d.as<T>()[i] = k % 2 != 0;
      else if constexpr (std::is_integral_v<T>) d.as<T>()[i] = static_cast<T>(k - 4);
      else if (k == 8) d.as<T>()[i] = static_cast<T>(std::nanf(""));
      else if (k == 7) d.as<T>()[i] = static_cast<T>(-0.0f);
      else d.as<T>()[i] = static_cast<T>((k - 3) * 0.5f);
    }
  });
  return d;
}

TEST(Library, ArgSortIsTheStableSortAlongEachDim) {
  std::vector<ScalarType> all(std::begin(kAll), std::end(kAll));
  all.push_back(ScalarType::BFloat16);
  for (ScalarType t : all)
    for (Dims xs : {dims({4, 5, 6}), dims({1, 1, 1}), dims({3, 0, 2}), dims({2, 3000, 1}), dims({300, 2, 70})})
      for (int dim = 0; dim < 3; ++dim)
        for (int descending : {0, 1}) {
          Data x = tied_data(t, xs);
          expect_same(Op::ArgSort, ScalarType::Long, xs, attrs({dim, descending}), {&x});
        }
  Data one = tied_data(ScalarType::Float, dims({}));
  expect_same(Op::ArgSort, ScalarType::Long, dims({}), attrs({0, 1}), {&one});
}

// Sums and products (float in double, bfloat16 in float, integers
// wrapping), cummax / cummin positions with ties and NaN.
TEST(Library, ScanAlongEachDim) {
  std::vector<ScalarType> all(std::begin(kAll), std::end(kAll));
  all.push_back(ScalarType::BFloat16);
  for (ScalarType t : all)
    for (Dims xs : {dims({4, 5, 6}), dims({1, 1, 1}), dims({3, 0, 2}), dims({2, 3000, 1}), dims({300, 2, 70})})
      for (int dim = 0; dim < 3; ++dim)
        for (int64_t kind = 0; kind < 4; ++kind) {
          Data x = kind < 2 && t != ScalarType::Bool ? random_data(t, xs, -3, 3) : tied_data(t, xs);
          expect_same(Op::Scan, kind < 2 ? t : ScalarType::Long, xs, attrs({dim, kind}), {&x});
        }
  Data one = tied_data(ScalarType::Double, dims({}));
  expect_same(Op::Scan, ScalarType::Double, dims({}), attrs({0, 0}), {&one});
  Data wraps = random_data(ScalarType::Int, dims({50}), INT32_MAX - 5, INT32_MAX);
  expect_same(Op::Scan, ScalarType::Int, dims({50}), attrs({0, 1}), {&wraps});
}

TEST(Library, RandomNumbersAreBitIdentical) {
  for (Op op : {Op::RandUniform, Op::RandNormal})
    for (ScalarType t : kAll)
      for (int64_t n : {0, 1, 7, 1000, 100003})
        for (auto [seed, offset] : {std::pair<int64_t, int64_t>{0, 0}, {42, 12345}, {-1, (int64_t{1} << 40) + 3}}) {
          RtScalar s0{static_cast<double>(seed), seed}, s1{static_cast<double>(offset), offset};
          expect_same(op, t, dims({n}), {}, {}, {s0, s1});
        }
}

TEST(Library, LinspaceIsBitIdentical) {
  const std::pair<double, double> ends[] = {{0, 1}, {-3.5, 7.25}, {10, -10}, {0.1, 0.7}, {-1e6, 3}, {5, 5}};
  for (ScalarType t : kAll)
    for (int64_t n : {0, 1, 2, 7, 63, 64, 65, 1000, 100001})
      for (auto [a, b] : ends) {
        RtScalar s0{a, static_cast<int64_t>(a)}, s1{b, static_cast<int64_t>(b)};
        expect_same(Op::Linspace, t, dims({n}), {}, {}, {s0, s1});
      }
}

const int64_t kShapes[][4] = {{1, 1, 1, 1},   {1, 7, 63, 65},  {3, 65, 7, 63},    {2, 100, 300, 129}, {1, 1000, 17, 3},
                              {5, 33, 513, 31}, {1, 1, 1000, 1}, {1, 130, 260, 2100}, {4, 2, 0, 3},      {2, 0, 5, 3}};

TEST(Library, MatMulExactTypes) {
  for (auto& s : kShapes) {
    Dims as = dims({s[0], s[1], s[2]}), bs = dims({s[0], s[2], s[3]}), os = dims({s[0], s[1], s[3]});
    for (ScalarType t : {ScalarType::Bool, ScalarType::Int, ScalarType::Long}) {
      // Large integers: the products and sums wrap around.
      Data a = random_data(t, as, -(int64_t{1} << 31), int64_t{1} << 31), b = random_data(t, bs, -(int64_t{1} << 31), int64_t{1} << 31);
      expect_same(Op::MatMul, t, os, {}, {&a, &b});
    }
  }
}

// A product of two matrices ([M,K] x [K,N], what mm records) is the same
// product as the batch of one, bit for bit, and the reference agrees on the
// 2-D form too. (Floating-point products are GEMM kernels: tests/gemm_test.cpp.)
TEST(Library, MatMulOfTwoMatricesIsTheBatchOfOne) {
  for (auto [M, K, N] : {std::array<int64_t, 3>{1, 64, 64}, {3, 5, 7}, {1, 64, 65}, {40, 300, 70}}) {
    for (ScalarType t : {ScalarType::Int, ScalarType::Long}) {
      Data a3 = random_data(t, dims({1, M, K})), b3 = random_data(t, dims({1, K, N}));
      Data a2(t, dims({M, K})), b2(t, dims({K, N}));
      a2.bytes = a3.bytes;
      b2.bytes = b3.bytes;
      Result r3 = run_library(Op::MatMul, t, dims({1, M, N}), {}, {&a3, &b3});
      Result r2 = run_library(Op::MatMul, t, dims({M, N}), {}, {&a2, &b2});
      ASSERT_EQ(r2.error, "");
      Data flat(t, dims({1, M, N}));
      flat.bytes = r2.out.bytes;
      EXPECT_TRUE(flat.same_bits(r3.out)) << M << "x" << K << "x" << N;
      Result ref2 = run_reference(Op::MatMul, t, dims({M, N}), {}, {&a2, &b2});
      Result ref3 = run_reference(Op::MatMul, t, dims({1, M, N}), {}, {&a3, &b3});
      Data ref_flat(t, dims({1, M, N}));
      ref_flat.bytes = ref2.out.bytes;
      EXPECT_TRUE(ref_flat.same_bits(ref3.out)) << M << "x" << K << "x" << N;
    }
  }
}

}  // namespace
