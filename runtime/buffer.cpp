#include "runtime/buffer.h"

#include <cstdlib>
#include <cstring>
#include <vector>
#include <new>

#include <loom/error.h>

#include "runtime/cuda/context.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/host_allocator.h"
#include "runtime/metrics.h"

namespace loom::runtime {

std::shared_ptr<Buffer> Buffer::allocate(Device device, size_t bytes) {
  bump(counters().bytes_allocated, static_cast<int64_t>(bytes));
  bump(counters().buffers_allocated);
  // One allocation for the Buffer and its control block (make_shared), where
  // shared_ptr(new Buffer) made two.
  struct Owned : Buffer {
    Owned(void* p, size_t bytes, Device device, std::function<void(void*)> release)
        : Buffer(p, bytes, device, std::move(release)) {}
  };
  if (device.is_cuda()) {
    const int index = device.index() < 0 ? 0 : device.index();
    void* p = cuda::device_allocate(index, bytes);
    return std::make_shared<Owned>(p, bytes, Device(kCUDA, static_cast<int8_t>(index)),
                                   [index, bytes](void* q) { cuda::device_free(index, q, bytes); });
  }
  void* p = host_allocate(bytes);
  return std::make_shared<Owned>(p, bytes, device, [bytes](void* q) { host_free(q, bytes); });
}

void copy_bytes(const Buffer& dst, size_t dst_offset, const Buffer& src, size_t src_offset, size_t bytes) {
  if (bytes == 0) return;
  char* d = static_cast<char*>(dst.data()) + dst_offset;
  const char* s = static_cast<const char*>(src.data()) + src_offset;
  const bool dc = dst.device().is_cuda(), sc = src.device().is_cuda();
  if (!dc && !sc) std::memcpy(d, s, bytes);
  else if (dc && !sc) cuda::copy_to_device(d, s, bytes, dst.device().index());
  else if (!dc && sc) cuda::copy_to_host(d, s, bytes, src.device().index());
  else if (dst.device() == src.device()) cuda::copy_on_device(d, s, bytes, dst.device().index());
  else {  // between two GPUs: through the host
    std::vector<char> host(bytes);
    cuda::copy_to_host(host.data(), s, bytes, src.device().index());
    cuda::copy_to_device(d, host.data(), bytes, dst.device().index());
    cuda::synchronize(dst.device().index());
  }
}

std::shared_ptr<Buffer> Buffer::borrow(void* ptr, size_t bytes, Device device,
                                       std::function<void(void*)> deleter) {
  return std::shared_ptr<Buffer>(new Buffer(ptr, bytes, device, std::move(deleter)));
}

Buffer::~Buffer() {
  if (release_) release_(ptr_);
  delete poison_.load(std::memory_order_relaxed);
}

void Buffer::poison(const std::string& message) const {
  auto* m = new std::string(message);
  const std::string* none = nullptr;
  if (!poison_.compare_exchange_strong(none, m, std::memory_order_acq_rel)) delete m;
}

}  // namespace loom::runtime
