// Kernel emission as CUDA C text. The structure follows the LLVM generator
// (jit/llvm/codegen.cpp): phases in order, each expression of the body once
// per element, the same NaN, integer-wrap and error semantics; only the
// loop structure differs (threads instead of loops, see codegen.h).
#include "jit/cuda/codegen.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "ir/lower.h"
#include "jit/cuda/gemm.h"

namespace loom::kernels::cuda::detail {
extern const char kPhiloxSource[];  // ir/philox.h, embedded at build time (embed_source.cmake)
extern const char kBf16Source[];    // kernels/cuda/bfloat16.cuh, the same way
}  // namespace loom::kernels::cuda::detail

namespace loom::jit::cuda {

namespace {

using ir::ExprKind;
using ir::Family;
using ir::Op;

const char* kPrelude =
#include "jit/cuda/prelude.cu.inc"
    ;

constexpr int kLanes = 4;           // elements per thread in vectorized pointwise kernels
constexpr int kMaxPerThread = 8;    // a row up to G x this many elements stays in registers
constexpr int kMaxStashRegs = 48;   // registers per thread the row stash may take
constexpr int kMaxEarlyRegs = 64;   // and the loads moved into phase 0 (plan_early_loads)
constexpr int kColumnSteps = 4;     // column groups: steps per thread before a row takes more threads
constexpr int kColumnMinRows = 256; // column groups: rows a kernel needs for enough blocks
// The parameters every generated kernel starts with (codegen.h), and a
// single-block program's steps too.
const char* const kKernelParams = "void* const* bufs, const double* fs, const long long* is, long long* err";

const char* ctype(ScalarType dt) {
  switch (dt) {
    case kBool: return "bool";
    case kInt: return "int";
    case kLong: return "long long";
    case kFloat: return "float";
    case kDouble: return "double";
    case kBFloat16: return "float";  // computed in float32, rounded per op (loom_bf16_round)
  }
  return "float";
}
const char* mtype(ScalarType dt) { return dt == kBool ? "unsigned char" : dt == kBFloat16 ? "unsigned short" : ctype(dt); }
// Reduction accumulators: bool folds as int (warp shuffles take no bool).
const char* acctype(ScalarType dt) { return dt == kBool ? "int" : ctype(dt); }
bool fp(ScalarType dt) { return is_floating_point(dt); }
// A libm-style name for dt: expf for float, exp for double.
std::string fn(const char* name, ScalarType dt) { return std::string(name) + (dt == kDouble ? "" : "f"); }

std::string lit(double v, ScalarType dt) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return dt == kDouble ? s : "(float)" + s;
}

int64_t prod(const ir::Dims& d, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= d[i];
  return p;
}

int pow2_at_least(int64_t x) {
  int p = 1;
  while (p < x && p < (1 << 20)) p <<= 1;
  return p;
}


// Threads that share one element of a single-block product: the block's
// threads over the outputs, a power of two from 1 to 32 (one warp).
int block_product_lanes(int64_t outputs) {
  int p = 1;
  while (p < 32 && outputs * p * 2 <= kSingleBlockThreads) p *= 2;
  return p;
}

bool is_pointwise(const ir::Kernel& k) {
  return k.phases.size() == 1 && k.phases[0].kind == ir::Phase::Store && !k.phases[0].per_row;
}

// Whether 4 consecutive innermost elements form one aligned 16-byte (or
// 4-byte for bool) group in every access that walks them.
bool can_use_lanes(const ir::KernelProgram& p, const ir::Kernel& k) {
  const int n = k.loop.n;
  if (n == 0 || k.loop[n - 1] % kLanes != 0) return false;
  for (const ir::Access& a : k.accesses) {
    if (a.strides[n - 1] != 1) continue;
    if (a.offset % kLanes != 0) return false;
    for (int d = 0; d + 1 < n; ++d)
      if (a.strides[d] % kLanes != 0) return false;
    const ir::BufferInfo& b = p.buffers[a.buffer];
    if (b.kind == ir::BufferKind::Temp && b.arena_offset % 32 != 0) return false;
  }
  return true;
}

class KernelEmitter {
 public:
  // A kernel of its own (not `single_block`): p and k are a kernel's local
  // form (ir::LocalKernel), emitted as the shared function
  // shared_symbol(index), whose failures name their node through the
  // launch's node table (`nd`). A single-block step: kernel_symbol(index)
  // of the whole program, its nodes as constants.
  KernelEmitter(const ir::KernelProgram& p, const ir::Kernel& k, size_t index, std::ostringstream& out,
                GemmConfig gemm = {}, bool single_block = false)
      : p_(p), k_(k), index_(index), o_(out), plan_(plan_kernel(p, k)), gemm_(gemm), single_block_(single_block) {
    // Values that are the same for every element of a phase (scalars, row
    // results and what is computed from them only) are computed once per
    // thread before the element loop: kernels have no __restrict__ (a
    // donated output aliases its input), so the compiler would otherwise
    // reload scalars and redo divisions after every store.
    varies_.assign(k.exprs.size(), false);
    for (size_t e = 0; e < k.exprs.size(); ++e) {
      const ir::Expr& x = k.exprs[e];
      if (ir::reads_memory(x) || x.kind == ExprKind::Iota || x.kind == ExprKind::Contract || x.kind == ExprKind::Operand)
        varies_[e] = true;
      for (int o = 0; o < ir::operand_count(x); ++o) varies_[e] = varies_[e] || varies_[ir::operand(x, o)];
    }
  }

  void emit() {
    if (k_.contraction && single_block_) return emit_block_product();
    if (k_.contraction) return emit_gemm();
    const LaunchDims dims = launch_dims(plan_);
    o_ << "\n// " << k_.name << ": loop [";
    for (int d = 0; d < k_.loop.n; ++d) o_ << (d ? ", " : "") << k_.loop[d];
    o_ << "], outer " << int(k_.outer) << "\n";
    // In a single-block program (see single_block()) the kernel is a step of
    // loom_program: the same grid-stride loop, with a grid of one block.
    if (single_block_)
      o_ << "__device__ __forceinline__ void " << symbol();
    else
      o_ << "extern \"C\" __global__ void __launch_bounds__(" << dims.block << ") " << symbol();
    o_ << "(" << kKernelParams << ") {\n";
    emit_buffer_pointers(kernel_buffers());
    // After an earlier kernel of the run failed on bad data, write nothing:
    // donated buffers must keep their values (runtime/output_plan.h). (A
    // single-block program's steps need no check: loom_program reads the
    // error word after each step that can fail.)
    if (!single_block_ && plan_.pointwise)
      o_ << "  if (err[0] != 0) return;\n";
    else if (!single_block_)
      o_ << "  __shared__ int failed;\n  if (threadIdx.x == 0) failed = err[0] != 0;\n  __syncthreads();\n  if (failed) return;\n";
    if (plan_.pointwise) emit_pointwise();
    else emit_rows();
    o_ << "}\n";
  }

