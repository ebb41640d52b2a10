// Vectorizable math emitters; see math.h for the contract and the measured
// error table.
//
// Technique (as in Cephes, fdlibm, SLEEF and Eigen's vectorized math, written
// anew here): Cody-Waite range reduction with a constant split into parts
// whose products with the reduction integer are exact, then a polynomial on
// the small remainder. Where the Taylor series converges fast on the reduced
// interval (expm1, double exp, log's atanh series, sin, cos) the
// coefficients are 1/k! or 2/(2k+1) and the degree is chosen so the
// truncation error is below 0.05 ulp; erf uses weighted least-squares fits on
// Chebyshev nodes (near-minimax), computed for this file in 90-digit
// arithmetic with mpmath and checked with the coefficients rounded to the
// type; float exp and the expm1 inside float tanh are Remez minimax fits
// (scripts/fit_math.py), two multiplies shorter than their Taylor series. Every branch a scalar libm would take is
// computed for all lanes and chosen with select.
#include "jit/llvm/math.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>

#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace loom::jit::llvm_cpu {
namespace {

using llvm::Value;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Emits arithmetic on one floating-point type (scalar or vector) and the
// integer type of the same shape. Constants are splatted to that shape.
class Em {
 public:
  Em(llvm::IRBuilder<>& b, llvm::Type* ty)
      : b_(b), guard_(b), ty_(ty), dbl(ty->getScalarType()->isDoubleTy()) {
    assert(dbl || ty->getScalarType()->isFloatTy());
    b_.clearFastMathFlags();
    ity_ = ty->getWithNewType(b.getIntNTy(dbl ? 64 : 32));
    i32ty_ = ty->getWithNewType(b.getInt32Ty());
    // AVX-512's vscalefps/pd is ldexp in one instruction: used for vectors
    // of whole 512-bit registers when the function is built for it.
    const llvm::Function* f = b.GetInsertBlock() ? b.GetInsertBlock()->getParent() : nullptr;
    auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(ty);
    const unsigned regs = vt ? vt->getNumElements() / (dbl ? 8 : 16) : 0;  // a power of two, concatenated pairwise
    scalef_ = f && vt && vt->getNumElements() % (dbl ? 8 : 16) == 0 && regs > 0 && (regs & (regs - 1)) == 0 &&
              f->getFnAttribute("target-features").getValueAsString().contains("+avx512f");
  }

  llvm::IRBuilder<>& b_;
  llvm::IRBuilder<>::FastMathFlagGuard guard_;
  llvm::Type* ty_;
  llvm::Type* ity_;
  llvm::Type* i32ty_;
  const bool dbl;
  bool scalef_ = false;

  int mant() const { return dbl ? 52 : 23; }  // stored significand bits
  int bias() const { return dbl ? 1023 : 127; }

  // Constants. fd(f, d) picks the float or the double value.
  Value* k(double v) const { return llvm::ConstantFP::get(ty_, v); }
  Value* fd(double f, double d) const { return k(dbl ? d : f); }
  Value* ki(int64_t v) const { return llvm::ConstantInt::get(ity_, v, true); }

