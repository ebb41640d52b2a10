// XXH3-64 of a graph's canonical words, with the host's vector unit: the
// xxhash library is built for baseline x86-64 (SSE2), and a graph's words
// are long enough (2 KiB for a control step, 32 KiB for O1's chain) that
// AVX2 halves the hash. The value is XXH3_64bits', bit for bit: XXH3 is
// defined independently of the instructions that compute it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace loom::ir {

uint64_t xxh3_64(const void* data, size_t bytes);

namespace detail {
// The AVX2 build of XXH3 (ir/hash_avx2.cpp, compiled with -mavx2 and
// nothing else in it, so no AVX2 copy of a shared inline function can leak
// into the rest of the library). Call only where the CPU has AVX2.
uint64_t xxh3_64_avx2(const void* data, size_t bytes);
}  // namespace detail

}  // namespace loom::ir
