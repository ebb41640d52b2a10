// The GPU, as libtorch's torch::cuda namespace exposes it. libcuda is loaded
// on first use: on a machine without a driver or a GPU these report "none"
// and tensors on kCUDA raise a loom::Error saying why.
#pragma once
#include <cstdint>
#include <string>

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

}  // namespace loom::cuda
#pragma GCC visibility pop
