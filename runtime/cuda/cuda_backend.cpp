#include "runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include <loom/error.h>
#include <tbb/parallel_for.h>
#include <tbb/task_group.h>

#include "ir/lower/lower.h"
#include "jit/cuda/codegen.h"
#include "kernels/cuda/library.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/cuda/gemm_tune.h"
#include "runtime/cuda/library_module.h"
#include "runtime/dump.h"
#include "runtime/lower_program.h"

namespace loom::runtime::cuda {

namespace {
// Multiply-adds from which a product's operand is copied in the layout its
// tiles want (pass "operand copies", ir/lower/operand_copies.cpp): contiguous
// along K for TF32 on sm_90a, a B contiguous along N for exact float32.
// The copy is one pass over the operand, the product M N K multiply-adds.
constexpr double kOperandCopyMinWork = 0x1p30;

// With sizes as arguments a product keeps the tile configuration chosen at
// the first size its kernel was compiled at (tuned there, static or not): at every later
// size the text is the same and compiles nothing, where tuning again would
// compile and time candidates for each new length. Keyed by the kernel's
// shape (ir::shape_key: a weight its graph computes or reads as an input
// alike), its buffers' alignment, the TF32 mode and the device; used only
// where it fits the operands (gemm_config_fits).
class RememberedGemms {
 public:
  std::string key_of(const ir::KernelProgram& p, const ir::Kernel& k, bool tf32, int device) const {
    return ir::shape_key(p, k) + jit::cuda::alignment_key(p, k) + (tf32 ? ";tf32;" : ";") +
           std::to_string(device);
  }
  jit::cuda::GemmConfig find(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = by_kernel_.find(key);
    return it == by_kernel_.end() ? jit::cuda::GemmConfig{} : it->second;
  }
  void keep(const std::string& key, const jit::cuda::GemmConfig& c) {
    std::lock_guard lock(mu_);
    if (by_kernel_.size() > 100000) by_kernel_.clear();  // bounded: a config is cheap to choose again
    by_kernel_.emplace(key, c);
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, jit::cuda::GemmConfig> by_kernel_;
};
RememberedGemms& remembered_gemms() {
  static RememberedGemms* r = new RememberedGemms();  // used until exit
  return *r;
}
}  // namespace

// Compiles, on TBB's threads, the library modules a program launches
// (library_function), while the compile goes on; waits for them when it
// ends. A function it could not plan or compile is left to the
// executable's own planning, which reports the error.
class LibraryPrefetch {
 public:
  LibraryPrefetch(const ir::KernelProgram& p, int device) {
    std::vector<std::string> names;
    for (const ir::Step& st : p.steps) {
      if (st.kind != ir::Step::Library) continue;
      try {
        for (const kernels::cuda::Launch& l : kernels::cuda::plan_library(p.library_calls[st.index], p, st.index))
          names.push_back(l.function);
      } catch (const loom::Error&) {
      }
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (names.empty()) return;
    tasks_.run([names = std::move(names), device] {
      tbb::parallel_for(size_t{0}, names.size(), [&](size_t i) {
        try {
          library_function(device, names[i]);
        } catch (...) {  // the executable's planning asks again, and reports it
        }
      });
    });
  }
  ~LibraryPrefetch() {
    try {
      tasks_.wait();
    } catch (...) {  // the tasks catch their own; a destructor must not throw
    }
  }

 private:
  tbb::task_group tasks_;
};

LOOM_REGISTER_BACKEND(CudaBackend, 100);

std::unique_ptr<Executable> CudaBackend::compile(const ir::Graph& g, const CompileHints& hints) {
  const Device device = g.nodes[g.outputs.at(0)]->device;
  const int index = device.index() < 0 ? 0 : device.index();
  context(index);  // fails early, with the reason, where there is no GPU

  std::string folder;
  // Floating-point products are GEMM kernels with their epilogues fused
  // (jit/cuda/gemm.h); integer ones stay library calls.
  ir::LowerOptions options;
  options.gemm_kernels = true;
  // Runtime view offsets found 16-byte aligned are taken to be so (vector
  // loads, GEMM copies), guarded at each run; the variant for runs that
  // are not assumes nothing.
  options.offset_alignment_bytes = hints.unaligned_offsets ? 0 : 16;
  options.narrow_products_as_rows = true;
  options.short_products_inline = true;
  options.operand_producers_min_work = 0x1p34;  // below, the separate pass is cheaper (ir/lower/lower.h)
  // A whole-tensor sum is split in up to 1024 parts: a group of threads
  // each, blocks for every SM (one part per row was one block, one SM).
  options.split_reduction_rows = 1024;
  // A large product's operand in the layout its tiles want (ir/lower/lower.h):
  // contiguous along K for the warpgroup tensor cores (TF32 on sm_90a), B
  // contiguous along N for the FFMA tiles (exact float32).
  const bool tf32 = allow_tf32();
  if (tf32 && context(index).wgmma()) options.k_contiguous_operands_min_work = kOperandCopyMinWork;
  if (!tf32) options.n_contiguous_b_min_work = kOperandCopyMinWork;
  ir::KernelProgram program = lower_program(g, name(), folder, options);

  // The library kernels it launches (attention, convolutions and the
  // library's own: a module each), compiled or loaded on the first use in
  // this process beside the tuning and the functions below, not after them.
  LibraryPrefetch library(program, index);

  LoadedModule module;
  if (!program.kernels.empty()) {
    // A single-block program computes its products itself: no tuning.
    // LOOM_CUDA_SINGLE_BLOCK=0 (read at each compile) keeps one kernel per
    // step, for comparisons and for tests of the GEMM template.
    // With sizes as arguments, never: its one kernel holds every size. So
    // only for a static compile, or the first of a structure whose sizes
    // would be lifted only because other graphs had its kernels at other
    // sizes (CompileHints::first_of_structure).
    const char* env = std::getenv("LOOM_CUDA_SINGLE_BLOCK");
    const bool lift = hints.sizes != ir::Lift::None;
    const bool single_block = (!lift || (hints.sizes == ir::Lift::Seen && hints.first_of_structure)) &&
                              !(env && std::string(env) == "0") && jit::cuda::single_block(program);
    // Each product's tile configuration, tuned once per problem (in memory
    // and on disk); with sizes as arguments, the one its kernel had at the
    // first size (RememberedGemms).
    module.gemm.resize(program.kernels.size());
    std::vector<std::string> remembered(program.kernels.size());
    for (size_t i = 0; i < program.kernels.size(); ++i)
      if (program.kernels[i].contraction) {
        remembered[i] = remembered_gemms().key_of(program, program.kernels[i], tf32, index);
        if (!lift) continue;
        // Only where it suits this size's operands (a tile that copies 16
        // bytes at a time needs their alignment, which a size may break).
        const jit::cuda::GemmConfig c = remembered_gemms().find(remembered[i]);
        if (c.valid() && gemm_config_fits(c, jit::cuda::gemm_problem(program, program.kernels[i], tf32), index))
          module.gemm[i] = c;
      }
    if (!single_block) {  // the tuning modules this graph needs, compiled side by side first
      std::vector<std::string> tuning;
      for (size_t i = 0; i < program.kernels.size(); ++i)
        if (const ir::Kernel& k = program.kernels[i]; k.contraction && !module.gemm[i].valid())
          for (std::string& s : pending_tuning_sources(jit::cuda::gemm_problem(program, k, tf32), index))
            tuning.push_back(std::move(s));
      std::sort(tuning.begin(), tuning.end());
      tuning.erase(std::unique(tuning.begin(), tuning.end()), tuning.end());
      compile_cubins(tuning, index, "GEMM tuning kernels");
    }
    for (size_t i = 0; i < program.kernels.size() && !single_block; ++i) {
      if (!program.kernels[i].contraction || module.gemm[i].valid()) continue;
      module.gemm[i] = choose_gemm(jit::cuda::gemm_problem(program, program.kernels[i], tf32), index);
      remembered_gemms().keep(remembered[i], module.gemm[i]);  // static compiles too: the next size's config
    }
    const std::string what = "graph " + std::to_string(g.hash) + " (" + std::to_string(program.kernels.size()) + " kernels)";
    if (single_block) {
      // Its kernels' sizes noted all the same: at the structure's next
      // size they become arguments (in kernels of their own).
      ir::share_kernels(program, [](const ir::Kernel&, const ir::LocalKernel&) { return std::string(); }, {},
                        ir::Lift::None, &sizes_seen_);
      // One program for the graph: its cubin's key is the graph and the
      // TF32 mode (the graph does not say it).
      std::vector<uint64_t> key(g.canonical.begin(), g.canonical.end());
      key.push_back(tf32);
      key.push_back(1);  // the single-block form
      const std::string source = jit::cuda::emit_source(program, module.shared, module.gemm, true);
      dump_file(folder, "kernels.cu", source);
      const std::vector<char> cubin = cached_cubin(source, index, key, what, folder, 1);
      module.cubin_bytes = static_cast<int64_t>(cubin.size());
      module.module = load_module(cubin, index, what);
      check(driver().cuModuleGetFunction(&module.single_block, module.module, jit::cuda::kSingleBlockSymbol),
            "cuModuleGetFunction", what);
      return std::make_unique<CudaExecutable>(std::move(program), index, std::move(module));
    }
    // Kernels alike share one function (GEMM kernels: with the same tile
    // configuration), each function a program of its own, compiled once
    // per process (side by side with the others a graph lacks) and loaded
    // once per GPU, whichever graphs run it.
    module.shared = jit::cuda::share_kernels(program, module.gemm, hints.sizes, &sizes_seen_);
    std::vector<std::string> sources(module.shared.first.size());
    for (size_t f = 0; f < sources.size(); ++f)
      sources[f] = jit::cuda::emit_function_source(program, module.shared, module.gemm, f);
    if (!folder.empty()) {
      std::string all;
      for (size_t f = 0; f < sources.size(); ++f) all += "// ---- function " + std::to_string(f) + "\n" + sources[f];
      dump_file(folder, "kernels.cu", all);
    }
    module.functions = function_modules(sources, index, what);
    for (size_t i = 0; i < program.kernels.size(); ++i) {
      CUfunction f = nullptr;
      const uint32_t fn = module.shared.function[i];
      const std::string symbol = jit::cuda::function_symbol(module.shared.keys[fn]);
      const CUmodule m = module.functions[fn]->module();
      check(driver().cuModuleGetFunction(&f, m, symbol.c_str()), "cuModuleGetFunction", program.kernels[i].name);
      module.kernels.push_back(f);
      CUfunction r = nullptr;  // split-K's reduce kernel
      if (program.kernels[i].contraction && module.gemm[i].split > 1)
        check(driver().cuModuleGetFunction(&r, m, (symbol + "_reduce").c_str()),
              "cuModuleGetFunction", program.kernels[i].name);
      module.reduce.push_back(r);
    }
  }
  const bool lifted = std::any_of(module.shared.local.begin(), module.shared.local.end(),
                                  [](const ir::LocalKernel& l) { return l.sizes.any(); });
  auto exe = std::make_unique<CudaExecutable>(std::move(program), index, std::move(module));
  exe->sizes_as_args = lifted;
  return exe;
}

}  // namespace loom::runtime::cuda
