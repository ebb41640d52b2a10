// What a loom::Tensor points at: a view (sizes, strides, offset) of a
// Storage. The Storage is the unit of aliasing and of materialization: views
// share it, in-place ops replace its node, a sync gives it a buffer.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <loom/device.h>
#include <loom/dtype.h>

#include "ir/node.h"
#include "runtime/buffer.h"

namespace loom::detail {

// A few-nanosecond lock for the rare case of two threads touching one
// storage (a read while another thread materializes it). Held only for a
// few loads and stores, so a waiter spins and yields rather than sleeping:
// unlock() then needs no notify (which cost a hashed waiter-table lookup
// on every unlock of the recording path).
class SpinLock {
 public:
  void lock() {
    while (flag_.test_and_set(std::memory_order_acquire))
      while (flag_.test(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_;
};

struct ViewSpec {
  ir::Dims sizes, strides;
  int64_t offset = 0;
  ViewSpec() = default;
  // The contiguous view of a whole storage of shape `shape`.
  explicit ViewSpec(const ir::Dims& shape) : sizes(shape) {
    strides.n = shape.n;
    int64_t acc = 1;
    for (int d = static_cast<int>(shape.n) - 1; d >= 0; --d) {
      strides[d] = acc;
      acc *= shape[d];
    }
  }
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
  ir::NodePtr node() const {  // inline: two calls per recorded binary op
    std::lock_guard lock(mu_);
    if (error_) [[unlikely]]
      throw_error();
    return node_;
  }
  // Records a new value (an in-place write); the storage becomes pending.
  void set_node(ir::NodePtr n);
  // Installs a computed result. If the storage already owns a buffer (it was
  // materialized before and written in place since), the result is copied
  // into it so data_ptr() stays stable, as after an in-place op in PyTorch.
  void set_result(const runtime::BufferPtr& result);
  // The buffer this storage owns, pending or not (null if it never had one).
  runtime::BufferPtr owned_buffer() const;
  // Whether it owns one: its data lives from sync to sync (a data set, a
  // parameter, a cache), even while writes to it are pending.
  bool stored() const {
    std::lock_guard lock(mu_);
    return buffer_ != nullptr;
  }
  void set_error(const std::string& message);
  // After a GPU graph failed (late_checks.h): if this storage still holds
  // the Input leaf over `held` (nothing was written into it since), its
  // value becomes `pending` again, and with `drop_buffer` it lets go of
  // `held` (the failed run's, not its own). Whether it did.
  bool restore_pending(const runtime::Buffer* held, ir::NodePtr pending, bool drop_buffer);
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
  // Bumped by every in-place write (write_through): a tensor saved for
  // backward remembers it and refuses to be used once it changed.
  std::atomic<uint32_t> version{0};

 private:
  [[noreturn]] void throw_error() const;  // raises *error_
  mutable SpinLock mu_;
  ir::NodePtr node_;
  runtime::BufferPtr buffer_;
  std::shared_ptr<const std::string> error_;
};

struct AutogradMeta;  // api/src/autograd/meta.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  ViewSpec view;
  // Autograd (api/src/autograd/): requires_grad is the flag every recorded
  // op tests (a leaf asked for it, or the tensor has a grad_fn); the rest
  // lives in `autograd`, made only for tensors that take part.
  bool requires_grad = false;
  uint32_t view_version = 0;                 // storage version when a view's history was set
  std::shared_ptr<AutogradMeta> autograd;
  std::shared_ptr<TensorImpl> view_base;     // views: the tensor they were made from (its root)
  TensorImpl() = default;
  // Member-wise: make_shared<TensorImpl>() value-initializes, which zero-fills
  // the whole object first (a `rep stos` costing ~10% of recording an op).
  TensorImpl(std::shared_ptr<Storage> s, const ir::Dims& shape) : storage(std::move(s)), view(shape) {}
  // A view (sizes, strides, offset) of `s`.
  TensorImpl(std::shared_ptr<Storage> s, const ir::Dims& sizes, const ir::Dims& strides, int64_t offset)
      : storage(std::move(s)) {
    view.sizes = sizes;
    view.strides = strides;
    view.offset = offset;
  }
};

}  // namespace loom::detail