  // Floating-point arithmetic.
  Value* add(Value* a, Value* c) { return b_.CreateFAdd(a, c); }
  Value* sub(Value* a, Value* c) { return b_.CreateFSub(a, c); }
  Value* mul(Value* a, Value* c) { return b_.CreateFMul(a, c); }
  Value* div(Value* a, Value* c) { return b_.CreateFDiv(a, c); }
  Value* neg(Value* a) { return b_.CreateFNeg(a); }
  Value* fma(Value* a, Value* c, Value* d) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fma, {ty_}, {a, c, d});
  }
  Value* rint(Value* a) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::rint, a); }
  Value* floor(Value* a) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, a); }
  Value* fabs(Value* a) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a); }
  Value* copysign(Value* mag, Value* sgn) {
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, mag, sgn);
  }

  // Comparisons (ordered: false when either side is NaN) and masks.
  Value* lt(Value* a, Value* c) { return b_.CreateFCmpOLT(a, c); }
  Value* gt(Value* a, Value* c) { return b_.CreateFCmpOGT(a, c); }
  Value* ge(Value* a, Value* c) { return b_.CreateFCmpOGE(a, c); }
  Value* eq(Value* a, Value* c) { return b_.CreateFCmpOEQ(a, c); }
  Value* ne(Value* a, Value* c) { return b_.CreateFCmpONE(a, c); }
  Value* isnan(Value* a) { return b_.CreateFCmpUNO(a, a); }
  Value* anynan(Value* a, Value* c) { return b_.CreateFCmpUNO(a, c); }
  Value* isfinite(Value* a) { return lt(fabs(a), k(kInf)); }
  Value* band(Value* m, Value* n) { return b_.CreateAnd(m, n); }
  Value* bor(Value* m, Value* n) { return b_.CreateOr(m, n); }
  Value* bnot(Value* m) { return b_.CreateNot(m); }
  Value* sel(Value* m, Value* t, Value* f) { return b_.CreateSelect(m, t, f); }

  // Integer view of the same bits.
  Value* bits(Value* a) { return b_.CreateBitCast(a, ity_); }
  Value* from_bits(Value* i) { return b_.CreateBitCast(i, ty_); }
  Value* iadd(Value* i, Value* j) { return b_.CreateAdd(i, j); }
  Value* isub(Value* i, Value* j) { return b_.CreateSub(i, j); }
  Value* iand(Value* i, Value* j) { return b_.CreateAnd(i, j); }
  Value* ashr(Value* i, int s) { return b_.CreateAShr(i, ki(s)); }
  Value* shl(Value* i, int s) { return b_.CreateShl(i, ki(s)); }

  // Integral FP value with |n| < 2^31 -> integer lanes. Conversions go
  // through 32-bit lanes because AVX2 has no 64-bit int<->double convert.
  Value* to_int(Value* n) {
    Value* i = b_.CreateFPToSI(n, i32ty_);
    return dbl ? b_.CreateSExt(i, ity_) : i;
  }
  Value* to_fp(Value* i) {
    if (dbl) i = b_.CreateTrunc(i, i32ty_);
    return b_.CreateSIToFP(i, ty_);
  }

  // 2^n for integer lanes n in the normal exponent range: build the bits.
  Value* pow2i(Value* n) { return from_bits(shl(iadd(n, ki(bias())), mant())); }

  // p * 2^n for integral FP n with |n| <= 2 * bias + 2: two factors
  // 2^(n>>1) and 2^(n - (n>>1)), each normal. p * 2^(n>>1) is exact for
  // p in [0.5, 2], so a subnormal result is rounded only once.
  Value* ldexp2(Value* p, Value* n) { return ldexp2i(p, to_int(n)); }
  Value* ldexp2i(Value* p, Value* ni) {
    Value* h = ashr(ni, 1);
    return mul(mul(p, pow2i(h)), pow2i(isub(ni, h)));
  }

  // p * 2^n as ldexp2i, n given as FP (n_fp) and integer lanes (ni); with
  // AVX-512 one vscalef per register, rounded once as ldexp2i is, so the
  // vector and scalar forms agree bit for bit.
  Value* ldexp(Value* p, Value* n_fp, Value* ni) {
    if (!scalef_) return ldexp2i(p, ni);
    const unsigned lanes = llvm::cast<llvm::FixedVectorType>(ty_)->getNumElements(), per = dbl ? 8 : 16;
    const auto id = dbl ? llvm::Intrinsic::x86_avx512_mask_scalef_pd_512 : llvm::Intrinsic::x86_avx512_mask_scalef_ps_512;
    auto part = [&](Value* v, unsigned at) {
      std::vector<int> idx(per);
      for (unsigned i = 0; i < per; ++i) idx[i] = static_cast<int>(at + i);
      return lanes == per ? v : b_.CreateShuffleVector(v, idx);
    };
    std::vector<Value*> parts;
    for (unsigned at = 0; at < lanes; at += per) {
      Value* pp = part(p, at);
      Value* mask = dbl ? static_cast<Value*>(b_.getInt8(0xff)) : b_.getInt16(0xffff);
      parts.push_back(b_.CreateIntrinsic(id, {}, {pp, part(n_fp, at), pp, mask, b_.getInt32(4)}));  // 4: current rounding
    }
    while (parts.size() > 1) {  // concatenate pairwise
      std::vector<Value*> next;
      for (size_t i = 0; i < parts.size(); i += 2) {
        const unsigned n = llvm::cast<llvm::FixedVectorType>(parts[i]->getType())->getNumElements();
        std::vector<int> idx(2 * n);
        for (unsigned j = 0; j < 2 * n; ++j) idx[j] = static_cast<int>(j);
        next.push_back(b_.CreateShuffleVector(parts[i], parts[i + 1], idx));
      }
      parts = std::move(next);
    }
    return parts[0];
  }

  // c[0] + x * (c[1] + x * (c[2] + ...)), one fma per coefficient.
  Value* horner(Value* x, std::span<const double> c) {
    Value* p = k(c.back());
    for (size_t i = c.size() - 1; i-- > 0;) p = fma(p, x, k(c[i]));
    return p;
  }
};

// sign * 1/k! for k = first, first + step, ... (count terms); sign alternates
// from + when `alternate`. k! is exact in double for the k used here (<= 18).
std::vector<double> inv_factorials(int first, int count, int step, bool alternate) {
  std::vector<double> c;
  for (int i = 0; i < count; ++i) {
    int k = first + i * step;
    double f = 1;
    for (int j = 2; j <= k; ++j) f *= j;
    c.push_back((alternate && i % 2 ? -1.0 : 1.0) / f);
  }
  return c;
}

// ---------------------------------------------------------------- exp ----

// ln 2 = LN2_HI + LN2_LO. LN2_HI keeps 16 (float) / 42 (double) significant
// bits, so n * LN2_HI is exact for |n| < 2^8 / 2^11 (every exponent here).
constexpr double kLn2HiF = 0x1.62e4p-1, kLn2LoF = 0x1.7f7d1cp-20;
constexpr double kLn2HiD = 0x1.62e42fefa38p-1, kLn2LoD = 0x1.ef35793c7673p-45;
constexpr double kLog2e = 0x1.71547652b82fep+0;

// Taylor degree for expm1(r) on |r| <= ln2/2: r^(d+1)/(d+1)! relative to r
// is 6e-10 (float, d = 8) and 3e-19 (double, d = 14), far below half an ulp
// also where the result is ~r.
int exp_degree(const Em& e) { return e.dbl ? 14 : 8; }

// exp(r) on |r| <= ln2/2. float: minimax of degree 6 for relative error
// (scripts/fit_math.py; 0.15 float ulp with the coefficients rounded, c0 and
// c1 round to 1). double: Taylor to r^14 (3e-19 relative).
constexpr double kExpPolyF[] = {0x1p0, 0x1p0, 0x1.fffffap-2, 0x1.55540ap-3, 0x1.55589ap-5, 0x1.126d0cp-7,
                                0x1.6ab98ep-10};
// expm1(r) = r + r^2 Q(r) on |r| <= ln2/2, float: Q a Remez minimax of
// degree 4 for the relative error of expm1 (scripts/fit_math.py: 0.14 ulp
// with the coefficients rounded), two multiplies shorter than Taylor.
constexpr double kExpm1QF[] = {0x1.fffffep-2, 0x1.5554b0p-3, 0x1.555674p-5, 0x1.122768p-7, 0x1.6bec0ep-10};

Value* exp_poly(Em& e, Value* r) {
  if (!e.dbl) return e.horner(r, kExpPolyF);
  return e.horner(r, inv_factorials(0, 15, 1, false));
}

