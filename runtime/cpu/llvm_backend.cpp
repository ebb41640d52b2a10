// llvm backend compile: lower -> per function (function cache, in memory or
// on disk | LLVM codegen + compile) -> link. Lowering always runs (it is
// cheap and deterministic); only the LLVM work of a function is skipped
// when some graph of this process, or the disk cache, compiled it before.
#include "runtime/cpu/llvm_backend.h"

#include <algorithm>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "ir/lower/lower.h"
#include "jit/llvm/codegen.h"
#include "jit/llvm/orc_jit.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/cpu/function_cache.h"
#include "runtime/dump.h"
#include "runtime/log.h"
#include "runtime/lower_program.h"
#include "runtime/metrics.h"

namespace loom::runtime::cpu {

namespace {

// Compiles the functions `missing` of the program, in parts of about equal
// work side by side on TBB's threads (one LLVMContext each: a context is
// not shared between threads), one module and one object per function:
// each is kept in the function cache by its key.
void compile_functions(const ir::KernelProgram& program, const jit::llvm_cpu::KernelFunctions& functions,
                       const std::vector<uint32_t>& missing, const std::string& folder,
                       std::vector<FunctionCache::Object>& objects) {
  const auto parts = jit::llvm_cpu::compile_parts(functions, missing,
                                                  static_cast<size_t>(tbb::this_task_arena::max_concurrency()));
  tbb::parallel_for(size_t{0}, parts.size(), [&](size_t p) {
    for (uint32_t i : parts[p]) {
      llvm::LLVMContext ctx;
      const uint32_t one[1] = {i};
      auto module = jit::llvm_cpu::emit_module(program, functions, one, ctx, jit::llvm_cpu::host_target());
      const std::string invalid = folder.empty() ? "" : folder + "/invalid" + std::to_string(i) + ".ll";
      std::vector<char> object = jit::llvm_cpu::compile_to_object(*module, invalid);
      function_cache().store(functions.keys[i], object);
      objects[i] = std::make_shared<const std::vector<char>>(std::move(object));
    }
  });
}

// LOOM_DUMP_DIR: every function's IR, compiled now or before.
void dump_ir(const ir::KernelProgram& program, const jit::llvm_cpu::KernelFunctions& functions,
             const std::string& folder) {
  llvm::LLVMContext ctx;
  dump_file(folder, "kernels.ll",
            jit::llvm_cpu::module_text(*jit::llvm_cpu::emit_module(program, functions, ctx, jit::llvm_cpu::host_target())));
}

}  // namespace

LOOM_REGISTER_BACKEND(LlvmBackend, 100);  // the default CPU backend

// The llvm code needs no alignment of view offsets: nothing to assume or guard.
std::unique_ptr<Executable> LlvmBackend::compile(const ir::Graph& g, const CompileHints& hints) {
  std::string folder;
  // Floating-point products are GEMM kernels with fused epilogues
  // (jit/llvm/gemm.h, runtime/cpu/gemm_driver.h), and their operands'
  // cheap producers applied to the packed panels.
  ir::LowerOptions options;
  options.gemm_kernels = true;
  options.operand_producers_min_work = 0;
  // A whole-tensor sum is split in 64 parts: TBB's ranges for 64 cores.
  options.split_reduction_rows = 64;
  ir::KernelProgram program = lower_program(g, name(), folder, options);

  // Kernels alike (the same layer's backward in each of many unsynced
  // backward calls) compile to one function; a function some graph
  // compiled before (the function cache, in memory and on disk) is not
  // compiled again. With sizes as arguments, that graph may be this one
  // at other sizes: then nothing is compiled here.
  jit::llvm_cpu::KernelFunctions functions = jit::llvm_cpu::share_functions(program, hints.sizes, &sizes_seen_);
  const size_t n = functions.first.size();
  std::vector<std::string> symbols(n);
  for (size_t i = 0; i < n; ++i) symbols[i] = jit::llvm_cpu::function_symbol(functions.keys[i]);
  if (!folder.empty()) {
    std::string text;
    for (size_t i = 0; i < functions.function.size(); ++i)
      text += program.kernels[i].name + " runs " + symbols[functions.function[i]] + "\n";
    dump_file(folder, "functions.txt", text);
    dump_ir(program, functions, folder);
  }
  std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels;
  if (n > 0) {
    std::vector<FunctionCache::Object> objects(n);
    std::vector<uint32_t> missing;
    for (uint32_t i = 0; i < n; ++i)
      if (!(objects[i] = function_cache().find(functions.keys[i]))) missing.push_back(i);
    if (!missing.empty()) {
      const int64_t t0 = now_ns();
      compile_functions(program, functions, missing, folder, objects);
      record_compile(static_cast<int64_t>(missing.size()), now_ns() - t0);
    }
    std::vector<std::span<const char>> spans;
    for (const FunctionCache::Object& o : objects) spans.emplace_back(o->data(), o->size());
    kernels = jit::llvm_cpu::load_objects(spans, symbols);
  }
  const bool lifted = std::any_of(functions.local.begin(), functions.local.end(),
                                  [](const ir::LocalKernel& l) { return l.sizes.any(); });
  auto exe = std::make_unique<CpuExecutable>(std::move(program), std::move(functions), std::move(kernels));
  exe->sizes_as_args = lifted;
  return exe;
}

}  // namespace loom::runtime::cpu
