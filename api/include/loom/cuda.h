// The GPU, as libtorch's torch::cuda namespace exposes it. libcuda is loaded
// on first use: on a machine without a driver or a GPU these report "none"
// and tensors on kCUDA raise a loom::Error saying why.
#pragma once
#include <cstdint>
#include <string>

#include <loom/error.h>

#pragma GCC visibility push(default)
namespace loom::cuda {

bool is_available();
int device_count();
// Why CUDA cannot be used here ("" when it can).
std::string unavailable_reason();
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)"
std::string device_name(int device = 0);
// Waits for all of loom's queued work on the device (kernels, copies).
// Raises the loom::Error of a graph on it that failed on bad data (an
// index out of range, an integer division by zero) and was not reported
// yet: on a GPU that is found while the host records on, and reported at
// the next sync on the device, read of its data or synchronize (as
// PyTorch's asynchronous GPU errors).
void synchronize(int device = 0);
// Returns the caching allocator's free blocks to the driver.
void empty_cache(int device = 0);

// Whether float32 matrix products may use TF32 tensor cores (10-bit
// mantissa inputs, float32 accumulation), as torch.backends.cuda.matmul.
// allow_tf32. Off by default: products are exact float32 (FFMA). Changing
// it drops compiled executables, so no product of the other mode is replayed.
void set_allow_tf32(bool allow);
bool allow_tf32();

// The caching device allocator's counters (runtime/cuda/device_allocator.h).
struct MemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors and loom's arenas
  int64_t reserved_bytes = 0;        // taken from the driver: allocated + cached
  int64_t peak_allocated_bytes = 0;
  int64_t allocations = 0;           // requests
  int64_t cache_hits = 0;            // requests served without the driver
  int64_t driver_allocations = 0;    // cuMemAlloc calls
  int64_t oom_retries = 0;           // out-of-memory recovered by freeing cached blocks
};
MemoryStats memory_stats(int device = 0);

// A marker in loom's stream on one GPU, for timing GPU work as
// torch.cuda.Event(enable_timing=True) does. loom records lazily, so queue
// the work first: loom::sync() launches the pending graph, then record().
//
//   loom::cuda::Event start, end;
//   start.record();
//   for (int i = 0; i < 20; ++i) { y = f(x); loom::sync(); }  // queued, not waited for
//   end.record();
//   float ms = start.elapsed_time(end) / 20;  // GPU time per call
//
// The time between two events is the GPU's: the host's recording,
// hashing and launching only count where the GPU sat idle waiting for them.
class Event {
 public:
  Event() = default;
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;

  // Queues the event on loom's stream of `device` (again, if recorded
  // before): it completes once everything queued there before it has.
  void record(int device = 0, SourceLoc loc = SourceLoc::current());
  // Waits until it has completed.
  void synchronize(SourceLoc loc = SourceLoc::current()) const;
  // Milliseconds of GPU time from this event to `end`, both recorded on the
  // same device; waits for `end`.
  float elapsed_time(const Event& end, SourceLoc loc = SourceLoc::current()) const;

  bool recorded() const { return event_ != nullptr; }
  int device() const { return device_; }  // -1 until recorded

 private:
  void* event_ = nullptr;  // a CUevent, created by the first record()
  int device_ = -1;
};

}  // namespace loom::cuda
#pragma GCC visibility pop
