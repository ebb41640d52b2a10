// What a loom::Tensor points at: a view (sizes, strides, offset) of a
// Storage. The Storage is the unit of aliasing and of materialization: views
// share it, in-place ops replace its node, a sync gives it a buffer.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include <loom/device.h>
#include <loom/dtype.h>

#include "ir/node.h"
#include "runtime/buffer.h"

namespace loom::detail {

// A few-nanosecond lock for the rare case of two threads touching one
// storage (a read while another thread materializes it).
class SpinLock {
 public:
  void lock() {
    while (flag_.test_and_set(std::memory_order_acquire)) flag_.wait(true, std::memory_order_relaxed);
  }
  void unlock() {
    flag_.clear(std::memory_order_release);
    flag_.notify_one();
  }

 private:
  std::atomic_flag flag_;
};

struct ViewSpec {
  ir::Dims sizes, strides;
  int64_t offset = 0;
};

class Storage {
 public:
  Storage(ir::NodePtr node, ScalarType dtype, Device device, int64_t numel)
      : dtype(dtype), device(device), numel(numel), node_(std::move(node)) {}

  const ScalarType dtype;
  const Device device;
  const int64_t numel;

  // The node whose value is this storage's contents now (an Input node once
  // materialized). Throws the stored error if a sync of it failed.
  ir::NodePtr node() const;
  // Records a new value (an in-place write); the storage becomes pending.
  void set_node(ir::NodePtr n);
  // Installs a computed result. If the storage already owns a buffer (it was
  // materialized before and written in place since), the result is copied
  // into it so data_ptr() stays stable, as after an in-place op in PyTorch.
  void set_result(const runtime::BufferPtr& result);
  void set_error(const std::string& message);
  // Pending: node is not an Input leaf (and no error).
  bool pending() const;
  // For sync: the node if pending, else null. Never throws.
  ir::NodePtr pending_node() const;
  // The materialized buffer (null while pending).
  runtime::BufferPtr buffer() const;
  // Materialized from borrowed memory, or computed: the buffer exists.
  void adopt_buffer(runtime::BufferPtr b);  // from_blob / copy-in constructors

  // Bookkeeping of the thread's pending list (see lazy.h).
  std::atomic<bool> listed{false};

 private:
  mutable SpinLock mu_;
  ir::NodePtr node_;
  runtime::BufferPtr buffer_;
  std::shared_ptr<const std::string> error_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  ViewSpec view;
  bool requires_grad = false;
};

}  // namespace loom::detail
