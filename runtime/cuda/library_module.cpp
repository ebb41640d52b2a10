#include "runtime/cuda/library_module.h"

#include <tbb/parallel_for.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <loom/error.h>

#include "jit/cuda/codegen.h"
#include "kernels/cuda/library.h"
#include "runtime/cuda/context.h"
#include "runtime/cuda/nvrtc_compile.h"
#include "runtime/disk_cache.h"
#include "runtime/dump.h"
#include "runtime/log.h"
#include "runtime/metrics.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "dev"
#endif

namespace loom::runtime::cuda {

namespace {
// Cubins this process compiled or loaded, by a 128-bit hash of their key's
// namespace and words: a graph, a tuning module or a function that comes
// back (another graph, an evicted executable) reads no file. At most
// kMemoryBytes, those kept longest ago dropped first.
class CubinMemory {
 public:
  static constexpr size_t kMemoryBytes = size_t{256} << 20;
  using Key = std::pair<uint64_t, uint64_t>;
  static Key key_of(const std::string& ns, std::span<const uint64_t> words) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, ns.data(), ns.size());
    XXH3_128bits_update(st, words.data(), words.size() * sizeof(uint64_t));
    const XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return {h.high64, h.low64};
  }
  std::optional<std::vector<char>> find(const Key& k) {
    std::lock_guard lock(mu_);
    auto it = cubins_.find(k);
    if (it == cubins_.end()) return std::nullopt;
    return it->second;
  }
  void keep(const Key& k, const std::vector<char>& cubin) {
    std::lock_guard lock(mu_);
    if (!cubins_.emplace(k, cubin).second) return;
    order_.push_back(k);
    bytes_ += cubin.size();
    while (bytes_ > kMemoryBytes && order_.size() > 1) {
      auto old = cubins_.find(order_.front());
      bytes_ -= old->second.size();
      cubins_.erase(old);
      order_.pop_front();
    }
  }

 private:
  std::mutex mu_;
  std::map<Key, std::vector<char>> cubins_;
  std::deque<Key> order_;
  size_t bytes_ = 0;
};
CubinMemory& cubin_memory() {
  static CubinMemory* m = new CubinMemory();  // never destroyed: used until exit
  return *m;
}
}  // namespace

std::vector<char> cached_cubin(const std::string& source, int device, std::span<const uint64_t> canonical,
                               const std::string& what, const std::string& dump_folder, int64_t kernels) {
  const DeviceContext& ctx = context(device);
  const std::string ns = "cuda-" + ctx.arch() + "-nvrtc" + nvrtc_version();
  static const std::string version = std::string(LOOM_VERSION) + ", " + jit::cuda::build_id();
  const CubinMemory::Key memory_key = CubinMemory::key_of(ns, canonical);
  if (std::optional<std::vector<char>> kept = cubin_memory().find(memory_key)) return std::move(*kept);
  DiskCache::Key key{ns, version, canonical};
  DiskCache& disk = DiskCache::instance();
  if (std::optional<std::vector<char>> hit = disk.load(key)) {
    cubin_memory().keep(memory_key, *hit);
    return std::move(*hit);
  }
  const int64_t t0 = now_ns();
  std::vector<char> cubin = compile_cubin(source, ctx.arch(), what + (dump_folder.empty() ? "" : " (source: " + dump_folder + "/kernels.cu)"));
  disk.store(key, cubin);
  cubin_memory().keep(memory_key, cubin);
  if (kernels > 0) record_compile(kernels, now_ns() - t0);
  if (log_enabled(LogTopic::Kernels))
    log_line(LogTopic::Kernels, "nvrtc %s: %s: %zu bytes in %.1f ms", what.c_str(), source_title(source).c_str(),
             cubin.size(), (now_ns() - t0) / 1e6);
  return cubin;
}

std::string source_title(const std::string& source) {
  const size_t entry = source.rfind("extern \"C\"");
  if (entry == std::string::npos) return "a module without an entry point";
  const size_t end = entry > 0 ? entry - 1 : 0;  // the newline before it
  const size_t line = end > 0 ? source.rfind('\n', end - 1) : std::string::npos;
  const size_t from = line == std::string::npos ? 0 : line + 1;
  if (source.compare(from, 3, "// ") == 0 && end > from + 3) return source.substr(from + 3, end - from - 3);
  return source.substr(entry, std::min(source.find('(', entry), entry + 120) - entry);
}

std::vector<uint64_t> source_words(const std::string& s) {
  std::vector<uint64_t> w((s.size() + 7) / 8 + 1, 0);
  w[0] = s.size();
  std::memcpy(w.data() + 1, s.data(), s.size());
  return w;
}

void compile_cubins(const std::vector<std::string>& sources, int device, const std::string& what) {
  context(device);  // made here, not on the threads below
  tbb::parallel_for(size_t{0}, sources.size(), [&](size_t i) {
    const std::vector<uint64_t> words = source_words(sources[i]);
    cached_cubin(sources[i], device, words, what, "", 1);
  });
}

CUmodule load_module(const std::vector<char>& cubin, int device, const std::string& what) {
  context(device);
  CUmodule m = nullptr;
  check(driver().cuModuleLoadData(&m, cubin.data()), "cuModuleLoadData", what);
  return m;
}

namespace {

// A library kernel on one device: its module's one function (the module
// stays loaded until exit).
struct Library {
  std::mutex mu;
  CUfunction function = nullptr;
};

}  // namespace

CUfunction library_function(int device, const std::string& name) {
  // Each kernel a module of its own per device (kernels/cuda/library.h
  // function_source), compiled when first launched: a program compiles
  // only what it launches.
  struct Modules {
    std::mutex mu;  // held only to find or make an entry: kernels compile side by side
    std::map<std::pair<int, std::string>, std::unique_ptr<Library>> by_name;
  };
  static auto* modules = new Modules;  // leaked: functions live in replayed graphs
  Library* lib = nullptr;
  {
    std::lock_guard lock(modules->mu);
    auto& slot = modules->by_name[{device, name}];
    if (!slot) slot = std::make_unique<Library>();
    lib = slot.get();
  }
  std::lock_guard lock(lib->mu);
  if (!lib->function) {  // kept only once both are there: a failed call is tried again, never half-made
    const std::string source = kernels::cuda::function_source(name);
    const std::string what = "the CUDA library kernel " + name;
    const CUmodule m = load_module(cached_cubin(source, device, source_words(source), what, "", 0), device, what);
    CUfunction f = nullptr;
    if (const CUresult r = driver().cuModuleGetFunction(&f, m, name.c_str()); r != CUDA_SUCCESS) {
      driver().cuModuleUnload(m);
      check(r, "cuModuleGetFunction", what);
    }
    lib->function = f;
  }
  return lib->function;
}

}  // namespace loom::runtime::cuda
