#include "runtime/host_allocator.h"

#include <sys/mman.h>

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

}  // namespace

void* host_allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
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