 private:
  // ---------------------------------------------------------------- GEMM
  // The template (jit/cuda/gemm.h) computes the product; its epilogue is a
  // lambda holding this kernel's Store phase, emitted by body() and store()
  // as for any pointwise kernel, at the loop indices (batch,) m, n of one
  // element of C, with the product's value in `acc`.
  void emit_gemm() {
    const GemmProblem g = gemm_problem(p_, k_, gemm_.mma);
    const char* t = ctype(g.dtype);   // the sums (float for bfloat16)
    const char* mt = mtype(g.dtype);  // the operands in memory
    const bool split = gemm_.split > 1;
    o_ << "\n// " << k_.name << ": gemm [" << g.batch << " x] " << g.m << " x " << g.n << " x " << g.k << ", "
       << gemm_.str() << "\n";
    // Split-K: this kernel writes partial sums to the workspace (its fifth
    // parameter) and <symbol>_reduce adds them up and runs the epilogue.
    o_ << "extern \"C\" __global__ void " << gemm_launch_bounds(gemm_) << " " << symbol()
       << "(" << kKernelParams << (split ? std::string(", ") + t + "* ws" : std::string()) << ") {\n";
    std::vector<bool> used = kernel_buffers();
    if (split) {  // only the operands: the reduce kernel runs the epilogue
      used.assign(used.size(), false);
      used[g.a_buffer] = used[g.b_buffer] = true;
    }
    emit_gemm_prologue(used);
    const std::string ops = operand_ops();
    const ir::Phase& ph = k_.phases[0];
    const std::vector<bool> need = needed(ph);
    // The values the epilogue loads from memory, per element: the tile
    // loads a few elements' (the lambda after the epilogue's) before it
    // runs their arithmetic and stores (LoomGemm::run_with).
    std::vector<uint32_t> loads;
    for (size_t e = 0; e < k_.exprs.size() && !split; ++e)
      if (need[e] && varies_[e] && k_.exprs[e].kind == ExprKind::Load) loads.push_back(static_cast<uint32_t>(e));
    if (!split) {
      // Values the same for every element (scalars) once per thread, out
      // here: inside the lambda they would be read from the argument block
      // again after every element's stores.
      hoisted(need, "  ");
      o_ << "  struct Loaded {";
      for (uint32_t e : loads) o_ << " " << ctype(k_.exprs[e].dtype) << " x" << e << ";";
      o_ << " };\n";
    }
    o_ << "  const LoomGemmArgs g = {" << g.m << "LL, " << g.n << "LL, " << g.k << "LL, " << g.a_m << "LL, " << g.a_k
       << "LL, " << g.a_b << "LL, " << g.b_k << "LL, " << g.b_n << "LL, " << g.b_b << "LL};\n";
    o_ << "  " << gemm_instance(gemm_, g) << (split ? "::run" : "::run_with") << "((const " << mt << "*)b" << g.a_buffer << " + " << g.a_off
       << "LL, (const " << mt << "*)b" << g.b_buffer << " + " << g.b_off << "LL, g,\n      [&](long long bz, long long gm, long long gn, "
       << t << " acc" << (split ? "" : ", const Loaded& loaded") << ") {\n";
    if (split) {
      o_ << "        ws[((blockIdx.y * " << g.batch << "LL + bz) * " << g.m << "LL + gm) * " << g.n << "LL + gn] = acc;\n";
      o_ << "      }, " << gemm_split_chunk(gemm_, g) << "LL" << ops << ");\n}\n";
      o_ << "extern \"C\" __global__ void __launch_bounds__(" << kGemmReduceThreads << ") " << symbol()
         << "_reduce(" << kKernelParams << ", const " << t << "* ws) {\n";
      emit_gemm_prologue(kernel_buffers());
      hoisted(need, "  ");
      o_ << "  LoomGemmReduce<" << t << ">::run(ws, " << gemm_.split << ", " << g.batch << "LL, " << g.m << "LL, " << g.n
         << "LL,\n      [&](long long bz, long long gm, long long gn, " << t << " acc) {\n";
    }
    const std::string indices = element_indices("        ");
    o_ << indices;
    preloaded_ = !split;  // the body reads its loads from `loaded`
    body(need, "        ");
    preloaded_ = false;
    for (auto [a, e] : ph.stores) store(a, e, "        ");
    o_ << "      }";
    if (split) {
      o_ << ");\n}\n";
      return;
    }
    o_ << ",\n      [&](long long bz, long long gm, long long gn) {\n" << indices << "        Loaded loaded;\n";
    for (uint32_t e : loads) o_ << "        loaded.x" << e << " = " << value(k_.exprs[e], e) << ";\n";
    o_ << "        return loaded;\n      }" << (ops.empty() ? "" : ", 0LL" + ops) << ");\n}\n";
  }

  // The operands' fused producers (ir::Contraction::a_value / b_value) as
  // lambdas op_a / op_b of an element `opx`, their scalars read once
  // before; returns the arguments that pass them to the template (empty
  // when neither operand has any).
  std::string operand_ops() {
    const ir::Contraction& c = *k_.contraction;
    if (!c.fused_operand(0) && !c.fused_operand(1)) return "";
    std::string args;
    for (int w = 0; w < 2; ++w) {
      const char* name = w == 0 ? "op_a" : "op_b";
      args += std::string(", ") + (c.fused_operand(w) ? name : "LoomRawOperand{}");
      if (!c.fused_operand(w)) continue;
      const uint32_t root = c.value(w);
      const char* t = ctype(k_.exprs[root].dtype);
      std::vector<bool> need(k_.exprs.size(), false);
      mark(root, need);
      hoisted(need, "  ");
      o_ << "  auto " << name << " = [&](" << t << " opx) -> " << t << " {\n";
      body(need, "    ");
      o_ << "    return x" << root << ";\n  };\n";
    }
    return args;
  }

