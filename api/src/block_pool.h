// Per-thread free lists for the small objects every recorded op allocates:
// TensorImpl and Storage, each with its shared_ptr control block
// (std::allocate_shared with PoolAllocator puts both in one pooled block),
// and ir::Node, which is recycled whole (make_node below).
//
// Why: a sync frees a whole graph at once (1,000 nodes for the O1 chain),
// and glibc's per-thread cache keeps only 7 blocks of a size, so almost
// every node went through malloc's slow bins (~40% of recording time in the
// O1 benchmark). Here a freed block is pushed on the freeing thread's list
// and the next allocation of its size class pops it: a few instructions.
//
// A block may be freed on another thread than the one that allocated it; it
// simply joins that thread's list. Each list is capped (kMaxBlocksPerClass),
// beyond which blocks go back to the system allocator, and a thread's lists
// are released when the thread exits, so memory stays bounded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "ir/node.h"

namespace loom::detail {

// Blocks of up to kMaxPooledBytes, in classes 64 bytes apart; anything larger
// goes straight to operator new.
inline constexpr size_t kPoolGranule = 64;
inline constexpr size_t kMaxPooledBytes = 512;
inline constexpr size_t kMaxBlocksPerClass = 4096;

namespace pool_internal {
struct FreeBlock {
  FreeBlock* next;
};
inline constexpr size_t kClasses = kMaxPooledBytes / kPoolGranule;
// One thread's lists. Trivially destructible and constant-initialized
// (constinit), so every access is a plain %fs-relative load: no TLS wrapper
// call, no init guard. initial-exec: no __tls_get_addr call either (about
// 100 bytes of the static TLS block glibc reserves for libraries).
struct FreeLists {
  FreeBlock* head[kClasses];
  uint32_t count[kClasses];
  bool reaper_registered;  // blocks are only kept once the thread-exit cleanup is registered
  bool thread_exiting;     // after that cleanup ran: free straight to the system
};
extern constinit __attribute__((tls_model("initial-exec"))) thread_local FreeLists t_lists;
inline size_t size_class(size_t bytes) { return (bytes - 1) / kPoolGranule; }
void* allocate_slow(size_t bytes);
void deallocate_slow(void* p, size_t bytes) noexcept;
}  // namespace pool_internal

// Inline fast paths: a pop or a push on this thread's list for the size.
inline void* pool_allocate(size_t bytes) {
  using namespace pool_internal;
  if (bytes - 1 < kMaxPooledBytes) {  // 1 .. kMaxPooledBytes
    FreeLists& l = t_lists;
    const size_t c = size_class(bytes);
    if (FreeBlock* b = l.head[c]) {
      l.head[c] = b->next;
      --l.count[c];
      return b;
    }
  }
  return allocate_slow(bytes);
}
inline void pool_deallocate(void* p, size_t bytes) noexcept {
  using namespace pool_internal;
  if (bytes - 1 < kMaxPooledBytes) {
    FreeLists& l = t_lists;
    const size_t c = size_class(bytes);
    if (l.reaper_registered && l.count[c] < kMaxBlocksPerClass) {
      auto* b = static_cast<FreeBlock*>(p);
      b->next = l.head[c];
      l.head[c] = b;
      ++l.count[c];
      return;
    }
  }
  deallocate_slow(p, bytes);
}

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "pooled blocks have operator new's alignment");
    return static_cast<T*>(pool_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { pool_deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
};

// std::make_shared, with the object and its control block in a pooled block.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<Args>(args)...);
}

// A blank node (as ir::Node{}, with op, dtype, device, shape, file and line
// for the caller to set). A node whose last owner lets go is not destroyed
// but releases its inputs and data and waits on the releasing thread's list
// for the next make_node. Why: constructing an ir::Node zero-fills ~330
// bytes (a `rep stos`, the costliest step of recording one op) and its
// inputs vector needs a malloc; a recycled node has neither cost, as it
// keeps its inputs' capacity. Lists are capped and freed at thread exit.
std::shared_ptr<ir::Node> make_node();

// Registers this thread's exit-time cleanup of its lists now (it is
// otherwise registered on the first free). Thread-local destructors run in
// reverse order of construction: an object made after this call and freeing
// nodes or pooled blocks in its destructor (a thread's pending list) then
// runs while the lists still work.
void register_pool_cleanup();

}  // namespace loom::detail
