// GPU graphs whose bad-data check is read later (runtime::LateCheck).
//
// A GPU graph that can fail on bad data (a cross-entropy's labels, an
// index_select's indices, an integer division by zero) finds out on the GPU.
// Waiting for that verdict when the graph is launched made every training
// step wait for the GPU before the host could record the next step. Instead
// the sync leaves the check with its device, and the next point that waits
// for that device or launches on it reads it first: the next sync on the
// device, a read of one of its tensors (item, to_vector, to(kCPU), printing,
// data_ptr), loom::cuda::synchronize, a loom::compile replay. A failure is
// raised there (as PyTorch raises a GPU's errors at its next
// synchronization), naming the failing op and its caller's file:line. The
// failed graph's outputs computed from the bad node keep the error; the
// others are pending again (the GPU skipped them), exactly what a failed
// sync leaves on the CPU. Nothing else runs on the device before the check
// is read, so no later graph can compute from a failed value.
//
// One check per device at most: taking a DeviceTurn reads the one left
// there before the turn's own run may leave another.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <loom/device.h>
#include <loom/error.h>

#include "api/src/tensor_impl.h"
#include "ir/graph.h"
#include "runtime/backend.h"

namespace loom::detail {

// The failure of a graph whose check was read late: only that graph failed,
// not the sync or read that reported it.
class LateRunError : public Error {
 public:
  using Error::Error;
};

// What a sync leaves behind when its run returned a check (RunArgs::late).
struct LateRun {
  std::unique_ptr<runtime::LateCheck> check;       // null: nothing left
  std::shared_ptr<runtime::Executable> exe;        // the check reads its state
  ir::Graph graph;                                 // for the op, the line and what depends on the bad node
  std::vector<ir::NodePtr> out_nodes;              // the outputs' pending nodes: keep `graph` valid, and
                                                   // are put back into the outputs that did not fail
  // Per graph output: its storage, the Input leaf and buffer the storage
  // holds after the run, and how the run wrote that buffer.
  enum class Written : uint8_t {
    Fresh,     // a new buffer
    Donated,   // the storage's own buffer, directly: on a failure the GPU skipped it (it still holds the
               // value before the update)
    CopiedIn,  // the storage's own buffer, by a copy of a new one after the run (whatever it held)
  };
  std::vector<std::weak_ptr<Storage>> outs;
  std::vector<std::weak_ptr<const ir::Node>> leaves;
  std::vector<std::weak_ptr<runtime::Buffer>> held;
  std::vector<Written> written;
};

struct LateSlot;  // one per GPU (late_checks.cpp)

// A thread's exclusive use of a GPU's late check: reading it, running a
// graph, leaving the next one. Taking the turn reads the check left there
// and throws LateRunError if that graph failed (having let go of the turn).
class DeviceTurn {
 public:
  explicit DeviceTurn(Device device);
  ~DeviceTurn();
  DeviceTurn(const DeviceTurn&) = delete;
  DeviceTurn& operator=(const DeviceTurn&) = delete;
  // After a run that returned `check` and the outputs received their
  // results: leave it, with what reading it needs. Takes `graph` and
  // `out_nodes` by swap (the caller gets back cleared vectors with their
  // capacity); `targets` are the buffers the outputs' storages owned before
  // the run, `results` what the run returned.
  void leave(std::unique_ptr<runtime::LateCheck> check, std::shared_ptr<runtime::Executable> exe, ir::Graph& graph,
             std::vector<ir::NodePtr>& out_nodes, const std::vector<std::shared_ptr<Storage>>& outs,
             const std::vector<runtime::BufferPtr>& targets, const std::vector<runtime::BufferPtr>& results);

 private:
  LateSlot& slot_;
  std::unique_lock<std::mutex> lock_;
};

// Reads the check left on `device`, if any (a read of its data,
// loom::cuda::synchronize); throws LateRunError if that graph failed. A CPU
// device has none: one relaxed load.
void wait_for_late_check(Device device);

}  // namespace loom::detail
