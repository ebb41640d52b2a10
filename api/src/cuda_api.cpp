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

// ---------------------------------------------------------------- Event

namespace {
using runtime::cuda::CUevent;
// Runs a driver call for `op`; a loom::Error it raises (no GPU, a failed
// call) is raised again naming the caller's file:line.
template <class F>
void with_caller(const char* op, const SourceLoc& loc, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string what = e.what();
    if (what.rfind("loom: ", 0) == 0) what.erase(0, 6);
    detail::throw_error(op, what, loc);
  }
}
}  // namespace

Event::~Event() {
  // Never throws: the driver may be gone at exit, and an event outlives nothing.
  if (event_ && runtime::cuda::available()) runtime::cuda::driver().cuEventDestroy(static_cast<CUevent>(event_));
}

Event::Event(Event&& other) noexcept : event_(other.event_), device_(other.device_) {
  other.event_ = nullptr;
  other.device_ = -1;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event dying(std::move(*this));
    event_ = other.event_;
    device_ = other.device_;
    other.event_ = nullptr;
    other.device_ = -1;
  }
  return *this;
}

void Event::record(int device, SourceLoc loc) {
  with_caller("cuda::Event::record", loc, [&] {
    const runtime::cuda::DeviceContext& c = runtime::cuda::context(device);  // raises without a GPU
    const runtime::cuda::DriverApi& d = runtime::cuda::driver();
    if (event_ && device_ != device) *this = Event();  // an event belongs to one device's context
    if (!event_) {
      CUevent e = nullptr;
      runtime::cuda::check(d.cuEventCreate(&e, 0), "cuEventCreate", "cuda:" + std::to_string(device));
      event_ = e;
      device_ = device;
    }
    runtime::cuda::check(d.cuEventRecord(static_cast<CUevent>(event_), c.stream), "cuEventRecord",
                         "cuda:" + std::to_string(device));
  });
}

void Event::synchronize(SourceLoc loc) const {
  LOOM_CHECK(event_, "cuda::Event::synchronize", loc, "the event was never recorded");
  with_caller("cuda::Event::synchronize", loc, [&] {
    runtime::cuda::context(device_);
    runtime::cuda::check(runtime::cuda::driver().cuEventSynchronize(static_cast<CUevent>(event_)), "cuEventSynchronize",
                         "cuda:" + std::to_string(device_));
  });
}

float Event::elapsed_time(const Event& end, SourceLoc loc) const {
  LOOM_CHECK(event_ && end.event_, "cuda::Event::elapsed_time", loc,
             (event_ ? "the end event" : "the start event"), " was never recorded");
  LOOM_CHECK(device_ == end.device_, "cuda::Event::elapsed_time", loc, "the start event was recorded on cuda:", device_,
             " and the end event on cuda:", end.device_);
  float ms = 0;
  with_caller("cuda::Event::elapsed_time", loc, [&] {
    runtime::cuda::context(device_);
    const runtime::cuda::DriverApi& d = runtime::cuda::driver();
    runtime::cuda::check(d.cuEventSynchronize(static_cast<CUevent>(end.event_)), "cuEventSynchronize",
                         "cuda:" + std::to_string(device_));
    runtime::cuda::check(d.cuEventElapsedTime(&ms, static_cast<CUevent>(event_), static_cast<CUevent>(end.event_)),
                         "cuEventElapsedTime", "cuda:" + std::to_string(device_));
  });
  return ms;
}

}  // namespace loom::cuda
