#include "runtime/cuda/function_modules.h"

#include <xxhash.h>

#include <map>
#include <mutex>

#include "runtime/cuda/context.h"
#include "runtime/cuda/library_module.h"

namespace loom::runtime::cuda {

FunctionModule::~FunctionModule() {
  // Errors are ignored: at process exit the driver may already be gone.
  driver().cuStreamSynchronize(context(device_).stream);
  driver().cuModuleUnload(module_);
}

namespace {
// The modules loaded now, by (device, 128-bit hash of the source): held
// weakly, so a module lives as long as an executable uses it.
struct Loaded {
  std::mutex mu;
  std::map<std::tuple<int, uint64_t, uint64_t>, std::weak_ptr<const FunctionModule>> modules;
};
Loaded& loaded() {
  static Loaded* l = new Loaded();  // never destroyed: modules may be released at exit
  return *l;
}
std::tuple<int, uint64_t, uint64_t> key_of(int device, const std::string& source) {
  const XXH128_hash_t h = XXH3_128bits(source.data(), source.size());
  return {device, h.high64, h.low64};
}
}  // namespace

std::vector<FunctionModulePtr> function_modules(const std::vector<std::string>& sources, int device,
                                                const std::string& what) {
  std::vector<FunctionModulePtr> out(sources.size());
  std::vector<std::string> missing;
  {
    std::lock_guard lock(loaded().mu);
    for (size_t i = 0; i < sources.size(); ++i) {
      auto it = loaded().modules.find(key_of(device, sources[i]));
      if (it != loaded().modules.end()) out[i] = it->second.lock();
      if (!out[i]) missing.push_back(sources[i]);
    }
  }
  // The cubins nobody compiled yet, side by side; then each is in memory.
  compile_cubins(missing, device, what);
  for (size_t i = 0; i < sources.size(); ++i) {
    if (out[i]) continue;
    const std::vector<char> cubin = cached_cubin(sources[i], device, source_words(sources[i]), what, "", 0);
    auto module = std::make_shared<const FunctionModule>(load_module(cubin, device, what), device,
                                                         static_cast<int64_t>(cubin.size()));
    std::lock_guard lock(loaded().mu);
    auto& slot = loaded().modules[key_of(device, sources[i])];
    if (FunctionModulePtr other = slot.lock()) {
      out[i] = std::move(other);  // another thread loaded it meanwhile: ours unloads now
    } else {
      slot = module;
      out[i] = std::move(module);
    }
  }
  return out;
}

}  // namespace loom::runtime::cuda
