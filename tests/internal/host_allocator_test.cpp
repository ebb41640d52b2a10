// The caching host allocator (runtime/host_allocator.h): freed blocks come
// back for the next request of their size instead of going to the OS (a
// replayed graph then takes no page faults), alignment, and the cache's
// byte count.
#include "runtime/host_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using loom::runtime::host_allocate;
using loom::runtime::host_cached_bytes;
using loom::runtime::host_free;

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// Sizes on both sides of every rounding step: the small lists (<= 4 KiB),
// 64-byte granules, 4 KiB ones from 64 KiB, 64 KiB ones from 1 MiB, whole
// 2 MiB pages from 32 MiB.
const std::vector<size_t> kSizes = {100,         4096,           4097,          40960,         65536 + 1,
                                    270 * 1024,  (1 << 20) + 3,  (2 << 20) - 64, (2 << 20) + 100, 3200000,
                                    (32 << 20) + 5};

TEST(HostAllocator, AFreedBlockServesTheNextRequestOfItsSize) {
  for (size_t bytes : kSizes) {
    void* p = host_allocate(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    host_free(p, bytes);
    void* q = host_allocate(bytes);
    EXPECT_EQ(q, p) << bytes << " bytes: a new block where the freed one should have been reused";
    host_free(q, bytes);
  }
}

TEST(HostAllocator, BlocksAreAlignedAndWholeWritable) {
  for (size_t bytes : kSizes) {
    auto* p = static_cast<unsigned char*>(host_allocate(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(aligned(p, 64)) << bytes;
    if (bytes >= (size_t{2} << 20)) EXPECT_TRUE(aligned(p, size_t{2} << 20)) << bytes << " bytes: not on a huge page";
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(p[bytes - 1], 0x5a);
    host_free(p, bytes);
  }
}

TEST(HostAllocator, TheCacheCountsWhatItHolds) {
  const size_t bytes = 270 * 1024;  // a packed GEMM operand's block
  void* p = host_allocate(bytes);
  const size_t before = host_cached_bytes();
  host_free(p, bytes);
  const size_t held = host_cached_bytes() - before;
  EXPECT_GE(held, bytes);
  EXPECT_LE(held, bytes + bytes / 16) << "rounded up by more than 1/16";
  void* q = host_allocate(bytes);
  EXPECT_EQ(host_cached_bytes(), before);
  host_free(q, bytes);
  EXPECT_EQ(host_allocate(0), nullptr);
}

}  // namespace
