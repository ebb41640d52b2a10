// Pass "operand copies" (lower.h: LowerOptions::k_contiguous_operands_min_work,
// n_contiguous_b_min_work).
//
// A GEMM kernel reads its operands in place, through any strides. Some
// tiles are much faster with an operand laid out one way:
// - the CUDA warpgroup tensor cores take TF32 operands only from K-major
//   shared-memory tiles (jit/cuda/gemm.cpp, wgmma_configs), so a product
//   whose B is [K, N] row-major (W6's layout) falls back to mma.sync tiles
//   at half their speed;
// - the CUDA FFMA tiles read a B contiguous along K (x W^T: a Linear
//   layer's weight [out, in]) ~10% slower than one contiguous along N.
// This pass gives such an operand a copy of its own, laid out as the tile
// wants, made by a small kernel just before the product: one pass over the
// operand, far less than what it saves on a large product. The copy of a
// transposed operand is a transposing pointwise kernel (CUDA: 32 x 32
// shared-memory tiles, jit/cuda KernelPlan::tiled).
#include <algorithm>
#include <string>

#include "ir/lower/lower.h"

namespace loom::ir {

namespace {

// The loops of a copy of operand access `from` of GEMM kernel g: g's loops
// the operand varies along (a batch, M for A, N for B), as g's loop
// numbers, and -1 for K, last (`k_inner`) or just before the operand's own
// last loop.
std::vector<int> copy_loops(const Kernel& g, const Access& from, bool k_inner) {
  std::vector<int> loop_of;
  for (int d = 0; d < g.loop.n; ++d)
    if (from.strides[d] != 0 && g.loop[d] != 1) loop_of.push_back(d);
  loop_of.insert(k_inner || loop_of.empty() ? loop_of.end() : loop_of.end() - 1, -1);
  return loop_of;
}

// The kernel that copies operand `side` (0: A, 1: B) of GEMM kernel g,
// over `loop_of` (copy_loops), into buffer `to`, row-major. Sets the
// GEMM's view of the copy: `to_strides` along g's loops and `to_k` along K.
Kernel copy_operand(const Kernel& g, int side, const std::vector<int>& loop_of, uint32_t to, Dims& to_strides,
                    int64_t& to_k) {
  const Contraction& c = *g.contraction;
  const Access& from = g.accesses[side == 0 ? c.a : c.b];
  Kernel k;
  k.name = g.name + (side == 0 ? "_a" : "_b") + (loop_of.back() < 0 ? "_along_k" : "_along_n");
  k.root = g.root;
  k.graph_nodes = {c.node};
  Access src{from.buffer, from.offset, {}, from.offset_scalar, from.offset_align}, dst{to, 0, {}};
  for (int d : loop_of) {
    k.loop.push_back(d < 0 ? c.k : g.loop[d]);
    src.strides.push_back(d < 0 ? (side == 0 ? c.a_k : c.b_k) : from.strides[d]);
  }
  dst.strides.n = k.loop.n;
  int64_t step = 1;
  for (int d = k.loop.n - 1; d >= 0; --d) {
    dst.strides[d] = step;
    step *= k.loop[d];
  }
  // The same element for the same loop position, 0 along the loops the
  // operand does not vary along.
  to_strides.n = g.loop.n;
  for (int d = 0; d < g.loop.n; ++d) to_strides[d] = 0;
  for (size_t i = 0; i < loop_of.size(); ++i) {
    if (loop_of[i] < 0) to_k = dst.strides[i];
    else to_strides[loop_of[i]] = dst.strides[i];
  }
  k.accesses = {src, dst};
  k.exprs.push_back(Expr{ExprKind::Load, Op::Cast, kFloat, 0});
  Phase store;
  store.stores = {{1, 0}};
  k.phases = {store};
  k.cost_per_element = 1;
  return k;
}

}  // namespace

int copy_operands(KernelProgram& prog, const LowerOptions& o) {
  if (o.k_contiguous_operands_min_work < 0 && o.n_contiguous_b_min_work < 0) return 0;
  int copies = 0;
  rewrite_kernels(prog, [&](Kernel& g, auto&& add) {
    if (!g.contraction || g.loop.n == 0) {
      add(std::move(g));
      return;
    }
    Contraction& c = *g.contraction;
    double work = static_cast<double>(c.k);
    for (uint8_t d = 0; d < g.loop.n; ++d) work *= static_cast<double>(g.loop[d]);
    auto at_least = [&](double bound) { return bound >= 0 && work >= bound; };
    for (int side = 0; side < 2; ++side) {
      const uint32_t a = side == 0 ? c.a : c.b;
      const Access& acc = g.accesses[a];
      int64_t& along_k = side == 0 ? c.a_k : c.b_k;
      // Float operands read as they are (a fused producer's exprs live
      // in g), through an access nothing else in g reads.
      const bool shared = std::any_of(g.exprs.begin(), g.exprs.end(), [&](const Expr& e) {
        return reads_memory(e) && e.a == a;
      });
      if (c.fused_operand(side) || prog.buffers[acc.buffer].dtype != kFloat || shared) continue;
      const bool to_k = along_k != 1 && at_least(o.k_contiguous_operands_min_work);
      const bool to_n = side == 1 && along_k == 1 && acc.strides[g.loop.n - 1] != 1 &&
                        acc.strides[g.loop.n - 1] != 0 && at_least(o.n_contiguous_b_min_work);
      if (!to_k && !to_n) continue;
      const std::vector<int> loop_of = copy_loops(g, acc, to_k);
      if (loop_of.size() > kMaxDims) continue;
      int64_t numel = 1;
      for (int d : loop_of) numel *= d < 0 ? c.k : g.loop[d];
      const uint32_t to = add_temp(prog, kFloat, numel);
      Dims to_strides;
      int64_t new_k = 1;
      add(copy_operand(g, side, loop_of, to, to_strides, new_k));
      g.accesses[a] = Access{to, 0, to_strides};
      along_k = new_k;
      ++copies;
    }
    add(std::move(g));
  });
  return copies;
}


}  // namespace loom::ir
