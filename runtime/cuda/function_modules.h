// The CUDA functions of every graph, one NVRTC program each, shared by all
// graphs of the process (as the llvm backend's runtime/cpu/function_cache.h).
//
// A function's CUDA C (jit/cuda/codegen.h emit_function_source) is the key
// of its cubin, kept in memory and in the disk cache (cached_cubin): the
// same layer in another graph, a loop's cut graphs, an evaluation graph
// beside the training step compile nothing new. The functions a graph
// lacks are compiled side by side, NVRTC on every core (a graph of 50
// kernels is 50 small programs, not one large one). A function's module is
// loaded once per GPU and unloaded when no executable uses it any more.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/driver.h"

namespace loom::runtime::cuda {

class FunctionModule {
 public:
  FunctionModule(CUmodule module, int device, int64_t bytes) : module_(module), device_(device), bytes_(bytes) {}
  // Waits for the device's stream (an evicted executable's launches may
  // still be queued), then unloads.
  ~FunctionModule();
  FunctionModule(const FunctionModule&) = delete;
  FunctionModule& operator=(const FunctionModule&) = delete;
  CUmodule module() const { return module_; }
  int64_t bytes() const { return bytes_; }  // the cubin's size

 private:
  CUmodule module_;
  int device_;
  int64_t bytes_;
};
using FunctionModulePtr = std::shared_ptr<const FunctionModule>;

// One loaded module per source (each the program of one function), on
// `device`: already loaded, else from memory or disk, else compiled (the
// missing ones side by side). `what` names the graph in errors.
std::vector<FunctionModulePtr> function_modules(const std::vector<std::string>& sources, int device,
                                                const std::string& what);

}  // namespace loom::runtime::cuda
