// execute(): the materialization core. Given a built ir::Graph, find or
// compile its Executable, bind the graph's inputs and scalars, run it.
#pragma once
#include <vector>

#include <loom/device.h>

#include "ir/graph.h"
#include "runtime/buffer.h"

namespace loom::runtime {

// One buffer per g.outputs entry. Throws loom::Error (naming the failing
// op and its source line) if the run fails; the cache is left as it was.
std::vector<BufferPtr> execute(const ir::Graph& g, Device device);

}  // namespace loom::runtime
