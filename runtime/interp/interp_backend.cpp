#include "runtime/interp/interp_backend.h"

#include "runtime/interp/interp_executable.h"
#include "runtime/lower_program.h"

namespace loom::runtime::interp {

// Registered by name only (LOOM_BACKEND=interp): priority 5 is below the
// reference's 10 and the llvm backend's 100, so it is never the default.
LOOM_REGISTER_BACKEND(InterpBackend, 5);

// What the JIT backends do first: lower the graph to kernels. GEMM kernels
// too (the interpreter multiplies them itself), so a product and its
// epilogue are interpreted exactly as the code generators see them. The
// interpreter assumes nothing of view offsets: no guards (CompileHints).
std::unique_ptr<Executable> InterpBackend::compile(const ir::Graph& g, const CompileHints&) {
  ir::LowerOptions options;
  options.gemm_kernels = true;
  std::string folder;  // LOOM_DUMP_DIR's folder for this graph: lower_program writes passes.txt and kernels.txt
  return std::make_unique<InterpExecutable>(lower_program(g, name(), folder, options));
}

}  // namespace loom::runtime::interp
