// Accuracy and code-shape tests for the vectorizable math emitters
// (jit/llvm/math.h). Each function is emitted into a tiny module with two
// loops over arrays: one in host-width vectors, one scalar. The module is
// optimized at O2 and checked for calls (IR and host assembly), JIT-compiled
// with ORC for the host CPU, run over dense sweeps, sweeps uniform in bit
// pattern and random bit patterns, and compared with a reference one
// precision higher (double for float32, long double for float64). The
// measured maxima are printed; math.h's table is copied from that output.
#include "jit/llvm/math.h"

#include "jit/llvm/codegen.h"

#include <gtest/gtest.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/BasicBlock.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace lc = loom::jit::llvm_cpu;

enum class Fn { kExp, kExpm1, kLog, kLog1p, kTanh, kSigmoid, kErf, kSin, kCos, kPow, kExpNonPositive, kAtan, kAsin, kAcos, kAtan2 };

const char* fn_name(Fn fn) {
  static const char* names[] = {"exp", "expm1", "log", "log1p", "tanh",
                                "sigmoid", "erf", "sin", "cos", "pow", "exp<=0",
                                "atan", "asin", "acos", "atan2"};
  return names[static_cast<int>(fn)];
}

llvm::Value* emit(Fn fn, llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  switch (fn) {
    case Fn::kExp: return lc::emit_exp(b, x);
    case Fn::kExpm1: return lc::emit_expm1(b, x);
    case Fn::kLog: return lc::emit_log(b, x);
    case Fn::kLog1p: return lc::emit_log1p(b, x);
    case Fn::kTanh: return lc::emit_tanh(b, x);
    case Fn::kSigmoid: return lc::emit_sigmoid(b, x);
    case Fn::kErf: return lc::emit_erf(b, x);
    case Fn::kSin: return lc::emit_sin(b, x);
    case Fn::kCos: return lc::emit_cos(b, x);
    case Fn::kPow: return lc::emit_pow(b, x, y);
    case Fn::kExpNonPositive: return lc::emit_exp_nonpositive(b, x);
    case Fn::kAtan: return lc::emit_atan(b, x);
    case Fn::kAsin: return lc::emit_asin(b, x);
    case Fn::kAcos: return lc::emit_acos(b, x);
    case Fn::kAtan2: return lc::emit_atan2(b, x, y);
  }
  return nullptr;
}

// ------------------------------------------------------------ references --

// float32: double is exact enough (glibc's double functions are < 1 ulp of
// double, i.e. < 2^-28 ulp of float).
double ref_f32(Fn fn, double x, double y) {
  switch (fn) {
    case Fn::kExp: case Fn::kExpNonPositive: return std::exp(x);
    case Fn::kExpm1: return std::expm1(x);
    case Fn::kLog: return std::log(x);
    case Fn::kLog1p: return std::log1p(x);
    case Fn::kTanh: return std::tanh(x);
    case Fn::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Fn::kErf: return std::erf(x);
    case Fn::kSin: return std::sin(x);
    case Fn::kCos: return std::cos(x);
    case Fn::kPow: return std::pow(x, y);
    case Fn::kAtan: return std::atan(x);
    case Fn::kAsin: return std::asin(x);
    case Fn::kAcos: return std::acos(x);
    case Fn::kAtan2: return std::atan2(x, y);
  }
  return 0;
}

// float64: x87 long double (64-bit significand).
long double ref_f64(Fn fn, long double x, long double y) {
  switch (fn) {
    case Fn::kExp: case Fn::kExpNonPositive: return expl(x);
    case Fn::kExpm1: return expm1l(x);
    case Fn::kLog: return logl(x);
    case Fn::kLog1p: return log1pl(x);
    case Fn::kTanh: return tanhl(x);
    case Fn::kSigmoid: return 1.0L / (1.0L + expl(-x));
    case Fn::kErf: return erfl(x);
    case Fn::kSin: return sinl(x);
    case Fn::kCos: return cosl(x);
    case Fn::kPow: return powl(x, y);
    case Fn::kAtan: return atanl(x);
    case Fn::kAsin: return asinl(x);
    case Fn::kAcos: return acosl(x);
    case Fn::kAtan2: return atan2l(x, y);
  }
  return 0;
}

// std:: in the tested type, for the exact special-value checks.
template <class T>
T std_fn(Fn fn, T x, T y) {
  switch (fn) {
    case Fn::kExp: case Fn::kExpNonPositive: return std::exp(x);
    case Fn::kExpm1: return std::expm1(x);
    case Fn::kLog: return std::log(x);
    case Fn::kLog1p: return std::log1p(x);
    case Fn::kTanh: return std::tanh(x);
    case Fn::kSigmoid: return T(1) / (T(1) + std::exp(-x));
    case Fn::kErf: return std::erf(x);
    case Fn::kSin: return std::sin(x);
    case Fn::kCos: return std::cos(x);
    case Fn::kPow: return std::pow(x, y);
    case Fn::kAtan: return std::atan(x);
    case Fn::kAsin: return std::asin(x);
    case Fn::kAcos: return std::acos(x);
    case Fn::kAtan2: return std::atan2(x, y);
  }
  return 0;
}

