// A caching allocator for host buffers, as PyTorch's CUDA allocator
// caches: blocks freed by one run are handed to the next instead of going
// back to the OS, so a replayed graph pays no page faults for its outputs
// or its scratch. Blocks of up to 4 KiB are kept on per-thread free lists,
// larger ones in one cache keyed by their size, bounded by
// LOOM_HOST_CACHE_BYTES (default 2 GiB; the blocks freed longest ago are
// given back first).
// Blocks of 2 MiB and more are 2 MiB aligned and asked for transparent
// huge pages (those of 32 MiB and more rounded to whole huge pages).
#pragma once
#include <cstddef>

namespace loom::runtime {

// 64-byte aligned, uninitialized; nullptr only for 0 bytes. Throws
// loom::Error when the system is out of memory (after dropping the cache).
void* host_allocate(size_t bytes);
void host_free(void* p, size_t bytes) noexcept;
// Bytes held in the cache now (for tests and metrics).
size_t host_cached_bytes();

}  // namespace loom::runtime
