// KernelEmitter (jit/cuda/kernel_emitter.h): a kernel's signature and
// launch-independent prologue, GEMM kernels (the tiled template with this
// kernel's epilogue), a product in a single block, pointwise kernels and
// row kernels with their phases and reductions.
#include "jit/cuda/kernel_emitter.h"

#include <algorithm>
#include <sstream>


namespace loom::jit::cuda::detail {

void KernelEmitter::emit() {
  if (k_.contraction && single_block_) return emit_block_product();
  if (k_.contraction) return emit_gemm();
  const LaunchDims dims = launch_dims(plan_);
  o_ << "\n// " << k_.name << ": loop [";
  for (int d = 0; d < k_.loop.n; ++d) o_ << (d ? ", " : "") << (sizes_.lifted_loop(d) ? std::string("?") : std::to_string(k_.loop[d]));
  o_ << "], outer " << int(k_.outer) << "\n";
  // In a single-block program (see single_block()) the kernel is a step of
  // loom_program: the same grid-stride loop, with a grid of one block.
  if (single_block_)
    o_ << "__device__ __forceinline__ void " << symbol();
  else
    o_ << "extern \"C\" __global__ void __launch_bounds__(" << dims.block << ") " << symbol();
  o_ << "(" << kKernelParams << ") {\n";
  o_ << size_registers();
  emit_buffer_pointers(kernel_buffers());
  // After an earlier kernel of the run failed on bad data, write nothing:
  // donated buffers must keep their values (runtime/output_plan.h). (A
  // single-block program's steps need no check: loom_program reads the
  // error word after each step that can fail.)
  if (!single_block_ && plan_.pointwise)
    o_ << "  if (err[0] != 0) return;\n";
  else if (!single_block_)
    o_ << "  __shared__ int failed;\n  if (threadIdx.x == 0) failed = err[0] != 0;\n  __syncthreads();\n  if (failed) return;\n";
  if (plan_.pointwise && plan_.tiled && !single_block_) emit_tiled();
  else if (plan_.pointwise) emit_pointwise();
  else emit_rows();
  o_ << "}\n";
}

// ---------------------------------------------------------------- GEMM
// The template (jit/cuda/gemm.h) computes the product; its epilogue is a
// lambda holding this kernel's Store phase, emitted by body() and store()
// as for any pointwise kernel, at the loop indices (batch,) m, n of one
// element of C, with the product's value in `acc`.
void KernelEmitter::emit_gemm() {
  const GemmProblem g = gemm_problem(p_, k_, gemm_.mma);
  const char* t = ctype(g.dtype);   // the sums (float for bfloat16)
  const char* mt = mtype(g.dtype);  // the operands in memory
  const bool split = gemm_.split > 1;
  const GemmText gt = gemm_text(g);
  o_ << "\n// " << k_.name << ": gemm [" << gt.batch << " x] " << gt.m << " x " << gt.n << " x " << gt.k << ", "
     << gemm_.str() << "\n";
  // Split-K: this kernel writes partial sums to the workspace (its fifth
  // parameter) and <symbol>_reduce adds them up and runs the epilogue.
  // An FFMA tile's kernel then takes, unlike any other kernel, the
  // product's sizes and strides and its operands' buffers as parameters
  // (GemmArgs in gemm.h says why); a tensor-core tile's has them as
  // constants and reads its operands from the argument block.
  const bool args = gemm_takes_args(gemm_, g);
  o_ << "extern \"C\" __global__ void " << gemm_launch_bounds(gemm_) << " " << symbol() << "(" << kKernelParams;
  if (split || args) o_ << ", " << (split ? std::string(t) + "* ws" : std::string("void* ws"));
  if (args) o_ << ", const LoomGemmArgs shape, const " << mt << "* op_a_buffer, const " << mt << "* op_b_buffer";
  o_ << ") {\n";
  o_ << size_registers();
  if (args && !split) o_ << "  (void)ws;\n";
  std::vector<bool> used = kernel_buffers();
  if (split) {  // the reduce kernel runs the epilogue
    used.assign(used.size(), false);
    if (!args) used[g.a_buffer] = used[g.b_buffer] = true;
  }
  emit_gemm_prologue(used);
  if (!args) {
    o_ << "  const LoomGemmArgs shape = {" << gt.m << ", " << gt.n << ", " << gt.k << ", " << gt.a_m << ", " << gt.a_k
       << ", " << gt.a_b << ", " << gt.b_k << ", " << gt.b_n << ", " << gt.b_b << "};\n";
    o_ << "  const " << mt << "* op_a_buffer = b" << g.a_buffer << ";\n  const " << mt << "* op_b_buffer = b" << g.b_buffer
       << ";\n";
  }
  // With the operands as parameters, an address the epilogue needs is read
  // again inside its lambdas, after the main loop, instead of being held
  // in two registers through it (W6: see GemmArgs); the prologue's copies
  // serve only the values hoisted out of the lambdas.
  const std::string reread = args && !split ? buffer_pointers(used, "        ") : "";
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
  o_ << "  " << gemm_instance(gemm_, g) << (split ? "::run" : "::run_with") << "(op_a_buffer + " << gt.a_at
     << ", op_b_buffer + " << gt.b_at << ", shape,\n      [&](long long bz, long long gm, long long gn, "
     << t << " acc" << (split ? "" : ", const Loaded& loaded") << ") {\n" << reread;
  if (split) {
    o_ << "        ws[((blockIdx.y * " << gt.batch << " + bz) * " << gt.m << " + gm) * " << gt.n << " + gn] = acc;\n";
    o_ << "      }, " << gemm_split_chunk(gemm_, g) << "LL" << ops << ");\n}\n";
    o_ << "extern \"C\" __global__ void __launch_bounds__(" << kGemmReduceThreads << ") " << symbol()
       << "_reduce(" << kKernelParams << ", const " << t << "* ws) {\n";
    o_ << size_registers();
    emit_gemm_prologue(kernel_buffers());
    hoisted(need, "  ");
    o_ << "  LoomGemmReduce<" << t << ">::run(ws, " << gemm_.split << ", " << gt.batch << ", " << gt.m << ", " << gt.n
       << ",\n      [&](long long bz, long long gm, long long gn, " << t << " acc) {\n";
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
  o_ << ",\n      [&](long long bz, long long gm, long long gn) {\n" << reread << indices << "        Loaded loaded;\n";
  for (uint32_t e : loads) o_ << "        loaded.x" << e << " = " << value(k_.exprs[e], e) << ";\n";
  o_ << "        return loaded;\n      }" << (ops.empty() ? "" : ", 0LL" + ops) << ");\n}\n";
}

// The product's sizes, strides and operand offsets as C: gemm_problem's
// numbers, each a literal unless it is a size argument of the kernel (a
// number gemm_problem changed, the stride of a dim of extent 1, stays its
// literal).
KernelEmitter::GemmText KernelEmitter::gemm_text(const GemmProblem& g) const {
  const ir::Contraction& c = *k_.contraction;
  const int n = k_.loop.n;
  auto field = [&](int32_t slot, int64_t raw, int64_t value) {
    return slot != ir::SizeArgs::kFixed && raw == value ? number(slot, raw) : std::to_string(value) + "LL";
  };
  const ir::Access& a = k_.accesses[c.a];
  const ir::Access& b = k_.accesses[c.b];
  auto at = [&](uint32_t ai, const std::string& fallback) {
    if (sizes_.offset_slot(ai) == ir::SizeArgs::kFixed) return fallback;
    const ir::Access& x = k_.accesses[ai];
    std::string s = access_offset(ai);
    if (x.has_runtime_offset()) s += " + is[" + std::to_string(x.offset_scalar) + "]";
    return s;
  };
  GemmText t;
  t.batch = n == 3 ? field(sizes_.loop_slot(0), k_.loop[0], g.batch) : "1LL";
  t.m = field(sizes_.loop_slot(n - 2), k_.loop[n - 2], g.m);
  t.n = field(sizes_.loop_slot(n - 1), k_.loop[n - 1], g.n);
  t.k = field(sizes_.k, c.k, g.k);
  t.a_m = field(sizes_.stride_slot(c.a, n - 2), a.strides[n - 2], g.a_m);
  t.a_k = field(sizes_.a_k, c.a_k, g.a_k);
  t.a_b = n == 3 ? field(sizes_.stride_slot(c.a, 0), a.strides[0], g.a_b) : "0LL";
  t.b_k = field(sizes_.b_k, c.b_k, g.b_k);
  t.b_n = field(sizes_.stride_slot(c.b, n - 1), b.strides[n - 1], g.b_n);
  t.b_b = n == 3 ? field(sizes_.stride_slot(c.b, 0), b.strides[0], g.b_b) : "0LL";
  t.a_at = at(c.a, g.a_at());
  t.b_at = at(c.b, g.b_at());
  return t;
}

// The operands' fused producers (ir::Contraction::a_value / b_value) as
// lambdas op_a / op_b of an element `opx`, their scalars read once
// before; returns the arguments that pass them to the template (empty
// when neither operand has any).
std::string KernelEmitter::operand_ops() {
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
void KernelEmitter::emit_block_product() {
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
  o_ << "      const " << t << "* pa = b" << g.a_buffer << " + " << g.a_at() << " + bz * " << g.a_b << "LL + gm * "
     << g.a_m << "LL;\n";
  o_ << "      const " << t << "* pb = b" << g.b_buffer << " + " << g.b_at() << " + bz * " << g.b_b << "LL + gn * "
     << g.b_n << "LL;\n";
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
std::string KernelEmitter::element_indices(const char* in) const {
  return std::string(in) + (k_.loop.n == 3 ? "const long long i0 = bz, i1 = gm, i2 = gn;\n"
                                           : "const long long i0 = gm, i1 = gn; (void)bz;\n");
}

// Which buffers the kernel's accesses touch.
std::vector<bool> KernelEmitter::kernel_buffers() const {
  std::vector<bool> used(p_.buffers.size(), false);
  for (const ir::Access& a : k_.accesses) used[a.buffer] = true;
  return used;
}

// A typed pointer b<i> for each used buffer, from the argument block.
std::string KernelEmitter::buffer_pointers(const std::vector<bool>& used, const char* indent) const {
  std::string s;
  for (size_t b = 0; b < used.size(); ++b)
    if (used[b]) {
      const std::string mt = mtype(p_.buffers[b].dtype);
      s += indent + mt + "* b" + std::to_string(b) + " = (" + mt + "*)bufs[" + std::to_string(b) + "];\n";
    }
  return s;
}

void KernelEmitter::emit_buffer_pointers(const std::vector<bool>& used) {
  o_ << buffer_pointers(used, "  ");
  o_ << "  (void)fs; (void)is;\n";
  // A shared function's node table follows the launch's buffer table.
  if (!single_block_) o_ << "  const long long* nd = (const long long*)(bufs + " << p_.buffers.size() << "); (void)nd;\n";
}

// The used buffers' pointers, then the whole block returns if an earlier
// kernel failed (one read of the error word per block).
void KernelEmitter::emit_gemm_prologue(const std::vector<bool>& used) {
  emit_buffer_pointers(used);
  o_ << "  __shared__ int failed;\n  if (threadIdx.x == 0) failed = err[0] != 0;\n  __syncthreads();\n  if (failed) return;\n";
}

// ---------------------------------------------------------------- pointwise
void KernelEmitter::emit_pointwise() {
  std::vector<bool> need = needed(k_.phases[0]);
  hoisted(need, "  ");
  if (!plan_.lanes_at_run_time) return emit_pointwise_loop(need);
  // Both forms, the run's numbers picking (the launch's grid is planned
  // for the same choice: plan_kernel at that size).
  const int lanes = plan_.lanes;
  o_ << "  if (" << lanes_condition() << ") {\n";
  plan_.lanes = kLanes;
  emit_pointwise_loop(need);
  o_ << "  } else {\n";
  plan_.lanes = 1;
  emit_pointwise_loop(need);
  o_ << "  }\n";
  plan_.lanes = lanes;
}

std::string KernelEmitter::lanes_condition() const {
  std::string c = "true";
  lanes_fit(p_, k_, sizes_, [&](int32_t slot) { c += " && " + number(slot, 0) + " % " + std::to_string(kLanes) + " == 0"; });
  return c;
}

// The element loop of a pointwise kernel, with plan_.lanes lanes.
void KernelEmitter::emit_pointwise_loop(const std::vector<bool>& need) {
  const int n = k_.loop.n;
  const int L = plan_.lanes, S = plan_.steps;
  const bool narrow = plan_.threads * L < (int64_t(1) << 31) && !sizes_.any();
  const char* ix = narrow ? "unsigned" : "long long";
  const ir::Phase& ph = k_.phases[0];
  // A thread takes S steps a block apart (each warp's accesses stay
  // contiguous), and issues the 16-byte loads of all S before computing
  // any: S times the bytes in flight per thread, for kernels whose
  // arithmetic would otherwise hold the next load back.
  // With sizes as arguments the thread count is computed; every size the
  // text serves takes 64-bit indices (it cannot know they fit 32 bits).
  const std::string threads = sizes_.any() ? extent_product(0, n, L) : std::to_string(plan_.threads) + "LL";
  o_ << "  const long long threads = " << threads << ";\n";
  o_ << "  for (long long t0 = (long long)blockIdx.x * blockDim.x * " << S << " + threadIdx.x; t0 < threads"
     << "; t0 += (long long)gridDim.x * blockDim.x * " << S << ") {\n";
  auto indices = [&](const char* in) {
    o_ << in << ix << " rest = (" << ix << ")t * " << L << ";\n";
    for (int d = n - 1; d >= 1; --d)
      o_ << in << "const long long i" << d << " = rest % " << index_extent(d, narrow) << "; rest /= "
         << index_extent(d, narrow) << ";\n";
    if (n) o_ << in << "const long long i0 = rest;\n";
    else o_ << in << "(void)rest;\n";
  };
  auto step_open = [&](const char* in) {
    o_ << in << "const long long t = t0 + (long long)s * blockDim.x;\n" << in << "if (t < threads) {\n";
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

// A pointwise kernel over two loops whose transposing loads (tiled_load)
// are staged through shared memory: each block takes kTile x kTile tiles of
// the loops, kTile x 8 threads. The stage reads each such load's tile with
// a warp along loop 0, where it is contiguous in memory, into tile<a>[i1][i0]
// (a row of kTile + 1: the column reads below fall in distinct banks); the
// body then runs with a warp along loop 1, where the stores and the other
// loads are contiguous, and reads tile<a>[i1][i0] back at its element. A
// generic one-lane kernel reads such a load one cache line per element of a
// warp: W6's [4096, 4096] B copied contiguous along K for TF32
// (ir/lower/operand_copies.cpp) took 0.11 ms on an H200, 1.2 TB/s.
void KernelEmitter::emit_tiled() {
  const ir::Phase& ph = k_.phases[0];
  std::vector<bool> need = needed(ph);
  hoisted(need, "  ");
  from_tile_.assign(k_.accesses.size(), false);
  for (size_t e = 0; e < k_.exprs.size(); ++e) {
    const ir::Expr& x = k_.exprs[e];
    if (!need[e] || x.kind != ExprKind::Load || !tiled_load(k_, k_.accesses[x.a]) || from_tile_[x.a]) continue;
    from_tile_[x.a] = true;
    o_ << "  __shared__ " << mtype(p_.buffers[k_.accesses[x.a].buffer].dtype) << " tile" << x.a << "[" << kTile << "]["
       << kTile + 1 << "];\n";
  }
  // The loops' extents and the tiles they make, as C: literals, or with
  // sizes as arguments computed from them.
  o_ << "  const long long L0 = " << extent(0) << ", L1 = " << extent(1) << ", tiles1 = (L1 + " << kTile - 1 << ") / " << kTile
     << ", tiles = (L0 + " << kTile - 1 << ") / " << kTile << " * tiles1;\n";
  o_ << "  const int tx = threadIdx.x % " << kTile << ", ty = threadIdx.x / " << kTile << ";\n";
  o_ << "  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {\n";
  o_ << "    const long long base0 = tile / tiles1 * " << kTile << ", base1 = tile % tiles1 * " << kTile << ";\n";
  o_ << "#pragma unroll\n    for (int j = 0; j < " << kTile << "; j += 8) {\n";
  o_ << "      const long long i0 = base0 + tx, i1 = base1 + ty + j;\n";
  o_ << "      if (i0 < L0 && i1 < L1) {\n";
  for (size_t a = 0; a < k_.accesses.size(); ++a)
    if (from_tile_[a])
      o_ << "        tile" << a << "[ty + j][tx] = b" << k_.accesses[a].buffer << "[" << offset(k_.accesses[a], "")
         << "];\n";
  o_ << "      }\n    }\n    __syncthreads();\n";
  o_ << "#pragma unroll\n    for (int j = 0; j < " << kTile << "; j += 8) {\n";
  o_ << "      const long long i0 = base0 + ty + j, i1 = base1 + tx;\n";
  o_ << "      if (i0 < L0 && i1 < L1) {\n";
  body(need, "        ");
  for (auto [ai, e] : ph.stores) store(ai, e, "        ");
  o_ << "      }\n    }\n    __syncthreads();\n  }\n";
  from_tile_.clear();
}

bool KernelEmitter::lane_vector(uint32_t access) const {
  const int n = k_.loop.n;
  return plan_.lanes > 1 && k_.accesses[access].strides[n - 1] == 1;
}

// ---------------------------------------------------------------- rows
void KernelEmitter::emit_rows() {
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
  o_ << "  const bool active = row < " << (sizes_.any() ? extent_product(0, outer) : std::to_string(plan_.rows) + "LL") << ";\n";
  o_ << "  long long rest = active ? row : 0;\n";
  for (int d = outer - 1; d >= 0; --d) o_ << "  const long long i" << d << " = rest % " << extent(d) << "; rest /= " << extent(d) << ";\n";
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
void KernelEmitter::open_row_loop(const std::vector<bool>& need, const ir::Phase& ph, const char* in) {
  const int n = k_.loop.n, outer = k_.outer, L = plan_.lanes;
  const std::string row_length = sizes_.any() ? extent_product(outer, n) : std::to_string(plan_.row_length) + "LL";
  if (plan_.per_thread) {
    o_ << in << "#pragma unroll\n" << in << "for (int j = 0; j < " << plan_.per_thread << "; ++j) {\n";
    o_ << in << "  const long long r = (lane + (long long)j * G) * " << L << ";\n";
    o_ << in << "  if (!active || r >= " << row_length << ") continue;\n";
  } else {
    o_ << in << "for (long long r = lane * " << L << "LL; active && r < " << row_length << "; r += G * " << L
       << "LL) {\n";
    o_ << in << "  const int j = 0; (void)j;\n";
  }
  o_ << in << "  long long rr = r;\n";
  for (int d = n - 1; d > outer; --d) o_ << in << "  const long long i" << d << " = rr % " << extent(d) << "; rr /= " << extent(d) << ";\n";
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
void KernelEmitter::close_row_loop(const ir::Phase& ph, const char* in) {
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

void KernelEmitter::stores(const ir::Phase& ph, const char* in) {
  for (size_t s = 0; s < ph.stores.size(); ++s) {
    auto [ai, e] = ph.stores[s];
    if (lane_ && lane_vector(ai)) o_ << in << "st" << s << "[l] = " << to_memory(e) << ";\n";
    else store(ai, e, in);
  }
}

void KernelEmitter::emit_phase(const ir::Phase& ph, size_t index) {
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
  if (dt == kHalf) o_ << "    rv" << p << " = loom_f16_round(rv" << p << ");  // summed in float32, rounded once\n";
  o_ << "  }\n";
}

std::string KernelEmitter::identity(Op op, ScalarType dt) {
  const bool f = fp(dt);
  switch (op) {
    case Op::Prod: case Op::All: return f ? lit(1, dt) : "1";
    case Op::Max:
      if (f) return dt != kDouble ? "__int_as_float((int)0xff800000u)" : "__longlong_as_double(0xfff0000000000000LL)";
      switch (dt) {  // the least value of dt
        case kBool: case kByte: return "0";
        case kChar: return "(-128)";
        case kShort: return "(-32768)";
        case kInt: return "(-2147483647 - 1)";
        default: return "(-9223372036854775807LL - 1)";
      }
    case Op::Min:
      if (f) return dt != kDouble ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
      switch (dt) {  // the greatest value of dt
        case kBool: return "1";
        case kByte: return "255";
        case kChar: return "127";
        case kShort: return "32767";
        case kInt: return "2147483647";
        default: return "9223372036854775807LL";
      }
    case Op::Sum: case Op::Any: return f ? lit(0, dt) : "0";
    default: no_code(op, dt);  // ArgMax and ArgMin keep a value and a position
  }
}

std::string KernelEmitter::combine(Op op, ScalarType dt, const std::string& a, const std::string& b) {
  const bool f = fp(dt), bl = dt == kBool;
  switch (op) {
    case Op::Sum: return f ? a + " + " + b : bl ? "(" + a + " | " + b + ")" : "loom_add(" + a + ", " + b + ")";
    case Op::Prod: return f ? a + " * " + b : bl ? "(" + a + " & " + b + ")" : "loom_mul(" + a + ", " + b + ")";
    case Op::Max: return f ? "loom_fmax(" + a + ", " + b + ")" : bl ? "(" + a + " | " + b + ")" : "loom_imax(" + a + ", " + b + ")";
    case Op::Min: return f ? "loom_fmin(" + a + ", " + b + ")" : bl ? "(" + a + " & " + b + ")" : "loom_imin(" + a + ", " + b + ")";
    case Op::All: return "(" + a + " & " + b + ")";
    case Op::Any: return "(" + a + " | " + b + ")";
    default: no_code(op, dt);
  }
}


}  // namespace loom::jit::cuda::detail