// hi = n ln2 + r with n the integer nearest hi log2 e and |r| <= ln2/2 (a
// hair more: n comes from the unrounded product). The fma with 1.5 * 2^mant
// rounds hi log2 e to an integer that ends up in the low bits of `shifted`:
// bits(shifted) - bits(1.5 * 2^mant) = n, so 2^n is built without a
// float-to-int conversion. |hi log2 e| < 2^(mant - 1).
struct ExpReduced {
  Value* shifted;
  Value* n;  // FP, integral
  Value* r;
};
constexpr double kShifterF = 0x1.8p23, kShifterD = 0x1.8p52;

ExpReduced exp_reduce(Em& e, Value* hi) {
  Value* shifter = e.fd(kShifterF, kShifterD);
  Value* shifted = e.fma(hi, e.k(kLog2e), shifter);
  Value* n = e.sub(shifted, shifter);
  // n*LN2_HI is exact and so is hi - n*LN2_HI.
  Value* r = e.fma(e.neg(n), e.fd(kLn2HiF, kLn2HiD), hi);
  r = e.fma(e.neg(n), e.fd(kLn2LoF, kLn2LoD), r);
  return {shifted, n, r};
}

// The integer n of an ExpReduced, in integer lanes.
Value* exp_n_int(Em& e, const ExpReduced& x) {
  const int64_t shifter_bits = e.dbl ? 0x4338000000000000 : 0x4b400000;
  return e.isub(e.bits(x.shifted), e.ki(shifter_bits));
}

// 2^(n + extra) for an ExpReduced whose n + extra is a normal exponent
// (-bias < n + extra <= bias): two integer ops on the shifted bits.
Value* exp_scale(Em& e, const ExpReduced& x, int extra) {
  const int64_t shifter_bits = e.dbl ? 0x4338000000000000 : 0x4b400000;
  return e.from_bits(e.shl(e.iadd(e.bits(x.shifted), e.ki(e.bias() + extra - shifter_bits)), e.mant()));
}

// exp(hi + lo) where lo is a small correction (or null). hi is clamped to
// where the result is already inf / 0; the clamp keeps n in ldexp2's range,
// and the overflow / underflow itself comes out of the final
// multiplications, correctly rounded. A NaN hi passes the clamps and every
// later step, so the result is NaN.
Value* exp_core(Em& e, Value* hi, Value* lo) {
  Value* hi_max = e.fd(89, 710);    // exp(89) > FLT_MAX, exp(710) > DBL_MAX
  Value* hi_min = e.fd(-104, -746);  // below half the smallest subnormal
  if (lo) lo = e.sel(e.band(e.lt(hi, hi_max), e.gt(hi, hi_min)), lo, e.k(0));
  hi = e.sel(e.gt(hi, hi_max), hi_max, hi);
  hi = e.sel(e.lt(hi, hi_min), hi_min, hi);
  ExpReduced x = exp_reduce(e, hi);
  Value* r = lo ? e.add(x.r, lo) : x.r;
  return e.ldexp(exp_poly(e, r), x.n, exp_n_int(e, x));
}

// ---------------------------------------------------------------- log ----

// x = 2^k * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), f exact.
struct LogReduced {
  Value* k;  // FP, integral
  Value* f;
};

LogReduced log_reduce(Em& e, Value* x, bool subnormals) {
  Value* k_adj = nullptr;
  if (subnormals) {  // scale subnormals up so the exponent field is valid
    Value* sub = e.lt(x, e.fd(0x1p-126, 0x1p-1022));
    x = e.sel(sub, e.mul(x, e.fd(0x1p24, 0x1p53)), x);
    k_adj = e.sel(sub, e.fd(24, 53), e.k(0));
  }
  // Adding 1.0's bits minus sqrt(1/2)'s bits carries into the exponent
  // exactly when the significand is >= sqrt(2); the exponent field is then k
  // and (low bits + sqrt(1/2)'s bits) is the significand in [sqrt(1/2), sqrt(2)).
  const int64_t one = e.dbl ? 0x3ff0000000000000 : 0x3f800000;
  const int64_t sqrt_half = e.dbl ? 0x3fe6a09e667f3bcd : 0x3f3504f3;
  const int64_t mant_mask = (int64_t{1} << e.mant()) - 1;
  Value* ix = e.iadd(e.bits(x), e.ki(one - sqrt_half));
  Value* k = e.to_fp(e.isub(e.ashr(ix, e.mant()), e.ki(e.bias())));
  if (k_adj) k = e.sub(k, k_adj);
  Value* m = e.from_bits(e.iadd(e.iand(ix, e.ki(mant_mask)), e.ki(sqrt_half)));
  return {k, e.sub(m, e.k(1))};
}

// log(2^k (1 + f)) + c for a small correction c (log1p's rounding of 1 + x).
// With s = f / (2 + f), log(1 + f) = 2 atanh(s) = 2s + s R(s^2) where
// R(z) = sum_{j>=1} 2/(2j+1) z^j; |s| <= 0.1716, so z <= 0.0295 and 5 (float)
// / 11 (double) terms leave < 0.03 ulp. The sum is arranged as fdlibm does,
// f - (f^2/2 - s (f^2/2 + R)), so the large part f enters exactly and only
// the small correction carries rounding error.
Value* log_finish(Em& e, LogReduced lr, Value* c) {
  auto [k, f] = lr;
  Value* s = e.div(f, e.add(e.k(2), f));
  Value* z = e.mul(s, s);
  std::vector<double> coef;
  for (int j = 1; j <= (e.dbl ? 11 : 5); ++j) coef.push_back(2.0 / (2 * j + 1));
  Value* R = e.mul(z, e.horner(z, coef));
  Value* hfsq = e.mul(e.mul(e.k(0.5), f), f);
  Value* lo = e.mul(k, e.fd(kLn2LoF, kLn2LoD));
  if (c) lo = e.add(lo, c);
  Value* t = e.sub(f, e.sub(hfsq, e.fma(s, e.add(hfsq, R), lo)));
  return e.fma(k, e.fd(kLn2HiF, kLn2HiD), t);
}

