// LOOM_DUMP_DIR=d: one folder per compiled graph (d/<backend>-<key>/) with
// the text of every stage, as TORCH_COMPILE_DEBUG does for Inductor.
#pragma once
#include <string>

#include "ir/graph.h"

namespace loom::runtime {

// The graph's folder (created), or "" when dumping is off.
std::string dump_folder(const ir::Graph& g, const char* backend);
// Writes `text` to folder/name; a failure to write is reported on stderr,
// never raised (a dump must not change what the program computes).
void dump_file(const std::string& folder, const std::string& name, const std::string& text);

}  // namespace loom::runtime
