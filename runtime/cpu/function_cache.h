// FunctionCache: compiled kernel functions by their key
// (ir::SharedKernels::keys), shared by every graph of the process.
//
// A function that one graph compiled is not compiled again for another:
// the graphs of a loop cut in several places (the same layers, other
// buffers), the last short batch of an epoch beside the others, an
// evaluation graph beside the training step. Its object is kept in memory
// (up to kMemoryBytes; those stored longest ago are dropped first) and on
// disk (LOOM_CACHE_DIR, so a second process compiles nothing), and loaded
// into each executable that runs it (jit/llvm/orc_jit.h).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace loom::runtime::cpu {

class FunctionCache {
 public:
  using Object = std::shared_ptr<const std::vector<char>>;
  static constexpr int64_t kMemoryBytes = int64_t{128} << 20;

  // The object compiled for `key` on this host by this build of loom, from
  // memory or disk; null if it was never compiled (or the file was lost).
  Object find(const std::string& key);
  // Keeps a freshly compiled object (memory and disk).
  void store(const std::string& key, std::vector<char> object);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, Object> objects_;
  std::deque<std::string> order_;  // keys in the order they were kept, for dropping
  int64_t bytes_ = 0;
  void keep_locked(const std::string& key, Object object);
};

FunctionCache& function_cache();

}  // namespace loom::runtime::cpu
