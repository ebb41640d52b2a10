// The few functions of loom's own that generated CPU kernels call (by
// name: the object on disk holds the name, the JITDylib of each loaded
// executable maps it to the address in this process, orc_jit.cpp).
#pragma once
#include <cstdint>

namespace loom::jit::llvm_cpu {

// loom_jit_random: n values of ir/philox.h at counters[i] with `seed`, into
// out (float or double by kind bit 1; Box-Muller normal by kind bit 0,
// else uniform in [0, 1)). Philox is 64-bit integer work and Box-Muller's
// log and cos are loom's own double-precision code: a lane at a time, the
// same bits as the reference backend and the GPU.
inline constexpr const char* kRandomCall = "loom_jit_random";
inline constexpr int32_t kRandomNormal = 1, kRandomDouble = 2;
extern "C" void loom_jit_random(uint64_t seed, const uint64_t* counters, int64_t n, int32_t kind, void* out);

}  // namespace loom::jit::llvm_cpu
