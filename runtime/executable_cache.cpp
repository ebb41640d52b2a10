#include "runtime/executable_cache.h"

#include <mutex>

namespace loom::runtime {

std::shared_ptr<Executable> ExecutableCache::find(const Backend& b, const ir::Graph& g, bool& collided) const {
  collided = false;
  std::shared_lock lock(mu_);
  auto it = buckets_.find(g.hash);
  if (it == buckets_.end()) return nullptr;
  for (const Entry& e : it->second)
    if (e.backend == &b && e.canonical == g.canonical) return e.executable;
  // Same hash, different graph (or another backend's entry): a true collision
  // only if some entry of this backend is there.
  for (const Entry& e : it->second) collided = collided || e.backend == &b;
  return nullptr;
}

std::shared_ptr<Executable> ExecutableCache::insert(const Backend& b, const ir::Graph& g,
                                                    std::shared_ptr<Executable> exe) {
  std::unique_lock lock(mu_);
  auto& bucket = buckets_[g.hash];
  for (const Entry& e : bucket)
    if (e.backend == &b && e.canonical == g.canonical) return e.executable;
  bucket.push_back(Entry{&b, g.canonical, exe});
  ++size_;
  return exe;
}

void ExecutableCache::clear() {
  std::unique_lock lock(mu_);
  buckets_.clear();
  size_ = 0;
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

}  // namespace loom::runtime
