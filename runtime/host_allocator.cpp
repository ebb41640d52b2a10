#include "runtime/host_allocator.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include <loom/error.h>

namespace loom::runtime {

namespace {

// Blocks of more than kSmallMax bytes (4 KiB) are cached, keyed by their
// size rounded to a granule of at most 1/16 of it (64 bytes, 4 KiB from
// 64 KiB, 64 KiB from 1 MiB, 2 MiB from 32 MiB); at most max_cached()
// bytes are held, and past that the blocks freed longest ago go back to the
// system first (a loop reuses what its last step freed; blocks of sizes that
// never come back, a shape that grows each step, age out instead of
// pinning the cache). Below 1 MiB too: glibc serves blocks of
// 128 KiB and more by a fresh mmap each time (its threshold only rises when
// such a block is freed, and the large ones never are: they stay here) and
// trims its heap's top, so every W4 step faulted in ~500 KiB of packing
// scratch and small gradients again (127 page faults a step; now none).
constexpr size_t kDefaultMaxCachedBytes = size_t{2} << 30;
// LOOM_HOST_CACHE_BYTES (e.g. 256M, 2G; 0 keeps nothing), else the default.
size_t max_cached() {
  static const size_t limit = [] {
    const char* env = std::getenv("LOOM_HOST_CACHE_BYTES");
    if (!env || !*env) return kDefaultMaxCachedBytes;
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    double scale = 1;
    if (*end == 'K' || *end == 'k') scale = 1 << 10;
    if (*end == 'M' || *end == 'm') scale = 1 << 20;
    if (*end == 'G' || *end == 'g') scale = double(1 << 30);
    return end == env || v < 0 ? kDefaultMaxCachedBytes : static_cast<size_t>(v * scale);
  }();
  return limit;
}
// Blocks from kMinHuge bytes up are aligned to 2 MiB and marked for
// transparent huge pages (madvise, as Linux's default "madvise" mode asks):
// each whole 2 MiB page inside the block is then one huge page (the tail
// past the last one stays in 4 KiB pages, so nothing is wasted), a kernel
// streaming through it misses the TLB once per 2 MiB instead of once per
// 4 KiB, and a first touch faults once per 2 MiB. From 2 MiB up (before:
// 32): W4's first step, which writes ~25 MiB of fresh gradients, momentum
// buffers and packed operands, took 5732-5799 page faults and now
// 1656-1719 (Zen 3, six processes each), its time over the second step's
// 13.3 -> 10.0 ms (medians). Blocks from kRoundHuge up are also rounded to
// whole 2 MiB pages, so their tail is huge too.
constexpr size_t kMinHuge = size_t{2} << 20;
constexpr size_t kRoundHuge = size_t{32} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

size_t rounded(size_t bytes) {
  auto up = [&](size_t to) { return (bytes + to - 1) / to * to; };
  if (bytes >= kRoundHuge) return up(kHugePage);
  if (bytes >= (size_t{1} << 20)) return up(size_t{64} << 10);
  return up(bytes >= (size_t{64} << 10) ? 4096 : 64);
}

void* system_allocate(size_t size) {
  if (size < kMinHuge) return std::aligned_alloc(64, size);
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, size) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP the pages stay 4 KiB
#endif
  return p;
}

struct Cache {
  std::mutex mu;
  // rounded size -> (block, when it was freed); `freed` indexes the same
  // blocks by that stamp, oldest first, for eviction.
  std::multimap<size_t, std::pair<void*, uint64_t>> free_blocks;
  std::map<uint64_t, std::multimap<size_t, std::pair<void*, uint64_t>>::iterator> freed;
  uint64_t stamp = 0;
  size_t cached = 0;

