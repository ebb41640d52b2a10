#include "runtime/lower_program.h"

#include "ir/lower.h"
#include "runtime/dump.h"
#include "runtime/log.h"

namespace loom::runtime {

ir::KernelProgram lower_program(const ir::Graph& g, const char* backend, std::string& folder,
                               const ir::LowerOptions& options) {
  ir::LowerLog log;
  ir::KernelProgram program = ir::lower(g, &log, options);
  folder = dump_folder(g, backend);
  dump_file(folder, "passes.txt", log.passes);
  dump_file(folder, "kernels.txt", ir::to_string(program));
  if (log_enabled(LogTopic::Passes)) log_block(LogTopic::Passes, log.passes);
  if (log_enabled(LogTopic::Fusion)) {
    std::string text;
    for (const ir::Boundary& b : program.boundaries)
      text += "%" + std::to_string(b.node) + " " + ir::op_name(g.nodes[b.node]->op) + ": " + b.reason + "\n";
    for (const ir::Kernel& k : program.kernels) text += "kernel " + k.name + ": " + std::to_string(k.graph_nodes.size()) + " nodes\n";
    log_block(LogTopic::Fusion, text);
  }
  return program;
}

}  // namespace loom::runtime
