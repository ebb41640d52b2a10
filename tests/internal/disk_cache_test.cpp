// DiskCache: round trips, misses, and every way a file on disk can be wrong
// (truncated, flipped bytes, another key's file under this key's name) being
// rejected, deleted and rewritten, never loaded; plus concurrent use.
#include "runtime/disk_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/metrics.h"

namespace loom::runtime {
namespace {

namespace fs = std::filesystem;

// Owns what a DiskCache::Key views.
struct OwnedKey {
  std::string ns = "llvm16-x86_64-test+avx2";
  std::string version = "0.1.0";
  std::vector<uint64_t> graph = {1, 2, 3, 0xdeadbeefcafef00dull, 42};
  DiskCache::Key key() const { return {ns, version, graph}; }
};

std::vector<char> bytes_of(size_t n, unsigned seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 7919) >> 3);
  return v;
}

// Counter deltas since construction (the counters are process-wide).
struct Deltas {
  int64_t h0 = counters().disk_cache_hits, m0 = counters().disk_cache_misses, w0 = counters().disk_cache_writes,
          r0 = counters().disk_cache_rejected;
  int64_t hits() const { return counters().disk_cache_hits - h0; }
  int64_t misses() const { return counters().disk_cache_misses - m0; }
  int64_t writes() const { return counters().disk_cache_writes - w0; }
  int64_t rejected() const { return counters().disk_cache_rejected - r0; }
};

std::vector<char> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void write_file(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
void flip_byte(const fs::path& p, size_t offset) {
  std::vector<char> b = read_file(p);
  ASSERT_LT(offset, b.size());
  b[offset] ^= 0x5a;
  write_file(p, b);
}
size_t files_in(const fs::path& dir) {
  size_t n = 0;
  for (auto it = fs::directory_iterator(dir); it != fs::directory_iterator(); ++it) ++n;
  return n;
}

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("loom_disk_cache_test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(DiskCacheTest, RoundTrip) {
  DiskCache cache(dir_ / "a" / "b");  // created on the first store
  OwnedKey k;
  std::vector<char> payload = bytes_of(10000, 1);
  Deltas d;
  cache.store(k.key(), payload);
  EXPECT_EQ(d.writes(), 1);
  std::optional<std::vector<char>> got = cache.load(k.key());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, payload);
  EXPECT_EQ(d.hits(), 1);
  EXPECT_EQ(d.misses(), 0);
  EXPECT_EQ(d.rejected(), 0);
  EXPECT_TRUE(fs::exists(cache.path_for(k.key())));
  EXPECT_EQ(cache.path_for(k.key()).parent_path(), dir_ / "a" / "b");
  // Directories the cache creates are private: it stores code that is run.
  for (const fs::path& p : {dir_, dir_ / "a", dir_ / "a" / "b"}) {
    struct stat st;
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << p;
  }
  // An empty payload is a value too.
  OwnedKey empty;
  empty.graph = {};
  cache.store(empty.key(), {});
  got = cache.load(empty.key());
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->empty());
  // A second cache object on the same directory (another process) hits.
  EXPECT_EQ(DiskCache(dir_ / "a" / "b").load(k.key()), payload);
}

TEST_F(DiskCacheTest, MissOnAbsentKey) {
  DiskCache cache(dir_);  // the directory does not even exist yet
  Deltas d;
  EXPECT_FALSE(cache.load(OwnedKey{}.key()).has_value());
  EXPECT_EQ(d.misses(), 1);
  EXPECT_EQ(d.rejected(), 0);
  EXPECT_FALSE(fs::exists(dir_));  // a load creates nothing
}

TEST_F(DiskCacheTest, DifferentKeysMiss) {
  DiskCache cache(dir_);
  OwnedKey k;
  cache.store(k.key(), bytes_of(100, 2));
  OwnedKey other_graph = k, other_version = k, other_ns = k, longer_graph = k;
  other_graph.graph[2] = 4;
  other_version.version = "0.1.1";
  other_ns.ns = "cuda-sm90-nvrtc13.0";
  longer_graph.graph.push_back(0);
  Deltas d;
  for (const OwnedKey* o : {&other_graph, &other_version, &other_ns, &longer_graph}) {
    EXPECT_NE(cache.path_for(o->key()), cache.path_for(k.key()));
    EXPECT_FALSE(cache.load(o->key()).has_value());
  }
  EXPECT_EQ(d.misses(), 4);
  EXPECT_EQ(d.rejected(), 0);
  EXPECT_EQ(cache.load(k.key()), bytes_of(100, 2));
}

