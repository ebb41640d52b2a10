// runtime::Buffer: device memory that a materialized tensor's storage owns
// (or borrows, for from_blob). It is the ir::DataRef behind Input nodes.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <loom/device.h>

#include "ir/node.h"

namespace loom::runtime {

class Buffer : public ir::DataRef {
 public:
  // 64-byte aligned (256 on a GPU), uninitialized.
  static std::shared_ptr<Buffer> allocate(Device device, size_t bytes);
  // Wraps memory the caller owns; `deleter` (may be empty) runs on release.
  static std::shared_ptr<Buffer> borrow(void* ptr, size_t bytes, Device device,
                                        std::function<void(void*)> deleter);
  ~Buffer() override;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }

  // Marks the contents as the product of a graph that failed on bad data,
  // found only after the buffer was handed out (a GPU's late check,
  // api/src/late_checks.h): a later run that reads it fails with `message`
  // instead of computing from it. The first message stays.
  void poison(const std::string& message) const;
  // The message, or null (the usual case: one load).
  const std::string* poisoned() const { return poison_.load(std::memory_order_acquire); }

  // loom::mark_dynamic: graphs reading this buffer compile with sizes as
  // arguments (runtime/recompile.h sizes_as_args).
  void mark_dynamic() const { dynamic_.store(true, std::memory_order_relaxed); }
  bool dynamic() const { return dynamic_.load(std::memory_order_relaxed); }

 private:
  Buffer(void* ptr, size_t bytes, Device device, std::function<void(void*)> release)
      : ptr_(ptr), bytes_(bytes), device_(device), release_(std::move(release)) {}
  void* ptr_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> release_;
  mutable std::atomic<const std::string*> poison_{nullptr};  // owned
  mutable std::atomic<bool> dynamic_{false};
};

using BufferPtr = std::shared_ptr<Buffer>;

// Copies `bytes` between any two buffers (host or GPU, either direction).
// Copies to the host return once the data is there; the others are ordered
// on the GPU's loom stream and may still be running when this returns.
void copy_bytes(const Buffer& dst, size_t dst_offset, const Buffer& src, size_t src_offset, size_t bytes);

}  // namespace loom::runtime
