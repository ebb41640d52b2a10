// The narrow integer dtypes (uint8, int8, int16) beside the others:
// torch.promote_types' whole table over loom's ten dtypes, wrap-around
// arithmetic, uint8's unsigned order, casts (a float is truncated toward
// zero, then wrapped), reductions (sum and prod widen to int64), and the
// API around them (item, data_ptr, from_blob, printing, save and load).
#include <cmath>
#include <cstdio>
#include <sstream>

#include "test_util.h"

namespace {

using loom::ScalarType;
using loom::Tensor;
using loom_test::BackendTest;
using V = std::vector<double>;
using loom::kBFloat16, loom::kBool, loom::kByte, loom::kChar, loom::kDouble, loom::kFloat, loom::kHalf, loom::kInt,
    loom::kLong, loom::kShort;

TEST(SmallDtypes, PromoteTypesIsPyTorchsTable) {
  // torch.promote_types(row, column), as PyTorch prints it.
  constexpr ScalarType order[] = {kBool, kByte, kChar, kShort, kInt, kLong, kHalf, kFloat, kDouble, kBFloat16};
  constexpr ScalarType b = kBool, u8 = kByte, i8 = kChar, i16 = kShort, i32 = kInt, i64 = kLong, f16 = kHalf,
                       f32 = kFloat, f64 = kDouble, bf = kBFloat16;
  constexpr ScalarType table[10][10] = {
      /* b    */ {b, u8, i8, i16, i32, i64, f16, f32, f64, bf},
      /* u8   */ {u8, u8, i16, i16, i32, i64, f16, f32, f64, bf},
      /* i8   */ {i8, i16, i8, i16, i32, i64, f16, f32, f64, bf},
      /* i16  */ {i16, i16, i16, i16, i32, i64, f16, f32, f64, bf},
      /* i32  */ {i32, i32, i32, i32, i32, i64, f16, f32, f64, bf},
      /* i64  */ {i64, i64, i64, i64, i64, i64, f16, f32, f64, bf},
      /* f16  */ {f16, f16, f16, f16, f16, f16, f16, f32, f64, f32},
      /* f32  */ {f32, f32, f32, f32, f32, f32, f32, f32, f64, f32},
      /* f64  */ {f64, f64, f64, f64, f64, f64, f64, f64, f64, f64},
      /* bf16 */ {bf, bf, bf, bf, bf, bf, f32, f32, f64, bf},
  };
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 10; ++c)
      EXPECT_EQ(loom::promote_types(order[r], order[c]), table[r][c]) << order[r] << " and " << order[c];
}

TEST(SmallDtypes, NamesSizesAndKinds) {
  EXPECT_EQ(std::string(loom::to_string(kByte)), "Byte");
  EXPECT_EQ(std::string(loom::to_string(kChar)), "Char");
  EXPECT_EQ(std::string(loom::to_string(kShort)), "Short");
  EXPECT_EQ(loom::kUInt8, kByte);
  EXPECT_EQ(loom::kU8, kByte);
  EXPECT_EQ(loom::kInt8, kChar);
  EXPECT_EQ(loom::kI8, kChar);
  EXPECT_EQ(loom::kInt16, kShort);
  EXPECT_EQ(loom::kI16, kShort);
  EXPECT_EQ(loom::element_size(kByte), 1u);
  EXPECT_EQ(loom::element_size(kChar), 1u);
  EXPECT_EQ(loom::element_size(kShort), 2u);
  for (ScalarType t : {kByte, kChar, kShort}) {
    EXPECT_TRUE(loom::is_integral(t));
    EXPECT_FALSE(loom::is_floating_point(t));
  }
  EXPECT_EQ(loom::dtype_of<uint8_t>, kByte);
  EXPECT_EQ(loom::dtype_of<int8_t>, kChar);
  EXPECT_EQ(loom::dtype_of<int16_t>, kShort);
  EXPECT_EQ(loom::dtype_of<loom::Half>, kHalf);
}

