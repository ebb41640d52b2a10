#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <mutex>

#include <loom/error.h>

namespace loom::runtime::cuda {

namespace {

// Resolves `name` from `lib` (versioned names, e.g. cuMemAlloc_v2, are the
// ones cuda.h maps the plain names to); records the first missing symbol.
template <class F>
void resolve(void* lib, F& slot, const char* name, std::string& missing) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
  if (!slot && missing.empty()) missing = name;
}

void* open_first(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

struct Driver {
  DriverApi api{};
  std::string reason;  // empty when usable

  Driver() {
    void* lib = open_first({"libcuda.so.1", "libcuda.so"});
    if (!lib) {
      reason = "no CUDA driver found (dlopen(\"libcuda.so.1\") failed: this machine has no NVIDIA driver)";
      return;
    }
    std::string missing;
    resolve(lib, api.cuInit, "cuInit", missing);
    resolve(lib, api.cuDriverGetVersion, "cuDriverGetVersion", missing);
    resolve(lib, api.cuDeviceGetCount, "cuDeviceGetCount", missing);
    resolve(lib, api.cuDeviceGet, "cuDeviceGet", missing);
    resolve(lib, api.cuDeviceGetName, "cuDeviceGetName", missing);
    resolve(lib, api.cuDeviceGetAttribute, "cuDeviceGetAttribute", missing);
    resolve(lib, api.cuDeviceTotalMem, "cuDeviceTotalMem_v2", missing);
    resolve(lib, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", missing);
    resolve(lib, api.cuCtxSetCurrent, "cuCtxSetCurrent", missing);
    resolve(lib, api.cuGetErrorString, "cuGetErrorString", missing);
    resolve(lib, api.cuGetErrorName, "cuGetErrorName", missing);
    resolve(lib, api.cuMemAlloc, "cuMemAlloc_v2", missing);
    resolve(lib, api.cuMemFree, "cuMemFree_v2", missing);
    resolve(lib, api.cuMemHostAlloc, "cuMemHostAlloc", missing);
    resolve(lib, api.cuMemFreeHost, "cuMemFreeHost", missing);
    resolve(lib, api.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", missing);
    resolve(lib, api.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", missing);
    resolve(lib, api.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", missing);
    resolve(lib, api.cuStreamCreate, "cuStreamCreate", missing);
    resolve(lib, api.cuStreamSynchronize, "cuStreamSynchronize", missing);
    resolve(lib, api.cuEventCreate, "cuEventCreate", missing);
    resolve(lib, api.cuEventRecord, "cuEventRecord", missing);
    resolve(lib, api.cuEventSynchronize, "cuEventSynchronize", missing);
    resolve(lib, api.cuEventDestroy, "cuEventDestroy_v2", missing);
    resolve(lib, api.cuEventElapsedTime, "cuEventElapsedTime", missing);
    resolve(lib, api.cuFuncSetAttribute, "cuFuncSetAttribute", missing);
    resolve(lib, api.cuModuleLoadData, "cuModuleLoadData", missing);
    resolve(lib, api.cuModuleUnload, "cuModuleUnload", missing);
    resolve(lib, api.cuModuleGetFunction, "cuModuleGetFunction", missing);
    resolve(lib, api.cuLaunchKernel, "cuLaunchKernel", missing);
    resolve(lib, api.cuGraphCreate, "cuGraphCreate", missing);
    resolve(lib, api.cuGraphAddKernelNode, "cuGraphAddKernelNode_v2", missing);
    resolve(lib, api.cuGraphInstantiate, "cuGraphInstantiateWithFlags", missing);
    resolve(lib, api.cuGraphLaunch, "cuGraphLaunch", missing);
    resolve(lib, api.cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2", missing);
    resolve(lib, api.cuGraphDestroy, "cuGraphDestroy", missing);
    resolve(lib, api.cuGraphExecDestroy, "cuGraphExecDestroy", missing);
    if (!missing.empty()) {
      reason = "the CUDA driver lacks " + missing + " (driver too old)";
      return;
    }
    if (CUresult r = api.cuInit(0); r != CUDA_SUCCESS) {
      const char* s = nullptr;
      api.cuGetErrorString(r, &s);
      reason = std::string("cuInit failed: ") + (s ? s : "unknown error") + " (no usable GPU)";
      return;
    }
    int count = 0;
    if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) reason = "the CUDA driver reports no GPU";
  }
};

Driver& the_driver() {
  static Driver* d = new Driver;  // leaked: kernels may be released after static destruction
  return *d;
}

struct Nvrtc {
  NvrtcApi api{};
  std::string reason;
  Nvrtc() {
    void* lib = open_first({"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"});
    if (!lib) {
      reason = "NVRTC not found (dlopen(\"libnvrtc.so\") failed; add the CUDA toolkit's lib64 to LD_LIBRARY_PATH)";
      return;
    }
    std::string missing;
    resolve(lib, api.nvrtcVersion, "nvrtcVersion", missing);
    resolve(lib, api.nvrtcGetErrorString, "nvrtcGetErrorString", missing);
    resolve(lib, api.nvrtcCreateProgram, "nvrtcCreateProgram", missing);
    resolve(lib, api.nvrtcDestroyProgram, "nvrtcDestroyProgram", missing);
    resolve(lib, api.nvrtcCompileProgram, "nvrtcCompileProgram", missing);
    resolve(lib, api.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", missing);
    resolve(lib, api.nvrtcGetProgramLog, "nvrtcGetProgramLog", missing);
    resolve(lib, api.nvrtcGetCUBINSize, "nvrtcGetCUBINSize", missing);
    resolve(lib, api.nvrtcGetCUBIN, "nvrtcGetCUBIN", missing);
    if (!missing.empty()) reason = "NVRTC lacks " + missing;
  }
};

Nvrtc& the_nvrtc() {
  static Nvrtc* n = new Nvrtc;
  return *n;
}

}  // namespace

const std::string& unavailable_reason() { return the_driver().reason; }

const DriverApi& driver() {
  Driver& d = the_driver();
  if (!d.reason.empty()) throw Error("loom: CUDA is not available: " + d.reason);
  return d.api;
}

const NvrtcApi& nvrtc() {
  Nvrtc& n = the_nvrtc();
  if (!n.reason.empty()) throw Error("loom: " + n.reason);
  return n.api;
}

std::string nvrtc_version() {
  Nvrtc& n = the_nvrtc();
  int major = 0, minor = 0;
  if (!n.reason.empty() || n.api.nvrtcVersion(&major, &minor) != 0) return "";
  return std::to_string(major) + "." + std::to_string(minor);
}

void check(CUresult r, const char* call, const std::string& what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverApi& d = the_driver().api;
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  std::string call_name = call;
  call_name = call_name.substr(0, call_name.find('('));
  throw Error("loom: CUDA " + call_name + " failed: " + (name ? name : std::to_string(r)) + ": " +
              (text ? text : "unknown error") + (what.empty() ? "" : " (" + what + ")"));
}

}  // namespace loom::runtime::cuda
