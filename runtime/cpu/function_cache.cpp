#include "runtime/cpu/function_cache.h"

#include <cstring>
#include <span>

#include "jit/llvm/codegen.h"
#include "jit/llvm/orc_jit.h"
#include "runtime/disk_cache.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "dev"
#endif

namespace loom::runtime::cpu {

namespace {
// The key's bytes as the disk cache's words (its length first).
std::vector<uint64_t> key_words(const std::string& key) {
  std::vector<uint64_t> w((key.size() + 7) / 8 + 1, 0);
  w[0] = key.size();
  std::memcpy(w.data() + 1, key.data(), key.size());
  return w;
}
DiskCache::Key disk_key(const std::string& ns, const std::vector<uint64_t>& words) {
  static const std::string version = std::string(LOOM_VERSION) + ", " + jit::llvm_cpu::build_id();
  return DiskCache::Key{ns, version, words};
}
const std::string& target_ns() {
  static const std::string ns = jit::llvm_cpu::target_key() + "-function";
  return ns;
}
}  // namespace

FunctionCache::Object FunctionCache::find(const std::string& key) {
  {
    std::lock_guard lock(mu_);
    if (auto it = objects_.find(key); it != objects_.end()) return it->second;
  }
  const std::vector<uint64_t> words = key_words(key);
  std::optional<std::vector<char>> bytes = DiskCache::instance().load(disk_key(target_ns(), words));
  if (!bytes) return nullptr;
  auto object = std::make_shared<const std::vector<char>>(std::move(*bytes));
  std::lock_guard lock(mu_);
  keep_locked(key, object);
  return object;
}

void FunctionCache::store(const std::string& key, std::vector<char> object) {
  const std::vector<uint64_t> words = key_words(key);
  DiskCache::instance().store(disk_key(target_ns(), words), object);
  auto kept = std::make_shared<const std::vector<char>>(std::move(object));
  std::lock_guard lock(mu_);
  keep_locked(key, std::move(kept));
}

void FunctionCache::keep_locked(const std::string& key, Object object) {
  const int64_t size = static_cast<int64_t>(object->size());
  auto [it, fresh] = objects_.try_emplace(key, std::move(object));
  if (!fresh) return;
  order_.push_back(key);
  bytes_ += size;
  while (bytes_ > kMemoryBytes && order_.size() > 1) {
    auto old = objects_.find(order_.front());
    bytes_ -= static_cast<int64_t>(old->second->size());
    objects_.erase(old);
    order_.pop_front();
  }
}

FunctionCache& function_cache() {
  static FunctionCache* cache = new FunctionCache();  // never destroyed: used until exit
  return *cache;
}

}  // namespace loom::runtime::cpu
