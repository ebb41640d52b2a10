// The in-process compiler: LLVM module -> optimized object bytes (so they
// can be cached on disk), and object bytes -> callable kernels (ORC LLJIT,
// one JITDylib per executable, removed when the executable dies).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jit/llvm/codegen.h"
#include "jit/llvm/gemm.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace loom::jit::llvm_cpu {

// Optimizes (O2 pipeline for the host) and compiles `m` to an ELF object.
// Throws loom::Error if the module does not verify; its IR is in the message
// file `ir_dump_path` when given.
std::vector<char> compile_to_object(llvm::Module& m, const std::string& ir_dump_path = "");

// The module's IR as text (for LOOM_DUMP_DIR), before optimization.
std::string module_text(const llvm::Module& m);

// Kernels loaded from objects; unloading happens when the last user lets go.
class LoadedKernels {
 public:
  ~LoadedKernels();
  LoadedKernels(const LoadedKernels&) = delete;
  LoadedKernels& operator=(const LoadedKernels&) = delete;
  KernelFn kernel(size_t i) const { return kernels_[i]; }
  // A GEMM kernel's symbol is its tile function (gemm.h), of another type.
  GemmFn gemm(size_t i) const { return reinterpret_cast<GemmFn>(reinterpret_cast<void*>(kernels_[i])); }
  size_t size() const { return kernels_.size(); }
  // The linked objects' bytes: about what the JIT holds of them (code,
  // data, relocations), plus its bookkeeping per JITDylib.
  int64_t bytes() const { return bytes_; }

 private:
  friend std::shared_ptr<LoadedKernels> load_objects(std::span<const std::span<const char>>,
                                                     std::span<const std::string>);
  LoadedKernels() = default;
  std::vector<KernelFn> kernels_;
  void* dylib_ = nullptr;  // llvm::orc::JITDylib*
  int64_t bytes_ = 0;
};

// Links `objects` (compile_to_object's results) into one JITDylib and
// resolves `symbols`, in order: kernel(i) is symbols[i], wherever it was
// compiled.
std::shared_ptr<LoadedKernels> load_objects(std::span<const std::span<const char>> objects,
                                            std::span<const std::string> symbols);

// "llvm16-<cpu>-<hash of features>": what a cached object depends on.
std::string target_key();

}  // namespace loom::jit::llvm_cpu