template <class T>
struct Traits;
template <>
struct Traits<float> {
  using Ref = double;
  static constexpr int kMant = 23, kMinExp = -126;
  static Ref ref(Fn fn, float x, float y) { return ref_f32(fn, x, y); }
  static llvm::Type* type(llvm::LLVMContext& c) { return llvm::Type::getFloatTy(c); }
  static const char* name() { return "f32"; }
};
template <>
struct Traits<double> {
  using Ref = long double;
  static constexpr int kMant = 52, kMinExp = -1022;
  static Ref ref(Fn fn, double x, double y) { return ref_f64(fn, x, y); }
  static llvm::Type* type(llvm::LLVMContext& c) { return llvm::Type::getDoubleTy(c); }
  static const char* name() { return "f64"; }
};

// Error of `got` in ulps of the reference's binade in T (subnormal ulp below
// the normal range). A reference at or past 2^max_exp (the value just past
// the largest finite one) must give inf; below that an infinite result
// counts as 2^max_exp, so rounding at the overflow threshold is measured
// like any other rounding.
template <class T>
double ulp_error(T got, typename Traits<T>::Ref ref) {
  using R = typename Traits<T>::Ref;
  constexpr double kFail = std::numeric_limits<double>::infinity();
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : kFail;
  R past_max = std::ldexp(R(1), std::numeric_limits<T>::max_exponent);
  if (std::fabs(ref) >= past_max) return R(got) == std::copysign(R(INFINITY), ref) ? 0 : kFail;
  R g = got;
  if (std::isinf(got)) g = std::copysign(past_max, R(got));
  int e = 0;
  std::frexp(ref, &e);  // |ref| in [2^(e-1), 2^e)
  if (ref == 0) e = Traits<T>::kMinExp;
  R ulp = std::ldexp(R(1), std::max(e - 1, Traits<T>::kMinExp) - Traits<T>::kMant);
  return double(std::fabs(g - ref) / ulp);
}

template <class T>
bool same(T a, T b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

// ------------------------------------------------------------------ JIT --

int host_vector_bytes() {
  llvm::StringMap<bool> f;
  llvm::sys::getHostCPUFeatures(f);
  if (f.lookup("avx512f")) return 64;
  if (f.lookup("avx")) return 32;
  return 16;
}

using Body = std::function<llvm::Value*(llvm::IRBuilder<>&, llvm::Value*, llvm::Value*)>;

// void name(const T* x, const T* y, T* out, i64 n): out[i] = body(x[i], y[i])
// in steps of `width` lanes; n must be a multiple of width. With a `cpu`, the
// function carries it and its features as the backend's kernels do (the
// emitters use AVX-512-only instructions only where the function allows).
void build_kernel(llvm::Module& m, const char* name, llvm::Type* elem, unsigned width,
                  const Body& body, const std::string& cpu = "", const std::string& features = "") {
  llvm::LLVMContext& c = m.getContext();
  llvm::Type* ptr = llvm::PointerType::get(c, 0);
  llvm::Type* i64 = llvm::Type::getInt64Ty(c);
  auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(c), {ptr, ptr, ptr, i64}, false);
  auto* f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, m);
  if (!cpu.empty()) {
    f->addFnAttr("target-cpu", cpu);
    f->addFnAttr("target-features", features);
  }
  auto* entry = llvm::BasicBlock::Create(c, "entry", f);
  auto* loop = llvm::BasicBlock::Create(c, "loop", f);
  auto* done = llvm::BasicBlock::Create(c, "done", f);
  llvm::IRBuilder<> b(entry);
  b.CreateCondBr(b.CreateICmpSGT(f->getArg(3), b.getInt64(0)), loop, done);
  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(i64, 2);
  i->addIncoming(b.getInt64(0), entry);
  llvm::Type* vt = width == 1 ? elem : llvm::FixedVectorType::get(elem, width);
  llvm::Align align(elem->getPrimitiveSizeInBits() / 8);
  auto load = [&](llvm::Value* base) {
    return b.CreateAlignedLoad(vt, b.CreateGEP(elem, base, i), align);
  };
  llvm::Value* r = body(b, load(f->getArg(0)), load(f->getArg(1)));
  b.CreateAlignedStore(r, b.CreateGEP(elem, f->getArg(2), i), align);
  llvm::Value* next = b.CreateAdd(i, b.getInt64(width));
  i->addIncoming(next, loop);
  b.CreateCondBr(b.CreateICmpSLT(next, f->getArg(3)), loop, done);
  b.SetInsertPoint(done);
  b.CreateRetVoid();
}

// O2 without the vectorizers, so the scalar kernel stays scalar and the
// vector kernel is the emitted vector code.
void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = false;
  pto.SLPVectorization = false;
  llvm::PassBuilder pb(&tm, pto);
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(m, mam);
}

// Calls left in optimized IR other than intrinsics that x86 lowers to
// instructions.
std::vector<std::string> ir_calls(llvm::Module& m) {
  static const llvm::Intrinsic::ID kOk[] = {
      llvm::Intrinsic::fma,     llvm::Intrinsic::fmuladd, llvm::Intrinsic::floor,
      llvm::Intrinsic::ceil,    llvm::Intrinsic::trunc,   llvm::Intrinsic::rint,
      llvm::Intrinsic::nearbyint, llvm::Intrinsic::roundeven, llvm::Intrinsic::fabs,
      llvm::Intrinsic::copysign, llvm::Intrinsic::minnum,  llvm::Intrinsic::maxnum,
      llvm::Intrinsic::smin,    llvm::Intrinsic::smax,    llvm::Intrinsic::umin,
      llvm::Intrinsic::umax,    llvm::Intrinsic::abs,     llvm::Intrinsic::sqrt,  // one instruction (asin, acos)
      llvm::Intrinsic::x86_avx512_mask_scalef_ps_512, llvm::Intrinsic::x86_avx512_mask_scalef_pd_512};
  std::vector<std::string> bad;
  for (llvm::Function& f : m)
    for (llvm::Instruction& inst : llvm::instructions(f)) {
      auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
      if (!call) continue;
      llvm::Function* callee = call->getCalledFunction();
      if (callee && callee->isIntrinsic() &&
          std::find(std::begin(kOk), std::end(kOk), callee->getIntrinsicID()) != std::end(kOk))
        continue;
      bad.push_back(callee ? callee->getName().str() : "<indirect>");
    }
  return bad;
}