  // ---------------------------------------------------------------- product in a single block
  // A step of a single-block program. Few outputs (W5: 64) would leave
  // most of the block idle and each thread a chain of K dependent sums
  // waiting on its loads, so P = kSingleBlockThreads / outputs threads
  // (a power of two, at most 32: lanes of one warp) share an element of C:
  // each sums every P-th term of its K in order, the P partial sums are
  // added by warp shuffles, and the first of them runs the epilogue.
  void emit_block_product() {
    const GemmProblem g = gemm_problem(p_, k_, false);
    const char* t = ctype(g.dtype);
    const int64_t outputs = g.batch * g.m * g.n;
    const int P = block_product_lanes(outputs);
    const int64_t total = (outputs * P + kSingleBlockThreads - 1) / kSingleBlockThreads * kSingleBlockThreads;
    o_ << "\n// " << k_.name << ": product [" << g.batch << " x] " << g.m << " x " << g.n << " x " << g.k
       << ", a step of a single-block program, " << P << " threads per element\n";
    o_ << "__device__ __forceinline__ void " << kernel_symbol(index_) << "(" << kKernelParams << ") {\n";
    emit_buffer_pointers(kernel_buffers());
    o_ << "  (void)err;\n";
    const ir::Contraction& c = *k_.contraction;
    operand_ops();
    // Every thread runs the same iterations (whole warps shuffle together).
    o_ << "  for (long long base = 0; base < " << total << "LL; base += " << kSingleBlockThreads << ") {\n";
    o_ << "    const long long t = base + threadIdx.x, o = t / " << P << ";\n";
    o_ << "    const int j = (int)(t % " << P << ");\n";
    o_ << "    const bool active = o < " << outputs << "LL;\n";
    o_ << "    const long long gn = o % " << g.n << "LL, gm = o / " << g.n << "LL % " << g.m << "LL, bz = o / "
       << g.m * g.n << "LL;\n";
    // The epilogue's invariant values (scalars) first: their loads overlap
    // the product's instead of following its shuffles.
    const ir::Phase& ph = k_.phases[0];
    std::vector<bool> need = needed(ph);
    hoisted(need, "    ");
    o_ << "    " << t << " acc = 0;\n";
    o_ << "    if (active) {\n";
    o_ << "      const " << t << "* pa = b" << g.a_buffer << " + " << g.a_off << "LL + bz * " << g.a_b << "LL + gm * " << g.a_m
       << "LL;\n";
    o_ << "      const " << t << "* pb = b" << g.b_buffer << " + " << g.b_off << "LL + bz * " << g.b_b << "LL + gn * " << g.b_n
       << "LL;\n";
    // A fixed trip count, unrolled: every load of the chain is issued
    // before the first sum waits.
    const int64_t chain = (g.k + P - 1) / P;
    o_ << "#pragma unroll\n      for (int r = 0; r < " << chain << "; ++r) {\n";
    o_ << "        const long long q = j + (long long)r * " << P << ";\n";
    auto operand = [&](int w, const std::string& element) {
      return c.fused_operand(w) ? std::string(w == 0 ? "op_a(" : "op_b(") + element + ")" : element;
    };
    o_ << "        if (q < " << g.k << "LL) acc = " << (g.dtype == kDouble ? "fma" : "fmaf") << "("
       << operand(0, "pa[q * " + std::to_string(g.a_k) + "LL]") << ", " << operand(1, "pb[q * " + std::to_string(g.b_k) + "LL]")
       << ", acc);\n      }\n";
    o_ << "    }\n";
    for (int w = P / 2; w >= 1; w /= 2) o_ << "    acc += __shfl_xor_sync(0xffffffffu, acc, " << w << ");\n";
    o_ << "    if (!active || j != 0) continue;\n";
    o_ << element_indices("    ");
    body(need, "    ");
    for (auto [a, e] : ph.stores) store(a, e, "    ");
    o_ << "  }\n}\n";
  }

  // A product's loop indices from the element (bz, gm, gn) of C.
  std::string element_indices(const char* in) const {
    return std::string(in) + (k_.loop.n == 3 ? "const long long i0 = bz, i1 = gm, i2 = gn;\n"
                                             : "const long long i0 = gm, i1 = gn; (void)bz;\n");
  }

  // Which buffers the kernel's accesses touch.
  std::vector<bool> kernel_buffers() const {
    std::vector<bool> used(p_.buffers.size(), false);
    for (const ir::Access& a : k_.accesses) used[a.buffer] = true;
    return used;
  }
  // A typed pointer b<i> for each used buffer, from the argument block.
  void emit_buffer_pointers(const std::vector<bool>& used) {
    for (size_t b = 0; b < used.size(); ++b)
      if (used[b]) o_ << "  " << mtype(p_.buffers[b].dtype) << "* b" << b << " = (" << mtype(p_.buffers[b].dtype) << "*)bufs[" << b << "];\n";
    o_ << "  (void)fs; (void)is;\n";
    // A shared function's node table follows the launch's buffer table.
    if (!single_block_) o_ << "  const long long* nd = (const long long*)(bufs + " << p_.buffers.size() << "); (void)nd;\n";
  }
  std::string symbol() const { return single_block_ ? kernel_symbol(index_) : shared_symbol(index_); }

  // The used buffers' pointers, then the whole block returns if an earlier
  // kernel failed (one read of the error word per block).
  void emit_gemm_prologue(const std::vector<bool>& used) {
    emit_buffer_pointers(used);
    o_ << "  __shared__ int failed;\n  if (threadIdx.x == 0) failed = err[0] != 0;\n  __syncthreads();\n  if (failed) return;\n";
  }