class SmallDtypesTest : public BackendTest {};

Tensor of(const V& v, ScalarType t) { return loom::tensor(v, loom::TensorOptions(t)); }

// The value a wrapped result has: v modulo 2^bits, in the type's range.
double wrap(double v, int bits, bool is_signed) {
  const double m = std::ldexp(1.0, bits);
  double r = std::fmod(v, m);
  if (r < 0) r += m;
  return is_signed && r >= m / 2 ? r - m : r;
}

TEST_P(SmallDtypesTest, ArithmeticWraps) {
  struct Case {
    ScalarType t;
    int bits;
    bool is_signed;
    V a, b;
  };
  const Case cases[] = {{kByte, 8, false, {200, 10, 255, 16, 0}, {100, 20, 1, 16, 255}},
                        {kChar, 8, true, {100, -128, 127, -100, 16}, {100, -1, 1, -100, 16}},
                        {kShort, 16, true, {30000, -32768, 32767, 300, -2}, {30000, -1, 1, 300, 3}}};
  for (const Case& c : cases) {
    Tensor a = of(c.a, c.t), b = of(c.b, c.t);
    V add, sub, mul, neg;
    for (size_t i = 0; i < c.a.size(); ++i) {
      add.push_back(wrap(c.a[i] + c.b[i], c.bits, c.is_signed));
      sub.push_back(wrap(c.a[i] - c.b[i], c.bits, c.is_signed));
      mul.push_back(wrap(c.a[i] * c.b[i], c.bits, c.is_signed));
      neg.push_back(wrap(-c.a[i], c.bits, c.is_signed));
    }
    EXPECT_EQ((a + b).dtype(), c.t);
    EXPECT_EQ((a + b).to_vector<double>(), add) << c.t;
    EXPECT_EQ((a - b).to_vector<double>(), sub) << c.t;
    EXPECT_EQ((a * b).to_vector<double>(), mul) << c.t;
    if (c.is_signed) EXPECT_EQ((-a).to_vector<double>(), neg) << c.t;
    // A Python number of the same category does not widen the tensor: it
    // is converted to the tensor's dtype (1000 wraps).
    V plus;
    for (double v : c.a) plus.push_back(wrap(v + wrap(1000, c.bits, c.is_signed), c.bits, c.is_signed));
    EXPECT_EQ((a + 1000).dtype(), c.t);
    EXPECT_EQ((a + 1000).to_vector<double>(), plus) << c.t;
    EXPECT_EQ((a * 1.5).dtype(), kFloat);
  }
  EXPECT_EQ((of({200}, kByte) + of({100}, kByte)).item<int64_t>(), 44);
}

TEST_P(SmallDtypesTest, MixedDtypesPromote) {
  Tensor u = of({200, 3}, kByte), s = of({-100, 5}, kChar), h = of({30000, 7}, kShort);
  Tensor us = u + s;
  EXPECT_EQ(us.dtype(), kShort);
  EXPECT_EQ(us.to_vector<double>(), (V{100, 8}));  // 200 and -100 both fit int16
  EXPECT_EQ((u + h).dtype(), kShort);
  EXPECT_EQ((u * h).to_vector<double>(), (V{wrap(200.0 * 30000, 16, true), 21}));
  EXPECT_EQ((s + of({1, 1}, kInt)).dtype(), kInt);
  EXPECT_EQ((u + of({true, false}, kBool)).dtype(), kByte);
  EXPECT_EQ((s + of({0.5, 0.5}, kHalf)).dtype(), kHalf);
  EXPECT_EQ((s + of({0.5, 0.5}, kHalf)).to_vector<double>(), (V{-99.5, 5.5}));
  // A zero-dim tensor of the same category does not widen; a floating one does.
  EXPECT_EQ((s + loom::tensor(int64_t{1000})).dtype(), kChar);
  EXPECT_EQ((u + loom::tensor(2.0, loom::TensorOptions(kDouble))).dtype(), kDouble);
  EXPECT_EQ((u / 2).dtype(), kFloat);
  EXPECT_EQ((u / 2).to_vector<double>(), (V{100, 1.5}));
}