// call / jmp-to-symbol instructions in the host assembly of the module.
std::vector<std::string> asm_calls(const llvm::Module& m, llvm::TargetMachine& tm) {
  std::unique_ptr<llvm::Module> clone = llvm::CloneModule(m);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_AssemblyFile)) return {"<no asm>"};
  pm.run(*clone);
  std::vector<std::string> bad;
  std::istringstream in(text.str().str());
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string op, target;
    words >> op >> target;
    if (op.rfind("call", 0) == 0 || (op == "jmp" && target.rfind(".L", 0) != 0))
      bad.push_back(line);
  }
  return bad;
}

void init_llvm() {
  static const bool done = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)done;
}

std::unique_ptr<llvm::TargetMachine> avx2_target_machine(
    const llvm::orc::JITTargetMachineBuilder& host) {
  llvm::orc::JITTargetMachineBuilder b(host.getTargetTriple());
  b.setCPU("haswell");
  b.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
  return llvm::cantFail(b.createTargetMachine());
}

template <class T>
struct Compiled {
  using Kernel = void (*)(const T*, const T*, T*, int64_t);
  std::unique_ptr<llvm::orc::LLJIT> jit;
  Kernel vec = nullptr;
  Kernel vec4 = nullptr;  // four registers per step, as the backend's unrolled loops
  Kernel scalar = nullptr;
  int width = 1;
  std::vector<std::string> ir_calls, asm_calls;
};

// With `fast_builder`, the builder handed to the emitter carries all
// fast-math flags, as a caller compiling with -ffast-math semantics would.
template <class T>
Compiled<T> compile(Fn fn, bool fast_builder = false) {
  init_llvm();
  Compiled<T> out;
  out.width = host_vector_bytes() / int(sizeof(T));
  auto jtmb = llvm::cantFail(llvm::orc::JITTargetMachineBuilder::detectHost());
  jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
  std::unique_ptr<llvm::TargetMachine> tm = llvm::cantFail(jtmb.createTargetMachine());
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = std::make_unique<llvm::Module>(std::string("math_") + fn_name(fn), *ctx);
  m->setDataLayout(tm->createDataLayout());
  m->setTargetTriple(tm->getTargetTriple().str());
  auto body = [fn, fast_builder](llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
    if (fast_builder) b.setFastMathFlags(llvm::FastMathFlags::getFast());
    return emit(fn, b, x, y);
  };
  // The host's cpu and features on every function, as the backend's kernels.
  const lc::Target& host = lc::host_target();
  build_kernel(*m, "vec", Traits<T>::type(*ctx), out.width, body, host.cpu, host.features);
  build_kernel(*m, "vec4", Traits<T>::type(*ctx), 4 * out.width, body, host.cpu, host.features);
  build_kernel(*m, "scalar", Traits<T>::type(*ctx), 1, body, host.cpu, host.features);
  EXPECT_FALSE(llvm::verifyModule(*m, &llvm::errs()));
  optimize(*m, *tm);
  out.ir_calls = ir_calls(*m);
  out.asm_calls = asm_calls(*m, *tm);
  // Also for an AVX2-only CPU (no AVX-512), the oldest the backend targets:
  // emitted again for it, since the emitters choose by the function's target.
  {
    llvm::LLVMContext c2;
    llvm::Module m2(std::string("math_avx2_") + fn_name(fn), c2);
    std::unique_ptr<llvm::TargetMachine> avx2 = avx2_target_machine(jtmb);
    m2.setDataLayout(avx2->createDataLayout());
    m2.setTargetTriple(avx2->getTargetTriple().str());
    build_kernel(m2, "vec", Traits<T>::type(c2), 32 / int(sizeof(T)), body, "haswell", "");
    build_kernel(m2, "scalar", Traits<T>::type(c2), 1, body, "haswell", "");
    EXPECT_FALSE(llvm::verifyModule(m2, &llvm::errs()));
    optimize(m2, *avx2);
    for (std::string& c : asm_calls(m2, *avx2)) out.asm_calls.push_back("[haswell] " + c);
  }
  out.jit = llvm::cantFail(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create());
  llvm::cantFail(out.jit->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))));
  out.vec = llvm::cantFail(out.jit->lookup("vec")).template toPtr<typename Compiled<T>::Kernel>();
  out.vec4 = llvm::cantFail(out.jit->lookup("vec4")).template toPtr<typename Compiled<T>::Kernel>();
  out.scalar =
      llvm::cantFail(out.jit->lookup("scalar")).template toPtr<typename Compiled<T>::Kernel>();
  return out;
}

// --------------------------------------------------------------- inputs --

template <class T>
using BitsOf = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

// count values evenly spaced in [lo, hi].
template <class T>
void add_linear(std::vector<T>& v, double lo, double hi, int count) {
  for (int i = 0; i < count; ++i) v.push_back(T(lo + (hi - lo) * i / (count - 1)));
}