TEST_F(DiskCacheTest, TruncatedFileIsRejectedAndRewritten) {
  DiskCache cache(dir_);
  OwnedKey k;
  std::vector<char> payload = bytes_of(300, 3);
  cache.store(k.key(), payload);
  const fs::path p = cache.path_for(k.key());
  const size_t full = fs::file_size(p);
  const size_t header_and_key = full - payload.size();
  const size_t header = 40;  // disk_cache.cpp's kHeaderSize
  for (size_t len : {size_t{0}, size_t{1}, header - 1, header, header + 1, header_and_key - 1, header_and_key,
                     header_and_key + 1, full - 1}) {
    SCOPED_TRACE(len);
    cache.store(k.key(), payload);
    fs::resize_file(p, len);
    Deltas d;
    EXPECT_FALSE(cache.load(k.key()).has_value());
    EXPECT_EQ(d.misses(), 1);
    EXPECT_EQ(d.rejected(), 1);
    EXPECT_FALSE(fs::exists(p));  // deleted, so the next store starts clean
    cache.store(k.key(), payload);
    EXPECT_EQ(fs::file_size(p), full);
    EXPECT_EQ(cache.load(k.key()), payload);
    EXPECT_EQ(d.hits(), 1);
  }
  // A file grown past its stated sizes is as wrong as a truncated one.
  std::vector<char> longer = read_file(p);
  longer.push_back('x');
  write_file(p, longer);
  Deltas d;
  EXPECT_FALSE(cache.load(k.key()).has_value());
  EXPECT_EQ(d.rejected(), 1);
}

TEST_F(DiskCacheTest, FlippedPayloadByteIsRejected) {
  DiskCache cache(dir_);
  OwnedKey k;
  std::vector<char> payload = bytes_of(4096, 4);
  for (size_t from_end : {size_t{1}, size_t{2048}, size_t{4096}}) {
    SCOPED_TRACE(from_end);
    cache.store(k.key(), payload);
    const fs::path p = cache.path_for(k.key());
    flip_byte(p, fs::file_size(p) - from_end);
    Deltas d;
    EXPECT_FALSE(cache.load(k.key()).has_value());
    EXPECT_EQ(d.rejected(), 1);
    EXPECT_FALSE(fs::exists(p));
  }
}

TEST_F(DiskCacheTest, FlippedKeyByteIsRejected) {
  DiskCache cache(dir_);
  OwnedKey k;
  std::vector<char> payload = bytes_of(64, 5);
  // The key sits just before the payload: its last bytes are the last graph
  // word, earlier ones the version and namespace.
  for (size_t before_payload : {size_t{1}, size_t{8 * k.graph.size()}, size_t{8 * k.graph.size() + 10}}) {
    SCOPED_TRACE(before_payload);
    cache.store(k.key(), payload);
    const fs::path p = cache.path_for(k.key());
    flip_byte(p, fs::file_size(p) - payload.size() - before_payload);
    Deltas d;
    EXPECT_FALSE(cache.load(k.key()).has_value());
    EXPECT_EQ(d.rejected(), 1);
    EXPECT_FALSE(fs::exists(p));
  }
}

TEST_F(DiskCacheTest, EveryFlippedByteIsRejected) {
  DiskCache cache(dir_);
  OwnedKey k;
  std::vector<char> payload = bytes_of(32, 6);
  cache.store(k.key(), payload);
  const fs::path p = cache.path_for(k.key());
  const std::vector<char> good = read_file(p);
  for (size_t i = 0; i < good.size(); ++i) {
    SCOPED_TRACE(i);
    std::vector<char> bad = good;
    bad[i] ^= 0x01;
    write_file(p, bad);
    Deltas d;
    EXPECT_FALSE(cache.load(k.key()).has_value());
    EXPECT_EQ(d.rejected(), 1);
  }
  write_file(p, good);
  EXPECT_EQ(cache.load(k.key()), payload);
}

// A valid file of another key under this key's name (what a file-name hash
// collision would look like): its checksum is right, its stored key is not.
TEST_F(DiskCacheTest, OtherKeysFileUnderThisNameIsRejected) {
  DiskCache cache(dir_);
  OwnedKey a, b;
  b.graph.push_back(99);
  cache.store(b.key(), bytes_of(200, 7));
  ASSERT_TRUE(cache.load(b.key()).has_value());
  fs::create_directories(dir_);
  fs::rename(cache.path_for(b.key()), cache.path_for(a.key()));
  Deltas d;
  EXPECT_FALSE(cache.load(a.key()).has_value());
  EXPECT_EQ(d.rejected(), 1);
  EXPECT_EQ(d.misses(), 1);
  EXPECT_FALSE(fs::exists(cache.path_for(a.key())));
  // Same for a file of the same size (only a graph word differs).
  b.graph = a.graph;
  b.graph[1] = 3;
  cache.store(b.key(), bytes_of(200, 7));
  fs::rename(cache.path_for(b.key()), cache.path_for(a.key()));
  EXPECT_FALSE(cache.load(a.key()).has_value());
  EXPECT_EQ(d.rejected(), 2);
}

