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

// Blocks from kMinCached bytes up are cached, keyed by their rounded size;
// at most kMaxCachedBytes are held, the rest is freed.
constexpr size_t kMinCached = size_t{1} << 20;
constexpr size_t kGranule = size_t{1} << 16;
constexpr size_t kMaxCachedBytes = size_t{2} << 30;
// Blocks from kMinHuge bytes up are whole 2 MiB pages, aligned to them and
// marked for transparent huge pages (madvise, as Linux's default "madvise"
// mode asks): a kernel streaming through hundreds of MiB then misses the TLB
// once per 2 MiB instead of once per 4 KiB, and a first touch faults once
// per 2 MiB. The rounding wastes under 1/16 of such a block.
constexpr size_t kMinHuge = size_t{32} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

size_t rounded(size_t bytes) {
  if (bytes >= kMinHuge) return (bytes + kHugePage - 1) / kHugePage * kHugePage;
  return bytes >= kMinCached ? (bytes + kGranule - 1) / kGranule * kGranule : (bytes + 63) / 64 * 64;
}

void* system_allocate(size_t size) {
  if (size < kMinHuge) return std::aligned_alloc(64, size);
  void* p = std::aligned_alloc(kHugePage, size);
#ifdef MADV_HUGEPAGE
  if (p) madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP the pages stay 4 KiB
#endif
  return p;
}

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  size_t cached = 0;

  void drop_all() {
    std::lock_guard lock(mu);
    for (auto& [size, p] : free_blocks) std::free(p);
    free_blocks.clear();
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
  if (size >= kMinCached) {
    Cache& c = cache();
    std::lock_guard lock(c.mu);
    if (auto it = c.free_blocks.find(size); it != c.free_blocks.end()) {
      void* p = it->second;
      c.free_blocks.erase(it);
      c.cached -= size;
      return p;
    }
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
  if (size >= kMinCached) {
    Cache& c = cache();
    std::lock_guard lock(c.mu);
    if (c.cached + size <= kMaxCachedBytes) {
      c.free_blocks.emplace(size, p);
      c.cached += size;
      return;
    }
  }
  std::free(p);
}

size_t host_cached_bytes() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  return c.cached;
}

}  // namespace loom::runtime
