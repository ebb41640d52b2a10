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
  // `library_stops_on_failure`: whether a library step after a failing step
  // is sure not to run. True on the CPU (a failure throws before the next
  // step); on a GPU generated kernels skip their work once an earlier one
  // failed, but library kernels do not check, so their outputs are never
  // donated after a step that can fail.
  OutputPlan(const ir::KernelProgram& program, bool library_stops_on_failure);

  // Whether a run can fail on bad data (an index out of range, an integer
  // division by zero).
  bool can_fail() const { return last_failing_step_ >= 0; }

  // The caller's buffer for output buffer `b` (RunArgs::targets), if the
  // program may write it directly without changing any value it reads, and
  // a failed run could not have written it (it is written after every step
  // that can fail: a failure leaves every existing tensor as it was).
  // `input`, if given, is set to the input buffer whose memory that is (an
  // in-place update), or -1.
  BufferPtr donated(uint32_t b, const RunArgs& args, int32_t* input = nullptr) const;

  // One buffer per graph output, into `result`, taken (moved) from the
  // output buffers `owned` (indexed by buffer id); an output asked for
  // twice is copied.
  void results(std::vector<BufferPtr>& owned, Device device, std::vector<BufferPtr>& result) const;

 private:
  const ir::KernelProgram& program_;
  bool library_stops_on_failure_;
  std::vector<uint32_t> inputs_;  // the Input buffers' ids (a donation check looks at these only)
  // (output buffer, input buffer) where the output's writer reads the
  // input and may still write the output over it; sorted.
  std::vector<std::pair<uint32_t, uint32_t>> in_place_ok_;
  std::vector<int64_t> last_use_;  // per buffer, the last step that uses it, -1 if none
  // Per buffer, the step that writes it (kNoStep: none, kTwoWriters: more than one).
  static constexpr size_t kNoStep = ~size_t{0}, kTwoWriters = ~size_t{0} - 1;
  std::vector<size_t> writer_;
  int64_t last_failing_step_ = -1;  // the last step that can fail on bad data, -1 if none
};

}  // namespace loom::runtime
