// The llvm code generator's entry points (jit/llvm/codegen.h): the host
// target, the plans shared with the runtime (transpose blocks, column
// lanes, parallel units), kernels alike sharing one function, and one
// module per part; each kernel's function is emitted by KernelEmitter
// (jit/llvm/kernel_emitter.h).
#include "jit/llvm/codegen.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Host.h>
#include <llvm/TargetParser/Triple.h>

#include <algorithm>
#include <cstdio>

#include "ir/lower/lower.h"
#include "jit/llvm/gemm.h"
#include "jit/llvm/kernel_emitter.h"
#include "jit/llvm/math.h"
#include "jit/llvm/memory_hints.h"

namespace loom::jit::llvm_cpu {

const Target& host_target() {
  static const Target t = [] {
    Target r;
    r.triple = llvm::sys::getProcessTriple();
    r.cpu = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> feats;
    llvm::sys::getHostCPUFeatures(feats);
    // LOOM_CPU_ISA=avx2 or baseline compiles for less than the host has, so
    // the AVX2 and SSE2 code paths (tiles, math, vector widths) can be run
    // and tested on an AVX-512 machine.
    const char* isa = std::getenv("LOOM_CPU_ISA");
    const std::string want = isa ? isa : "";
    if (want == "avx2" || want == "baseline") {
      r.cpu = want == "avx2" ? "x86-64-v3" : "x86-64";
      for (auto& f : feats) {
        const std::string name = f.first().str();
        const bool wide = name.rfind("avx512", 0) == 0 || name == "evex512" || name.rfind("avx10", 0) == 0 ||
                          name.rfind("amx", 0) == 0;
        const bool avx = name.rfind("avx", 0) == 0 || name == "fma" || name == "f16c" || name.rfind("vaes", 0) == 0 ||
                         name == "vpclmulqdq" || name == "gfni";
        if (wide || (want == "baseline" && avx)) f.second = false;
      }
    }
    // Every feature is named, off ones too: the CPU name alone implies its
    // model's features, and a hypervisor may hide some of them (a Zen 4 VM
    // without AVX-512 reports "znver4"), so "+" only would let LLVM emit
    // instructions this CPU faults on.
    std::vector<std::string> named;
    for (auto& f : feats) named.push_back((llvm::Twine(f.second ? "+" : "-") + f.first()).str());
    std::sort(named.begin(), named.end());  // deterministic: part of the disk-cache key
    for (auto& f : named) r.features += (r.features.empty() ? "" : ",") + f;
    r.vector_width = feats.lookup("avx512f") ? 16 : feats.lookup("avx2") ? 8 : 4;
    return r;
  }();
  return t;
}

std::string build_id() { return std::string("llvm " LLVM_VERSION_STRING ", ") + ir::codegen_source_id(); }

std::string function_symbol(const std::string& key) { return ir::key_symbol("loom_f", key); }

LoopBlock transpose_block(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs* sizes) {
  const int n = k.loop.n;
  if (k.contraction || k.outer != 0 || k.phases.size() != 1 || k.phases[0].kind != ir::Phase::Store ||
      k.phases[0].per_row || n < 2)
    return {};
  if (sizes && sizes->any()) return {};  // its choice reads extents and strides
  int64_t widest = 0;  // bytes of the widest element read or written across rows
  for (const ir::Access& a : k.accesses) {
    const int64_t across = a.strides[n - 1], along = a.strides[n - 2];
    if (across != 0 && across != 1 && (along == 1 || along == -1))
      widest = std::max<int64_t>(widest, element_size(p.buffers[a.buffer].dtype));
  }
  if (widest == 0) return {};
  const LoopBlock b{256, 64 / widest};
  if (k.loop[n - 1] < 2 * b.cols || k.loop[n - 2] < 2 * b.cols) return {};  // a few lines: in cache anyway
  return b;
}

int64_t column_lanes(const ir::Kernel& k, int vector_width, const ir::SizeArgs* sizes) {
  if (k.outer < 1) return 0;
  if (sizes && sizes->lifted_loop(k.outer - 1)) return 0;
  bool reduces = false;
  for (const ir::Phase& ph : k.phases) {
    if (ph.kind == ir::Phase::Reduce && (ph.reduce_op == ir::Op::ArgMax || ph.reduce_op == ir::Op::ArgMin)) return 0;
    reduces = reduces || ph.kind == ir::Phase::Reduce;
  }
  if (!reduces) return 0;
  const int64_t lanes = 8 * vector_width;
  if (k.loop[k.outer - 1] < lanes || !ir::rows_lie_across_memory(k)) return 0;
  for (const ir::Expr& x : k.exprs)
    if (x.kind == ir::ExprKind::Op && (x.op == ir::Op::RandUniform || x.op == ir::Op::RandNormal)) return 0;
  return lanes;
}

int64_t parallel_unit(const ir::KernelProgram& p, const ir::Kernel& k, const Target& t, const ir::SizeArgs* sizes) {
  if (k.loop.n == 2)
    if (const int64_t rows = transpose_block(p, k, sizes).rows) return rows;
  if (k.outer == 1)
    if (const int64_t lanes = column_lanes(k, t.vector_width, sizes)) return lanes;
  return 1;
}

KernelFunctions share_functions(const ir::KernelProgram& p, ir::Lift lift, ir::SizeHistory* history) {
  // Memory hints depend on the rest of the program (whether anyone reads
  // an output again): part of what makes two kernels' code the same.
  return ir::share_kernels(p, [&](const ir::Kernel& k, const ir::LocalKernel&) {
    const MemoryHints h = memory_hints(p, k);
    std::string key;
    for (bool s : h.stream) key += s ? 'S' : '.';
    key += h.prefetch_spread ? ";spread" : ";";
    for (int ph : h.prefetch_phases) key += ':' + std::to_string(ph);
    for (uint32_t a : h.prefetch) key += ',' + std::to_string(a);
    key += ';';
    for (uint32_t a : h.ahead) key += ',' + std::to_string(a);
    return key;
  }, {}, lift, history);
}

std::unique_ptr<llvm::Module> emit_module(const ir::KernelProgram& p, const KernelFunctions& f,
                                          std::span<const uint32_t> which, llvm::LLVMContext& ctx, const Target& t) {
  auto m = std::make_unique<llvm::Module>("loom_graph", ctx);
  m->setTargetTriple(t.triple);
  for (uint32_t i : which) {
    const ir::LocalKernel& l = f.local[f.first[i]];
    detail::KernelEmitter(l.program, l.kernel(), l.sizes, memory_hints(p, p.kernels[f.first[i]]), *m, t,
                          function_symbol(f.keys[i]))
        .emit();
  }
  return m;
}

std::unique_ptr<llvm::Module> emit_module(const ir::KernelProgram& p, const KernelFunctions& f, llvm::LLVMContext& ctx,
                                          const Target& t) {
  std::vector<uint32_t> all(f.first.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  return emit_module(p, f, all, ctx, t);
}

std::vector<std::vector<uint32_t>> compile_parts(const KernelFunctions& f, std::span<const uint32_t> which,
                                                 size_t parts) {
  // Work to compile, roughly: the body's exprs and phases, and for a GEMM
  // kernel its tile code (an unrolled MR x NR block of FMAs per K-loop
  // variant) on top. Largest first, each to the lightest part (W4's 13
  // functions on 2 cores: 1110 ms in one part, 550-600 ms in two).
  std::vector<std::pair<double, uint32_t>> work;
  for (uint32_t i : which) {
    const ir::Kernel& k = f.local[f.first[i]].kernel();
    work.push_back({static_cast<double>(k.exprs.size() + 8 * k.phases.size()) + (k.contraction ? 200.0 : 0.0), i});
  }
  std::sort(work.begin(), work.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<std::vector<uint32_t>> out(std::max<size_t>(1, std::min(parts, work.size())));
  std::vector<double> load(out.size(), 0);
  for (auto [w, i] : work) {
    const size_t lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[lightest].push_back(i);
    load[lightest] += w;
  }
  for (auto& part : out) std::sort(part.begin(), part.end());
  return out;
}

}  // namespace loom::jit::llvm_cpu
