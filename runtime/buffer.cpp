#include "runtime/buffer.h"

#include <cstdlib>
#include <new>

#include <loom/error.h>

#include "runtime/host_allocator.h"
#include "runtime/metrics.h"

namespace loom::runtime {

std::shared_ptr<Buffer> Buffer::allocate(Device device, size_t bytes) {
  if (!device.is_cpu())
    throw Error("loom: cannot allocate " + std::to_string(bytes) + " bytes on " + device.str() +
                ": no backend for this device in this build");
  void* p = host_allocate(bytes);
  bump(counters().bytes_allocated, static_cast<int64_t>(bytes));
  bump(counters().buffers_allocated);
  // One allocation for the Buffer and its control block (make_shared), where
  // shared_ptr(new Buffer) made two.
  struct Owned : Buffer {
    Owned(void* p, size_t bytes, Device device) : Buffer(p, bytes, device, [bytes](void* q) { host_free(q, bytes); }) {}
  };
  return std::make_shared<Owned>(p, bytes, device);
}

std::shared_ptr<Buffer> Buffer::borrow(void* ptr, size_t bytes, Device device,
                                       std::function<void(void*)> deleter) {
  return std::shared_ptr<Buffer>(new Buffer(ptr, bytes, device, std::move(deleter)));
}

Buffer::~Buffer() {
  if (release_) release_(ptr_);
}

}  // namespace loom::runtime
