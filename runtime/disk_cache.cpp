// DiskCache: one file per key, named by XXH3-128 of the key, holding
//
//   header (40 bytes, little-endian)     magic "LOOMBLOB", format version,
//                                        header size, key size, payload size,
//                                        checksum
//   key bytes                            the full encoded Key
//   payload                              the caller's bytes
//
// The file name only finds a candidate; load() trusts it after every header
// field, the file size, the stored key (compared byte for byte, so a name
// collision can never load another key's object) and the checksum match.
// Files are immutable once renamed into place, so a reader holding an open
// descriptor never sees a writer's bytes change under it.
#include "runtime/disk_cache.h"

#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/log.h"
#include "runtime/metrics.h"

namespace loom::runtime {

namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'B', 'L', 'O', 'B'};
// Bump when the layout changes. It also seeds the file-name hash, so builds
// with different formats sharing a directory use different names instead of
// rejecting and rewriting each other's files.
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 40;
// A cache file larger than this is not one we wrote: reject it rather than
// try to allocate its claimed size.
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;

void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void put_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// Length-prefixed fields, so ("ab", "c") and ("a", "bc") never encode alike.
std::vector<char> encode_key(const DiskCache::Key& k) {
  std::vector<char> out(8 + k.ns.size() + 8 + k.version.size() + 8 + 8 * k.graph.size());
  char* p = out.data();
  put_u64(p, k.ns.size()), p += 8;
  std::memcpy(p, k.ns.data(), k.ns.size()), p += k.ns.size();
  put_u64(p, k.version.size()), p += 8;
  std::memcpy(p, k.version.data(), k.version.size()), p += k.version.size();
  put_u64(p, k.graph.size()), p += 8;
  for (uint64_t w : k.graph) put_u64(p, w), p += 8;
  return out;
}

std::string file_name(const std::vector<char>& key_bytes) {
  XXH128_hash_t h = XXH3_128bits_withSeed(key_bytes.data(), key_bytes.size(), kFormatVersion);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string(buf) + ".bin";
}

// Covers key and payload: the key's hash seeds the payload's.
uint64_t checksum(const std::vector<char>& key_bytes, const char* payload, size_t n) {
  static const char kEmpty = 0;  // xxHash wants a valid pointer even for 0 bytes
  uint64_t seed = XXH3_64bits(key_bytes.data(), key_bytes.size());
  return XXH3_64bits_withSeed(n ? payload : &kEmpty, n, seed);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads up to n bytes, retrying short reads and EINTR. Returns the count
// read (less than n at end of file) or -1 on an I/O error.
ssize_t read_full(int fd, char* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::read(fd, p + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

bool write_full(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= static_cast<size_t>(r);
  }
  return true;
}

// Creates `dir` and missing parents with mode 0700: compiled code is loaded
// and run, so the default cache must not be writable (or readable) by others.
// Directories that already exist keep their permissions.
bool ensure_dir(const std::filesystem::path& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  std::filesystem::path prefix;
  for (const auto& part : dir) {
    prefix /= part;
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Why the open file `fd` (of `size` bytes) is not a valid entry for
// `key_bytes`, or nullptr with the payload in `out`.
const char* validate(int fd, uint64_t size, const std::vector<char>& key_bytes, std::vector<char>& out) {
  if (size > kMaxFileBytes) return "file too large";
  char h[kHeaderSize];
  if (read_full(fd, h, kHeaderSize) != static_cast<ssize_t>(kHeaderSize)) return "short header";
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) return "bad magic";
  if (get_u32(h + 8) != kFormatVersion) return "other format version";
  if (get_u32(h + 12) != kHeaderSize) return "bad header size";
  uint64_t key_size = get_u64(h + 16), payload_size = get_u64(h + 24), sum = get_u64(h + 32);
  if (key_size != key_bytes.size()) return "stored key differs (size)";
  if (payload_size > size || kHeaderSize + key_size + payload_size != size) return "size mismatch (truncated?)";
  std::vector<char> stored_key(key_size);
  if (read_full(fd, stored_key.data(), key_size) != static_cast<ssize_t>(key_size)) return "short key";
  if (stored_key != key_bytes) return "stored key differs";
  out.resize(payload_size);
  if (read_full(fd, out.data(), payload_size) != static_cast<ssize_t>(payload_size)) return "short payload";
  if (checksum(key_bytes, out.data(), out.size()) != sum) return "checksum mismatch";
  return nullptr;
}

// Deletes a rejected file, but only if the name still points at the file we
// read: a concurrent store may have just renamed a good one into its place.
void remove_rejected(const std::filesystem::path& p, const struct stat& read_st) {
  struct stat now;
  if (::stat(p.c_str(), &now) == 0 && now.st_dev == read_st.st_dev && now.st_ino == read_st.st_ino)
    ::unlink(p.c_str());
}

}  // namespace

std::filesystem::path DiskCache::dir_from_env(const char* loom_cache_dir, const char* xdg_cache_home,
                                              const char* home) {
  if (loom_cache_dir) {
    std::string v = loom_cache_dir;
    if (v.empty() || v == "0" || strcasecmp(v.c_str(), "off") == 0) return {};
    return v;
  }
  // The XDG spec says to ignore a relative XDG_CACHE_HOME.
  if (xdg_cache_home && *xdg_cache_home && std::filesystem::path(xdg_cache_home).is_absolute())
    return std::filesystem::path(xdg_cache_home) / "loom";
  if (home && *home) return std::filesystem::path(home) / ".cache" / "loom";
  return {};
}

DiskCache& DiskCache::instance() {
  static DiskCache cache = [] {
    DiskCache c(dir_from_env(std::getenv("LOOM_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")));
    if (log_enabled(LogTopic::Cache))
      log_line(LogTopic::Cache, "disk cache %s", c.enabled() ? c.dir().c_str() : "off");
    return c;
  }();
  return cache;
}

DiskCache::DiskCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

std::filesystem::path DiskCache::path_for(const Key& key) const {
  if (!enabled()) return {};
  return dir_ / file_name(encode_key(key));
}

std::optional<std::vector<char>> DiskCache::load(const Key& key) const {
  if (!enabled()) return std::nullopt;
  Counters& c = counters();
  try {
    std::vector<char> key_bytes = encode_key(key);
    std::filesystem::path p = dir_ / file_name(key_bytes);
    Fd f{::open(p.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0) {
      if (errno != ENOENT && log_enabled(LogTopic::Cache))
        log_line(LogTopic::Cache, "disk miss %s: open: %s", p.c_str(), std::strerror(errno));
      bump(c.disk_cache_misses);
      return std::nullopt;
    }
    struct stat st {};
    bool have_st = ::fstat(f.fd, &st) == 0;
    std::vector<char> payload;
    const char* why = have_st ? validate(f.fd, static_cast<uint64_t>(st.st_size), key_bytes, payload) : "fstat failed";
    if (why) {
      // Corrupt, truncated or another key's file: never load it, and delete
      // it so the next store writes a good one.
      if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "disk reject %s: %s", p.c_str(), why);
      if (have_st) remove_rejected(p, st);
      bump(c.disk_cache_rejected);
      bump(c.disk_cache_misses);
      return std::nullopt;
    }
    if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "disk hit  %s (%zu bytes)", p.c_str(), payload.size());
    bump(c.disk_cache_hits);
    return payload;
  } catch (const std::exception& e) {  // bad_alloc, filesystem_error: a miss, not a failure
    if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "disk miss: %s", e.what());
    bump(c.disk_cache_misses);
    return std::nullopt;
  } catch (...) {
    bump(c.disk_cache_misses);
    return std::nullopt;
  }
}