// count values evenly spaced in bit pattern over [lo, hi] (0 < lo < hi), so
// every binade gets the same share; with `both_signs` also their negatives.
template <class T>
void add_bits(std::vector<T>& v, T lo, T hi, int count, bool both_signs) {
  using B = BitsOf<T>;
  B a = std::bit_cast<B>(lo), z = std::bit_cast<B>(hi);
  for (int i = 0; i < count; ++i) {
    T x = std::bit_cast<T>(B(a + (z - a) / B(count - 1) * B(i)));
    v.push_back(x);
    if (both_signs) v.push_back(-x);
  }
}

template <class T>
void add_random_bits(std::vector<T>& v, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < count; ++i) v.push_back(std::bit_cast<T>(BitsOf<T>(rng())));
}

template <class T>
std::vector<T> specials() {
  using L = std::numeric_limits<T>;
  std::vector<T> s = {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(), T(0), -T(0),
                      L::denorm_min(), -L::denorm_min(), L::min(), -L::min(), L::max(), -L::max(),
                      T(1), T(-1), T(0.5), T(-0.5), T(2), T(-2), T(1e-30), T(-1e-30)};
  return s;
}

// --------------------------------------------------------------- checks --

struct Stats {
  double max_ulp = 0;
  double worst_x = 0, worst_y = 0;
  long mismatches = 0;  // vector and scalar results differ
  long count = 0;
};

// Runs both kernels over (x, y) and measures each result against the
// reference; `accept` filters the inputs counted in the statistics.
template <class T>
Stats measure(const Compiled<T>& k, Fn fn, std::vector<T> x, std::vector<T> y,
              const std::type_identity_t<std::function<bool(T, T)>>& accept = nullptr) {
  if (y.empty()) y.assign(x.size(), T(0));
  size_t n = x.size(), padded = (n + 4 * k.width - 1) / (4 * k.width) * (4 * k.width);
  x.resize(padded, T(0));
  y.resize(padded, T(0));
  std::vector<T> out_v(padded), out_v4(padded), out_s(padded);
  k.vec(x.data(), y.data(), out_v.data(), int64_t(padded));
  k.vec4(x.data(), y.data(), out_v4.data(), int64_t(padded));
  k.scalar(x.data(), y.data(), out_s.data(), int64_t(padded));
  Stats st;
  for (size_t i = 0; i < n; ++i) {
    if (!same(out_v[i], out_s[i]) || !same(out_v4[i], out_s[i])) ++st.mismatches;
    if (accept && !accept(x[i], y[i])) continue;
    ++st.count;
    double err = ulp_error<T>(out_v[i], Traits<T>::ref(fn, x[i], y[i]));
    if (!(err <= st.max_ulp)) {
      st.max_ulp = err;
      st.worst_x = x[i];
      st.worst_y = y[i];
    }
  }
  return st;
}

template <class T>
void report(Fn fn, const char* what, const Stats& st, double bound) {
  std::printf("[ ulp      ] %-7s %s %-28s max %.3f ulp at x=%.17g y=%.17g (%ld inputs)\n",
              fn_name(fn), Traits<T>::name(), what, st.max_ulp, st.worst_x, st.worst_y,
              st.count);
  EXPECT_LE(st.max_ulp, bound) << fn_name(fn) << " " << Traits<T>::name() << " " << what
                               << " worst x=" << st.worst_x << " y=" << st.worst_y;
  EXPECT_EQ(st.mismatches, 0) << "vector (one or four registers) and scalar kernels disagree";
}

// Special inputs against std::. Exact (bits, or both NaN) where the input
// is NaN, +-inf or +-0, where std:: gives NaN or +-inf, and for every input
// in `exact`; elsewhere within `bound` ulp of the reference.
template <class T>
void check_specials(const Compiled<T>& k, Fn fn, std::vector<T> x, std::vector<T> y,
                    const std::vector<T>& exact, double bound) {
  size_t n = x.size();
  x.insert(x.end(), exact.begin(), exact.end());
  y.resize(x.size(), T(0));
  size_t padded = (x.size() + k.width - 1) / k.width * k.width;
  x.resize(padded, T(0));
  y.resize(padded, T(0));
  std::vector<T> out(padded);
  k.vec(x.data(), y.data(), out.data(), int64_t(padded));
  for (size_t i = 0; i < n + exact.size(); ++i) {
    T want = std_fn<T>(fn, x[i], y[i]);
    bool must_match = i >= n || !std::isfinite(x[i]) || x[i] == 0 || !std::isfinite(want);
    if (must_match)
      EXPECT_TRUE(same(out[i], want)) << fn_name(fn) << " " << Traits<T>::name() << "(" << x[i]
                                      << ", " << y[i] << ") = " << out[i] << ", std:: gives "
                                      << want;
    else
      EXPECT_LE(ulp_error<T>(out[i], Traits<T>::ref(fn, x[i], y[i])), bound)
          << fn_name(fn) << " " << Traits<T>::name() << "(" << x[i] << ")";
  }
}

template <class T>
void check_no_calls(const Compiled<T>& k, Fn fn) {
  for (const std::string& c : k.ir_calls) ADD_FAILURE() << fn_name(fn) << ": IR calls " << c;
  for (const std::string& c : k.asm_calls) ADD_FAILURE() << fn_name(fn) << ": asm has " << c;
}