// log(x) as a double-double (hi, lo), relative error ~2^-66, for pow: the
// error of log(x) is multiplied by |y log x| (up to ~745) in pow's result.
// Same reduction as log; 2s, s^3 and the 2/3 coefficient are carried in
// double-double, the rest of the series (< 2^-12 of the result) in double.
std::pair<Value*, Value*> log_dd(Em& e, Value* x) {
  assert(e.dbl);
  auto [k, f] = log_reduce(e, x, true);
  // s + s_lo = f / (2 + f); d + d_lo = 2 + f exactly (|f| < 2).
  Value* d = e.add(e.k(2), f);
  Value* d_lo = e.add(e.sub(e.k(2), d), f);
  Value* s = e.div(f, d);
  Value* s_lo = e.div(e.sub(e.fma(e.neg(s), d, f), e.mul(s, d_lo)), d);
  // z = s^2 and t = s^3 as double-double (fma gives the product's error).
  Value* z = e.mul(s, s);
  Value* z_lo = e.fma(e.add(s, s), s_lo, e.fma(s, s, e.neg(z)));
  Value* t = e.mul(z, s);
  Value* t_lo = e.fma(z_lo, s, e.fma(z, s_lo, e.fma(z, s, e.neg(t))));
  // u = (2/3) s^3 with 2/3 = C_HI + C_LO.
  const double c_hi = 0x1.5555555555555p-1, c_lo = 0x1.5555555555555p-55;
  Value* u = e.mul(t, e.k(c_hi));
  Value* u_lo = e.fma(t, e.k(c_lo), e.fma(t_lo, e.k(c_hi), e.fma(t, e.k(c_hi), e.neg(u))));
  // The rest of 2 atanh(s): s^5 * sum_{j>=2} 2/(2j+1) z^(j-2), to z^11.
  std::vector<double> coef;
  for (int j = 2; j <= 12; ++j) coef.push_back(2.0 / (2 * j + 1));
  Value* tail = e.mul(e.mul(t, z), e.horner(z, coef));
  // log(1+f) = 2s + u + (2 s_lo + u_lo + tail); |u| < |2s| so fast two-sum.
  Value* s2 = e.add(s, s);
  Value* h = e.add(s2, u);
  Value* l = e.sub(u, e.sub(h, s2));
  l = e.add(l, e.add(e.add(s_lo, s_lo), e.add(u_lo, tail)));
  // + k ln2: k * LN2_HI is exact; k * LN2_LO split by fma.
  Value* kh = e.mul(k, e.k(kLn2HiD));
  Value* kl = e.mul(k, e.k(kLn2LoD));
  Value* kl_err = e.fma(k, e.k(kLn2LoD), e.neg(kl));
  Value* H = e.add(kh, h);  // two-sum: either side may be larger
  Value* bv = e.sub(H, kh);
  Value* H_err = e.add(e.sub(kh, e.sub(H, bv)), e.sub(h, bv));
  Value* lo = e.add(e.add(H_err, l), e.add(kl, kl_err));
  Value* rh = e.add(H, lo);
  return {rh, e.sub(lo, e.sub(rh, H))};
}

// ---------------------------------------------------------------- erf ----

// erf(a) = a (1 + Q(a^2)) on [0, 0.875]: Q fitted for relative error of erf
// (2^-27 float, 2^-56 double); the 1 is kept out of Q so its rounding error
// does not enter (2/sqrt(pi) is not representable).
constexpr double kErfSmallF[] = {0x1.06eba8p-3,   -0x1.812744p-2, 0x1.ce2e82p-4,
                                 -0x1.b81982p-6,  0x1.553946p-8,  -0x1.ae7238p-11,
                                 0x1.6bb13ep-14};
constexpr double kErfSmallD[] = {
    0x1.06eba8214db69p-3,  -0x1.812746b0379e7p-2, 0x1.ce2f21a042bd6p-4,
    -0x1.b82ce31288654p-6, 0x1.565bcd0e57dcdp-8,  -0x1.c02db3fb284bbp-11,
    0x1.f9a32612399b7p-14, -0x1.f4d240a73569cp-17, 0x1.b9e488261b3afp-20,
    -0x1.5f539c84355e0p-23, 0x1.fa466fff6b325p-27, -0x1.41d6683d85595p-30,
    0x1.231636c073be6p-34};
// erf(a) = 1 - exp(-a^2) R(a) on [0.875, 4] (float) / [0.875, 6] (double),
// R(a) = erfc(a) exp(a^2) a polynomial in (a - center), fitted for absolute
// error of erf (2^-28.9 float, 2^-57.4 double). Beyond the interval erf
// rounds to 1.
constexpr double kErfBigF[] = {0x1.b97392p-3,  -0x1.3db402p-4,  0x1.b1e4e8p-6,  -0x1.1b6cf6p-7,
                               0x1.6dca22p-9,  -0x1.67557ap-11, 0x1.160166p-12, -0x1.6a0acep-13,
                               -0x1.55eae2p-14, -0x1.2fc4dap-15};
constexpr double kErfBigD[] = {
    0x1.436adf606b261p-3,  -0x1.5db3a1a9c4cbap-5,  0x1.6e4807289b543p-7,  -0x1.74927aa605fb0p-9,
    0x1.70d12f9944070p-11, -0x1.63f7c1956272dp-13, 0x1.4f80d26889cc3p-15, -0x1.353f2d5bcbe76p-17,
    0x1.16ff7fc812a43p-19, -0x1.ed06e5da2e7cep-22, 0x1.b1a1213a440d7p-24, -0x1.62381c7e07285p-26,
    0x1.12a881a3678c9p-28, -0x1.d8eb770cbffffp-30, -0x1.99d1034715f4bp-33, 0x1.882aee30d8835p-35,
    0x1.94fdbb0d41312p-33, 0x1.5f83b5d92a6bap-34,  0x1.e12b1431a65f6p-38,  -0x1.6028bb92dccd1p-37,
    -0x1.768b2a8fe708ep-38, -0x1.76b45e0618a6bp-40, -0x1.8d3d4ef461768p-43, -0x1.7571b44496914p-47};
