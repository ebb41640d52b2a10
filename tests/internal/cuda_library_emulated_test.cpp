// The CUDA library kernels' arithmetic without a GPU: library_kernels.cu is
// compiled here as host C++ against cuda_emulation.h, each call is planned
// by plan_library and its launches emulated, and the result must equal
// kernels/cpu's run_library bit for bit (float matmul, which is a generated
// GEMM kernel on the CPU and no library kernel: within a tolerance of a
// float64 product computed here). Index errors must set the error block
// instead. This checks the kernels' index math, meta reading and dtype
// handling; the GPU tests check the same kernels on a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulation.h"
#include "ir/philox.h"
#include "kernels/cpu/library.h"
#include "kernels/cuda/library.h"
#include "kernels/cuda/meta_layout.h"
// The kernels themselves, as host code (see cuda_emulation.h).
#include "kernels/cuda/bfloat16.cuh"
#include "kernels/cuda/library_kernels.cu"

namespace {

using loom::ScalarType;
using loom::ir::Attrs;
using loom::ir::Dims;
using loom::ir::Op;
using loom::ir::RtScalar;
namespace cpu = loom::kernels::cpu;
namespace cuda = loom::kernels::cuda;

constexpr ScalarType kAll[] = {ScalarType::Bool, ScalarType::Int, ScalarType::Long, ScalarType::Float,
                               ScalarType::Double};
// With bfloat16 and float16, which have only some typed kernels (data movement, scatter_add, scatter_reduce, linspace, argsort, scan).
constexpr ScalarType kAllAndBf16[] = {ScalarType::Bool,   ScalarType::Int,      ScalarType::Long, ScalarType::Float,
                                      ScalarType::Double, ScalarType::BFloat16, ScalarType::Half};

Dims dims(std::initializer_list<int64_t> v) { return Dims(v.begin(), v.size()); }
Attrs attrs(std::initializer_list<int64_t> v) { return Attrs(v.begin(), v.size()); }

const std::map<std::string, EmulatedKernel>& kernels() {
#define LOOM_KERNEL(name) {#name, &cuda::name}
#define LOOM_TYPED(s)                                                                                \
  LOOM_KERNEL(loom_matmul_##s), LOOM_KERNEL(loom_scatter_add_##s), LOOM_KERNEL(loom_scatter_reduce_##s),        \
      LOOM_KERNEL(loom_linspace_##s), LOOM_KERNEL(loom_rand_uniform_##s), LOOM_KERNEL(loom_rand_normal_##s), \
      LOOM_KERNEL(loom_argsort_##s), LOOM_KERNEL(loom_scan_##s)
  static const std::map<std::string, EmulatedKernel> all = {
      LOOM_KERNEL(loom_copy_2d), LOOM_KERNEL(loom_index_select), LOOM_KERNEL(loom_gather),
      LOOM_KERNEL(loom_scatter_strided), LOOM_KERNEL(loom_check_index), LOOM_TYPED(b8), LOOM_TYPED(i32), LOOM_TYPED(i64), LOOM_TYPED(f32),
      LOOM_TYPED(f64), LOOM_KERNEL(loom_scatter_add_bf16), LOOM_KERNEL(loom_scatter_reduce_bf16),
      LOOM_KERNEL(loom_linspace_bf16), LOOM_KERNEL(loom_argsort_bf16), LOOM_KERNEL(loom_scan_bf16),
      LOOM_KERNEL(loom_scatter_add_f16), LOOM_KERNEL(loom_scatter_reduce_f16), LOOM_KERNEL(loom_linspace_f16),
      LOOM_KERNEL(loom_argsort_f16), LOOM_KERNEL(loom_scan_f16)};
#undef LOOM_TYPED
#undef LOOM_KERNEL
  return all;
}

// A buffer holding a tensor `offset` elements in (a contiguous view of a
// larger buffer), padded to whole 8-byte words as a device allocation is.
struct HostTensor {
  ScalarType dtype;
  Dims shape;
  int64_t offset = 0;
  std::vector<unsigned char> bytes;
  HostTensor(ScalarType t, Dims s, int64_t off = 0) : dtype(t), shape(s), offset(off) {
    bytes.assign(((off + s.numel()) * loom::element_size(t) + 7) / 8 * 8 + 8, 0xAB);
  }
  size_t esize() const { return loom::element_size(dtype); }
  unsigned char* data() { return bytes.data() + offset * esize(); }
  const unsigned char* data() const { return bytes.data() + offset * esize(); }
  template <class T> T* as() { return reinterpret_cast<T*>(data()); }
  bool same_values(const HostTensor& o) const {
    return shape == o.shape && std::memcmp(data(), o.data(), shape.numel() * esize()) == 0;
  }
};

std::mt19937_64 rng(99);

HostTensor random_tensor(ScalarType t, Dims s, int64_t offset = 0) {
  HostTensor h(t, s, offset);
  std::uniform_real_distribution<double> reals(-1, 1);
  for (int64_t i = 0; i < s.numel(); ++i) {
    const int64_t v = static_cast<int64_t>(rng() % 2001) - 1000;
    switch (t) {
      case ScalarType::Bool: h.as<uint8_t>()[i] = rng() & 1; break;
      case ScalarType::Int: h.as<int32_t>()[i] = static_cast<int32_t>(v * 2000003); break;  // wraps in products
      case ScalarType::Long: h.as<int64_t>()[i] = v * 4000000000037; break;
      case ScalarType::Float: h.as<float>()[i] = static_cast<float>(reals(rng)); break;
      case ScalarType::Double: h.as<double>()[i] = reals(rng); break;
      case ScalarType::BFloat16: h.as<loom::BFloat16>()[i] = loom::BFloat16(static_cast<float>(reals(rng))); break;
      case ScalarType::Half: h.as<loom::Half>()[i] = loom::Half(static_cast<float>(reals(rng))); break;
      case ScalarType::Byte: h.as<uint8_t>()[i] = static_cast<uint8_t>(v); break;
      case ScalarType::Char: h.as<int8_t>()[i] = static_cast<int8_t>(v); break;
      case ScalarType::Short: h.as<int16_t>()[i] = static_cast<int16_t>(v); break;
    }
  }
  return h;
}

HostTensor index_tensor(Dims s, int64_t size, int64_t offset = 0) {
  HostTensor h(ScalarType::Long, s, offset);
  for (int64_t i = 0; i < s.numel(); ++i) h.as<int64_t>()[i] = static_cast<int64_t>(rng() % size);
  return h;
}

struct Outcome {
  HostTensor out;
  bool index_error = false;
};

// One library call over `inputs` (buffer ids 0..), output the next id; its
// two scalars at scalar_begin 3, after three unrelated ones.
struct Call {
  loom::ir::LibraryCall call;
  loom::ir::KernelProgram program;
  std::vector<RtScalar> scalars;

  Call(Op op, ScalarType t, Dims out, const std::vector<HostTensor>& inputs, Attrs attr, RtScalar s0 = {},
       RtScalar s1 = {}) {
    for (uint32_t i = 0; i < inputs.size(); ++i) {
      const HostTensor& in = inputs[i];
      program.buffers.push_back({loom::ir::BufferKind::Input, i, in.dtype, in.offset + in.shape.numel()});
      call.inputs.push_back(i);
      call.input_offsets.push_back(in.offset);
      call.input_shapes.push_back(in.shape);
      call.input_dtypes.push_back(in.dtype);
    }
    program.buffers.push_back({loom::ir::BufferKind::Output, 0, t, out.numel()});
    call.op = op;
    call.node = 5;
    call.output = static_cast<uint32_t>(inputs.size());
    call.dtype = t;
    call.shape = out;
    call.attr = attr;
    call.scalar_begin = 3;
    call.num_scalars = 2;
    scalars = {{1.5, 1}, {2.5, 2}, {3.5, 3}, s0, s1};
  }

  Outcome on_cpu(std::vector<HostTensor> inputs) const {
    std::vector<cpu::View> views;
    for (HostTensor& in : inputs) views.push_back({in.data(), in.dtype, in.shape});
    Outcome r{HostTensor(call.dtype, call.shape)};
    try {
      cpu::run_library(call, views, {r.out.data(), call.dtype, call.shape},
                       std::span(scalars).subspan(call.scalar_begin, call.num_scalars));
    } catch (const cpu::LibraryError&) {
      r.index_error = true;
    }
    return r;
  }

  // `in_place`: the output is bound to input 0's memory, as the executor
  // does when it donates a scatter's base.
  Outcome emulated(std::vector<HostTensor> inputs, bool in_place = false) const {
    std::vector<void*> bufs;
    for (HostTensor& in : inputs) bufs.push_back(in.bytes.data());
    Outcome r{HostTensor(call.dtype, call.shape)};
    bufs.push_back(in_place ? inputs[0].bytes.data() : r.out.bytes.data());
    std::vector<double> fs;
    std::vector<long long> is;
    for (const RtScalar& s : scalars) fs.push_back(s.f), is.push_back(s.i);
    long long err[2] = {0, -1};
    for (const cuda::Launch& l : cuda::plan_library(call, program, 0)) {
      EmulatedKernel fn = kernels().at(l.function);
      emulate_launch(fn, l.grid, l.block, l.function.starts_with("loom_matmul_") || l.function.starts_with("loom_argsort_"), bufs.data(), fs.data(), is.data(),
                     err, reinterpret_cast<const long long*>(l.meta.data()));
    }
    if (in_place) std::memcpy(r.out.data(), inputs[0].data(), call.shape.numel() * r.out.esize());
    if (err[0] != 0) {
      EXPECT_EQ(err[0], cuda::meta_layout::kIndexOutOfRange);
      EXPECT_EQ(err[1], call.node);
      r.index_error = true;
    }
    return r;
  }
};

// The emulated kernels against the CPU, bit for bit.
void expect_same(const Call& c, const std::vector<HostTensor>& inputs, const std::string& what, bool in_place = false) {
  const Outcome want = c.on_cpu(inputs), got = c.emulated(inputs, in_place);
  ASSERT_EQ(got.index_error, want.index_error) << what;
  if (!want.index_error) EXPECT_TRUE(got.out.same_values(want.out)) << what;
}

std::string name(ScalarType t) { return std::string(loom::to_string(t)); }

TEST(CudaLibraryEmulated, ToDeviceAndConcat) {
  for (ScalarType t : kAll) {
    std::vector<HostTensor> one{random_tensor(t, dims({37}), 3)};
    expect_same(Call(Op::ToDevice, t, dims({37}), one, {}), one, "to_device " + name(t));
    for (int dim = 0; dim < 3; ++dim) {
      Dims a = dims({2, 3, 4}), b = a, e = a, out = a;
      b[dim] = 5;
      e[dim] = 0;
      out[dim] = a[dim] + b[dim];
      std::vector<HostTensor> ins{random_tensor(t, a), random_tensor(t, e), random_tensor(t, b, 7)};
      expect_same(Call(Op::Concat, t, out, ins, attrs({dim})), ins, "cat dim " + std::to_string(dim) + " " + name(t));
    }
  }
}

TEST(CudaLibraryEmulated, IndexSelectAndItsIndexErrors) {
  for (ScalarType t : kAll)
    for (int dim = 0; dim < 3; ++dim) {
      const Dims xs = dims({3, 4, 5});
      Dims out = xs;
      out[dim] = 6;
      std::vector<HostTensor> ins{random_tensor(t, xs, 2), index_tensor(dims({6}), xs[dim], 1)};
      const Call c(Op::IndexSelect, t, out, ins, attrs({dim}));
      expect_same(c, ins, "index_select dim " + std::to_string(dim) + " " + name(t));
      ins[1].as<int64_t>()[4] = xs[dim];
      expect_same(c, ins, "index_select past the end");
      ins[1].as<int64_t>()[4] = -1;
      expect_same(c, ins, "index_select negative");
    }
}

TEST(CudaLibraryEmulated, AnEmptyOutputStillChecksItsIndex) {
  const ScalarType f = ScalarType::Float;
  std::vector<HostTensor> sel{random_tensor(f, dims({3, 0})), index_tensor(dims({2}), 3)};
  const Call select(Op::IndexSelect, f, dims({2, 0}), sel, attrs({0}));
  expect_same(select, sel, "index_select into an empty output");
  sel[1].as<int64_t>()[1] = 5;
  expect_same(select, sel, "index_select into an empty output, bad index");
  ASSERT_TRUE(select.emulated(sel).index_error);
  std::vector<HostTensor> add{random_tensor(f, dims({0})), index_tensor(dims({2}), 1), random_tensor(f, dims({2}))};
  const Call scatter(Op::ScatterAdd, f, dims({0}), add, attrs({0}));
  expect_same(scatter, add, "scatter_add into an empty x");
  ASSERT_TRUE(scatter.emulated(add).index_error);
}

TEST(CudaLibraryEmulated, GatherAndScatterAdd) {
  for (ScalarType t : kAllAndBf16)
    for (int dim = 0; dim < 3; ++dim) {
      const Dims xs = dims({4, 5, 6}), is = dims({3, 4, 5}), ss = dims({5, 4, 6});
      const std::string what = " dim " + std::to_string(dim) + " " + name(t);
      std::vector<HostTensor> g{random_tensor(t, xs, 1), index_tensor(is, xs[dim], 3)};
      expect_same(Call(Op::Gather, t, is, g, attrs({dim})), g, "gather" + what);
      std::vector<HostTensor> s{random_tensor(t, xs), index_tensor(is, xs[dim], 2), random_tensor(t, ss, 5)};
      const Call scatter(Op::ScatterAdd, t, xs, s, attrs({dim}));
      expect_same(scatter, s, "scatter_add" + what);
      expect_same(scatter, s, "scatter_add in place" + what, /*in_place=*/true);
      s[1].as<int64_t>()[17] = -3;
      expect_same(scatter, s, "scatter_add bad index" + what);
      g[1].as<int64_t>()[59] = xs[dim];
      expect_same(Call(Op::Gather, t, is, g, attrs({dim})), g, "gather bad index" + what);
    }
  // ScatterReduce: every kind, duplicates along dim, in place, a bad index.
  for (int64_t kind = 0; kind < 4; ++kind)
    for (ScalarType t : kAllAndBf16)
      for (int dim = 0; dim < 3; ++dim) {
        const Dims xs = dims({4, 5, 6});
        Dims isd = xs, ss = xs;
        for (int d = 0; d < 3; ++d) {
          isd[d] = d == dim ? 7 : xs[d] - 1;  // 7 > xs[dim]: duplicates along dim
          ss[d] = isd[d] + 1;
        }
        const std::string what = " kind " + std::to_string(kind) + " dim " + std::to_string(dim) + " " + name(t);
        std::vector<HostTensor> s{random_tensor(t, xs), index_tensor(isd, xs[dim], 2), random_tensor(t, ss, 5)};
        const Call scatter(Op::ScatterReduce, t, xs, s, attrs({dim, kind}));
        expect_same(scatter, s, "scatter_reduce" + what);
        expect_same(scatter, s, "scatter_reduce in place" + what, /*in_place=*/true);
        s[1].as<int64_t>()[17] = -3;
        expect_same(scatter, s, "scatter_reduce bad index" + what);
      }
  // A 0-d index reads (or adds to) element 0, unchecked, as the reference.
  std::vector<HostTensor> g{random_tensor(ScalarType::Float, dims({})), index_tensor(dims({}), 1)};
  g[1].as<int64_t>()[0] = 42;
  expect_same(Call(Op::Gather, ScalarType::Float, dims({}), g, attrs({0})), g, "gather 0-d");
}

TEST(CudaLibraryEmulated, ScatterStridedParallelOverlappingAndInPlace) {
  struct View {
    Dims sizes;
    Attrs strides_and_offset;
  };
  const View views[] = {
      {dims({4, 5}), attrs({10, 1, 3})},   // rows of a wider matrix
      {dims({5, 4}), attrs({1, 10, 2})},   // transposed
      {dims({4, 5}), attrs({2, 1, 0})},    // overlapping rows: the last write wins
      {dims({3, 4}), attrs({0, 1, 8})},    // expanded: every row in one place
      {dims({}), attrs({9})},              // one element
  };
  for (ScalarType t : kAll)
    for (const View& v : views) {
      std::vector<HostTensor> ins{random_tensor(t, dims({50})), random_tensor(t, v.sizes, 4)};
      const Call c(Op::ScatterStrided, t, dims({50}), ins, v.strides_and_offset);
      const std::string what = "scatter_strided offset " + std::to_string(v.strides_and_offset[v.sizes.n]) + " " + name(t);
      expect_same(c, ins, what);
      expect_same(c, ins, what + " in place", /*in_place=*/true);
    }
}

TEST(CudaLibraryEmulated, MatMulEveryDtype) {
  struct Shape {
    int64_t B, M, K, N;
  };
  for (const Shape& s : {Shape{1, 1, 1, 1}, Shape{2, 17, 33, 20}, Shape{3, 5, 0, 4}, Shape{1, 40, 16, 1}})
    for (ScalarType t : kAll) {
      std::vector<HostTensor> ins{random_tensor(t, dims({s.B, s.M, s.K}), 3), random_tensor(t, dims({s.B, s.K, s.N}), 1)};
      const Call c(Op::MatMul, t, dims({s.B, s.M, s.N}), ins, {});
      const std::string what = "matmul " + std::to_string(s.M) + "x" + std::to_string(s.K) + "x" + std::to_string(s.N) +
                               " " + name(t);
      if (!loom::is_floating_point(t)) {
        expect_same(c, ins, what);
        continue;
      }
      Outcome got = c.emulated(ins);
      const double eps = t == ScalarType::Float ? 1.2e-7 : 2.3e-16;
      auto value = [&](HostTensor& h, int64_t i) {
        return t == ScalarType::Float ? static_cast<double>(h.as<float>()[i]) : h.as<double>()[i];
      };
      for (int64_t i = 0; i < s.B * s.M * s.N; ++i) {
        const int64_t bi = i / (s.M * s.N), r = i / s.N % s.M, col = i % s.N;
        double w = 0;
        for (int64_t k = 0; k < s.K; ++k)
          w += value(ins[0], (bi * s.M + r) * s.K + k) * value(ins[1], (bi * s.K + k) * s.N + col);
        const double g = value(got.out, i);
        ASSERT_NEAR(g, w, 4 * eps * (s.K + 1)) << what << " element " << i;
      }
    }
}

// Values with ties, and NaN, -0.0 and 0.0 for floating types.
HostTensor tied_tensor(ScalarType t, Dims s, int64_t offset = 0) {
  HostTensor h(t, s, offset);
  for (int64_t i = 0; i < s.numel(); ++i) {
    const int k = static_cast<int>(rng() % 9);
    const float f = k == 8 ? std::nanf("") : k == 7 ? -0.0f : (k - 3) * 0.5f;
    switch (t) {
      case ScalarType::Bool: h.as<uint8_t>()[i] = k % 2; break;
      case ScalarType::Int: h.as<int32_t>()[i] = k - 4; break;
      case ScalarType::Long: h.as<int64_t>()[i] = k - 4; break;
      case ScalarType::Float: h.as<float>()[i] = f; break;
      case ScalarType::Double: h.as<double>()[i] = f; break;
      case ScalarType::BFloat16: h.as<loom::BFloat16>()[i] = loom::BFloat16(f); break;
    }
  }
  return h;
}

// Rows in shared memory (short, one element, a power of two and not) and
// rows longer than the shared tile, sorted in place in global memory.
TEST(CudaLibraryEmulated, ArgSortEveryDtypeAndRowLength) {
  const Dims shapes[] = {dims({3, 5, 4}), dims({2, 1, 3}), dims({1, 64, 1}), dims({1, 2049, 1}), dims({1, 3, 4})};
  for (ScalarType t : kAllAndBf16)
    for (const Dims& xs : shapes)
      for (int dim : {0, 1, 2})
        for (int descending : {0, 1}) {
          // Every dtype on the first shape, float on the others, one long row:
          // emulated, each CUDA thread of a block is a host thread.
          if (xs != shapes[0] && t != ScalarType::Float) continue;
          if (xs[dim] > 2048 && !descending) continue;
          std::vector<HostTensor> ins{tied_tensor(t, xs, 3)};
          const Call c(Op::ArgSort, ScalarType::Long, xs, ins, attrs({dim, descending}));
          expect_same(c, ins, "argsort " + name(t) + " len " + std::to_string(xs[dim]) + " dim " + std::to_string(dim) +
                                  (descending ? " desc" : ""));
        }
  std::vector<HostTensor> one{tied_tensor(ScalarType::Double, dims({}))};
  expect_same(Call(Op::ArgSort, ScalarType::Long, dims({}), one, attrs({0, 0})), one, "argsort 0-d");
}

TEST(CudaLibraryEmulated, ScanEveryDtypeAndKind) {
  const Dims shapes[] = {dims({3, 5, 4}), dims({2, 1, 3}), dims({1, 300, 1}), dims({1, 3, 4})};
  for (ScalarType t : kAllAndBf16)
    for (const Dims& xs : shapes)
      for (int dim : {0, 1, 2})
        for (int64_t kind = 0; kind < 4; ++kind) {
          std::vector<HostTensor> ins{kind < 2 ? random_tensor(t, xs, 2) : tied_tensor(t, xs, 2)};
          const Call c(Op::Scan, kind < 2 ? t : ScalarType::Long, xs, ins, attrs({dim, kind}));
          expect_same(c, ins, "scan kind " + std::to_string(kind) + " " + name(t) + " dim " + std::to_string(dim));
        }
  std::vector<HostTensor> one{random_tensor(ScalarType::Float, dims({}))};
  expect_same(Call(Op::Scan, ScalarType::Float, dims({}), one, attrs({0, 1})), one, "scan 0-d");
}

TEST(CudaLibraryEmulated, LinspaceEveryDtype) {
  const std::pair<RtScalar, RtScalar> ends[] = {
      {{-3.5, -3}, {7.25, 7}}, {{0.1, 0}, {0.7, 1}}, {{10, 10}, {-10, -10}}, {{1e8 + 1, 100000001}, {1e8 + 17, 100000017}}};
  for (ScalarType t : kAllAndBf16)
    for (int64_t n : {1, 2, 3, 10, 101, 1000})
      for (const auto& [s0, s1] : ends) {
        const Call c(Op::Linspace, t, dims({n}), {}, {}, s0, s1);
        expect_same(c, {}, "linspace " + std::to_string(n) + " from " + std::to_string(s0.f) + " " + name(t));
      }
}

TEST(CudaLibraryEmulated, RandomNumbersEqualThePhiloxOfTheCpu) {
  const RtScalar seed{0, 0x1234567890abcdefLL}, offset{0, 1000};
  for (ScalarType t : kAll)
    for (Op op : {Op::RandUniform, Op::RandNormal}) {
      const Call c(op, t, dims({3, 333}), {}, {}, seed, offset);
      expect_same(c, {}, std::string(loom::ir::op_name(op)) + " " + name(t));
    }
  // More elements than threads in the largest grid: the grid-stride loop.
  const Call big(Op::RandUniform, ScalarType::Float, dims({(8192 * 256) + 12345}), {}, {}, seed, offset);
  expect_same(big, {}, "rand_uniform past one grid");
}

}  // namespace