// ------------------------------------------------- unary function tests --

template <class T>
struct UnaryCase {
  Fn fn;
  double bound;          // asserted max ulp
  double lo, hi;         // dense linear sweep and the range of the table
  T bits_lo, bits_hi;    // sweep uniform in bit pattern, both signs
  bool bits_both_signs;
  std::vector<T> exact;  // extra inputs that must match std:: exactly
  double lo2 = 0, hi2 = 0;  // a second, narrower dense sweep (if lo2 < hi2)
};

template <class T>
int scale() {  // float64 references are slower; use fewer points
  return sizeof(T) == 4 ? 2 : 1;
}

template <class T>
void run_unary(const UnaryCase<T>& c) {
  Compiled<T> k = compile<T>(c.fn);
  check_no_calls(k, c.fn);
  int n = 400000 * scale<T>();

  std::vector<T> dense;
  add_linear(dense, c.lo, c.hi, n);
  report<T>(c.fn, "dense sweep", measure(k, c.fn, dense, {}), c.bound);
  if (c.lo2 < c.hi2) {
    std::vector<T> dense2;
    add_linear(dense2, c.lo2, c.hi2, n);
    report<T>(c.fn, "narrow dense sweep", measure(k, c.fn, dense2, {}), c.bound);
  }

  std::vector<T> bits;
  add_bits(bits, c.bits_lo, c.bits_hi, n, c.bits_both_signs);
  // The documented range: the dense range plus the bit-pattern range.
  auto in_range = [&](T x, T) {
    bool in_bits = std::fabs(x) >= c.bits_lo && std::fabs(x) <= c.bits_hi &&
                   (c.bits_both_signs || x > 0);
    return (x >= T(c.lo) && x <= T(c.hi)) || in_bits;
  };
  report<T>(c.fn, "bit-pattern sweep", measure(k, c.fn, bits, {}, in_range), c.bound);

  // Random bits: everything in the documented range to the bound; NaN/inf
  // results and inputs beyond the range (sin/cos) are checked separately.
  std::vector<T> rnd;
  add_random_bits(rnd, n, 42 + int(c.fn));
  report<T>(c.fn, "random bits in range", measure(k, c.fn, rnd, {}, in_range), c.bound);

  // Specials and NaN/inf results of the random inputs against std::.
  std::vector<T> sp = specials<T>();
  for (T x : rnd)
    if (!std::isfinite(std_fn<T>(c.fn, x, T(0)))) sp.push_back(x);
  // Finite inputs past the documented range (sin/cos of +-max) are only
  // required to stay in [-1, 1], below.
  std::erase_if(sp, [&](T x) { return std::isfinite(x) && x != 0 && !in_range(x, x); });
  check_specials(k, c.fn, sp, {}, c.exact, c.bound);

  if (c.fn == Fn::kSin || c.fn == Fn::kCos) {
    // Beyond the accurate range std:: still gives a finite value; so must we.
    std::vector<T> out(rnd.size() + k.width);
    rnd.resize((rnd.size() + k.width - 1) / k.width * k.width, T(0));
    k.vec(rnd.data(), rnd.data(), out.data(), int64_t(rnd.size()));
    for (size_t i = 0; i < rnd.size(); ++i)
      if (std::isfinite(rnd[i]))
        ASSERT_TRUE(out[i] >= T(-1) && out[i] <= T(1)) << fn_name(c.fn) << "(" << rnd[i] << ")";
  }
}

template <class T>
void run_trig_extended(Fn fn) {
  // Informational: how the error grows past the documented range.
  Compiled<T> k = compile<T>(fn);
  for (double hi : {1e5, 1e6, 1e9}) {
    std::vector<T> v;
    add_linear(v, -hi, hi, 200000);
    Stats st = measure(k, fn, v, {});
    std::printf("[ info     ] %-7s %s |x| <= %-8g max %.3f ulp\n", fn_name(fn), Traits<T>::name(),
                hi, st.max_ulp);
  }
}

constexpr float kFMax = std::numeric_limits<float>::max();
constexpr double kDMax = std::numeric_limits<double>::max();
constexpr float kFTiny = std::numeric_limits<float>::denorm_min();
constexpr double kDTiny = std::numeric_limits<double>::denorm_min();

TEST(JitMath, ExpF32) {
  run_unary<float>({Fn::kExp, 2, -104, 89, 1e-10f, 104, true, {-104, 89, 88.7228394f, -1000}, -1, 1});
}
// exp_nonpositive (softmax's exp(x - max x)) must give exp's bits for every
// x <= 0 and NaN: a dense sweep, every binade of both types (subnormal
// results included), random negative bit patterns and the specials.
template <class T>
void run_exp_nonpositive(double lo) {
  Compiled<T> exp = compile<T>(Fn::kExp), np = compile<T>(Fn::kExpNonPositive);
  check_no_calls(np, Fn::kExpNonPositive);
  using L = std::numeric_limits<T>;
  const int n = 200000 * scale<T>();
  std::vector<T> x;
  add_linear(x, lo, 0, n);
  std::vector<T> mags;
  add_bits(mags, L::denorm_min(), L::max(), n, false);
  add_random_bits(mags, n, 7);
  for (T m : mags) x.push_back(-std::fabs(m));
  for (T s : specials<T>())
    if (!(s > 0)) x.push_back(s);
  x.resize((x.size() + 4 * np.width - 1) / (4 * np.width) * (4 * np.width), T(0));
  long differ = 0;
  T worst = 0;
  for (auto run : {&Compiled<T>::vec, &Compiled<T>::vec4, &Compiled<T>::scalar}) {
    std::vector<T> want(x.size()), got(x.size());
    (exp.*run)(x.data(), x.data(), want.data(), int64_t(x.size()));
    (np.*run)(x.data(), x.data(), got.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i)
      if (!same(got[i], want[i])) ++differ, worst = x[i];
  }
  EXPECT_EQ(differ, 0) << Traits<T>::name() << ": exp<=0 and exp differ, e.g. at x=" << worst;
}
TEST(JitMath, ExpNonPositiveIsExpF32) { run_exp_nonpositive<float>(-110); }
TEST(JitMath, ExpNonPositiveIsExpF64) { run_exp_nonpositive<double>(-750); }