void DiskCache::store(const Key& key, std::span<const char> bytes) const {
  if (!enabled()) return;
  std::string tmp;  // set once the temp file exists, so a failure removes it
  try {
    std::vector<char> key_bytes = encode_key(key);
    std::string name = file_name(key_bytes);
    if (!ensure_dir(dir_)) {
      if (log_enabled(LogTopic::Cache))
        log_line(LogTopic::Cache, "disk store: cannot create %s: %s", dir_.c_str(), std::strerror(errno));
      return;
    }
    char h[kHeaderSize];
    std::memcpy(h, kMagic, sizeof kMagic);
    put_u32(h + 8, kFormatVersion);
    put_u32(h + 12, kHeaderSize);
    put_u64(h + 16, key_bytes.size());
    put_u64(h + 24, bytes.size());
    put_u64(h + 32, checksum(key_bytes, bytes.data(), bytes.size()));

    // A unique temp name in the same directory (rename is atomic only within
    // one file system): pid for other processes, a counter for other threads.
    // O_EXCL plus a retry covers a stale temp left by a crashed process whose
    // pid was reused.
    static std::atomic<uint64_t> counter{0};
    Fd f;
    std::string candidate;
    for (int attempt = 0; attempt < 8 && f.fd < 0; ++attempt) {
      candidate =
          (dir_ / ("." + name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++))).string();
      f.fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (f.fd < 0 && errno != EEXIST) break;
    }
    if (f.fd < 0) {
      if (log_enabled(LogTopic::Cache))
        log_line(LogTopic::Cache, "disk store: create %s: %s", candidate.c_str(), std::strerror(errno));
      return;
    }
    tmp = std::move(candidate);
    // No fsync: after a crash a file may be renamed but empty or partial;
    // the checksum rejects it on the next load, which costs one recompile.
    bool ok = write_full(f.fd, h, kHeaderSize) && write_full(f.fd, key_bytes.data(), key_bytes.size()) &&
              write_full(f.fd, bytes.data(), bytes.size());
    int fd = f.fd;
    f.fd = -1;
    ok = (::close(fd) == 0) && ok;  // close can report a deferred write error
    // Concurrent stores of one key each rename a complete file; the last wins.
    if (!ok || ::rename(tmp.c_str(), (dir_ / name).c_str()) != 0) {
      if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "disk store %s: %s", name.c_str(), std::strerror(errno));
      ::unlink(tmp.c_str());
      return;
    }
    tmp.clear();
    if (log_enabled(LogTopic::Cache))
      log_line(LogTopic::Cache, "disk store %s (%zu bytes)", (dir_ / name).c_str(), bytes.size());
    bump(counters().disk_cache_writes);
  } catch (const std::exception& e) {
    if (log_enabled(LogTopic::Cache)) log_line(LogTopic::Cache, "disk store failed: %s", e.what());
    if (!tmp.empty()) ::unlink(tmp.c_str());
  } catch (...) {
    if (!tmp.empty()) ::unlink(tmp.c_str());
  }
}

}  // namespace loom::runtime
