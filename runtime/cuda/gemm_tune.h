// Autotuning of GEMM kernels: the tile configuration of each product is
// chosen by timing the candidates (jit/cuda/gemm.h: gemm_candidates) once per
// problem (shape, operand layout, dtype, TF32 mode) and GPU model, then kept
// in memory and in the disk cache (namespace "cuda-gemm-tune-<arch>-<SMs>"),
// so a warm process neither compiles the tuning kernels nor times anything.
#pragma once
#include <string>
#include <vector>

#include "jit/cuda/gemm.h"

namespace loom::runtime::cuda {

// The configuration for `g` on `device`; tunes on the first request.
// LOOM_GEMM_TUNE=0 skips timing and takes jit::cuda::gemm_heuristic, as
// does a product of fewer than kTuneMinWork multiply-adds: timing its
// candidates costs seconds of NVRTC to save microseconds.
jit::cuda::GemmConfig choose_gemm(const jit::cuda::GemmProblem& g, int device);
// Whether configuration `c`, chosen for another problem, may compute `g`
// on `device`: it is one choose_gemm could have picked for g (its
// heuristic or one of its candidates, which hold to what each tile needs
// of the operands' layout and alignment).
bool gemm_config_fits(const jit::cuda::GemmConfig& c, const jit::cuda::GemmProblem& g, int device);
inline constexpr double kTuneMinWork = 0x1p24;
// The tuning modules choose_gemm would compile for `g` (one per candidate),
// or none (small, chosen before, on disk): a graph's are compiled side by
// side first (compile_cubins).
std::vector<std::string> pending_tuning_sources(const jit::cuda::GemmProblem& g, int device);

// Whether float32 products may run on TF32 tensor cores (loom::cuda::
// set_allow_tf32; off by default: exact float32). Changing it clears the
// compiled executables, so one compiled in the other mode is never replayed;
// the mode is also part of the cubin's disk-cache key.
bool allow_tf32();
void set_allow_tf32(bool on);

}  // namespace loom::runtime::cuda
