// DiskCache: compiled artifacts (LLVM objects, CUDA cubins) on disk, so a
// second process running the same program compiles nothing. Backend-neutral:
// it stores opaque bytes under a key; what the bytes mean, and which compiler
// and target they are valid for, is the caller's namespace string.
//
// A file is trusted only after its magic, format version, sizes, checksum and
// its full stored key all match: a truncated, corrupted or colliding file is
// a miss, is deleted and is rewritten by the next store, never loaded.
// Neither load() nor store() throws: a broken cache must not break a program.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace loom::runtime {

class DiskCache {
 public:
  // Borrowed views, valid for the duration of one load() or store() call.
  struct Key {
    // Backend, compiler version and target, e.g. "llvm16-x86_64-znver4+avx512f"
    // or "cuda-sm90-nvrtc13.0": objects for one target never load on another.
    std::string_view ns;
    std::string_view version;        // loom's version: a new loom recompiles
    std::span<const uint64_t> graph; // ir::Graph::canonical, the full words
  };

  // The process-wide cache, configured once from the environment (dir_from_env).
  static DiskCache& instance();

  // The cache directory the environment selects, empty if the cache is off:
  // LOOM_CACHE_DIR if set ("off", "0" or "" turn the cache off), else
  // $XDG_CACHE_HOME/loom (if absolute), else $HOME/.cache/loom. Takes the
  // values rather than reading getenv so tests need not touch the environment.
  static std::filesystem::path dir_from_env(const char* loom_cache_dir, const char* xdg_cache_home,
                                            const char* home);

  // An explicit directory (created on the first store); an empty path gives
  // a disabled cache that never touches the disk.
  explicit DiskCache(std::filesystem::path dir);

  bool enabled() const { return !dir_.empty(); }
  const std::filesystem::path& dir() const { return dir_; }
  // Where `key`'s file lives (whether or not it exists); empty if disabled.
  std::filesystem::path path_for(const Key& key) const;

  // The bytes stored under `key`, or nullopt on a miss (absent, unreadable,
  // or rejected as corrupt/stale; a rejected file is deleted).
  std::optional<std::vector<char>> load(const Key& key) const;
  // Writes atomically (temp file + rename): a concurrent reader sees the old
  // file, the new one or none, never a partial one. Errors are logged only.
  void store(const Key& key, std::span<const char> bytes) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace loom::runtime
