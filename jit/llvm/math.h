// Vectorizable math for the LLVM CPU backend: IR emitters for exp, expm1,
// log, log1p, tanh, sigmoid, erf, sin, cos, atan, asin, acos, atan2 and pow.
//
// Every emitter takes x (and y for pow) of type float, double, <N x float> or
// <N x double> and returns a value of the same type. The emitted IR is
// straight-line and elementwise: fadd/fmul/fdiv, llvm.fma, llvm.rint,
// llvm.floor, llvm.fabs, llvm.copysign, fcmp + select, bitcasts, integer
// shifts/adds and int<->fp conversions with 32-bit lanes; and, in functions
// whose "target-features" include +avx512f, vscalefps/pd (ldexp) on whole
// 512-bit registers, which rounds exactly as the portable two-factor ldexp
// does. No libm calls, no branches, no tables, so a fused kernel's loop body
// stays one vector block.
// llvm.fma is only cheap where the target has FMA (every AVX2 / AVX-512 host
// does); elsewhere LLVM lowers it to a call to fma().
//
// The builder's fast-math flags are cleared while emitting: the special-value
// handling (NaN, inf, -0) depends on IEEE semantics.
//
// Special values follow std:: exactly (NaN in -> NaN out; atan2 takes C99's
// values at +-0 and +-inf; exp overflows to inf
// and underflows through subnormals to 0; log(0) = -inf, log(<0) = NaN;
// tanh and erf saturate to +-1; sin/cos are NaN only for inf/NaN input; pow
// follows C99/std::pow: pow(x, +-0) = 1, pow(1, y) = 1, pow(-x, odd int) < 0,
// pow(-x, non-int) = NaN, pow(+-0, y<0) = inf, ...).
//
// MEASURED max error in ulp, from tests/internal/math_test.cpp (its output
// lines "[ ulp ]"), against a reference one precision higher (glibc double
// for float32, x87 long double for float64). Each range was covered by a
// dense linear sweep, a sweep uniform in bit pattern (every binade, both
// signs) and random bit patterns; special values (NaN, +-inf, +-0, and
// every random input whose result is NaN/inf) must match std:: exactly.
// In brackets: the bound the test asserts. Vector (one and four registers)
// and scalar forms of each emitter are checked to give bit-identical results.
//
//   function  range measured (f32 / f64)            float32     float64
//   exp       |x| <= 104 / |x| <= 746               1.00 [2]    0.84 [4]
//   expm1     |x| <= 90 / |x| <= 710                1.23 [4]    1.48 [4]
//   log       (0, max], subnormals included         0.80 [2]    0.80 [4]
//   log1p     (-1, max]                             0.83 [4]    0.79 [4]
//   tanh      all finite                            2.44 [4]    2.41 [4]
//   sigmoid   all finite                            2.31 [4]    2.19 [4]
//   erf       all finite                            0.91 [4]    1.05 [4]
//   sin       |x| <= 1e4                            1.47 [4]    1.43 [4]
//   cos       |x| <= 1e4                            1.48 [4]    1.45 [4]
//   atan      all finite                            2.77 [4]    0.87 [4]
//   asin      [-1, 1]                               3.57 [4]    2.16 [4]
//   acos      [-1, 1]                               3.47 [4]    1.70 [4]
//   atan2     random bits (both); grid [-3, 3]^2    3.02 [4]    1.59 [4]
//   pow       x in (0, 1e4] with y in [-60, 60];    0.50 [4]    0.99 [4]
//             any x in 2^[-40, 40] with y such that
//             the result spans subnormal..overflow;
//             x < 0 with integer y; random bits
//
// Beyond |x| = 1e4, sin/cos (Cody-Waite with a 3-part float / 4-part double
// pi/2, no Payne-Hanek) measured 1.42 ulp up to |x| = 1e5 for float32 but
// ~1e6 ulp by 1e6, and 1.41 ulp up to 1e9 for float64; for any finite x the
// result stays in [-1, 1]. float32 pow runs on double lanes and is rounded
// once (so about twice the cost of a float64 pow lane, still no libm).
#pragma once
#include <string>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Value.h>

namespace loom::jit::llvm_cpu {


llvm::Value* emit_exp(llvm::IRBuilder<>& b, llvm::Value* x);
// exp for an x known to be <= 0 or NaN (x - max over a set holding x):
// emit_exp's bits there, four operations fewer; any x > 0 is wrong.
llvm::Value* emit_exp_nonpositive(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_expm1(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_log(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_log1p(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_tanh(llvm::IRBuilder<>& b, llvm::Value* x);
// 1 / (1 + exp(-x)), without overflow for large negative x.
llvm::Value* emit_sigmoid(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_erf(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_sin(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_cos(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_atan(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_asin(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* emit_acos(llvm::IRBuilder<>& b, llvm::Value* x);
// x and y of the same type.
llvm::Value* emit_atan2(llvm::IRBuilder<>& b, llvm::Value* y, llvm::Value* x);
llvm::Value* emit_pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);

}  // namespace loom::jit::llvm_cpu
