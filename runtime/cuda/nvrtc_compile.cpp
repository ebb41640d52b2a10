#include "runtime/cuda/nvrtc_compile.h"

#include <loom/error.h>

#include "runtime/cuda/driver.h"
#include "runtime/metrics.h"

namespace loom::runtime::cuda {

std::vector<char> compile_cubin(const std::string& source, const std::string& arch, const std::string& what) {
  const NvrtcApi& n = nvrtc();
  auto fail = [&](nvrtcResult r, const char* call, const std::string& log) {
    throw Error("loom: NVRTC " + std::string(call) + " failed for " + what + ": " + n.nvrtcGetErrorString(r) +
                (log.empty() ? "" : "\n" + log));
  };
  int64_t t0 = now_ns();
  nvrtcProgram prog = nullptr;
  if (nvrtcResult r = n.nvrtcCreateProgram(&prog, source.c_str(), "loom.cu", 0, nullptr, nullptr)) fail(r, "nvrtcCreateProgram", "");
  struct Destroy {
    const NvrtcApi& n;
    nvrtcProgram& p;
    ~Destroy() { n.nvrtcDestroyProgram(&p); }
  } destroy{n, prog};
  const std::string arch_opt = "--gpu-architecture=" + arch;
  // --fmad=false: a*b + c stays two roundings, as on the CPU backends and
  // in the reference, so the three agree to the bit on exact programs.
  const char* opts[] = {arch_opt.c_str(), "-std=c++17", "-lineinfo", "--fmad=false"};
  nvrtcResult r = n.nvrtcCompileProgram(prog, 4, opts);
  bump(counters().nvrtc_compiles);
  if (r != 0) {
    size_t size = 0;
    n.nvrtcGetProgramLogSize(prog, &size);
    std::string log(size, '\0');
    if (size) n.nvrtcGetProgramLog(prog, log.data());
    fail(r, "nvrtcCompileProgram", log);
  }
  size_t size = 0;
  if (nvrtcResult e = n.nvrtcGetCUBINSize(prog, &size)) fail(e, "nvrtcGetCUBINSize", "");
  std::vector<char> cubin(size);
  if (nvrtcResult e = n.nvrtcGetCUBIN(prog, cubin.data())) fail(e, "nvrtcGetCUBIN", "");
  bump(counters().nvrtc_compile_ns, now_ns() - t0);
  return cubin;
}

}  // namespace loom::runtime::cuda