// uint8 is unsigned: 200 > 100, its max is 255 and its min 0; int8's order
// is signed.
TEST_P(SmallDtypesTest, OrderComparisonsAndExtremes) {
  Tensor u = of({200, 100, 0, 255, 128}, kByte);
  EXPECT_EQ((u > 127).to_vector<double>(), (V{1, 0, 0, 1, 1}));
  EXPECT_EQ((u > 127).dtype(), kBool);
  EXPECT_EQ(u.lt(of({100, 200, 1, 0, 127}, kByte)).to_vector<double>(), (V{0, 1, 1, 0, 0}));
  EXPECT_EQ(u.max().item<int64_t>(), 255);
  EXPECT_EQ(u.min().item<int64_t>(), 0);
  EXPECT_EQ(u.argmax().item<int64_t>(), 3);
  EXPECT_EQ(u.argmin().item<int64_t>(), 2);
  EXPECT_EQ(loom::maximum(u, of({201, 0, 0, 0, 0}, kByte)).to_vector<double>(), (V{201, 100, 0, 255, 128}));
  EXPECT_EQ(u.abs().to_vector<double>(), (V{200, 100, 0, 255, 128}));
  EXPECT_EQ(u.sign().to_vector<double>(), (V{1, 1, 0, 1, 1}));
  EXPECT_EQ(u.relu().to_vector<double>(), (V{200, 100, 0, 255, 128}));
  Tensor s = of({-128, 127, -1, 0, 5}, kChar);
  EXPECT_EQ(s.max().item<int64_t>(), 127);
  EXPECT_EQ(s.min().item<int64_t>(), -128);
  EXPECT_EQ(s.abs().to_vector<double>(), (V{-128, 127, 1, 0, 5}));  // |-128| wraps, as PyTorch's
  EXPECT_EQ(s.relu().to_vector<double>(), (V{0, 127, 0, 0, 5}));
  EXPECT_EQ(s.sign().to_vector<double>(), (V{-1, 1, -1, 0, 1}));
  EXPECT_EQ((s >= 0).to_vector<double>(), (V{0, 1, 0, 1, 1}));
  Tensor h = of({-32768, 32767, 7}, kShort);
  EXPECT_EQ(h.amax({0}, false).item<int64_t>(), 32767);
  EXPECT_EQ(h.amin({0}, false).item<int64_t>(), -32768);
  EXPECT_EQ(loom::where(h > 0, h, of({1, 2, 3}, kShort)).to_vector<double>(), (V{1, 32767, 7}));
}

// Division's remainders (Python's % and C's fmod), powers (wrapping), and
// a zero divisor failing as int32's does.
TEST_P(SmallDtypesTest, RemaindersAndPowers) {
  Tensor u = of({250, 7, 255}, kByte), d = of({7, 255, 16}, kByte);
  EXPECT_EQ(u.remainder(d).to_vector<double>(), (V{250 % 7, 7, 255 % 16}));
  EXPECT_EQ(u.fmod(d).to_vector<double>(), (V{250 % 7, 7, 255 % 16}));
  Tensor s = of({-7, 7, -128}, kChar), e = of({3, -3, -1}, kChar);
  EXPECT_EQ(s.remainder(e).to_vector<double>(), (V{2, -2, 0}));
  EXPECT_EQ(s.fmod(e).to_vector<double>(), (V{-1, 1, 0}));
  EXPECT_EQ(of({3, 3, 2}, kByte).pow(of({5, 6, 8}, kByte)).to_vector<double>(), (V{243, wrap(729, 8, false), 0}));
  EXPECT_EQ(of({2, -3, 2}, kChar).pow(of({7, 3, 6}, kChar)).to_vector<double>(), (V{-128, -27, 64}));
  EXPECT_EQ(of({10, 300}, kShort).pow(of({4, 2}, kShort)).to_vector<double>(), (V{10000, wrap(90000, 16, true)}));
  const std::string msg = loom_test::error_of([&] {
    of({1, 2}, kByte).remainder(of({1, 0}, kByte)).to_vector<double>();
    wait_for_device();
  });
  EXPECT_NE(msg.find("ZeroDivisionError"), std::string::npos) << msg;
}

