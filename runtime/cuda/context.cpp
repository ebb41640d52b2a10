#include "runtime/cuda/context.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include <loom/error.h>

namespace loom::runtime::cuda {

namespace {

constexpr int kMaxDevices = 16;

// Two pinned buffers used alternately, so filling one overlaps the copy
// out of the other; an event per buffer says when its last copy is done.
struct Staging {
  static constexpr size_t kChunk = size_t(8) << 20;
  std::mutex mu;
  void* host[2] = {nullptr, nullptr};
  CUevent done[2] = {nullptr, nullptr};
  bool busy[2] = {false, false};
  int next = 0;
};

struct Devices {
  std::mutex mu;  // creation only: a created context is read without it
  std::array<std::atomic<DeviceContext*>, kMaxDevices> ctx{};  // never freed
  std::array<std::unique_ptr<Staging>, kMaxDevices> staging;
};

Devices& devices() {
  static Devices* d = new Devices;  // leaked: buffers may be freed during static destruction
  return *d;
}

DeviceContext* create(int index) {
  const DriverApi& d = driver();
  auto c = std::make_unique<DeviceContext>();
  c->index = index;
  const std::string what = "cuda:" + std::to_string(index);
  check(d.cuDeviceGet(&c->device, index), "cuDeviceGet", what);
  check(d.cuDevicePrimaryCtxRetain(&c->context, c->device), "cuDevicePrimaryCtxRetain", what);
  check(d.cuCtxSetCurrent(c->context), "cuCtxSetCurrent", what);
  check(d.cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", what);
  check(d.cuDeviceGetAttribute(&c->sm_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->device),
        "cuDeviceGetAttribute", what);
  check(d.cuDeviceGetAttribute(&c->sm_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->device),
        "cuDeviceGetAttribute", what);
  check(d.cuDeviceGetAttribute(&c->multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->device),
        "cuDeviceGetAttribute", what);
  check(d.cuDeviceTotalMem(&c->total_memory, c->device), "cuDeviceTotalMem", what);
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof(name) - 1, c->device), "cuDeviceGetName", what);
  c->name = name;
  return c.release();
}

Staging& staging(int index) {
  Devices& all = devices();
  std::lock_guard lock(all.mu);
  auto& s = all.staging[index];
  if (!s) {
    s = std::make_unique<Staging>();
    for (int i = 0; i < 2; ++i) {
      check(driver().cuMemHostAlloc(&s->host[i], Staging::kChunk, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc",
            "pinned staging buffer");
      check(driver().cuEventCreate(&s->done[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate", "staging");
    }
  }
  return *s;
}

// Waits until staging buffer `i` is no longer read or written by a copy.
void wait_slot(Staging& s, int i) {
  if (s.busy[i]) check(driver().cuEventSynchronize(s.done[i]), "cuEventSynchronize", "staging");
  s.busy[i] = false;
}

}  // namespace

int device_count() {
  // Asked on every factory call for a GPU (record.cpp): counted once.
  static const int count = [] {
    int n = 0;
    if (!available() || driver().cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
    return std::min(n, kMaxDevices);
  }();
  return count;
}

DeviceContext& context(int index) {
  thread_local CUcontext current = nullptr;
  if (index < 0 || index >= kMaxDevices) throw Error("loom: invalid CUDA device index " + std::to_string(index));
  Devices& all = devices();
  // Every launch and allocation asks for its context: after the first call
  // that is one atomic load and a thread-local compare, no lock.
  DeviceContext* c = all.ctx[index].load(std::memory_order_acquire);
  if (!c) {
    std::lock_guard lock(all.mu);
    c = all.ctx[index].load(std::memory_order_relaxed);
    if (!c) {
      const int n = device_count();
      if (!available()) driver();  // throws with the reason
      if (index >= n)
        throw Error("loom: cuda:" + std::to_string(index) + " does not exist (this machine has " + std::to_string(n) +
                    " CUDA device" + (n == 1 ? "" : "s") + ")");
      c = create(index);
      all.ctx[index].store(c, std::memory_order_release);
      current = c->context;
    }
  }
  if (current != c->context) {
    check(driver().cuCtxSetCurrent(c->context), "cuCtxSetCurrent", "cuda:" + std::to_string(index));
    current = c->context;
  }
  return *c;
}

void synchronize(int index) {
  DeviceContext& c = context(index);
  check(driver().cuStreamSynchronize(c.stream), "cuStreamSynchronize", "cuda:" + std::to_string(index));
}

void copy_to_device(void* dst, const void* src, size_t bytes, int index) {
  if (bytes == 0) return;
  DeviceContext& c = context(index);
  Staging& s = staging(index);
  std::lock_guard lock(s.mu);
  for (size_t off = 0; off < bytes; off += Staging::kChunk) {
    const size_t n = std::min(Staging::kChunk, bytes - off);
    const int i = s.next;
    s.next ^= 1;
    wait_slot(s, i);
    std::memcpy(s.host[i], static_cast<const char*>(src) + off, n);
    check(driver().cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst) + off, s.host[i], n, c.stream),
          "cuMemcpyHtoDAsync", "copy to cuda");
    check(driver().cuEventRecord(s.done[i], c.stream), "cuEventRecord", "staging");
    s.busy[i] = true;
  }
}

void copy_to_host(void* dst, const void* src, size_t bytes, int index) {
  if (bytes == 0) return;
  DeviceContext& c = context(index);
  Staging& s = staging(index);
  std::lock_guard lock(s.mu);
  // Chunk k is copied out of slot k%2 while chunk k+1 is copied into the other.
  size_t pending_off = 0, pending_n = 0;
  int pending_slot = -1;
  auto drain = [&] {
    if (pending_slot < 0) return;
    wait_slot(s, pending_slot);
    std::memcpy(static_cast<char*>(dst) + pending_off, s.host[pending_slot], pending_n);
    pending_slot = -1;
  };
  for (size_t off = 0; off < bytes; off += Staging::kChunk) {
    const size_t n = std::min(Staging::kChunk, bytes - off);
    const int i = s.next;
    s.next ^= 1;
    wait_slot(s, i);
    check(driver().cuMemcpyDtoHAsync(s.host[i], reinterpret_cast<CUdeviceptr>(src) + off, n, c.stream),
          "cuMemcpyDtoHAsync", "copy to host");
    check(driver().cuEventRecord(s.done[i], c.stream), "cuEventRecord", "staging");
    s.busy[i] = true;
    drain();
    pending_off = off;
    pending_n = n;
    pending_slot = i;
  }
  drain();
}

void copy_on_device(void* dst, const void* src, size_t bytes, int index) {
  if (bytes == 0 || dst == src) return;
  DeviceContext& c = context(index);
  check(driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes,
                                   c.stream),
        "cuMemcpyDtoDAsync", "copy on cuda");
}

}  // namespace loom::runtime::cuda
