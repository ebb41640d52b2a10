// XXH3 compiled for AVX2 (see ir/hash.h). Everything xxhash defines here is
// static (XXH_INLINE_ALL): this file exports one function.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ir/hash.h"

namespace loom::ir::detail {

uint64_t xxh3_64_avx2(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

}  // namespace loom::ir::detail