constexpr double kErfSplit = 0.875;

// ---------------------------------------------------------------- tanh ----


// ------------------------------------------------------------ sin/cos ----

// pi/2 = P1 + P2 + P3 (+ P4): each part is the previous remainder rounded to
// the type. With fma, x - n*P1 is exact for |x - n*P1| < 2, and the later
// parts fix up the rest; the sum carries 72 (float) / 200+ (double) bits.
constexpr double kPio2F[] = {0x1.921fb6p+0, -0x1.777a5cp-25, -0x1.ee59dap-50};
constexpr double kPio2D[] = {0x1.921fb54442d18p+0, 0x1.1a62633145c07p-54,
                             -0x1.f1976b7ed8fbcp-110, 0x1.4cf98e804p-164};
constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;

// x = n pi/2 + r with |r| <= pi/4; q = n mod 4. Non-finite x reduce as 0.
struct TrigReduced {
  Value* r;
  Value* q;  // FP in {0, 1, 2, 3}
};

TrigReduced trig_reduce(Em& e, Value* x) {
  x = e.sel(e.isfinite(x), x, e.k(0));
  Value* n = e.rint(e.mul(x, e.k(kTwoOverPi)));
  std::span<const double> parts = e.dbl ? std::span<const double>(kPio2D) : kPio2F;
  Value* r = x;
  for (double p : parts) r = e.fma(e.neg(n), e.k(p), r);
  // Beyond the supported range r is inaccurate and can be huge; clamp it so
  // the polynomials stay in [-1, 1] instead of overflowing.
  Value* lim = e.k(0.8);
  r = e.sel(e.gt(r, lim), lim, r);
  r = e.sel(e.lt(r, e.neg(lim)), e.neg(lim), r);
  // n mod 4 without converting n (which may exceed int range): exact, since
  // n * 0.25 is exact and, when |n| >= 2^24, n is a multiple of 4 (float)
  // or the floor is exact.
  Value* q = e.sub(n, e.mul(e.k(4), e.floor(e.mul(n, e.k(0.25)))));
  return {r, q};
}

// sin(r) = r + r^3 S(r^2): Taylor to r^9 (float) / r^17 (double) on
// |r| <= pi/4, truncation < 0.05 ulp.
Value* sin_poly(Em& e, Value* r, Value* z) {
  auto c = inv_factorials(3, e.dbl ? 8 : 4, 2, true);
  for (double& v : c) v = -v;  // starts at -1/3!
  return e.fma(e.mul(r, z), e.horner(z, c), r);
}

// cos(r) = 1 - r^2/2 + ...: Taylor to r^10 (float) / r^16 (double).
Value* cos_poly(Em& e, Value* z) {
  return e.horner(z, inv_factorials(0, e.dbl ? 9 : 6, 2, true));
}

// sin or cos of x: by quadrant q the result is +-sin(r) or +-cos(r).
Value* sincos(llvm::IRBuilder<>& b, Value* x, bool want_cos) {
  Em e(b, x->getType());
  auto [r, q] = trig_reduce(e, x);
  Value* z = e.mul(r, r);
  Value* sp = sin_poly(e, r, z);
  Value* cp = cos_poly(e, z);
  Value* q1 = e.eq(q, e.k(1));
  Value* q2 = e.eq(q, e.k(2));
  Value* q3 = e.eq(q, e.k(3));
  Value* odd = e.bor(q1, q3);
  Value* res;
  Value* negate;
  if (want_cos) {  // cos: cos r, -sin r, -cos r, sin r
    res = e.sel(odd, sp, cp);
    negate = e.bor(q1, q2);
  } else {  // sin: sin r, cos r, -sin r, -cos r
    res = e.sel(odd, cp, sp);
    negate = e.bor(q2, q3);
  }
  res = e.sel(negate, e.neg(res), res);
  if (!want_cos) res = e.sel(e.eq(x, e.k(0)), x, res);  // sin(-0) = -0
  return e.sel(e.isfinite(x), res, e.k(kNaN));
}

}  // namespace

// exp: see exp_core.
Value* emit_exp(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  return exp_core(e, x, nullptr);
}

// exp(x) for x <= 0 (softmax's exp(x - max x)): exp_core's bits without its
// upper clamp, and with 2^n as one factor. n is in [-150, 0] (float) /
// [-1077, 0] (double), so 2^(n + 64) is normal and p 2^(n + 64) is exact;
// the multiply by 2^-64 then rounds p 2^n once, as ldexp2i's second factor
// does: the same bits, in four operations instead of eight (AVX2). A NaN x
// gives NaN (p is NaN, whatever the scale's bits). With AVX-512, vscalef
// is one operation already: exp_core.
Value* emit_exp_nonpositive(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  if (e.scalef_) return exp_core(e, x, nullptr);
  Value* hi_min = e.fd(-104, -746);
  Value* hi = e.sel(e.lt(x, hi_min), hi_min, x);
  ExpReduced ex = exp_reduce(e, hi);
  return e.mul(e.mul(exp_poly(e, ex.r), exp_scale(e, ex, 64)), e.k(0x1p-64));
}

