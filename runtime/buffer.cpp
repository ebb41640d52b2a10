#include "runtime/buffer.h"

#include <cstdlib>
#include <new>

#include <loom/error.h>

#include "runtime/metrics.h"

namespace loom::runtime {

std::shared_ptr<Buffer> Buffer::allocate(Device device, size_t bytes) {
  if (!device.is_cpu())
    throw Error("loom: cannot allocate " + std::to_string(bytes) + " bytes on " + device.str() +
                ": no backend for this device in this build");
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p)
    throw Error("loom: out of memory allocating " + std::to_string(bytes) + " bytes on cpu");
  bump(counters().bytes_allocated, static_cast<int64_t>(bytes));
  bump(counters().buffers_allocated);
  return std::shared_ptr<Buffer>(new Buffer(p, bytes, device, [](void* q) { std::free(q); }));
}

std::shared_ptr<Buffer> Buffer::borrow(void* ptr, size_t bytes, Device device,
                                       std::function<void(void*)> deleter) {
  return std::shared_ptr<Buffer>(new Buffer(ptr, bytes, device, std::move(deleter)));
}

Buffer::~Buffer() {
  if (release_) release_(ptr_);
}

}  // namespace loom::runtime