TEST(JitMath, ExpF64) {
  run_unary<double>({Fn::kExp, 4, -746, 710, 1e-20, 746, true, {-746, 710, 709.79, -1e4}, -1, 1});
}
TEST(JitMath, Expm1F32) {
  run_unary<float>({Fn::kExpm1, 4, -90, 89, kFTiny, 90, true, {-90, 89, -1e-40f}, -1, 1});
}
TEST(JitMath, Expm1F64) {
  run_unary<double>({Fn::kExpm1, 4, -710, 710, kDTiny, 710, true, {-710, 710, -1e-310}, -1, 1});
}
TEST(JitMath, LogF32) {
  run_unary<float>({Fn::kLog, 2, 0, kFMax, kFTiny, kFMax, false, {1, -1, -kFTiny}, 0.25, 4});
}
TEST(JitMath, LogF64) {
  run_unary<double>({Fn::kLog, 4, 0, kDMax, kDTiny, kDMax, false, {1, -1, -kDTiny}, 0.25, 4});
}
TEST(JitMath, Log1pF32) {
  run_unary<float>({Fn::kLog1p, 4, -1, kFMax, kFTiny, kFMax, false, {-1, -2, -kFMax, kFTiny}, -0.5, 1});
}
TEST(JitMath, Log1pF64) {
  run_unary<double>({Fn::kLog1p, 4, -1, kDMax, kDTiny, kDMax, false, {-1, -2, -kDMax, kDTiny}, -0.5, 1});
}
TEST(JitMath, Log1pNearMinusOne) {
  // (-1, 0) in bit pattern: the negative half the sweeps above cover only
  // linearly.
  Compiled<float> kf = compile<float>(Fn::kLog1p);
  std::vector<float> vf;
  add_bits(vf, kFTiny, std::nextafter(1.0f, 0.0f), 800000, false);
  for (float& x : vf) x = -x;
  report<float>(Fn::kLog1p, "(-1, 0) bit-pattern sweep", measure(kf, Fn::kLog1p, vf, {}), 4);
  Compiled<double> kd = compile<double>(Fn::kLog1p);
  std::vector<double> vd;
  add_bits(vd, kDTiny, std::nextafter(1.0, 0.0), 400000, false);
  for (double& x : vd) x = -x;
  report<double>(Fn::kLog1p, "(-1, 0) bit-pattern sweep", measure(kd, Fn::kLog1p, vd, {}), 4);
}
TEST(JitMath, TanhF32) {
  run_unary<float>({Fn::kTanh, 4, -12, 12, kFTiny, kFMax, true, {10.5f, -10.5f, 1e30f, kFTiny}, -1, 1});
}
TEST(JitMath, TanhF64) {
  run_unary<double>({Fn::kTanh, 4, -25, 25, kDTiny, kDMax, true, {20.5, -20.5, 1e300, kDTiny}, -1, 1});
}
TEST(JitMath, SigmoidF32) {
  run_unary<float>({Fn::kSigmoid, 4, -110, 110, kFTiny, kFMax, true, {-110, 110, -1e30f, 1e30f}, -20, 20});
}
TEST(JitMath, SigmoidF64) {
  run_unary<double>({Fn::kSigmoid, 4, -750, 750, kDTiny, kDMax, true, {-750, 750, -1e300, 1e300}, -20, 20});
}
TEST(JitMath, ErfF32) {
  run_unary<float>({Fn::kErf, 4, -6, 6, kFTiny, kFMax, true, {4, -4, 10, -10, 1e30f}, -1, 1});
}
TEST(JitMath, ErfF64) {
  run_unary<double>({Fn::kErf, 4, -7, 7, kDTiny, kDMax, true, {6, -6, 10, -10, 1e300}, -1, 1});
}
TEST(JitMath, SinF32) { run_unary<float>({Fn::kSin, 4, -1e4, 1e4, kFTiny, 1e4f, true, {}, -10, 10}); }
TEST(JitMath, SinF64) { run_unary<double>({Fn::kSin, 4, -1e4, 1e4, kDTiny, 1e4, true, {}, -10, 10}); }
TEST(JitMath, CosF32) { run_unary<float>({Fn::kCos, 4, -1e4, 1e4, kFTiny, 1e4f, true, {}, -10, 10}); }
TEST(JitMath, CosF64) { run_unary<double>({Fn::kCos, 4, -1e4, 1e4, kDTiny, 1e4, true, {}, -10, 10}); }
TEST(JitMath, AtanF32) { run_unary<float>({Fn::kAtan, 4, -20, 20, kFTiny, kFMax, true, {1, -1, 1e30f}, -1, 1}); }
TEST(JitMath, AtanF64) { run_unary<double>({Fn::kAtan, 4, -20, 20, kDTiny, kDMax, true, {1, -1, 1e300}, -1, 1}); }
TEST(JitMath, AsinF32) { run_unary<float>({Fn::kAsin, 4, -1, 1, kFTiny, 1, true, {1, -1, 1.5f, -2}, 0.9, 1}); }
TEST(JitMath, AsinF64) { run_unary<double>({Fn::kAsin, 4, -1, 1, kDTiny, 1, true, {1, -1, 1.5, -2}, 0.9, 1}); }
TEST(JitMath, AcosF32) { run_unary<float>({Fn::kAcos, 4, -1, 1, kFTiny, 1, true, {1, -1, 1.5f, -2}, -1, -0.9}); }
TEST(JitMath, AcosF64) { run_unary<double>({Fn::kAcos, 4, -1, 1, kDTiny, 1, true, {1, -1, 1.5, -2}, -1, -0.9}); }