// expm1(x) = 2^n (1 + p) - 1 with p = expm1(r) = r + r^2 (1/2 + r/6 + ...),
// evaluated as 2^n r2q + (2^n r + (2^n - 1)) with r2q = r^2 (1/2 + ...):
// 2^n - 1 is exact for the n where it matters, and for n = 0 the result is
// r + r2q, accurate for tiny x.
Value* emit_expm1(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  // Below -87 / -708 the result is -1 in the type; the clamp keeps 2^n normal.
  Value* x_max = e.fd(89, 710);
  Value* x_min = e.fd(-87, -708);
  Value* xc = e.sel(e.lt(x, x_max), x, x_max);
  xc = e.sel(e.gt(xc, x_min), xc, x_min);
  Value* n = e.rint(e.mul(xc, e.k(kLog2e)));
  Value* r = e.fma(e.neg(n), e.fd(kLn2HiF, kLn2HiD), xc);
  r = e.fma(e.neg(n), e.fd(kLn2LoF, kLn2LoD), r);
  Value* q = e.horner(r, inv_factorials(2, exp_degree(e) - 1, 1, false));
  Value* r2q = e.mul(r, e.mul(r, q));  // p = r + r2q
  // Small n: 2^n r + (2^n - 1) is exact or nearly (2^n r is exact), so the
  // smaller r2q part is added with one final rounding. n > 64 (up to 128 /
  // 1024): 2^n does not fit one factor, but -1 no longer matters; scale
  // 1 + p as exp does.
  Value* big = e.gt(n, e.k(64));
  Value* s = e.pow2i(e.to_int(e.sel(big, e.k(64), n)));
  Value* res = e.fma(s, r2q, e.fma(s, r, e.sub(s, e.k(1))));
  Value* p = e.add(r, r2q);
  res = e.sel(big, e.ldexp2(e.add(p, e.k(1)), n), res);
  res = e.sel(e.eq(x, e.k(0)), x, res);  // keeps -0
  return e.sel(e.isnan(x), x, res);
}

Value* emit_log(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  Value* res = log_finish(e, log_reduce(e, x, true), nullptr);
  res = e.sel(e.eq(x, e.k(0)), e.k(-kInf), res);
  res = e.sel(e.lt(x, e.k(0)), e.k(kNaN), res);
  res = e.sel(e.eq(x, e.k(kInf)), x, res);
  return e.sel(e.isnan(x), x, res);
}

// log1p(x) = log(u) + (1 + x - u) / u with u = fl(1 + x): the rounding error
// of 1 + x is recovered exactly with two-sum and added as a first-order
// correction inside log's small terms. u is never subnormal (>= 2^-24).
Value* emit_log1p(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  Value* one = e.k(1);
  Value* u = e.add(one, x);
  Value* bv = e.sub(u, x);
  Value* err = e.add(e.sub(one, bv), e.sub(x, e.sub(u, bv)));
  Value* res = log_finish(e, log_reduce(e, u, false), e.div(err, u));
  res = e.sel(e.eq(x, e.k(-1)), e.k(-kInf), res);
  res = e.sel(e.lt(x, e.k(-1)), e.k(kNaN), res);
  res = e.sel(e.eq(x, e.k(kInf)), x, res);
  res = e.sel(e.eq(x, e.k(0)), x, res);  // keeps -0
  return e.sel(e.isnan(x), x, res);
}

// tanh(a) = m / (m + 2) with m = expm1(2a), a = |x|, sign restored; one
// expression for every a (no branch for small a: m's own accuracy carries
// down to subnormal a, where m = 2a and m / 2 = a exactly). Three roundings
// (m, m + 2, the division) give up to ~2.5 ulp for small a. |x| is clamped
// at 9.5 / 20, where tanh already rounds to 1; 2a <= 40 then, so m needs no
// range handling: 2^n is normal and m = 2^n (r + r^2 Q(r)) + (2^n - 1), with
// 2^n - 1 exact (emit_expm1 keeps r apart from r^2 Q for its last half ulp;
// here the division's rounding dominates and that costs a multiply). For float, ln 2 as one constant is enough: with n <= 28 its
// rounding error moves r by < 6e-8, < 0.05 ulp of the result.
Value* emit_tanh(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  Value* a = e.fabs(x);
  Value* a_max = e.fd(9.5, 20);
  a = e.sel(e.gt(a, a_max), a_max, a);  // NaN stays NaN
  // Reduced as 2a = n ln2 + 2h, and everything below carried at half scale:
  // h = a - n ln2/2, Q2(h) = 2 Q(2h) (coefficients times 2^(j+1)), so
  // h + h^2 Q2(h) is exactly half of r + r^2 Q(r) at r = 2h, and 2a is never
  // formed. Powers of two commute with rounding: the same bits, one add less.
  Value* shifter = e.fd(kShifterF, kShifterD);
  ExpReduced ex{e.fma(a, e.k(2 * kLog2e), shifter), nullptr, nullptr};
  ex.n = e.sub(ex.shifted, shifter);
  Value* h;
  if (e.dbl) {
    h = e.fma(e.neg(ex.n), e.k(kLn2HiD / 2), a);
    h = e.fma(e.neg(ex.n), e.k(kLn2LoD / 2), h);
  } else {
    h = e.fma(e.neg(ex.n), e.k(0x1.62e430p-2), a);
  }
  std::vector<double> q = e.dbl ? inv_factorials(2, exp_degree(e) - 1, 1, false)
                                : std::vector<double>(std::begin(kExpm1QF), std::end(kExpm1QF));
  for (size_t j = 0; j < q.size(); ++j) q[j] = std::ldexp(q[j], static_cast<int>(j) + 1);
  Value* half_pm = e.fma(e.mul(h, h), e.horner(h, q), h);
  // 2 * 2^n and 2^n - 1 from 2^n by two adds (both exact; an fma
  // s2 * 0.5 - 1 gave the same bits on the FMA pipes, which this kernel
  // keeps busier than the adders).
  Value* s1 = exp_scale(e, ex, 0);
  Value* m = e.fma(e.add(s1, s1), half_pm, e.sub(s1, e.k(1)));
  return e.copysign(e.div(m, e.add(m, e.k(2))), x);
}

