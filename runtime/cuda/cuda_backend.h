// The cuda backend: lowers a graph exactly as the llvm backend does
// (ir/lower/lower.h), emits CUDA C for its kernels (jit/cuda/), compiles it with
// NVRTC for the GPU's architecture or loads the cubin from the disk cache,
// and returns a CudaExecutable that replays as one CUDA graph.
#pragma once
#include "ir/local_kernel.h"
#include "runtime/backend.h"

namespace loom::runtime::cuda {

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  DeviceType device_type() const override { return kCUDA; }
  std::unique_ptr<Executable> compile(const ir::Graph& g, const CompileHints& hints) override;
  bool takes_sizes_as_args() const override { return true; }

 private:
  ir::SizeHistory sizes_seen_;  // every compile's numbers, for ir::Lift::Seen
};

}  // namespace loom::runtime::cuda
