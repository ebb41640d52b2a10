// ExecutableCache: graph key -> compiled Executable, shared by all threads.
// A lookup compares the stored canonical form word for word, so two graphs
// whose hashes collide never share an executable.
//
// The cache is bounded by bytes (Executable::bytes(): code, arenas,
// argument blocks): inserting past the bound evicts the executables used
// least recently, never the one just inserted. An evicted executable is
// released when its last user lets go (a thread's last run, a
// loom::compile trace): LLVM's JITDylib is removed, CUDA modules unloaded,
// arenas freed. The disk cache keeps every compiled object, so coming back
// to an evicted graph costs a load, not a compile.
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
  // A graph has up to two executables: as first compiled (variant 0), and,
  // once a run's view offsets did not fit that one's assumptions
  // (Executable::fits), one compiled assuming nothing of them (variant 1).
  struct Entry {
    const Backend* backend;
    ir::Words canonical;
    std::shared_ptr<Executable> executable;
    int64_t bytes = 0;
    uint8_t variant = 0;
  };
  // nullptr on a miss. `collided` is set when an entry had the same hash but
  // a different canonical form. A hit counts as a use (touch).
  std::shared_ptr<Executable> find(const Backend& b, const ir::Graph& g, bool& collided, uint8_t variant = 0) const;
  // Returns the executable now cached for g: `exe`, or an equal entry that
  // another thread inserted first. May evict others to stay within bounds.
  std::shared_ptr<Executable> insert(const Backend& b, const ir::Graph& g, std::shared_ptr<Executable> exe,
                                     uint8_t variant = 0);
  // Marks `exe` used now: it is evicted after those used before it.
  // A plain load and store (no read-modify-write on the hit path): the
  // clock moves at each insert, so the order is exact up to that.
  void touch(Executable& exe) const {
    exe.last_used.store(clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  void clear();
  size_t size() const;
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // The bound (LOOM_EXECUTABLE_CACHE_BYTES; 0: none). Lowering it evicts at once.
  void set_limit(int64_t bytes);
  int64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  // Bumped by clear(): an executable remembered outside the cache (the
  // executor's per-thread last run) is only reused while this is unchanged.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  void evict_locked(const Executable* keep);  // under mu_ (unique)

  std::atomic<uint64_t> generation_{1};
  mutable std::atomic<uint64_t> clock_{1};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> limit_;
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, std::vector<Entry>> buckets_;
  size_t size_ = 0;

 public:
  ExecutableCache();
};

ExecutableCache& executable_cache();

// The default bound: LOOM_EXECUTABLE_CACHE_BYTES ("4G", "512M", "0" for
// none), else kDefaultExecutableCacheBytes.
inline constexpr int64_t kDefaultExecutableCacheBytes = int64_t{4} << 30;
int64_t executable_cache_limit_from_env();

}  // namespace loom::runtime
