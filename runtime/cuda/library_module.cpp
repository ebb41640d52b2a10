#include "runtime/cuda/library_module.h"

#include <array>
#include <cstring>
#include <map>
#include <mutex>

#include <loom/error.h>

#include "jit/cuda/codegen.h"
#include "kernels/cuda/library.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/nvrtc_compile.h"
#include "runtime/disk_cache.h"
#include "runtime/dump.h"
#include "runtime/metrics.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "dev"
#endif

namespace loom::runtime::cuda {

std::vector<char> cached_cubin(const std::string& source, int device, std::span<const uint64_t> canonical,
                               const std::string& what, const std::string& dump_folder, int64_t kernels) {
  const DeviceContext& ctx = context(device);
  const std::string ns = "cuda-" + ctx.arch() + "-nvrtc" + nvrtc_version();
  static const std::string version = std::string(LOOM_VERSION) + ", " + jit::cuda::build_id();
  DiskCache::Key key{ns, version, canonical};
  DiskCache& disk = DiskCache::instance();
  if (std::optional<std::vector<char>> hit = disk.load(key)) return std::move(*hit);
  const int64_t t0 = now_ns();
  std::vector<char> cubin = compile_cubin(source, ctx.arch(), what + (dump_folder.empty() ? "" : " (source: " + dump_folder + "/kernels.cu)"));
  disk.store(key, cubin);
  if (kernels > 0) record_compile(kernels, now_ns() - t0);
  return cubin;
}

CUmodule load_module(const std::vector<char>& cubin, int device, const std::string& what) {
  context(device);
  CUmodule m = nullptr;
  check(driver().cuModuleLoadData(&m, cubin.data()), "cuModuleLoadData", what);
  return m;
}

namespace {

struct Library {
  std::mutex mu;
  CUmodule module = nullptr;
  std::map<std::string, CUfunction> functions;
};

// The library source as cache-key words (it is its own canonical form).
std::vector<uint64_t> source_words(const std::string& s) {
  std::vector<uint64_t> w((s.size() + 7) / 8 + 1, 0);
  w[0] = s.size();
  std::memcpy(w.data() + 1, s.data(), s.size());
  return w;
}

}  // namespace

CUfunction library_function(int device, const std::string& name) {
  static auto* libraries = new std::array<Library, 16>;  // leaked: functions live in replayed graphs
  Library& lib = (*libraries)[device];
  std::lock_guard lock(lib.mu);
  if (!lib.module) {
    const std::string& source = kernels::cuda::library_source();
    lib.module = load_module(cached_cubin(source, device, source_words(source), "the CUDA library kernels", "", 0), device,
                             "the CUDA library kernels");
  }
  auto it = lib.functions.find(name);
  if (it != lib.functions.end()) return it->second;
  CUfunction f = nullptr;
  check(driver().cuModuleGetFunction(&f, lib.module, name.c_str()), "cuModuleGetFunction", "library kernel " + name);
  lib.functions.emplace(name, f);
  return f;
}

}  // namespace loom::runtime::cuda
