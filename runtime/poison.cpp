#include "runtime/poison.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace loom::runtime {

namespace {
// Few entries (one per output of a failed graph), looked up only when a run
// meets a poisoned leaf. Weak: an entry goes with its node (a recycled node
// gets a new control block, so it never matches an old entry).
struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::weak_ptr<const ir::Node>, std::string>> entries;
};
Registry& registry() {
  static auto* r = new Registry;  // never destroyed: nodes may be released at exit
  return *r;
}
}  // namespace

void poison_leaf(const ir::NodePtr& leaf, const std::string& message) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (leaf->poisoned.exchange(true)) return;
  std::erase_if(r.entries, [](const auto& e) { return e.first.expired(); });
  r.entries.emplace_back(leaf, message);
}

std::string poison_message(const ir::Node& leaf) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (const auto& [node, message] : r.entries)
    if (std::shared_ptr<const ir::Node> n = node.lock(); n.get() == &leaf) return message;
  return "loom: this value was computed by a GPU graph that failed on bad data";
}

}  // namespace loom::runtime
