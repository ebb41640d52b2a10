// The caching device allocator. cuMemAlloc and cuMemFree synchronize the
// GPU and cost tens of microseconds, so freed blocks are kept in per-size
// bins and handed out again; a training step that repeats allocates the same
// sizes and never reaches the driver after the first step.
//
// Sizes are rounded up to 512 bytes below 1 MiB and to 2 MiB above, and a
// request takes a cached block of exactly its rounded size. Blocks belong to
// the one loom stream of their device (runtime/cuda/context.h), so a freed
// block can be reused by the next launch on that stream without waiting.
// When cuMemAlloc reports out-of-memory, every cached block is released and
// the allocation retried once before a loom::Error is raised; live tensors
// are never touched.
#pragma once
#include <cstddef>
#include <cstdint>

namespace loom::runtime::cuda {

void* device_allocate(int device, size_t bytes);
void device_free(int device, void* ptr, size_t bytes);
// Returns every cached (free) block of `device` to the driver.
void empty_cache(int device);

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // held by live buffers (rounded sizes)
  int64_t reserved_bytes = 0;        // allocated + cached, i.e. taken from the driver
  int64_t peak_allocated_bytes = 0;
  int64_t allocations = 0;           // device_allocate calls
  int64_t cache_hits = 0;            // of those, served from a bin
  int64_t driver_allocations = 0;    // cuMemAlloc calls
  int64_t oom_retries = 0;           // out-of-memory recovered by emptying the cache
};
AllocatorStats allocator_stats(int device);

}  // namespace loom::runtime::cuda