// sigmoid(x) = N / (1 + t) with t = exp(-|x|) <= 1, N = 1 for x >= 0 and
// N = t for x < 0: nothing overflows. t can be subnormal (x < -87 / -708),
// so numerator and denominator are both scaled by 2^64, keeping t 2^64 =
// p 2^(n + 64) normal: one integer add builds the scale and the division
// rounds a subnormal result once. Rounding 2^64 + t 2^64 costs up to ~0.5
// ulp; correcting it (two-sum, then q (1 - lo/d)) measured 1.9 instead of
// 2.3 ulp but three more multiplies per lane, 15% of a fused
// sigmoid(tanh(x)) kernel, so it is left out. NaN propagates through every
// step. With AVX-512, vscalef builds t itself (two operations fewer).
Value* emit_sigmoid(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  Value* two64 = e.k(0x1p64);
  Value* m = e.neg(e.fabs(x));
  Value* m_min = e.fd(-104, -746);  // sigmoid rounds to 0 below
  m = e.sel(e.lt(m, m_min), m_min, m);  // NaN stays NaN
  ExpReduced ex = exp_reduce(e, m);
  Value* pos = e.ge(x, e.k(0));
  if (e.scalef_) {
    // vscalef rounds a subnormal t once, as the division by 2^64 below
    // would: the same result without the scaling.
    Value* t = e.ldexp(exp_poly(e, ex.r), ex.n, nullptr);
    return e.div(e.sel(pos, e.k(1), t), e.add(e.k(1), t));
  }
  Value* t64 = e.mul(exp_poly(e, ex.r), exp_scale(e, ex, 64));
  return e.div(e.sel(pos, two64, t64), e.add(two64, t64));
}

Value* emit_erf(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  Value* a = e.fabs(x);
  // Small: a + a Q(a^2).
  Value* small = e.fma(a, e.horner(e.mul(a, a), e.dbl ? std::span<const double>(kErfSmallD)
                                                      : kErfSmallF),
                       a);
  // Large: 1 - exp(-a^2) R(a), a clamped into the fitted interval. a^2 is
  // passed to exp as a double-word (hi + fma's rounding error), since an
  // error of a^2 is an error of exp(-a^2)'s exponent.
  Value* a_max = e.fd(4, 6);
  Value* ab = e.sel(e.lt(a, a_max), a, a_max);  // NaN -> a_max, result 1, fixed below
  ab = e.sel(e.gt(ab, e.k(kErfSplit)), ab, e.k(kErfSplit));
  Value* a2 = e.mul(ab, ab);
  Value* a2_lo = e.fma(ab, ab, e.neg(a2));
  Value* ex = exp_core(e, e.neg(a2), e.neg(a2_lo));
  Value* R = e.horner(e.sub(ab, e.fd(2.4375, 3.4375)),
                      e.dbl ? std::span<const double>(kErfBigD) : kErfBigF);
  Value* big = e.fma(e.neg(ex), R, e.k(1));
  Value* res = e.sel(e.lt(a, e.k(kErfSplit)), small, big);
  res = e.copysign(res, x);
  return e.sel(e.isnan(x), x, res);
}

Value* emit_sin(llvm::IRBuilder<>& b, Value* x) { return sincos(b, x, false); }
Value* emit_cos(llvm::IRBuilder<>& b, Value* x) { return sincos(b, x, true); }

namespace {

// ------------------------------------------------------- inverse trig ----

// atan on [0, inf], as Cephes' atanf.c / atan.c (their coefficients):
// a > tan(3pi/8) is reduced by t = -1/a (plus pi/2), a > tan(pi/8) (float) /
// 0.66 (double) by t = (a - 1)/(a + 1) (plus pi/4), and atan(t) = t + t z P(z)
// with z = t^2 (float: a polynomial; double: a rational P/Q). Double adds the
// bits of pi/2 that its constant drops. inf -> pi/2 (t = -0); NaN stays NaN.
constexpr double kAtanF[] = {-3.33329491539e-1, 1.99777106478e-1, -1.38776856032e-1, 8.05374449538e-2};
constexpr double kAtanPD[] = {-6.485021904942025371773e1, -1.228866684490136173410e2, -7.500855792314704667340e1,
                              -1.615753718733365076637e1, -8.750608600031904122785e-1};
constexpr double kAtanQD[] = {1.945506571482613964425e2, 4.853903996359136964868e2, 4.328810604912902668951e2,
                              1.650270098316988542046e2, 2.485846490142306297962e1, 1.0};
constexpr double kPio2Lo = 6.123233995736765886130e-17;  // pi/2 - double(pi/2)

Value* atan_nonnegative(Em& e, Value* a) {
  Value* big = e.gt(a, e.k(2.414213562373095));
  Value* mid = e.gt(a, e.fd(0.4142135623730950, 0.66));
  Value* t = e.sel(big, e.div(e.k(-1), a), e.sel(mid, e.div(e.sub(a, e.k(1)), e.add(a, e.k(1))), a));
  Value* base = e.sel(big, e.k(M_PI_2), e.sel(mid, e.k(M_PI_4), e.k(0)));
  Value* z = e.mul(t, t);
  if (!e.dbl) return e.add(base, e.fma(e.mul(t, z), e.horner(z, kAtanF), t));
  Value* pq = e.div(e.mul(z, e.horner(z, kAtanPD)), e.horner(z, kAtanQD));
  Value* lo = e.sel(big, e.k(kPio2Lo), e.sel(mid, e.k(kPio2Lo / 2), e.k(0)));
  return e.add(base, e.add(e.fma(t, pq, t), lo));
}

}  // namespace

Value* emit_atan(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  return e.copysign(atan_nonnegative(e, e.fabs(x)), x);
}

// asin |x| = atan(|x| / sqrt((1 - |x|)(1 + |x|))): 1 - |x| is exact for
// |x| >= 1/2, so no cancellation near 1; |x| = 1 gives atan(inf) = pi/2 and
// |x| > 1 the square root of a negative, NaN.
Value* emit_asin(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  Value* a = e.fabs(x);
  Value* s = b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, e.mul(e.sub(e.k(1), a), e.add(e.k(1), a)));
  return e.copysign(atan_nonnegative(e, e.div(a, s)), x);
}

