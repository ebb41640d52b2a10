// One GPU as loom uses it: the device's primary context, made current on
// every thread that touches it, and the one loom stream all of loom's work
// on that GPU is ordered on (kernels, copies, CUDA graph launches). Because
// everything is on one stream, a buffer freed on the host may be reused by
// the next launch at once: the stream orders the old reads before new writes.
#pragma once
#include <string>

#include "runtime/cuda/driver.h"

namespace loom::runtime::cuda {

struct DeviceContext {
  int index = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  int sm_major = 0, sm_minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t total_memory = 0;
  std::string name;                // "NVIDIA H100 80GB HBM3"
  // What NVRTC compiles for: the device's exact architecture, and on
  // compute capability 9.0 its "a" form (sm_90a), which adds the
  // warpgroup instructions (wgmma) that code runs only on 9.0 itself.
  std::string arch() const {
    return "sm_" + std::to_string(sm_major) + std::to_string(sm_minor) + (wgmma() ? "a" : "");
  }
  bool wgmma() const { return sm_major == 9 && sm_minor == 0; }
};

// The device's context, created on first use and made current on the
// calling thread. Throws loom::Error if CUDA or the device is unavailable.
DeviceContext& context(int index);
int device_count();  // 0 without a driver; never throws

// Blocks until all of loom's work on the device has finished.
void synchronize(int index);

// Host <-> device copies on the loom stream, through pinned staging
// buffers. to_device returns once `src` may be reused; to_host returns once
// `dst` holds the data (it waits for the work that produced it).
void copy_to_device(void* dst_device, const void* src_host, size_t bytes, int index);
void copy_to_host(void* dst_host, const void* src_device, size_t bytes, int index);
void copy_on_device(void* dst_device, const void* src_device, size_t bytes, int index);

}  // namespace loom::runtime::cuda
