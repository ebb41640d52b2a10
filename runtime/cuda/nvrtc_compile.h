// CUDA C -> cubin with NVRTC, for one GPU architecture, in-process.
#pragma once
#include <string>
#include <vector>

namespace loom::runtime::cuda {

// Compiles `source` for `arch` ("sm_90") with -lineinfo and no FMA contraction. Throws loom::Error
// naming `what` (the graph's kernels, or the library) with NVRTC's log; the
// caller has written the source to the dump folder for reading alongside.
// Counts one NVRTC compile in loom::metrics().
std::vector<char> compile_cubin(const std::string& source, const std::string& arch, const std::string& what);

}  // namespace loom::runtime::cuda
