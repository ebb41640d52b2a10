// LOOM_EXPORT: marks the few definitions (explicit template instantiations)
// that must leave libloom although the library is built with hidden
// visibility. Public headers export their declarations with
// "#pragma GCC visibility push(default)".
#pragma once
#define LOOM_EXPORT __attribute__((visibility("default")))
