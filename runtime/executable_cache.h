// ExecutableCache: graph key -> compiled Executable, shared by all threads.
// A lookup compares the stored canonical form word for word, so two graphs
// whose hashes collide never share an executable.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "runtime/backend.h"

namespace loom::runtime {

class ExecutableCache {
 public:
  struct Entry {
    const Backend* backend;
    ir::Words canonical;
    std::shared_ptr<Executable> executable;
  };
  // nullptr on a miss. `collided` is set when an entry had the same hash but
  // a different canonical form.
  std::shared_ptr<Executable> find(const Backend& b, const ir::Graph& g, bool& collided) const;
  // Returns the executable now cached for g: `exe`, or an equal entry that
  // another thread inserted first.
  std::shared_ptr<Executable> insert(const Backend& b, const ir::Graph& g, std::shared_ptr<Executable> exe);
  void clear();
  size_t size() const;
  // Bumped by clear(): an executable remembered outside the cache (the
  // executor's per-thread last run) is only reused while this is unchanged.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> generation_{1};
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, std::vector<Entry>> buckets_;
  size_t size_ = 0;
};

ExecutableCache& executable_cache();

}  // namespace loom::runtime
