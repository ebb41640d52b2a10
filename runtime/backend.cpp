// Backend registry: which backend runs a device's graphs.
#include "runtime/backend.h"

#include <cstdlib>
#include <mutex>

#include <loom/error.h>

#include "runtime/cpu/llvm_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/reference/reference_backend.h"

namespace loom::runtime {

namespace {

struct Registry {
  reference::ReferenceBackend reference;
  cpu::LlvmBackend llvm;
  cuda::CudaBackend cuda;  // every GPU: the device index is part of each graph
  std::mutex mu;
  Backend* cpu = nullptr;

  Backend* by_name(const std::string& name) {
    if (name == "reference") return &reference;
    if (name == "llvm") return &llvm;
    return nullptr;
  }
  Registry() {
    const char* env = std::getenv("LOOM_BACKEND");
    cpu = &llvm;  // the JIT is the default; LOOM_BACKEND=reference selects the oracle
    if (env && *env) {
      Backend* b = by_name(env);
      if (!b)
        throw Error(std::string("loom: LOOM_BACKEND=") + env +
                    " names no backend of this build (available: reference, llvm)");
      cpu = b;
    }
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

Backend& backend_for(Device device) {
  Registry& r = registry();
  if (device.is_cuda()) return r.cuda;
  std::lock_guard lock(r.mu);
  return *r.cpu;
}

std::string select_cpu_backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  Backend* b = r.by_name(name);
  if (!b) throw Error("loom: set_backend: unknown backend '" + name + "' (available: reference, llvm)");
  std::string previous = r.cpu->name();
  r.cpu = b;
  return previous;
}

}  // namespace loom::runtime
