// What every backend's executable decides the same way about a program's
// outputs: which may be written straight into a caller's buffer (a donated
// input, for in-place updates), and how the per-graph-output result list is
// made from the output buffers.
#pragma once
#include <utility>
#include <vector>

#include "ir/kernel.h"
#include "runtime/backend.h"

namespace loom::runtime {

class OutputPlan {
 public:
  explicit OutputPlan(const ir::KernelProgram& program);

  // Whether a run can fail on bad data (an index out of range, an integer
  // division by zero). Such a program never writes into donated buffers: a
  // failure must leave every existing tensor as it was.
  bool can_fail() const { return can_fail_; }

  // The caller's buffer for output buffer `b` (RunArgs::targets), if the
  // program may write it directly without changing any value it reads.
  BufferPtr donated(uint32_t b, const RunArgs& args) const;

  // One buffer per graph output from the output buffers `owned` (indexed by
  // buffer id); an output asked for twice is copied.
  std::vector<BufferPtr> results(const std::vector<BufferPtr>& owned, Device device) const;

 private:
  bool can_write_in_place(uint32_t out, uint32_t in) const;

  const ir::KernelProgram& program_;
  bool can_fail_ = false;
  std::vector<std::pair<uint32_t, uint32_t>> in_place_ok_;  // (output buffer, input buffer)
};

}  // namespace loom::runtime
