#include "runtime/cuda/device_allocator.h"

#include <array>
#include <map>
#include <mutex>
#include <vector>

#include <loom/error.h>

#include "runtime/cuda/context.h"

namespace loom::runtime::cuda {

namespace {

struct Pool {
  std::mutex mu;
  std::map<size_t, std::vector<CUdeviceptr>> free_blocks;  // rounded size -> blocks
  AllocatorStats stats;
};

Pool& pool(int device) {
  static auto* pools = new std::array<Pool, 16>;  // leaked: tensors may die after static destruction
  return (*pools)[device];
}

size_t rounded(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  if (bytes == 0) bytes = 1;
  if (bytes < (size_t(1) << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

std::string mib(int64_t bytes) { return std::to_string(bytes / (1 << 20)) + " MiB"; }

// Frees every cached block; the caller holds p.mu.
void release_cached(Pool& p, int device) {
  if (p.free_blocks.empty()) return;
  synchronize(device);  // a cached block may still be read by queued work
  for (auto& [size, blocks] : p.free_blocks)
    for (CUdeviceptr b : blocks) {
      check(driver().cuMemFree(b), "cuMemFree", "empty_cache");
      p.stats.reserved_bytes -= static_cast<int64_t>(size);
    }
  p.free_blocks.clear();
}

}  // namespace

void* device_allocate(int device, size_t bytes) {
  DeviceContext& ctx = context(device);
  Pool& p = pool(device);
  const size_t size = rounded(bytes);
  std::lock_guard lock(p.mu);
  ++p.stats.allocations;
  CUdeviceptr ptr = 0;
  auto bin = p.free_blocks.find(size);
  if (bin != p.free_blocks.end() && !bin->second.empty()) {
    ptr = bin->second.back();
    bin->second.pop_back();
    ++p.stats.cache_hits;
  } else {
    CUresult r = driver().cuMemAlloc(&ptr, size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      release_cached(p, device);
      ++p.stats.oom_retries;
      r = driver().cuMemAlloc(&ptr, size);
      if (r == CUDA_ERROR_OUT_OF_MEMORY)
        throw Error("loom: CUDA out of memory on cuda:" + std::to_string(device) + " (" + ctx.name +
                    "): tried to allocate " + mib(static_cast<int64_t>(size)) + "; " +
                    mib(p.stats.allocated_bytes) + " held by live tensors, " + mib(static_cast<int64_t>(ctx.total_memory)) +
                    " total (cached blocks were released and the allocation retried)");
    }
    check(r, "cuMemAlloc", "allocating " + std::to_string(size) + " bytes");
    ++p.stats.driver_allocations;
    p.stats.reserved_bytes += static_cast<int64_t>(size);
  }
  p.stats.allocated_bytes += static_cast<int64_t>(size);
  p.stats.peak_allocated_bytes = std::max(p.stats.peak_allocated_bytes, p.stats.allocated_bytes);
  return reinterpret_cast<void*>(ptr);
}

void device_free(int device, void* ptr, size_t bytes) {
  Pool& p = pool(device);
  const size_t size = rounded(bytes);
  std::lock_guard lock(p.mu);
  p.free_blocks[size].push_back(reinterpret_cast<CUdeviceptr>(ptr));
  p.stats.allocated_bytes -= static_cast<int64_t>(size);
}

void empty_cache(int device) {
  Pool& p = pool(device);
  std::lock_guard lock(p.mu);
  release_cached(p, device);
}

AllocatorStats allocator_stats(int device) {
  Pool& p = pool(device);
  std::lock_guard lock(p.mu);
  return p.stats;
}

}  // namespace loom::runtime::cuda