// A float becomes a narrow integer truncated toward zero, then wrapped
// (as PyTorch's CPU kernels give); integers wrap; uint8 widens unsigned.
TEST_P(SmallDtypesTest, Casts) {
  Tensor f = of({-1.0, 300.7, 2.9, -2.9, 127.9, -129.5, 65535.5}, kFloat);
  V u8, i8, i16;
  for (double v : {-1.0, 300.7, 2.9, -2.9, 127.9, -129.5, 65535.5}) {
    u8.push_back(wrap(std::trunc(v), 8, false));
    i8.push_back(wrap(std::trunc(v), 8, true));
    i16.push_back(wrap(std::trunc(v), 16, true));
  }
  EXPECT_EQ(f.to(kByte).to_vector<double>(), u8);
  EXPECT_EQ(f.to(kChar).to_vector<double>(), i8);
  EXPECT_EQ(f.to(kShort).to_vector<double>(), i16);
  EXPECT_EQ(f.to(kDouble).to(kByte).to_vector<double>(), u8);
  // Through float16 first: 300.7 is 300.75 there, -129.5 exact.
  EXPECT_EQ(of({-1.0, 300.7, 2.9, -2.9, 127.9, -129.5}, kFloat).to(kHalf).to(kChar).to_vector<double>(), (V{-1, 44, 2, -2, 127, 127}));
  Tensor l = of({257, -1, 40000, -40000}, kLong);
  EXPECT_EQ(l.to(kByte).to_vector<double>(), (V{1, 255, wrap(40000, 8, false), wrap(-40000, 8, false)}));
  EXPECT_EQ(l.to(kShort).to_vector<double>(), (V{257, -1, wrap(40000, 16, true), wrap(-40000, 16, true)}));
  Tensor u = of({255, 128, 0}, kByte);
  EXPECT_EQ(u.to(kLong).to_vector<double>(), (V{255, 128, 0}));
  EXPECT_EQ(u.to(kFloat).to_vector<double>(), (V{255, 128, 0}));
  EXPECT_EQ(u.to(kHalf).to_vector<double>(), (V{255, 128, 0}));
  EXPECT_EQ(u.to(kChar).to_vector<double>(), (V{-1, -128, 0}));
  EXPECT_EQ(of({-1, -128}, kChar).to(kByte).to_vector<double>(), (V{255, 128}));
  EXPECT_EQ(of({-1, -128}, kChar).to(kInt).to_vector<double>(), (V{-1, -128}));
  EXPECT_EQ(u.to(kBool).to_vector<double>(), (V{1, 1, 0}));
  EXPECT_EQ(of({1, 0}, kBool).to(kShort).to_vector<double>(), (V{1, 0}));
  // A fused chain: the cast and arithmetic in one kernel.
  EXPECT_EQ((u.to(kShort) * 300).to_vector<double>(), (V{wrap(255.0 * 300, 16, true), wrap(128.0 * 300, 16, true), 0}));
}

