// llvm backend compile: lower -> (disk cache | LLVM codegen + compile) -> link.
// Lowering always runs (it is cheap and deterministic); only the LLVM work is
// skipped when the disk cache holds the object for this graph and host.
#include "runtime/cpu/llvm_backend.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "ir/lower.h"
#include "jit/llvm/codegen.h"
#include "jit/llvm/orc_jit.h"
#include "runtime/cpu/cpu_executable.h"
#include "runtime/disk_cache.h"
#include "runtime/dump.h"
#include "runtime/log.h"
#include "runtime/lower_program.h"
#include "runtime/metrics.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "dev"
#endif

namespace loom::runtime::cpu {

namespace {

// The program's functions in parts of about equal work, one module and one
// object each, compiled side by side on TBB's threads (each part with its
// own LLVMContext: a context is not shared between threads), then packed
// into one byte string for the disk cache.
std::vector<char> compile_in_parts(const ir::KernelProgram& program, const jit::llvm_cpu::KernelFunctions& functions,
                                   const std::string& folder) {
  const auto parts = jit::llvm_cpu::compile_parts(functions, static_cast<size_t>(tbb::this_task_arena::max_concurrency()));
  std::vector<std::vector<char>> objects(parts.size());
  std::vector<std::string> text(parts.size());
  tbb::parallel_for(size_t{0}, parts.size(), [&](size_t i) {
    llvm::LLVMContext ctx;
    auto module = jit::llvm_cpu::emit_module(program, functions, parts[i], ctx, jit::llvm_cpu::host_target());
    if (!folder.empty()) text[i] = jit::llvm_cpu::module_text(*module);
    const std::string invalid = folder.empty() ? "" : folder + "/invalid" + std::to_string(i) + ".ll";
    objects[i] = jit::llvm_cpu::compile_to_object(*module, invalid);
  });
  if (!folder.empty()) {
    std::string all;
    for (size_t i = 0; i < text.size(); ++i) all += "; ---- part " + std::to_string(i) + " of " + std::to_string(text.size()) + "\n" + text[i];
    dump_file(folder, "kernels.ll", all);
  }
  return jit::llvm_cpu::pack_objects(objects);
}

}  // namespace

std::unique_ptr<Executable> LlvmBackend::compile(const ir::Graph& g) {
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
  // backward calls) compile to one function.
  jit::llvm_cpu::KernelFunctions functions = jit::llvm_cpu::share_functions(program);
  if (!folder.empty()) {
    std::string text;
    for (size_t i = 0; i < functions.function.size(); ++i)
      text += program.kernels[i].name + " runs " + jit::llvm_cpu::kernel_symbol(functions.function[i]) + "\n";
    dump_file(folder, "functions.txt", text);
  }
  std::shared_ptr<jit::llvm_cpu::LoadedKernels> kernels;
  if (!program.kernels.empty()) {
    const std::string ns = jit::llvm_cpu::target_key();
    static const std::string version = std::string(LOOM_VERSION) + ", " + jit::llvm_cpu::build_id();
    DiskCache::Key key{ns, version, g.canonical};
    DiskCache& disk = DiskCache::instance();
    std::optional<std::vector<char>> object = disk.load(key);
    if (!object || !folder.empty()) {  // a dump wants the IR even on a disk hit
      const int64_t t0 = now_ns();
      std::vector<char> fresh = compile_in_parts(program, functions, folder);
      if (!object) {
        object = std::move(fresh);
        disk.store(key, *object);
        record_compile(static_cast<int64_t>(functions.first.size()), now_ns() - t0);
      }
    }
    kernels = jit::llvm_cpu::load_objects(*object, functions.first.size());
  }
  return std::make_unique<CpuExecutable>(std::move(program), std::move(functions), std::move(kernels));
}

}  // namespace loom::runtime::cpu
