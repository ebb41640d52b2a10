// The slow paths of the per-thread free lists (see block_pool.h), their
// thread-exit cleanup, and the node recycler behind make_node.
#include "api/src/block_pool.h"

#include <array>
#include <cstdint>

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

struct Reaper {
  ~Reaper() {
    for (uint32_t i = 0; i < t_nodes.count; ++i) delete t_nodes.nodes[i];
    delete[] t_nodes.nodes;
    t_nodes = NodeList{};
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

// Inputs of released nodes, let go of in a loop rather than by recursion: a
// chain of N nodes would otherwise need N nested destructor frames and could
// overflow a thread's stack when a long graph is freed.
thread_local std::vector<ir::NodePtr> t_deferred;
thread_local bool t_draining = false;

// The shared_ptr deleter of make_node's nodes.
struct RecycleNode {
  void operator()(ir::Node* n) const noexcept {
    for (auto& in : n->inputs) t_deferred.push_back(std::move(in));
    n->inputs.clear();  // keeps the capacity for the next node
    n->data.reset();
    recycle(n);
    if (t_draining) return;
    t_draining = true;
    while (!t_deferred.empty()) {
      ir::NodePtr p = std::move(t_deferred.back());
      t_deferred.pop_back();
      p.reset();  // may push that node's inputs: handled by this loop, not deeper
    }
    t_draining = false;
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
    for (uint8_t i = 0; i < n->attr.n; ++i) n->attr.v[i] = 0;
    n->attr.n = 0;
    n->scalar[0] = n->scalar[1] = ir::RtScalar{};
    n->num_scalars = 0;
    n->file = "";
    n->line = 0;
    l.nodes[l.count++] = n;
  }
};

}  // namespace

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
