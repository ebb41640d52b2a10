// loom::cuda: the public face of runtime/cuda.
#include <loom/cuda.h>

#include "api/src/late_checks.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/gemm_tune.h"

namespace loom::cuda {

bool is_available() { return runtime::cuda::device_count() > 0; }
int device_count() { return runtime::cuda::device_count(); }
std::string unavailable_reason() { return runtime::cuda::unavailable_reason(); }

std::string device_name(int device) {
  const runtime::cuda::DeviceContext& c = runtime::cuda::context(device);
  return c.name + " (" + c.arch() + ", " + std::to_string(c.multiprocessors) + " SMs)";
}

void synchronize(int device) {
  if (!is_available()) return;
  runtime::cuda::synchronize(device);
  // A graph that failed on bad data is reported here at the latest (api/src/late_checks.h).
  detail::wait_for_late_check(Device(kCUDA, static_cast<int8_t>(device)));
}

void empty_cache(int device) {
  if (is_available()) runtime::cuda::empty_cache(device);
}

void set_allow_tf32(bool allow) { runtime::cuda::set_allow_tf32(allow); }
bool allow_tf32() { return runtime::cuda::allow_tf32(); }

MemoryStats memory_stats(int device) {
  MemoryStats m;
  if (!is_available()) return m;
  const runtime::cuda::AllocatorStats s = runtime::cuda::allocator_stats(device);
  m.allocated_bytes = s.allocated_bytes;
  m.reserved_bytes = s.reserved_bytes;
  m.peak_allocated_bytes = s.peak_allocated_bytes;
  m.allocations = s.allocations;
  m.cache_hits = s.cache_hits;
  m.driver_allocations = s.driver_allocations;
  m.oom_retries = s.oom_retries;
  return m;
}

}  // namespace loom::cuda
