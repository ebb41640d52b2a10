#include "runtime/lower_program.h"

#include "ir/lower/lower.h"
#include "runtime/dump.h"
#include "runtime/log.h"

namespace loom::runtime {

namespace {

std::string node_text(const ir::Graph& g, uint32_t i) {
  const ir::Node& n = *g.nodes[i];
  std::string s = "%" + std::to_string(i) + " " + ir::op_name(n.op) + " " + std::string(to_string(n.dtype)) + "[";
  for (size_t d = 0; d < n.shape.n; ++d) s += (d ? "," : "") + std::to_string(n.shape[d]);
  s += "]";
  if (n.line) s += " (" + std::string(n.file) + ":" + std::to_string(n.line) + ")";
  return s;
}

}  // namespace

// LOOM_LOG=fusion: the nodes as loom::explain() and LOOM_LOG=graph number
// them (the canonical order of the graph the sync runs), each node that
// owns a buffer with its source line and every reason it is not computed
// inside its readers' kernels, then each kernel's nodes.
std::string fusion_text(const ir::Graph& g, const ir::KernelProgram& program) {
  std::string text;
  for (const ir::Boundary& b : program.boundaries) {
    text += node_text(g, b.node) + ": " + b.reason;
    for (const std::string& r : b.also) text += "; " + r;
    text += "\n";
  }
  for (const ir::Kernel& k : program.kernels) {
    text += "kernel " + k.name + ":";
    for (uint32_t n : k.graph_nodes) text += " %" + std::to_string(n);
    text += "\n";
  }
  for (const ir::LibraryCall& c : program.library_calls)
    text += std::string("library ") + ir::op_name(c.op) + ": %" + std::to_string(c.node) + "\n";
  return text;
}

ir::KernelProgram lower_program(const ir::Graph& g, const char* backend, std::string& folder,
                               const ir::LowerOptions& options) {
  ir::LowerLog log;
  ir::KernelProgram program = ir::lower(g, &log, options);
  folder = dump_folder(g, backend);
  dump_file(folder, "passes.txt", log.passes);
  dump_file(folder, "kernels.txt", ir::to_string(program));
  if (log_enabled(LogTopic::Passes)) log_block(LogTopic::Passes, log.passes);
  if (log_enabled(LogTopic::Fusion)) log_block(LogTopic::Fusion, fusion_text(g, program));
  return program;
}

}  // namespace loom::runtime
