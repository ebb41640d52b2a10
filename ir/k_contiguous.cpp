// Pass "k-contiguous operands" (lower.h, LowerOptions::k_contiguous_operands_min_work).
//
// A GEMM kernel reads its operands in place, through any strides. Some
// tile kinds need an operand contiguous along K: the CUDA warpgroup
// tensor cores take TF32 operands only from K-major shared-memory tiles
// (jit/cuda/gemm.cpp, wgmma_configs), so a product whose B is [K, N]
// row-major (W6's layout, a weight gradient's x) would fall back to the
// mma.sync tiles, a third of their speed. This pass gives such an operand
// a copy of its own, contiguous along K, made by a small kernel just
// before the product: one pass over the operand, far less than what it
// saves on a large product.
#include <algorithm>
#include <string>

#include "ir/lower.h"

namespace loom::ir {

namespace {

// The kernel that copies operand `side` (0: A, 1: B) of GEMM kernel g into
// buffer `to`, contiguous along K: its loops are g's loops the operand
// varies along (a batch, M for A, N for B), then K.
Kernel copy_along_k(const Kernel& g, int side, uint32_t to, Dims& to_strides) {
  const Contraction& c = *g.contraction;
  const Access& from = g.accesses[side == 0 ? c.a : c.b];
  Kernel k;
  k.name = g.name + (side == 0 ? "_a" : "_b") + "_along_k";
  k.root = g.root;
  k.graph_nodes = {c.node};
  Access src{from.buffer, from.offset, {}}, dst{to, 0, {}};
  for (uint8_t d = 0; d < g.loop.n; ++d)
    if (from.strides[d] != 0 && g.loop[d] != 1) {
      k.loop.push_back(g.loop[d]);
      src.strides.push_back(from.strides[d]);
    }
  k.loop.push_back(c.k);
  src.strides.push_back(side == 0 ? c.a_k : c.b_k);
  // Row-major in the copy: K innermost.
  dst.strides.n = k.loop.n;
  int64_t step = 1;
  for (int d = k.loop.n - 1; d >= 0; --d) {
    dst.strides[d] = step;
    step *= k.loop[d];
  }
  // The GEMM's view of the copy: the same element for the same loop
  // position, 0 along the loops the operand does not vary along.
  to_strides.n = g.loop.n;
  for (uint8_t d = 0, kept = 0; d < g.loop.n; ++d)
    to_strides[d] = from.strides[d] != 0 && g.loop[d] != 1 ? dst.strides[kept++] : 0;
  k.accesses = {src, dst};
  k.exprs.push_back(Expr{ExprKind::Load, Op::Cast, kFloat, 0});
  Phase store;
  store.stores = {{1, 0}};
  k.phases = {store};
  k.cost_per_element = 1;
  return k;
}

}  // namespace

int k_contiguous_operands(KernelProgram& prog, double min_work) {
  if (min_work < 0) return 0;
  int copies = 0;
  uint32_t temps = 0;
  for (const BufferInfo& b : prog.buffers) temps += b.kind == BufferKind::Temp;
  std::vector<Step> steps;
  std::vector<Kernel> kernels;
  auto add = [&](Kernel k) {
    steps.push_back({Step::Generated, static_cast<uint32_t>(kernels.size())});
    kernels.push_back(std::move(k));
  };
  for (const Step& s : prog.steps) {
    if (s.kind != Step::Generated) {
      steps.push_back(s);
      continue;
    }
    Kernel& g = prog.kernels[s.index];
    if (g.contraction) {
      Contraction& c = *g.contraction;
      double work = static_cast<double>(c.k);
      for (uint8_t d = 0; d < g.loop.n; ++d) work *= static_cast<double>(g.loop[d]);
      for (int side = 0; side < 2 && work >= min_work; ++side) {
        const uint32_t a = side == 0 ? c.a : c.b;
        const int64_t along_k = side == 0 ? c.a_k : c.b_k;
        const ScalarType dt = prog.buffers[g.accesses[a].buffer].dtype;
        // Float operands read as they are (a fused producer's exprs live
        // in g), through an access nothing else in g reads.
        const bool shared = std::any_of(g.exprs.begin(), g.exprs.end(), [&](const Expr& e) {
          return reads_memory(e) && e.a == a;
        });
        if (along_k == 1 || c.fused_operand(side) || dt != kFloat || shared) continue;
        Dims to_strides;
        int64_t numel = c.k;
        int kept = 1;
        for (uint8_t d = 0; d < g.loop.n; ++d)
          if (g.accesses[a].strides[d] != 0 && g.loop[d] != 1) numel *= g.loop[d], ++kept;
        if (kept > kMaxDims) continue;
        prog.buffers.push_back({BufferKind::Temp, temps++, dt, numel});
        const uint32_t to = static_cast<uint32_t>(prog.buffers.size() - 1);
        add(copy_along_k(g, side, to, to_strides));
        g.accesses[a] = Access{to, 0, to_strides};
        (side == 0 ? c.a_k : c.b_k) = 1;
        ++copies;
      }
    }
    add(std::move(g));
  }
  prog.steps = std::move(steps);
  prog.kernels = std::move(kernels);
  return copies;
}

std::string k_contiguous_build_id() { return std::string("k-contiguous ") + __DATE__ " " __TIME__; }

}  // namespace loom::ir
