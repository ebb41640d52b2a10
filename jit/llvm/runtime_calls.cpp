#include "jit/llvm/runtime_calls.h"

#include "ir/philox.h"

namespace loom::jit::llvm_cpu {

extern "C" void loom_jit_random(uint64_t seed, const uint64_t* counters, int64_t n, int32_t kind, void* out) {
  namespace philox = ir::philox;
  for (int64_t i = 0; i < n; ++i) {
    const double v = kind & kRandomNormal ? philox::normal(seed, counters[i], 0) : philox::uniform(seed, counters[i], 0);
    if (kind & kRandomDouble) static_cast<double*>(out)[i] = v;
    else static_cast<float*>(out)[i] = kind & kRandomNormal ? static_cast<float>(v) : philox::uniform_f32(v);
  }
}

}  // namespace loom::jit::llvm_cpu
