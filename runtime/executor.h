// execute(): the materialization core. Given a built ir::Graph, find or
// compile its Executable, bind the graph's inputs and scalars, run it.
#pragma once
#include <string>
#include <vector>

#include <loom/device.h>
#include <loom/error.h>

#include "ir/graph.h"
#include "runtime/backend.h"
#include "runtime/buffer.h"

namespace loom::runtime {

// What execute() throws when the run failed at one node (bad data, such as
// an index out of range): the message names the op and the user's
// file:line; `node` is that node's index in the Graph, so the caller can
// tell which outputs were computed from it.
class NodeError : public Error {
 public:
  NodeError(const std::string& what, uint32_t node) : Error(what), node(node) {}
  uint32_t node;
};

// Fills `out` with one buffer per g.outputs entry. Throws loom::Error
// (naming the failing op and its source line; a NodeError when one node
// failed) if the run fails; the cache is left as it was.
// `ran` (if given) receives the executable, for loom::compile's replays.
// `late` (if given): a backend may return before it knows whether the run
// failed on bad data and leave the check there (RunArgs::late); the caller
// then keeps the executable (`ran` is required with it) and the graph's
// nodes alive, and waits for the check before this executable runs again.
void execute(const ir::Graph& g, Device device, std::span<const BufferPtr> targets, std::vector<BufferPtr>& out,
             std::shared_ptr<Executable>* ran = nullptr, std::unique_ptr<LateCheck>* late = nullptr);

// "loom: <op>: <message> (called from <file>:<line>)" for a run that failed
// at node e.node of g.
std::string node_error_message(const ir::Graph& g, const RunError& e);

// A replay of an executable execute() handed out (loom::compile): runs it on
// `args` and counts it as a cache hit. RunError passes through (the caller
// names the node).
void replay(Executable& exe, const RunArgs& args, std::vector<BufferPtr>& out);

}  // namespace loom::runtime