// atan2 over pairs: random bit patterns of both signs (every ratio, with
// underflow and overflow of y/x), a dense grid, and every pair of specials
// (+-0, +-inf, NaN, finite), which must match std:: exactly.
template <class T>
void run_atan2() {
  Compiled<T> k = compile<T>(Fn::kAtan2);
  check_no_calls(k, Fn::kAtan2);
  const int n = 400000 * scale<T>();
  std::vector<T> y, x;
  add_random_bits(y, n, 91);
  add_random_bits(x, n, 92);
  auto finite = [](T a, T b) { return std::isfinite(a) && std::isfinite(b); };
  report<T>(Fn::kAtan2, "random bits", measure(k, Fn::kAtan2, y, x, finite), 4);
  std::vector<T> gy, gx;
  for (int i = 0; i < 700; ++i)
    for (int j = 0; j < 700; ++j) gy.push_back(T(-3 + 6.0 * i / 699)), gx.push_back(T(-3 + 6.0 * j / 699));
  report<T>(Fn::kAtan2, "grid [-3, 3]^2", measure(k, Fn::kAtan2, gy, gx), 4);
  std::vector<T> sy, sx;
  for (T a : specials<T>())
    for (T b : specials<T>()) sy.push_back(a), sx.push_back(b);
  check_specials(k, Fn::kAtan2, sy, sx, {}, 4);
}
TEST(JitMath, Atan2F32) { run_atan2<float>(); }
TEST(JitMath, Atan2F64) { run_atan2<double>(); }

TEST(JitMath, SinCosBeyondRangeInfo) {
  for (Fn fn : {Fn::kSin, Fn::kCos}) {
    run_trig_extended<float>(fn);
    run_trig_extended<double>(fn);
  }
}

// The call scanners must see a libm call when there is one: llvm.exp on a
// vector lowers to calls to expf.
TEST(JitMath, CallScanCatchesLibmCalls) {
  init_llvm();
  auto jtmb = llvm::cantFail(llvm::orc::JITTargetMachineBuilder::detectHost());
  std::unique_ptr<llvm::TargetMachine> tm = llvm::cantFail(jtmb.createTargetMachine());
  llvm::LLVMContext ctx;
  llvm::Module m("libm_call", ctx);
  m.setDataLayout(tm->createDataLayout());
  m.setTargetTriple(tm->getTargetTriple().str());
  build_kernel(m, "vec", llvm::Type::getFloatTy(ctx), 8,
               [](llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value*) {
                 return b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
               });
  optimize(m, *tm);
  EXPECT_FALSE(ir_calls(m).empty());
  std::vector<std::string> calls = asm_calls(m, *tm);
  // One expf call per lane (through a register holding its address).
  EXPECT_GE(calls.size(), 8u);
}

// Throughput of the vector kernels against a scalar std:: loop, for tuning;
// run with --gtest_also_run_disabled_tests.
template <class T>
void time_fn(Fn fn) {
  Compiled<T> k = compile<T>(fn);
  const int n = 1 << 16, reps = 200;
  std::vector<T> x, y(n, T(1.5)), out(n);
  add_linear(x, 0.1, 10, n);
  auto ns_per = [&](auto&& body) {
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) body();
    std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t0;
    return d.count() / (double(n) * reps);
  };
  double jit = ns_per([&] { k.vec(x.data(), y.data(), out.data(), n); });
  double libm = ns_per([&] {
    for (int i = 0; i < n; ++i) out[i] = std_fn<T>(fn, x[i], y[i]);
    asm volatile("" : : "r"(out.data()) : "memory");
  });
  std::printf("[ time     ] %-7s %s  jit %6.3f ns/elem   std:: loop %6.3f ns/elem\n", fn_name(fn),
              Traits<T>::name(), jit, libm);
}

TEST(JitMath, DISABLED_Throughput) {
  for (Fn fn : {Fn::kExp, Fn::kExpm1, Fn::kLog, Fn::kLog1p, Fn::kTanh, Fn::kSigmoid, Fn::kErf,
                Fn::kSin, Fn::kCos, Fn::kPow}) {
    time_fn<float>(fn);
    time_fn<double>(fn);
  }
}