// sum and prod of a narrow integer tensor are int64 (torch.sum's rule), so
// they do not wrap; max and min keep the dtype; mean needs a float.
TEST_P(SmallDtypesTest, Reductions) {
  V vals(300);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<double>(200 + i % 50);
  Tensor u = of(vals, kByte).view({3, 100});
  double total = 0;
  for (double v : vals) total += v;
  EXPECT_EQ(u.sum().dtype(), kLong);
  EXPECT_EQ(u.sum().item<int64_t>(), static_cast<int64_t>(total));
  V rows(3, 0.0);
  for (size_t i = 0; i < vals.size(); ++i) rows[i / 100] += vals[i];
  EXPECT_EQ(u.sum({1}).to_vector<double>(), rows);
  Tensor s = of({-100, -100, -100, 50}, kChar);
  EXPECT_EQ(s.sum().item<int64_t>(), -250);
  EXPECT_EQ(s.prod().dtype(), kLong);
  EXPECT_EQ(s.prod().item<int64_t>(), -50000000);
  EXPECT_EQ(of({30000, 30000}, kShort).sum().item<int64_t>(), 60000);
  EXPECT_EQ(u.amax({1}, false).dtype(), kByte);
  EXPECT_EQ(u.amax({1}, false).to_vector<double>(), (V{249, 249, 249}));
  EXPECT_LOOM_ERROR(u.mean(), "mean", "floating point");
  EXPECT_EQ(u.to(kFloat).mean().item<double>(), total / 300);
}

TEST_P(SmallDtypesTest, MatmulWraps) {
  Tensor a = of({100, 2, 3, 4}, kChar).view({2, 2}), b = of({2, 0, 1, 1}, kChar).view({2, 2});
  if (on_gpu()) {  // no narrow-integer library kernels on the GPU yet (api/README.md): a clear error
    const std::string msg = loom_test::error_of([&] { (void)a.matmul(b).to_vector<double>(); });
    EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
    EXPECT_NE(msg.find("has no Char library kernel on the GPU"), std::string::npos) << msg;
    return;
  }
  Tensor c = a.matmul(b);
  EXPECT_EQ(c.dtype(), kChar);
  EXPECT_EQ(c.to_vector<double>(), (V{wrap(202, 8, true), 2, 10, 4}));
  Tensor u = of({200, 1, 1, 1}, kByte).view({2, 2});
  EXPECT_EQ(u.matmul(u).to_vector<double>(), (V{wrap(40001, 8, false), 201, 201, 2}));
}

TEST_P(SmallDtypesTest, ElementAccessPrintingAndFiles) {
  Tensor u = loom::tensor({250, 3, 7}, loom::TensorOptions(kByte));
  EXPECT_EQ(u[0].item<uint8_t>(), 250);
  EXPECT_EQ(u[0].item().toLong(), 250);
  Tensor c = u.cpu();
  EXPECT_EQ(c.data_ptr<uint8_t>()[1], 3);
  EXPECT_LOOM_ERROR(c.data_ptr<int8_t>(), "data_ptr", "Char");
  int16_t raw[4] = {-300, 2, 3, 30000};
  Tensor h = loom::from_blob(raw, {2, 2}, loom::TensorOptions(kShort));
  EXPECT_EQ(h.dtype(), kShort);
  EXPECT_EQ((h * 2).to_vector<double>(), (V{-600, 4, 6, wrap(60000, 16, true)}));
  EXPECT_EQ(loom::tensor({-5, 6}, loom::TensorOptions(kChar)).to_vector<int8_t>(), (std::vector<int8_t>{-5, 6}));
  std::ostringstream os;
  os << c;
  EXPECT_NE(os.str().find("[ CPUByteType{3} ]"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("250"), std::string::npos) << os.str();
  std::ostringstream hs;
  hs << loom::tensor({1.5, -2.0}, loom::TensorOptions(kHalf));
  EXPECT_NE(hs.str().find(on_gpu() ? "CUDAHalfType{2}" : "CPUHalfType{2}"), std::string::npos) << hs.str();

  const std::string path = ::testing::TempDir() + "small_dtypes_" + GetParam() + ".pt";
  std::vector<Tensor> saved = {u, h.to(kChar), loom::tensor({0.1, 70000.0}, loom::TensorOptions(kHalf))};
  loom::save(saved, path);
  std::vector<Tensor> back(3);
  loom::load(back, path);
  std::remove(path.c_str());
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_EQ(back[i].dtype(), saved[i].dtype());
    EXPECT_EQ(back[i].to_vector<double>(), saved[i].to_vector<double>());
  }
}

LOOM_INSTANTIATE_BACKENDS(SmallDtypesTest);

}  // namespace
