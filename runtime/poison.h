// Values a GPU graph failed to compute, found only after they were handed
// out (a late check: api/src/late_checks.h). A run that reads one fails with
// that graph's message instead of computing from it.
//
// Two marks, for two kinds of value: a buffer whose contents the failed
// graph was to write (Buffer::poison: every leaf over it is wrong), and an
// Input leaf that claims a value its buffer never received (an in-place
// update the GPU skipped: the buffer still holds the value before it, which
// the leaves made before the update read correctly).
#pragma once
#include <memory>
#include <string>

#include "ir/node.h"

namespace loom::runtime {

// Marks `leaf` (an Input node); the first message stays.
void poison_leaf(const ir::NodePtr& leaf, const std::string& message);
// The message a poisoned leaf (Node::poisoned) was marked with.
std::string poison_message(const ir::Node& leaf);

}  // namespace loom::runtime
