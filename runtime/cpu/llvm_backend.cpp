// llvm backend compile: lower -> (disk cache | LLVM codegen + compile) -> link.
// Lowering always runs (it is cheap and deterministic); only the LLVM work is
// skipped when the disk cache holds the object for this graph and host.
#include "runtime/cpu/llvm_backend.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

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
      int64_t t0 = now_ns();
      llvm::LLVMContext ctx;
      auto module = jit::llvm_cpu::emit_module(program, functions, ctx, jit::llvm_cpu::host_target());
      dump_file(folder, "kernels.ll", jit::llvm_cpu::module_text(*module));
      std::vector<char> fresh = jit::llvm_cpu::compile_to_object(*module, folder.empty() ? "" : folder + "/invalid.ll");
      if (!object) {
        object = std::move(fresh);
        disk.store(key, *object);
        record_compile(static_cast<int64_t>(functions.first.size()), now_ns() - t0);
      }
    }
    kernels = jit::llvm_cpu::load_object(*object, functions.first.size());
  }
  return std::make_unique<CpuExecutable>(std::move(program), std::move(functions), std::move(kernels));
}

}  // namespace loom::runtime::cpu