// The emitters clear the caller's fast-math flags: NaN/inf/-0 handling
// must survive a builder set to `fast`.
TEST(JitMath, IgnoresCallerFastMathFlags) {
  using L = std::numeric_limits<float>;
  std::vector<float> sp = {L::quiet_NaN(), L::infinity(), -L::infinity(), 0.0f, -0.0f, -1.0f};
  for (Fn fn : {Fn::kExp, Fn::kExpm1, Fn::kLog, Fn::kLog1p, Fn::kTanh, Fn::kSigmoid, Fn::kErf,
                Fn::kSin, Fn::kCos}) {
    Compiled<float> k = compile<float>(fn, true);
    check_specials(k, fn, sp, {}, {}, 4);
  }
  Compiled<float> k = compile<float>(Fn::kPow, true);
  check_specials(k, Fn::kPow, {0.0f, -0.0f, -2.0f, L::infinity(), L::quiet_NaN(), 1.0f},
                 {-1.0f, -3.0f, 0.5f, -0.5f, 0.0f, L::quiet_NaN()}, {}, 4);
}

// ------------------------------------------------------------------ pow --

template <class T>
void run_pow(double bound) {
  Compiled<T> k = compile<T>(Fn::kPow);
  check_no_calls(k, Fn::kPow);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u01(0, 1);
  int n = 400000 * scale<T>();
  constexpr int kMaxExp = std::numeric_limits<T>::max_exponent;
  constexpr int kMinExp = std::numeric_limits<T>::min_exponent - std::numeric_limits<T>::digits;

  // x in (0, 1e4] log-uniform, y in [-60, 60].
  std::vector<T> x, y;
  for (int i = 0; i < n; ++i) {
    x.push_back(T(std::exp2(u01(rng) * (std::log2(1e4) + 30) - 30)));
    y.push_back(T(u01(rng) * 120 - 60));
  }
  report<T>(Fn::kPow, "x (0,1e4] y [-60,60]", measure(k, Fn::kPow, x, y), bound);

  // Results spread over the whole range, subnormal to overflow: x anywhere,
  // y chosen so that y log2 x is uniform in [min_exp - 2, max_exp + 1].
  x.clear();
  y.clear();
  for (int i = 0; i < n; ++i) {
    T xi = T(std::exp2(u01(rng) * 80 - 40));
    if (xi == 1) continue;
    double target = kMinExp - 2 + u01(rng) * (kMaxExp - kMinExp + 3);
    x.push_back(xi);
    y.push_back(T(target / std::log2(double(xi))));
  }
  report<T>(Fn::kPow, "y log2 x over whole range", measure(k, Fn::kPow, x, y), bound);

  // Negative bases with integer exponents.
  x.clear();
  y.clear();
  for (int i = 0; i < n; ++i) {
    x.push_back(T(-std::exp2(u01(rng) * 14 - 7)));
    y.push_back(T(std::floor(u01(rng) * 61 - 30)));
  }
  report<T>(Fn::kPow, "x<0, integer y in [-30,30]", measure(k, Fn::kPow, x, y), bound);

  // Random bit pairs: special results exactly, the rest to the bound
  // (but only where |y log x| keeps the result finite and nonzero).
  x.clear();
  y.clear();
  add_random_bits(x, n, 11);
  add_random_bits(y, n, 12);
  report<T>(Fn::kPow, "random bits", measure(k, Fn::kPow, x, y), bound);

  // The C99 special cases, every pair of these, against std::pow: exact
  // where either side is special or the result is; to the bound otherwise.
  using L = std::numeric_limits<T>;
  std::vector<T> vals = {T(0), -T(0), L::infinity(), -L::infinity(), L::quiet_NaN(), T(1), T(-1),
                         T(0.5), T(-0.5), T(2), T(-2), T(3), T(-3), T(1.5), T(-1.5),
                         T(16777215), T(-16777215), T(0x1p60), T(-0x1p60), L::denorm_min(),
                         L::max(), -L::max()};
  std::vector<T> px, py;
  for (T a : vals)
    for (T b : vals) {
      px.push_back(a);
      py.push_back(b);
    }
  std::vector<T> out(px.size() + k.width);
  size_t padded = (px.size() + k.width - 1) / k.width * k.width;
  px.resize(padded, T(1));
  py.resize(padded, T(1));
  k.vec(px.data(), py.data(), out.data(), int64_t(padded));
  for (size_t i = 0; i < padded; ++i) {
    T want = std::pow(px[i], py[i]);
    bool special = !std::isfinite(px[i]) || !std::isfinite(py[i]) || px[i] == 0 || py[i] == 0 ||
                   std::fabs(px[i]) == 1 || !std::isfinite(want) || want == 0;
    if (special)
      EXPECT_TRUE(same(out[i], want))
          << "pow(" << px[i] << ", " << py[i] << ") = " << out[i] << ", std:: gives " << want;
    else
      EXPECT_LE(ulp_error<T>(out[i], Traits<T>::ref(Fn::kPow, px[i], py[i])), bound)
          << "pow(" << px[i] << ", " << py[i] << ")";
  }
  // Exactly representable results come out exact.
  for (auto [a, b] : {std::pair<T, T>{3, 2}, {2, 10}, {-2, 3}, {10, 2}, {4, 0.5}, {10, 5},
                      {7, 3}, {-3, 5}, {2, -3}, {0.5, 4}}) {
    T in_x[64] = {}, in_y[64] = {}, res[64] = {};
    in_x[0] = a;
    in_y[0] = b;
    k.vec(in_x, in_y, res, k.width);
    EXPECT_EQ(res[0], std::pow(a, b)) << "pow(" << a << ", " << b << ")";
  }
}

TEST(JitMath, PowF32) { run_pow<float>(4); }
TEST(JitMath, PowF64) { run_pow<double>(4); }

}  // namespace