  // ---------------------------------------------------------------- pointwise
  void emit_pointwise() {
    const int n = k_.loop.n;
    const int L = plan_.lanes, S = plan_.steps;
    const bool narrow = plan_.threads * L < (int64_t(1) << 31);
    const char* ix = narrow ? "unsigned" : "long long";
    const ir::Phase& ph = k_.phases[0];
    std::vector<bool> need = needed(ph);
    hoisted(need, "  ");
    // A thread takes S steps a block apart (each warp's accesses stay
    // contiguous), and issues the 16-byte loads of all S before computing
    // any: S times the bytes in flight per thread, for kernels whose
    // arithmetic would otherwise hold the next load back.
    o_ << "  for (long long t0 = (long long)blockIdx.x * blockDim.x * " << S << " + threadIdx.x; t0 < " << plan_.threads
       << "LL; t0 += (long long)gridDim.x * blockDim.x * " << S << ") {\n";
    auto indices = [&](const char* in) {
      o_ << in << ix << " rest = (" << ix << ")t * " << L << ";\n";
      for (int d = n - 1; d >= 1; --d)
        o_ << in << "const long long i" << d << " = rest % " << k_.loop[d] << "u; rest /= " << k_.loop[d] << "u;\n";
      if (n) o_ << in << "const long long i0 = rest;\n";
      else o_ << in << "(void)rest;\n";
    };
    auto step_open = [&](const char* in) {
      o_ << in << "const long long t = t0 + (long long)s * blockDim.x;\n" << in << "if (t < " << plan_.threads << "LL) {\n";
    };
    lane_ = L > 1;
    // 16-byte loads of the accesses that walk the lanes contiguously.
    bool vector_loads = false;
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      const ir::Expr& x = k_.exprs[e];
      if (!need[e] || x.kind != ExprKind::Load || !lane_vector(x.a)) continue;
      o_ << "    " << mtype(p_.buffers[k_.accesses[x.a].buffer].dtype) << " ld" << e << "_[" << S << "][4];\n";
      vector_loads = true;
    }
    if (vector_loads) {
      o_ << "#pragma unroll\n    for (int s = 0; s < " << S << "; ++s) {\n";
      step_open("      ");
      indices("        ");
      for (size_t e = 0; e < k_.exprs.size(); ++e) {
        const ir::Expr& x = k_.exprs[e];
        if (!need[e] || x.kind != ExprKind::Load || !lane_vector(x.a)) continue;
        const ir::Access& a = k_.accesses[x.a];
        o_ << "        loom_vload4(ld" << e << "_[s], b" << a.buffer << " + " << offset(a, "") << ");\n";
      }
      o_ << "      }\n    }\n";
    }
    o_ << "#pragma unroll\n    for (int s = 0; s < " << S << "; ++s) {\n";
    step_open("      ");
    indices("      ");
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      const ir::Expr& x = k_.exprs[e];
      if (need[e] && x.kind == ExprKind::Load && lane_vector(x.a))
        o_ << "      " << mtype(p_.buffers[k_.accesses[x.a].buffer].dtype) << "* ld" << e << " = ld" << e << "_[s];\n";
    }
    for (size_t st = 0; st < ph.stores.size(); ++st)
      if (lane_vector(ph.stores[st].first))
        o_ << "      " << mtype(p_.buffers[k_.accesses[ph.stores[st].first].buffer].dtype) << " st" << st << "[4];\n";
    if (L > 1) o_ << "#pragma unroll\n      for (int l = 0; l < " << L << "; ++l) {\n";
    else o_ << "      {\n        const int l = 0; (void)l;\n";
    body(need, "        ");
    for (size_t st = 0; st < ph.stores.size(); ++st) {
      auto [ai, e] = ph.stores[st];
      if (lane_vector(ai)) o_ << "        st" << st << "[l] = " << to_memory(e) << ";\n";
      else store(ai, e, "        ");
    }
    o_ << "      }\n";
    for (size_t st = 0; st < ph.stores.size(); ++st) {
      const ir::Access& a = k_.accesses[ph.stores[st].first];
      if (lane_vector(ph.stores[st].first))
        o_ << "      loom_vstore4(b" << a.buffer << " + " << offset(a, "") << ", st" << st << ");\n";
    }
    o_ << "      }\n    }\n  }\n";
    lane_ = false;
  }

  bool lane_vector(uint32_t access) const {
    const int n = k_.loop.n;
    return plan_.lanes > 1 && k_.accesses[access].strides[n - 1] == 1;
  }

  // ---------------------------------------------------------------- rows
  void emit_rows() {
    const int n = k_.loop.n, outer = k_.outer;
    const int G = plan_.group, RB = plan_.rows_per_block;
    // The column groups' partials: one per thread, of at most 8 bytes.
    const int smem = plan_.columns ? std::max(1024, 8 * G * RB) : 1024;
    o_ << "  __shared__ __align__(16) unsigned char smem[" << smem << "]; (void)smem;\n";
    o_ << "  const int G = " << G << ";\n";
    if (plan_.columns) {
      o_ << "  const int lane = threadIdx.x / " << RB << ";\n";
      o_ << "  const long long row = (long long)blockIdx.x * " << RB << " + threadIdx.x % " << RB << ";\n";
    } else {
      o_ << "  const int lane = threadIdx.x % G;\n";
      o_ << "  const long long row = (long long)blockIdx.x * " << RB << " + threadIdx.x / G;\n";
    }
    o_ << "  const bool active = row < " << plan_.rows << "LL;\n";
    o_ << "  long long rest = active ? row : 0;\n";
    for (int d = outer - 1; d >= 0; --d) o_ << "  const long long i" << d << " = rest % " << k_.loop[d] << "LL; rest /= " << k_.loop[d] << "LL;\n";
    o_ << "  (void)rest;\n";
    plan_stash();
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (stash_[e]) o_ << "  " << ctype(k_.exprs[e].dtype) << " s" << e << "[" << plan_.per_thread * plan_.lanes << "];\n";
    for (size_t ph = 0; ph < k_.phases.size(); ++ph) {
      phase_ = static_cast<int>(ph);
      emit_phase(k_.phases[ph], ph);
    }
    (void)n;
  }

  // Opens the walk over this thread's elements of the row, with the row's
  // loop indices i[outer..n) defined inside. With 4 lanes each step covers 4
  // consecutive innermost elements: the contiguous loads of the phase are
  // read with 16-byte loads, then an inner loop over `l` runs the body.
  void open_row_loop(const std::vector<bool>& need, const ir::Phase& ph, const char* in) {
    const int n = k_.loop.n, outer = k_.outer, L = plan_.lanes;
    if (plan_.per_thread) {
      o_ << in << "#pragma unroll\n" << in << "for (int j = 0; j < " << plan_.per_thread << "; ++j) {\n";
      o_ << in << "  const long long r = (lane + (long long)j * G) * " << L << ";\n";
      o_ << in << "  if (!active || r >= " << plan_.row_length << "LL) continue;\n";
    } else {
      o_ << in << "for (long long r = lane * " << L << "LL; active && r < " << plan_.row_length << "LL; r += G * " << L
         << "LL) {\n";
      o_ << in << "  const int j = 0; (void)j;\n";
    }
    o_ << in << "  long long rr = r;\n";
    for (int d = n - 1; d > outer; --d) o_ << in << "  const long long i" << d << " = rr % " << k_.loop[d] << "LL; rr /= " << k_.loop[d] << "LL;\n";
    if (n > outer) o_ << in << "  const long long i" << outer << " = rr;\n";
    else o_ << in << "  (void)rr;\n";
    if (L == 1) {
      o_ << in << "  {\n" << in << "    const int l = 0; (void)l;\n";
      return;
    }
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      const ir::Expr& x = k_.exprs[e];
      if (!need[e] || x.kind != ExprKind::Load || !lane_vector(x.a) || reloaded(static_cast<uint32_t>(e))) continue;
      const ir::Access& a = k_.accesses[x.a];
      o_ << in << "  " << mtype(p_.buffers[a.buffer].dtype) << " ld" << e << "[4]; loom_vload4(ld" << e << ", b" << a.buffer
         << " + " << offset(a, "") << ");\n";
    }
    for (size_t s = 0; s < ph.stores.size(); ++s)
      if (lane_vector(ph.stores[s].first))
        o_ << in << "  " << mtype(p_.buffers[k_.accesses[ph.stores[s].first].buffer].dtype) << " st" << s << "[4];\n";
    o_ << in << "#pragma unroll\n" << in << "  for (int l = 0; l < 4; ++l) {\n";
    lane_ = true;
  }

  // Closes the lane loop (writing the phase's 16-byte stores) and the row loop.
  void close_row_loop(const ir::Phase& ph, const char* in) {
    o_ << in << "  }\n";
    if (lane_)
      for (size_t s = 0; s < ph.stores.size(); ++s) {
        const ir::Access& a = k_.accesses[ph.stores[s].first];
        if (lane_vector(ph.stores[s].first))
          o_ << in << "  loom_vstore4(b" << a.buffer << " + " << offset(a, "") << ", st" << s << ");\n";
      }
    lane_ = false;
    o_ << in << "}\n";
  }

  void stores(const ir::Phase& ph, const char* in) {
    for (size_t s = 0; s < ph.stores.size(); ++s) {
      auto [ai, e] = ph.stores[s];
      if (lane_ && lane_vector(ai)) o_ << in << "st" << s << "[l] = " << to_memory(e) << ";\n";
      else store(ai, e, in);
    }
  }

  void emit_phase(const ir::Phase& ph, size_t index) {
    std::vector<bool> need = needed(ph);
    const std::string p = std::to_string(index);
    if (ph.kind == ir::Phase::Store && ph.per_row) {
      o_ << "  if (active && lane == 0) {\n";
      hoisted(need, "    ");
      for (int d = k_.outer; d < k_.loop.n; ++d) o_ << "    const long long i" << d << " = 0;\n";
      o_ << "    const int j = 0, l = 0; (void)j; (void)l;\n";
      body(need, "    ");
      for (auto [a, e] : ph.stores) store(a, e, "    ");
      o_ << "  }\n";
      return;
    }
    if (ph.kind == ir::Phase::Store) {
      o_ << "  {\n";
      hoisted(need, "    ");
      open_row_loop(need, ph, "    ");
      body(need, "        ");
      stores(ph, "        ");
      close_row_loop(ph, "    ");
      o_ << "  }\n";
      return;
    }
    const ScalarType dt = k_.exprs[ph.value].dtype;
    const std::string v = "x" + std::to_string(ph.value);
    if (ph.reduce_op == Op::ArgMax || ph.reduce_op == Op::ArgMin) {
      const char* is_max = ph.reduce_op == Op::ArgMax ? "true" : "false";
      o_ << "  long long rv" << p << ";\n  {\n";
      hoisted(need, "    ");
      o_ << "    " << acctype(dt) << " best = 0; long long at = -1;\n";
      open_row_loop(need, ph, "    ");
      body(need, "        ");
      o_ << "        const " << acctype(dt) << " v = " << v << ";\n";
      o_ << "        if (at < 0 || loom_arg_better(v, best, " << is_max << ")) { best = v; at = i" << int(k_.outer) << " + l; }\n";
      close_row_loop(ph, "    ");
      o_ << "    rv" << p << " = loom_group_arg(best, at, " << is_max << ", G, smem);\n  }\n";
      return;
    }
    const char* acc = acctype(dt);
    o_ << "  " << acc << " rv" << p << ";\n  {\n";
    hoisted(need, "    ");
    o_ << "    " << acc << " acc = " << identity(ph.reduce_op, dt) << ";\n";
    open_row_loop(need, ph, "    ");
    body(need, "        ");
    o_ << "        acc = " << combine(ph.reduce_op, dt, "acc", "(" + std::string(acc) + ")" + v) << ";\n";
    close_row_loop(ph, "    ");
    o_ << "    rv" << p << " = " << (plan_.columns ? "loom_column_reduce" : "loom_group_reduce") << "(acc, [](" << acc
       << " a, " << acc << " b) { return " << combine(ph.reduce_op, dt, "a", "b") << "; }, G, "
       << (plan_.columns ? std::to_string(plan_.rows_per_block) + ", " : "") << "smem);\n";
    if (dt == kBFloat16) o_ << "    rv" << p << " = loom_bf16_round(rv" << p << ");  // summed in float32, rounded once\n";
    o_ << "  }\n";
  }

  std::string identity(Op op, ScalarType dt) {
    const bool f = fp(dt);
    switch (op) {
      case Op::Prod: case Op::All: return f ? lit(1, dt) : "1";
      case Op::Max:
        if (f) return dt != kDouble ? "__int_as_float((int)0xff800000u)" : "__longlong_as_double(0xfff0000000000000LL)";
        return dt == kBool ? "0" : dt == kInt ? "(-2147483647 - 1)" : "(-9223372036854775807LL - 1)";
      case Op::Min:
        if (f) return dt != kDouble ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
        return dt == kBool ? "1" : dt == kInt ? "2147483647" : "9223372036854775807LL";
      default: return f ? lit(0, dt) : "0";
    }
  }

  std::string combine(Op op, ScalarType dt, const std::string& a, const std::string& b) {
    const bool f = fp(dt), bl = dt == kBool;
    switch (op) {
      case Op::Sum: return f ? a + " + " + b : bl ? "(" + a + " | " + b + ")" : "loom_add(" + a + ", " + b + ")";
      case Op::Prod: return f ? a + " * " + b : bl ? "(" + a + " & " + b + ")" : "loom_mul(" + a + ", " + b + ")";
      case Op::Max: return f ? "loom_fmax(" + a + ", " + b + ")" : bl ? "(" + a + " | " + b + ")" : "loom_imax(" + a + ", " + b + ")";
      case Op::Min: return f ? "loom_fmin(" + a + ", " + b + ")" : bl ? "(" + a + " & " + b + ")" : "loom_imin(" + a + ", " + b + ")";
      case Op::All: return "(" + a + " & " + b + ")";
      case Op::Any: return "(" + a + " | " + b + ")";
      default: return a;
    }
  }

  // ---------------------------------------------------------------- row stash
  // As in the LLVM generator: a value computed in a reduce phase and read
  // again by a later phase of the same row is kept (here in registers)
  // rather than loaded or computed twice. Loads count too: on a GPU the
  // second read of a row is the cost worth saving.
  void plan_stash() {
    const size_t n = k_.exprs.size();
    stash_.assign(n, false);
    early_.assign(n, false);
    first_.assign(n, -1);
    if (!plan_.per_thread) return;
    std::vector<int> last(n, -1);
    for (size_t ph = 0; ph < k_.phases.size(); ++ph) {
      phase_ = -1;
      std::vector<bool> need = needed(k_.phases[ph]);
      for (size_t e = 0; e < n; ++e) {
        if (!need[e]) continue;
        if (first_[e] < 0) first_[e] = static_cast<int>(ph);
        if (!k_.phases[ph].per_row) last[e] = static_cast<int>(ph);
      }
    }
    int regs = 0;
    for (size_t e = 0; e < n; ++e) {
      const ir::Expr& x = k_.exprs[e];
      const int f = first_[e];
      const bool worth = ir::reads_memory(x) || (x.kind == ExprKind::Op && ir::costly_op(x.op));
      if (!worth || !varies_[e] || f < 0 || last[e] <= f || k_.phases[f].per_row) continue;
      const int cost = stash_regs(x.dtype);
      if (regs + cost > kMaxStashRegs) continue;
      regs += cost;
      stash_[e] = true;
    }
    plan_early_loads();
  }
  // Loads that only a later phase needs (W3's weight and bias, read by its
  // store phase) are issued with phase 0's loads and stashed: their latency
  // then hides behind the row's own loads and the reductions instead of
  // stalling the last phase after the final barrier. H200, W3's kernel
  // alone (bench/micro/row_kernels.cu): 69.6 -> 67.5 us, against 65.6 us
  // for a copy of the same bytes. Not past a phase that stores into the
  // load's buffer (an in-place update read back later).
  void plan_early_loads() {
    if (k_.phases.size() < 2 || k_.phases[0].kind != ir::Phase::Reduce || k_.phases[0].per_row) return;
    int regs = 0;
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      const ir::Expr& x = k_.exprs[e];
      const int f = first_[e];
      if (x.kind != ExprKind::Load || !varies_[e] || f <= 0 || stash_[e] || k_.phases[f].per_row) continue;
      bool stored_before = false;
      for (int ph = 0; ph < f; ++ph)
        for (auto [a, v] : k_.phases[ph].stores)
          stored_before = stored_before || k_.accesses[a].buffer == k_.accesses[x.a].buffer;
      const int cost = stash_regs(x.dtype);
      if (stored_before || regs + cost > kMaxEarlyRegs) continue;
      regs += cost;
      early_[e] = stash_[e] = true;
      first_[e] = 0;
    }
  }
  // Registers a stashed value of dtype dt takes a thread: its row elements.
  int stash_regs(ScalarType dt) const { return plan_.per_thread * plan_.lanes * (element_size(dt) == 8 ? 2 : 1); }
  bool reloaded(uint32_t e) const { return !stash_.empty() && stash_[e] && phase_ > first_[e]; }

  std::vector<bool> needed(const ir::Phase& ph) {
    std::vector<bool> need(k_.exprs.size(), false);
    if (ph.kind == ir::Phase::Reduce) mark(ph.value, need);
    for (auto [a, e] : ph.stores) mark(e, need);
    if (&ph == &k_.phases.front())
      for (size_t e = 0; e < early_.size(); ++e)
        if (early_[e]) need[e] = true;
    return need;
  }
  void mark(uint32_t e, std::vector<bool>& need) {
    if (need[e]) return;
    need[e] = true;
    if (reloaded(e)) return;
    const ir::Expr& x = k_.exprs[e];
    for (int o = 0; o < ir::operand_count(x); ++o) mark(ir::operand(x, o), need);
  }

  // ---------------------------------------------------------------- bodies
  std::string stash_slot() const { return plan_.lanes > 1 ? "[j * 4 + l]" : "[j]"; }

  // The phase's invariant values, before its element loop.
  void hoisted(const std::vector<bool>& need, const char* in) {
    for (size_t e = 0; e < k_.exprs.size(); ++e)
      if (need[e] && !varies_[e])
        o_ << in << "const " << ctype(k_.exprs[e].dtype) << " x" << e << " = " << rounded(k_.exprs[e], static_cast<uint32_t>(e)) << ";\n";
  }

  void body(const std::vector<bool>& need, const char* in) {
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      if (!need[e] || !varies_[e]) continue;
      const ir::Expr& x = k_.exprs[e];
      o_ << in << "const " << ctype(x.dtype) << " x" << e << " = ";
      if (reloaded(static_cast<uint32_t>(e))) o_ << "s" << e << stash_slot();
      else o_ << rounded(x, static_cast<uint32_t>(e));
      o_ << ";\n";
      if (!stash_.empty() && stash_[e] && first_[e] == phase_) o_ << in << "s" << e << stash_slot() << " = x" << e << ";\n";
    }
  }

  // Element offset of access `a` at the current indices; in a lane loop the
  // innermost index is advanced by `lane` (e.g. "l").
  std::string offset(const ir::Access& a, const std::string& lane) {
    std::string s = std::to_string(a.offset) + "LL";
    const int n = k_.loop.n;
    for (int d = 0; d < a.strides.n; ++d) {
      if (!a.strides[d]) continue;
      std::string i = "i" + std::to_string(d);
      if (d == n - 1 && !lane.empty()) i = "(" + i + " + " + lane + ")";
      s += " + " + i + " * " + std::to_string(a.strides[d]) + "LL";
    }
    return s;
  }

  std::string lane_index() const { return lane_ ? "l" : ""; }

  // A bfloat16 value is a float holding a number bfloat16 represents: a
  // load widens it exactly, each computed value is rounded to nearest even
  // (as the reference backend rounds per op), a store keeps the high half.
  std::string rounded(const ir::Expr& x, uint32_t e) {
    return x.dtype == kBFloat16 && ir::is_computed(x) ? "loom_bf16_round(" + value(x, e) + ")" : value(x, e);
  }

  std::string value(const ir::Expr& x, uint32_t e) {
    switch (x.kind) {
      case ExprKind::Load: {
        if (preloaded_) return "loaded.x" + std::to_string(e);
        const ir::Access& a = k_.accesses[x.a];
        std::string v = lane_vector(x.a) && lane_ ? "ld" + std::to_string(e) + "[l]"
                                                  : "b" + std::to_string(a.buffer) + "[" + offset(a, lane_index()) + "]";
        if (x.dtype == kBFloat16) return "loom_bf16_widen(" + v + ")";
        return x.dtype == kBool ? "(" + v + " != 0)" : v;
      }
      case ExprKind::Gather: {  // in range: x.b is an IndexCheck (0 where the run fails)
        const ir::Access& a = k_.accesses[x.a];
        const std::string v = "b" + std::to_string(a.buffer) + "[" + offset(a, lane_index()) + " + x" +
                              std::to_string(x.b) + " * " + std::to_string(x.imm) + "LL]";
        if (x.dtype == kBFloat16) return "loom_bf16_widen(" + v + ")";
        return x.dtype == kBool ? "(" + v + " != 0)" : v;
      }
      case ExprKind::Scalar: {
        const std::string s = std::to_string(x.a);
        switch (x.dtype) {
          case kBool: return "(fs[" + s + "] != 0.0 || is[" + s + "] != 0)";
          case kInt: return "(int)is[" + s + "]";
          case kLong: return "is[" + s + "]";
          case kFloat: return "(float)fs[" + s + "]";
          case kDouble: return "fs[" + s + "]";
          case kBFloat16: return "(float)fs[" + s + "]";
        }
        return "0";
      }
      case ExprKind::RowValue: return "(" + std::string(ctype(x.dtype)) + ")rv" + std::to_string(x.a);
      case ExprKind::Iota: {
        if (x.a == ~0u) return "0LL";
        std::string i = "i" + std::to_string(x.a);
        if (lane_ && static_cast<int>(x.a) + 1 == k_.loop.n) i = "(" + i + " + l)";
        return i;
      }
      case ExprKind::Contract: return "acc";
      case ExprKind::Operand: return "opx";
      case ExprKind::Const: return "((" + std::string(ctype(x.dtype)) + ")" + std::to_string(x.imm) + "LL)";
      case ExprKind::Op: break;
    }
    if (x.op == Op::RandUniform || x.op == Op::RandNormal) {
      // ir/philox.h at (seed, counter): the library kernel's bits.
      const std::string args = "(u64)x" + std::to_string(x.b) + ", (u64)x" + std::to_string(x.a) + ", 0ULL";
      if (x.op == Op::RandNormal) return "(" + std::string(ctype(x.dtype)) + ")loom::ir::philox::normal(" + args + ")";
      const std::string u = "loom::ir::philox::uniform(" + args + ")";
      return x.dtype != kDouble ? "loom::ir::philox::uniform_f32(" + u + ")" : u;
    }
    const Family f = ir::op_family(x.op);
    const std::string a = "x" + std::to_string(x.a);
    if (f == Family::Unary) return unary(x.op, a, k_.exprs[x.a].dtype, x.dtype);
    const std::string b = "x" + std::to_string(x.b);
    if (f == Family::Ternary) return "(" + a + " ? " + b + " : x" + std::to_string(x.c) + ")";
    // An op that can fail names its own node in the error word (ir::Expr::imm).
    return binary(x.op, a, b, k_.exprs[x.a].dtype, ir::can_fail_op(x.op) ? static_cast<uint32_t>(x.imm) : k_.root);
  }

  std::string unary(Op op, const std::string& x, ScalarType in, ScalarType out) {
    if (op == Op::Cast) {
      if (in == out) return x;
      if (out == kBool) return "(" + x + " != 0)";
      return "(" + std::string(ctype(out)) + ")" + x;
    }
    if (op == Op::LogicalNot) return "!" + x;
    if (in == kBool) return x;
    const char* T = ctype(in);
    if (!fp(in)) {
      switch (op) {
        case Op::Neg: return "loom_sub((" + std::string(T) + ")0, " + x + ")";
        case Op::Abs: return "(" + x + " < 0 ? loom_sub((" + std::string(T) + ")0, " + x + ") : " + x + ")";
        case Op::Relu: return "(" + x + " > 0 ? " + x + " : (" + T + ")0)";
        case Op::Sign: return "(" + std::string(T) + ")((" + x + " > 0) - (" + x + " < 0))";
        default: return x;
      }
    }
    auto c = [&](double v) { return lit(v, in); };
    auto call = [&](const char* name, const std::string& arg) { return fn(name, in) + "(" + arg + ")"; };
    switch (op) {
      case Op::Neg: return "(-" + x + ")";
      case Op::Abs: return call("fabs", x);
      case Op::Exp: return call("exp", x);
      case Op::Log: return call("log", x);
      case Op::Log1p: return call("log1p", x);
      case Op::Expm1: return call("expm1", x);
      case Op::Sqrt: return call("sqrt", x);
      case Op::Rsqrt: return "(" + c(1) + " / " + call("sqrt", x) + ")";
      case Op::Sin: return call("sin", x);
      case Op::Cos: return call("cos", x);
      case Op::Tanh: return call("tanh", x);
      case Op::Sigmoid: return "(" + c(1) + " / (" + c(1) + " + " + call("exp", "-" + x) + "))";
      case Op::Relu: return "(!(" + x + " <= " + c(0) + ") ? " + x + " : " + c(0) + ")";  // NaN stays NaN
      case Op::Gelu: return "(" + c(0.5) + " * " + x + " * (" + c(1) + " + " + call("erf", x + " * " + c(0.70710678118654752440)) + "))";
      case Op::GeluTanh:
        return "(" + c(0.5) + " * " + x + " * (" + c(1) + " + " +
               call("tanh", c(0.79788456080286535588) + " * (" + x + " + " + c(0.044715) + " * " + x + " * " + x + " * " + x + ")") + "))";
      case Op::Silu: return "(" + x + " / (" + c(1) + " + " + call("exp", "-" + x) + "))";
      case Op::Erf: return call("erf", x);
      case Op::Floor: return call("floor", x);
      case Op::Ceil: return call("ceil", x);
      case Op::Round: return call("rint", x);  // half to even
      case Op::Sign: return "(" + x + " > " + c(0) + " ? " + c(1) + " : " + x + " < " + c(0) + " ? " + c(-1) + " : " + c(0) + ")";
      case Op::Reciprocal: return "(" + c(1) + " / " + x + ")";
      default: return x;
    }
  }

  std::string binary(Op op, const std::string& a, const std::string& b, ScalarType dt, uint32_t fail_node) {
    auto infix = [&](const char* o) { return "(" + a + " " + o + " " + b + ")"; };
    auto call = [&](const std::string& f) { return f + "(" + a + ", " + b + ")"; };
    switch (op) {
      case Op::Eq: return infix("==");
      case Op::Ne: return infix("!=");
      case Op::Lt: return infix("<");
      case Op::Le: return infix("<=");
      case Op::Gt: return infix(">");
      case Op::Ge: return infix(">=");
      default: break;
    }
    if (dt == kBool) {
      switch (op) {
        case Op::Mul: case Op::Minimum: case Op::LogicalAnd: return infix("&&");
        default: return infix("||");  // add, maximum, logical_or
      }
    }
    if (fp(dt)) {
      switch (op) {
        case Op::Add: return infix("+");
        case Op::Sub: return infix("-");
        case Op::Mul: return infix("*");
        case Op::Div: return infix("/");
        case Op::Pow: return call(fn("pow", dt));
        case Op::Maximum: return call("loom_fmax");
        case Op::Minimum: return call("loom_fmin");
        case Op::Fmod: return call(fn("fmod", dt));
        case Op::Remainder: {
          const std::string m = fn("fmod", dt) + "(" + a + ", " + b + ")";
          return "([&] { const " + std::string(ctype(dt)) + " m = " + m + "; return (m != 0 && ((" + b + " < 0) != (m < 0))) ? m + " +
                 b + " : m; }())";
        }
        default: return a;
      }
    }
    const std::string node = single_block_ ? std::to_string(fail_node) : "nd[" + std::to_string(fail_node) + "]";
    switch (op) {
      case Op::Add: return call("loom_add");
      case Op::Sub: return call("loom_sub");
      case Op::Mul: return call("loom_mul");
      case Op::Maximum: return call("loom_imax");
      case Op::Minimum: return call("loom_imin");
      case Op::Pow: return call("loom_ipow");
      case Op::Fmod: return "loom_imod(" + a + ", " + b + ", false, err, " + node + ")";
      case Op::Remainder: return "loom_imod(" + a + ", " + b + ", true, err, " + node + ")";
      case Op::IndexCheck: return "loom_index_check(" + a + ", " + b + ", err, " + node + ")";
      default: return a;
    }
  }

  std::string to_memory(uint32_t e) {
    const std::string v = "x" + std::to_string(e);
    if (k_.exprs[e].dtype == kBFloat16) return "loom_bf16_narrow(" + v + ")";
    return k_.exprs[e].dtype == kBool ? "(unsigned char)" + v : v;
  }

  void store(uint32_t ai, uint32_t e, const char* in) {
    const ir::Access& a = k_.accesses[ai];
    o_ << in << "b" << a.buffer << "[" << offset(a, lane_index()) << "] = " << to_memory(e) << ";\n";
  }

  const ir::KernelProgram& p_;
  const ir::Kernel& k_;
  size_t index_;
  std::ostringstream& o_;
  KernelPlan plan_;
  GemmConfig gemm_;
  bool single_block_;          // a step of loom_program, not a kernel (a shared function) of its own
  bool lane_ = false;          // emitting inside a pointwise lane loop
  bool preloaded_ = false;     // a GEMM epilogue: loads come from its `loaded` struct
  int phase_ = -1;
  std::vector<bool> stash_;    // exprs kept in registers across phases
  std::vector<bool> early_;    // stashed loads moved into phase 0 (plan_early_loads)
  std::vector<int> first_;     // the phase that computes each
  std::vector<bool> varies_;   // differs between the elements of a phase (see the constructor)
};

}  // namespace