// acos x = 2 atan(sqrt((1 - x)/(1 + x))): small near x = 1 without losing
// relative precision (1 - x exact there), pi at x = -1, NaN beyond [-1, 1].
Value* emit_acos(llvm::IRBuilder<>& b, Value* x) {
  Em e(b, x->getType());
  Value* r = e.div(e.sub(e.k(1), x), e.add(e.k(1), x));
  Value* t = atan_nonnegative(e, b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, r));
  return e.add(t, t);
}

// atan2(y, x): r = atan of the smaller magnitude over the larger (in
// [0, 1], never overflowing), then the octant: pi/2 - r when |y| > |x| and
// x >= 0, pi/2 + r when |y| > |x| and x < 0, pi - r when x < 0 (-0
// included), with y's sign. Each is (hi +- r) + lo, so an exact result such
// as atan2(inf, -1) = pi/2 rounds once. 0/0 and inf/inf take C99's limits
// (0 and pi/4): atan2(+-0, -0) = +-pi, atan2(inf, -inf) = 3pi/4.
Value* emit_atan2(llvm::IRBuilder<>& b, Value* y, Value* x) {
  Em e(b, x->getType());
  Value* ay = e.fabs(y);
  Value* ax = e.fabs(x);
  Value* swap = e.gt(ay, ax);
  Value* q = e.div(e.sel(swap, ax, ay), e.sel(swap, ay, ax));
  q = e.sel(e.band(e.eq(ax, e.k(kInf)), e.eq(ay, e.k(kInf))), e.k(1), q);
  q = e.sel(e.band(e.eq(ax, e.k(0)), e.eq(ay, e.k(0))), e.k(0), q);
  Value* r = atan_nonnegative(e, q);
  std::span<const double> pio2 = e.dbl ? std::span<const double>(kPio2D) : kPio2F;
  Value* x_negative = b.CreateICmpSLT(e.bits(x), e.ki(0));
  Value* hi = e.sel(swap, e.k(pio2[0]), e.sel(x_negative, e.k(2 * pio2[0]), e.k(0)));
  Value* lo = e.sel(swap, e.k(pio2[1]), e.sel(x_negative, e.k(2 * pio2[1]), e.k(0)));
  Value* signed_r = e.sel(b.CreateXor(swap, x_negative), e.neg(r), r);
  r = e.add(e.add(hi, signed_r), lo);
  return e.sel(e.anynan(x, y), e.add(x, y), e.copysign(r, y));
}

namespace {

// pow on double lanes. With `dd_log`, log|x| is carried in double-double so
// the result keeps < 1 ulp of double even when |y log x| is ~700; without,
// log|x| has ~2^-52 relative error, enough for a result rounded to float
// afterwards (|y log x| <= 104 there, so < 2^-45 relative error).
Value* pow_double(llvm::IRBuilder<>& b, Value* x, Value* y, bool dd_log) {
  Em e(b, x->getType());
  Value* one = e.k(1);
  Value* inf = e.k(kInf);
  Value* ax = e.fabs(x);
  // |x|^y for finite nonzero |x| (garbage otherwise, replaced below).
  Value* lh;
  Value* ll = nullptr;
  if (dd_log)
    std::tie(lh, ll) = log_dd(e, ax);
  else
    lh = log_finish(e, log_reduce(e, ax, true), nullptr);
  Value* ph = e.mul(y, lh);
  Value* pl = e.fma(y, lh, e.neg(ph));  // the product's rounding error
  if (ll) pl = e.fma(y, ll, pl);
  Value* mag = exp_core(e, ph, pl);
  // |x| in {0, inf} or y = +-inf: the result is 0 or inf; it is 0 exactly
  // when (|x| < 1) == (y > 0).
  Value* edge = e.bor(e.bor(e.eq(ax, e.k(0)), e.eq(ax, inf)), e.eq(e.fabs(y), inf));
  Value* zero = b.CreateICmpEQ(e.lt(ax, one), e.gt(y, e.k(0)));
  mag = e.sel(edge, e.sel(zero, e.k(0), inf), mag);
  mag = e.sel(e.eq(ax, one), one, mag);  // incl. pow(-1, +-inf) = 1
  mag = e.sel(e.anynan(x, y), e.k(kNaN), mag);
  // Negative base: odd integer y takes x's sign, non-integer y gives NaN
  // (for finite x; pow(-inf, 0.5) = inf). Integers >= 2^53 are even.
  Value* y_int = e.eq(e.rint(y), y);
  Value* half = e.mul(y, e.k(0.5));
  Value* y_odd = e.band(y_int, e.ne(e.rint(half), half));
  Value* res = e.sel(y_odd, e.copysign(mag, x), mag);
  Value* neg_finite = e.band(e.lt(x, e.k(0)), e.gt(x, e.neg(inf)));
  res = e.sel(e.band(neg_finite, e.bnot(y_int)), e.k(kNaN), res);
  return e.sel(e.bor(e.eq(y, e.k(0)), e.eq(x, one)), one, res);  // even for NaN
}

}  // namespace

// pow(x, y) = exp(y log|x|), then the C99 special cases by select. float32
// is computed on double lanes and rounded once: every float32 result
// (subnormals included) is then within 0.5 + ~2^-20 ulp.
Value* emit_pow(llvm::IRBuilder<>& b, Value* x, Value* y) {
  llvm::Type* ty = x->getType();
  if (ty->getScalarType()->isDoubleTy()) return pow_double(b, x, y, true);
  llvm::IRBuilder<>::FastMathFlagGuard guard(b);
  b.clearFastMathFlags();
  llvm::Type* dty = ty->getWithNewType(b.getDoubleTy());
  Value* r = pow_double(b, b.CreateFPExt(x, dty), b.CreateFPExt(y, dty), false);
  return b.CreateFPTrunc(r, ty);
}


}  // namespace loom::jit::llvm_cpu
