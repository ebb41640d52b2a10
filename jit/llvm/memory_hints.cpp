#include "jit/llvm/memory_hints.h"

#include <algorithm>

namespace loom::jit::llvm_cpu {

namespace {

int64_t buffer_bytes(const ir::KernelProgram& p, uint32_t b) {
  return p.buffers[b].numel * static_cast<int64_t>(element_size(p.buffers[b].dtype));
}

bool read_anywhere(const ir::KernelProgram& p, uint32_t b) {
  for (const ir::Kernel& k : p.kernels)
    for (const ir::Expr& e : k.exprs)
      if (ir::reads_memory(e) && k.accesses[e.a].buffer == b) return true;
  for (const ir::LibraryCall& c : p.library_calls)
    if (std::find(c.inputs.begin(), c.inputs.end(), b) != c.inputs.end()) return true;
  return false;
}

int64_t inner_stride(const ir::Access& a) { return a.strides.n ? a.strides[a.strides.n - 1] : 0; }

}  // namespace

MemoryHints memory_hints(const ir::KernelProgram& p, const ir::Kernel& k) {
  MemoryHints h;
  h.stream.assign(k.accesses.size(), false);
  for (const ir::Phase& ph : k.phases) {
    if (ph.kind != ir::Phase::Store || ph.per_row) continue;
    for (auto [a, e] : ph.stores) {
      const ir::Access& acc = k.accesses[a];
      const ir::BufferInfo& info = p.buffers[acc.buffer];
      h.stream[a] = info.kind == ir::BufferKind::Output && info.dtype != kBool && inner_stride(acc) == 1 &&
                    buffer_bytes(p, acc.buffer) >= kStreamBytes && !read_anywhere(p, acc.buffer);
    }
  }

  // Prefetch ahead: a pointwise kernel (one store phase over all its loops)
  // that streams a store reads its large contiguous inputs ahead.
  const bool streams = std::find(h.stream.begin(), h.stream.end(), true) != h.stream.end();
  if (streams && k.phases.size() == 1 && k.phases[0].kind == ir::Phase::Store && !k.phases[0].per_row &&
      !k.contraction)
    for (const ir::Expr& e : k.exprs) {
      if (e.kind != ir::ExprKind::Load) continue;
      const ir::Access& acc = k.accesses[e.a];
      if (inner_stride(acc) == 1 && buffer_bytes(p, acc.buffer) >= kPrefetchBytes &&
          std::find(h.ahead.begin(), h.ahead.end(), e.a) == h.ahead.end())
        h.ahead.push_back(e.a);
    }

  // Prefetch: a row kernel whose first phase reads rows from memory and
  // which has a later phase over the row to overlap the next row's reads with.
  if (k.outer == 0 || k.outer >= k.loop.n || k.phases.empty() || k.phases[0].kind != ir::Phase::Reduce) return h;
  std::vector<int> whole_row;  // the phases that walk the whole row (not a per-row store)
  for (size_t ph = 0; ph < k.phases.size(); ++ph)
    if (!k.phases[ph].per_row) whole_row.push_back(static_cast<int>(ph));
  if (whole_row.size() < 2) return h;
  const std::vector<bool> need = ir::phase_exprs(k, k.phases[0]);
  const int row_loop = k.outer - 1;
  for (size_t e = 0; e < k.exprs.size(); ++e) {
    if (!need[e] || k.exprs[e].kind != ir::ExprKind::Load) continue;
    const uint32_t a = k.exprs[e].a;
    const ir::Access& acc = k.accesses[a];
    if (inner_stride(acc) == 1 && acc.strides[row_loop] != 0 && buffer_bytes(p, acc.buffer) >= kPrefetchBytes &&
        std::find(h.prefetch.begin(), h.prefetch.end(), a) == h.prefetch.end())
      h.prefetch.push_back(a);
  }
  if (h.prefetch.empty()) return h;
  h.prefetch_spread = k.outer == k.loop.n - 1;
  if (h.prefetch_spread) h.prefetch_phases.assign(whole_row.begin() + 1, whole_row.end());
  else h.prefetch_phases = {whole_row[1]};
  return h;
}


}  // namespace loom::jit::llvm_cpu
