// The slow paths of the per-thread free lists (see block_pool.h), their
// thread-exit cleanup, and the node recycler behind make_node.
#include "api/src/block_pool.h"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace loom::detail {

namespace pool_internal {
constinit __attribute__((tls_model("initial-exec"))) thread_local FreeLists t_lists{};
}  // namespace pool_internal

namespace {

using namespace pool_internal;

// Recycled nodes: a stack of up to kMaxRecycledNodes, allocated on first use.
constexpr uint32_t kMaxRecycledNodes = 4096;
struct NodeList {
  ir::Node** nodes;
  uint32_t count;
};
__attribute__((tls_model("initial-exec"))) thread_local NodeList t_nodes{};

// Released nodes whose inputs are still to be let go of, drained in a loop
// rather than by recursion: a chain of N nodes would otherwise need N nested
// destructor frames and could overflow a thread's stack when a long graph is
// freed. A dead node keeps its inputs until the loop reaches it, so only
// node pointers are stacked (no shared_ptr moves). Trivial and initial-exec,
// like t_lists: every access is a plain %fs-relative load, where a
// thread_local std::vector cost a __tls_get_addr call per use (several per
// released node). The array is freed by the Reaper.
struct DrainStack {
  ir::Node** items;
  uint32_t count;
  uint32_t capacity;
  bool draining;
};
__attribute__((tls_model("initial-exec"))) thread_local DrainStack t_drain{};

struct Reaper {
  ~Reaper() {
    for (uint32_t i = 0; i < t_nodes.count; ++i) delete t_nodes.nodes[i];
    delete[] t_nodes.nodes;
    t_nodes = NodeList{};
    std::free(t_drain.items);  // empty: no node is being released while the thread exits
    t_drain.items = nullptr;
    t_drain.capacity = 0;
    for (size_t c = 0; c < kClasses; ++c) {
      while (FreeBlock* b = t_lists.head[c]) {
        t_lists.head[c] = b->next;
        ::operator delete(b);
      }
      t_lists.count[c] = 0;
    }
    t_lists.thread_exiting = true;
  }
};

void register_reaper() {
  thread_local Reaper reaper;
  (void)reaper;
  t_lists.reaper_registered = true;
}

// The shared_ptr deleter of make_node's nodes.
struct RecycleNode {
  void operator()(ir::Node* n) const noexcept {
    DrainStack& d = t_drain;
    if (d.draining) {  // inside the loop below: n waits its turn
      if (d.count < d.capacity || grow(d)) {
        d.items[d.count++] = n;
        return;
      }
      release(n);  // out of memory: one level deeper, correct all the same
      return;
    }
    d.draining = true;
    release(n);  // may stack n's inputs
    while (d.count) release(d.items[--d.count]);
    d.draining = false;
  }

  // Lets go of n's inputs (a dying input is stacked by operator() above)
  // and its data, then keeps n for the next make_node.
  static void release(ir::Node* n) noexcept {
    n->inputs.clear();  // keeps any heap capacity for the next node
    n->data.reset();
    recycle(n);
  }

  static bool grow(DrainStack& d) noexcept {
    const uint32_t cap = d.capacity ? 2 * d.capacity : 256;
    auto* items = static_cast<ir::Node**>(std::realloc(d.items, cap * sizeof(ir::Node*)));
    if (!items) return false;
    if (!t_lists.reaper_registered && !t_lists.thread_exiting) register_reaper();
    d.items = items;
    d.capacity = cap;
    return true;
  }

  static void recycle(ir::Node* n) noexcept {
    NodeList& l = t_nodes;
    if (!t_lists.reaper_registered && !t_lists.thread_exiting) register_reaper();
    if (t_lists.thread_exiting || l.count == kMaxRecycledNodes) {
      delete n;
      return;
    }
    if (!l.nodes) l.nodes = new (std::nothrow) ir::Node*[kMaxRecycledNodes];
    if (!l.nodes) {
      delete n;
      return;
    }
    // Back to blank: only what callers fill in below their count, and the
    // fields new_node does not set.
    // (memset, not a loop: GCC turns the loop into a `rep stos`, whose startup
    // cost was the most expensive step of releasing a node, even for n == 0)
    if (n->attr.n) std::memset(n->attr.v.data(), 0, n->attr.n * sizeof(int64_t));
    n->attr.n = 0;
    // Each written on its own: `a = b = {}` stored b as two 8-byte zeros, then
    // copied it with one 16-byte load, which cannot be forwarded from those
    // stores (a stall that was ~40% of releasing a node).
    n->scalar[0] = ir::RtScalar{};
    n->scalar[1] = ir::RtScalar{};
    n->num_scalars = 0;
    n->header_cache.store(0, std::memory_order_relaxed);  // its next life gets its own header
    n->poisoned.store(false, std::memory_order_relaxed);
    n->file = "";
    n->line = 0;
    l.nodes[l.count++] = n;
  }
};

}  // namespace

void register_pool_cleanup() {
  if (!t_lists.reaper_registered && !t_lists.thread_exiting) register_reaper();
}

std::shared_ptr<ir::Node> make_node() {
  NodeList& l = t_nodes;
  ir::Node* n = l.count ? l.nodes[--l.count] : new ir::Node();
  return std::shared_ptr<ir::Node>(n, RecycleNode{}, PoolAllocator<ir::Node>());
}

namespace pool_internal {

void* allocate_slow(size_t bytes) {
  if (bytes > kMaxPooledBytes || bytes == 0) return ::operator new(bytes);
  return ::operator new((size_class(bytes) + 1) * kPoolGranule);  // a whole class block: any size of the class can reuse it
}

void deallocate_slow(void* p, size_t bytes) noexcept {
  if (bytes > kMaxPooledBytes || bytes == 0) {
    ::operator delete(p);
    return;
  }
  FreeLists& l = t_lists;
  if (!l.reaper_registered && !l.thread_exiting) {
    register_reaper();
    pool_deallocate(p, bytes);  // now kept, unless the list is full
    return;
  }
  ::operator delete(p);  // list full, or the thread is exiting
}

}  // namespace pool_internal

}  // namespace loom::detail