TEST_F(DiskCacheTest, DisabledCacheNeverTouchesDisk) {
  DiskCache cache{fs::path()};
  EXPECT_FALSE(cache.enabled());
  EXPECT_TRUE(cache.path_for(OwnedKey{}.key()).empty());
  Deltas d;
  cache.store(OwnedKey{}.key(), bytes_of(10, 8));
  EXPECT_FALSE(cache.load(OwnedKey{}.key()).has_value());
  EXPECT_EQ(d.writes(), 0);
  EXPECT_EQ(d.hits(), 0);
  EXPECT_EQ(d.misses(), 0);
  EXPECT_EQ(d.rejected(), 0);
}

// A directory that cannot be created (a regular file is in the way): store
// and load fail quietly, as misses, and never throw.
TEST_F(DiskCacheTest, UnusableDirectoryIsHarmless) {
  write_file(dir_, {'x'});
  DiskCache cache(dir_ / "sub");
  Deltas d;
  EXPECT_NO_THROW(cache.store(OwnedKey{}.key(), bytes_of(10, 12)));
  EXPECT_FALSE(cache.load(OwnedKey{}.key()).has_value());
  EXPECT_EQ(d.writes(), 0);
  EXPECT_EQ(d.misses(), 1);
  EXPECT_EQ(d.rejected(), 0);
}

TEST_F(DiskCacheTest, DirectoryFromEnvironment) {
  EXPECT_TRUE(DiskCache::dir_from_env("off", "/xdg", "/home/u").empty());
  EXPECT_TRUE(DiskCache::dir_from_env("OFF", "/xdg", "/home/u").empty());
  EXPECT_TRUE(DiskCache::dir_from_env("0", "/xdg", "/home/u").empty());
  EXPECT_TRUE(DiskCache::dir_from_env("", "/xdg", "/home/u").empty());
  EXPECT_EQ(DiskCache::dir_from_env("/tmp/c", "/xdg", "/home/u"), fs::path("/tmp/c"));
  EXPECT_EQ(DiskCache::dir_from_env(nullptr, "/xdg", "/home/u"), fs::path("/xdg/loom"));
  EXPECT_EQ(DiskCache::dir_from_env(nullptr, "", "/home/u"), fs::path("/home/u/.cache/loom"));
  EXPECT_EQ(DiskCache::dir_from_env(nullptr, "relative", "/home/u"), fs::path("/home/u/.cache/loom"));
  EXPECT_EQ(DiskCache::dir_from_env(nullptr, nullptr, "/home/u"), fs::path("/home/u/.cache/loom"));
  EXPECT_TRUE(DiskCache::dir_from_env(nullptr, nullptr, nullptr).empty());
}

// Two writers of one key with different bytes: every rename is of a complete
// file, so the survivor is exactly one of them and no temp file is left.
TEST_F(DiskCacheTest, ConcurrentStoresOfOneKey) {
  DiskCache cache(dir_);
  OwnedKey k;
  const std::vector<char> x = bytes_of(64 * 1024, 9), y = bytes_of(64 * 1024, 10);
  Deltas d;
  std::thread tx([&] {
    for (int i = 0; i < 100; ++i) cache.store(k.key(), x);
  });
  std::thread ty([&] {
    for (int i = 0; i < 100; ++i) cache.store(k.key(), y);
  });
  tx.join();
  ty.join();
  EXPECT_EQ(d.writes(), 200);
  std::optional<std::vector<char>> got = cache.load(k.key());
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(*got == x || *got == y);
  EXPECT_EQ(files_in(dir_), 1u);
}

// Eight readers while two writers replace the file: a reader sees a miss
// (before the first store) or exactly the stored bytes, never a torn file.
TEST_F(DiskCacheTest, LoadsWhileStoring) {
  DiskCache cache(dir_);
  OwnedKey k;
  const std::vector<char> payload = bytes_of(256 * 1024, 11);
  Deltas d;
  std::atomic<bool> done{false};
  std::atomic<int> bad{0}, hits{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) cache.store(k.key(), payload);
    });
  for (int r = 0; r < 8; ++r)
    threads.emplace_back([&] {
      do {
        std::optional<std::vector<char>> got = cache.load(k.key());
        if (got && *got != payload) ++bad;
        if (got) ++hits;
      } while (!done.load());
    });
  threads[0].join();
  threads[1].join();
  done = true;
  for (size_t i = 2; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(d.rejected(), 0);  // no reader ever saw a partial file
  EXPECT_EQ(d.hits(), hits.load());
  EXPECT_EQ(cache.load(k.key()), payload);
  EXPECT_EQ(files_in(dir_), 1u);
}

}  // namespace
}  // namespace loom::runtime