KernelPlan plan_kernel(const ir::KernelProgram& program, const ir::Kernel& k) {
  KernelPlan p;
  const int n = k.loop.n;
  if (is_pointwise(k)) {
    p.pointwise = true;
    p.lanes = can_use_lanes(program, k) ? kLanes : 1;
    p.threads = prod(k.loop, 0, n) / p.lanes;
    p.empty = p.threads == 0;
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
    if (k.cost_per_element >= kCostlyElement && p.threads >= kCostlyMinThreads) {
      p.steps = kCostlySteps;
      p.block = kCostlyBlock;
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
  p.columns = !arg && k.loop[k.outer - 1] >= 32 && p.rows >= kColumnMinRows && ir::rows_lie_across_memory(k);
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

std::string build_id() { return std::string("cuda codegen ") + __DATE__ " " __TIME__ + ", " + ir::lower_build_id(); }

namespace {
// The tile configuration GEMM kernel i is emitted with.
GemmConfig config_of(const ir::KernelProgram& p, const std::vector<GemmConfig>& gemm, size_t i) {
  GemmConfig c = i < gemm.size() ? gemm[i] : GemmConfig{};
  return c.valid() ? c : gemm_heuristic(gemm_problem(p, p.kernels[i], false), 132);
}
}  // namespace

ir::SharedKernels share_kernels(const ir::KernelProgram& p, const std::vector<GemmConfig>& gemm) {
  return ir::share_kernels(p, [&](const ir::Kernel& k) {
    std::string key;
    for (const ir::Access& a : k.accesses) {
      const ir::BufferInfo& b = p.buffers[a.buffer];
      key += b.kind == ir::BufferKind::Temp && b.arena_offset % 32 != 0 ? 'u' : 'a';
    }
    if (k.contraction)
      for (uint64_t w : config_of(p, gemm, static_cast<size_t>(&k - p.kernels.data())).key()) key += ";" + std::to_string(w);
    return key;
  });
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
    KernelEmitter(l.program, l.kernel(), f, out, c).emit();
  }
  return out.str();
}

std::string emit_source(const ir::KernelProgram& p, const std::vector<GemmConfig>& gemm, bool allow_single_block) {
  // A single-block program shares nothing (its steps are one kernel).
  const bool one_block = allow_single_block && single_block(p);
  return emit_source(p, one_block ? ir::SharedKernels{} : share_kernels(p, gemm), gemm, allow_single_block);
}

}  // namespace loom::jit::cuda
