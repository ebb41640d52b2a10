// The first step of every JIT backend's compile: lower the graph
// (ir/lower/lower.h) and show what lowering did, the same way for every backend:
// LOOM_LOG=passes,fusion on stderr, passes.txt and kernels.txt in the
// graph's LOOM_DUMP_DIR folder.
#pragma once
#include <string>

#include "ir/graph.h"
#include "ir/kernel.h"
#include "ir/lower/lower.h"

namespace loom::runtime {

// `folder` receives the graph's dump folder ("" when dumping is off), where
// the backend adds its own files (kernels.ll, kernels.cu).
// `options` says what the backend's code generator takes (GEMM kernels).
ir::KernelProgram lower_program(const ir::Graph& g, const char* backend, std::string& folder,
                               const ir::LowerOptions& options = {});

// What LOOM_LOG=fusion prints for a lowered graph: each buffer-owning node
// numbered as loom::explain() numbers it, with its source line and every
// reason it owns a buffer, then each kernel's nodes.
std::string fusion_text(const ir::Graph& g, const ir::KernelProgram& program);

}  // namespace loom::runtime
