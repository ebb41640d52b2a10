#include "runtime/executable_cache.h"

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

#include "runtime/log.h"
#include "runtime/metrics.h"

namespace loom::runtime {

ExecutableCache::ExecutableCache() : limit_(executable_cache_limit_from_env()) {}

std::shared_ptr<Executable> ExecutableCache::find(const Backend& b, const ir::Graph& g, bool& collided,
                                                  uint8_t variant) const {
  collided = false;
  std::shared_lock lock(mu_);
  auto it = buckets_.find(g.hash);
  if (it == buckets_.end()) return nullptr;
  for (const Entry& e : it->second)
    if (e.backend == &b && e.variant == variant && e.canonical == g.canonical) {
      touch(*e.executable);
      return e.executable;
    }
  // Same hash, different graph (or another backend's entry): a true collision
  // only if some entry of this backend is there.
  for (const Entry& e : it->second) collided = collided || e.backend == &b;
  return nullptr;
}

std::shared_ptr<Executable> ExecutableCache::insert(const Backend& b, const ir::Graph& g,
                                                    std::shared_ptr<Executable> exe, uint8_t variant) {
  std::unique_lock lock(mu_);
  auto& bucket = buckets_[g.hash];
  for (const Entry& e : bucket)
    if (e.backend == &b && e.variant == variant && e.canonical == g.canonical) return e.executable;
  const int64_t bytes = exe->bytes();
  clock_.fetch_add(1, std::memory_order_relaxed);
  touch(*exe);
  bucket.push_back(Entry{&b, g.canonical, exe, bytes, variant});
  ++size_;
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  evict_locked(exe.get());
  return exe;
}

// Least recently used first, until within the limit; `keep` (just
// inserted, about to run) stays even when it alone is over.
void ExecutableCache::evict_locked(const Executable* keep) {
  const int64_t limit = limit_.load(std::memory_order_relaxed);
  while (limit > 0 && bytes_.load(std::memory_order_relaxed) > limit) {
    std::vector<Entry>* oldest_bucket = nullptr;
    size_t oldest = 0;
    uint64_t oldest_use = UINT64_MAX;
    for (auto& [hash, bucket] : buckets_)
      for (size_t i = 0; i < bucket.size(); ++i) {
        const Executable* e = bucket[i].executable.get();
        const uint64_t used = e->last_used.load(std::memory_order_relaxed);
        if (e != keep && used < oldest_use) oldest_bucket = &bucket, oldest = i, oldest_use = used;
      }
    if (!oldest_bucket) return;
    Entry& victim = (*oldest_bucket)[oldest];
    bytes_.fetch_sub(victim.bytes, std::memory_order_relaxed);
    bump(counters().executables_evicted);
    if (log_enabled(LogTopic::Cache))
      log_line(LogTopic::Cache, "evict %s executable of %lld bytes (cache over %lld bytes)", victim.backend->name(),
               static_cast<long long>(victim.bytes), static_cast<long long>(limit));
    (*oldest_bucket)[oldest] = std::move(oldest_bucket->back());
    oldest_bucket->pop_back();
    --size_;
  }
}

void ExecutableCache::set_limit(int64_t bytes) {
  std::unique_lock lock(mu_);
  limit_.store(bytes < 0 ? 0 : bytes, std::memory_order_relaxed);
  evict_locked(nullptr);
}

void ExecutableCache::clear() {
  std::unique_lock lock(mu_);
  buckets_.clear();
  size_ = 0;
  bytes_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

size_t ExecutableCache::size() const {
  std::shared_lock lock(mu_);
  return size_;
}

ExecutableCache& executable_cache() {
  static ExecutableCache cache;
  return cache;
}

int64_t executable_cache_limit_from_env() {
  const char* env = std::getenv("LOOM_EXECUTABLE_CACHE_BYTES");
  if (!env || !*env) return kDefaultExecutableCacheBytes;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  int64_t scale = 1;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case 'K': scale = int64_t{1} << 10; ++end; break;
    case 'M': scale = int64_t{1} << 20; ++end; break;
    case 'G': scale = int64_t{1} << 30; ++end; break;
    default: break;
  }
  if (end == env || v < 0 || (*end && !(std::toupper(static_cast<unsigned char>(*end)) == 'B' && !end[1]))) {
    std::fprintf(stderr, "loom: LOOM_EXECUTABLE_CACHE_BYTES=%s is not a size (e.g. 4G, 512M, 0 for no bound); using %lld\n",
                 env, static_cast<long long>(kDefaultExecutableCacheBytes));
    return kDefaultExecutableCacheBytes;
  }
  return static_cast<int64_t>(v * static_cast<double>(scale));
}

}  // namespace loom::runtime