  void insert(size_t size, void* p) {
    auto it = free_blocks.emplace(size, std::make_pair(p, ++stamp));
    freed.emplace(stamp, it);
    cached += size;
  }
  // A cached block of exactly `size`, taken out; null if none.
  void* take(size_t size) {
    auto it = free_blocks.find(size);
    if (it == free_blocks.end()) return nullptr;
    void* p = it->second.first;
    freed.erase(it->second.second);
    free_blocks.erase(it);
    cached -= size;
    return p;
  }
  // The block freed longest ago, taken out (to be freed by the caller).
  std::pair<void*, size_t> take_oldest() {
    auto at = freed.begin();
    auto it = at->second;
    const std::pair<void*, size_t> out{it->second.first, it->first};
    cached -= it->first;
    free_blocks.erase(it);
    freed.erase(at);
    return out;
  }
  void drop_all() {
    std::lock_guard lock(mu);
    for (auto& [size, block] : free_blocks) std::free(block.first);
    free_blocks.clear();
    freed.clear();
    cached = 0;
  }
};
// Never destroyed: buffers owned by static objects may be freed at exit.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

// Small blocks (up to kSmallMax bytes, in 64-byte classes) are kept on
// per-thread free lists: a control loop's outputs are a few hundred bytes,
// and an aligned malloc and free of them cost more than the kernel that
// fills them. The link lives in the free block itself. Trivial and
// initial-exec TLS (a plain %fs-relative access); a thread's lists are
// freed when it exits, and a block freed on another thread joins that
// thread's lists.
constexpr size_t kSmallMax = 4096;
constexpr size_t kSmallClasses = kSmallMax / 64;
constexpr uint32_t kSmallPerClass = 16;  // at most ~2 MiB held per thread
struct SmallLists {
  void* head[kSmallClasses];
  uint32_t count[kSmallClasses];
  bool reaper_registered;  // blocks are only kept once the thread-exit cleanup is registered
  bool thread_exiting;     // after that cleanup ran: free straight to the system
};
constinit __attribute__((tls_model("initial-exec"))) thread_local SmallLists t_small{};

struct SmallReaper {
  ~SmallReaper() {
    for (size_t c = 0; c < kSmallClasses; ++c) {
      while (void* p = t_small.head[c]) {
        t_small.head[c] = *static_cast<void**>(p);
        std::free(p);
      }
      t_small.count[c] = 0;
    }
    t_small.thread_exiting = true;
  }
};

[[gnu::noinline]] void register_small_reaper() {
  thread_local SmallReaper reaper;
  (void)reaper;
  t_small.reaper_registered = true;
}

}  // namespace

void* host_allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes <= kSmallMax) {
    const size_t c = (bytes - 1) / 64;
    if (void* p = t_small.head[c]) {
      t_small.head[c] = *static_cast<void**>(p);
      --t_small.count[c];
      return p;
    }
  }
  const size_t size = rounded(bytes);
  if (bytes > kSmallMax) {  // small blocks never enter the cache (host_free keeps them per thread)
    Cache& c = cache();
    std::lock_guard lock(c.mu);
    if (void* p = c.take(size)) return p;
  }
  void* p = system_allocate(size);
  if (!p) {  // give the cache back to the OS and try once more
    cache().drop_all();
    p = system_allocate(size);
  }
  if (!p) throw Error("loom: out of memory allocating " + std::to_string(bytes) + " bytes on cpu");
  return p;
}

void host_free(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes <= kSmallMax) {  // rounded() gave it a whole 64-byte class: any size of the class can reuse it
    SmallLists& l = t_small;
    if (!l.reaper_registered && !l.thread_exiting) register_small_reaper();
    const size_t c = (bytes - 1) / 64;
    if (l.reaper_registered && !l.thread_exiting && l.count[c] < kSmallPerClass) {
      *static_cast<void**>(p) = l.head[c];
      l.head[c] = p;
      ++l.count[c];
      return;
    }
    std::free(p);
    return;
  }
  const size_t size = rounded(bytes);
  const size_t limit = max_cached();
  if (size > limit) {
    std::free(p);
    return;
  }
  // The blocks to give back are freed after the lock is released.
  constexpr int kFew = 8;
  void* evicted[kFew];
  int n = 0;
  {
    Cache& c = cache();
    std::lock_guard lock(c.mu);
    c.insert(size, p);
    while (c.cached > limit && n < kFew) evicted[n++] = c.take_oldest().first;
  }
  for (int i = 0; i < n; ++i) std::free(evicted[i]);
}

size_t host_cached_bytes() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  return c.cached;
}

}  // namespace loom::runtime
