#include "runtime/cuda/cuda_backend.h"

#include "ir/lower.h"
#include "jit/cuda/codegen.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/cuda/library_module.h"
#include "runtime/dump.h"
#include "runtime/lower_program.h"

namespace loom::runtime::cuda {

std::unique_ptr<Executable> CudaBackend::compile(const ir::Graph& g) {
  const Device device = g.nodes[g.outputs.at(0)]->device;
  const int index = device.index() < 0 ? 0 : device.index();
  context(index);  // fails early, with the reason, where there is no GPU

  std::string folder;
  ir::KernelProgram program = lower_program(g, name(), folder);

  LoadedModule module;
  if (!program.kernels.empty()) {
    const std::string source = jit::cuda::emit_source(program);
    dump_file(folder, "kernels.cu", source);
    const std::string what = "graph " + std::to_string(g.hash) + " (" + std::to_string(program.kernels.size()) + " kernels)";
    module.module = load_module(cached_cubin(source, index, g.canonical, what, folder,
                                             static_cast<int64_t>(program.kernels.size())),
                                index, what);
    for (size_t i = 0; i < program.kernels.size(); ++i) {
      CUfunction f = nullptr;
      check(driver().cuModuleGetFunction(&f, module.module, jit::cuda::kernel_symbol(i).c_str()), "cuModuleGetFunction",
            program.kernels[i].name);
      module.kernels.push_back(f);
    }
  }
  return std::make_unique<CudaExecutable>(std::move(program), index, std::move(module));
}

}  // namespace loom::runtime::cuda
