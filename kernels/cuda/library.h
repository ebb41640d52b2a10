// The CUDA library kernels: the GPU counterpart of kernels/cpu for the ops
// the code generator does not emit (ir::LibraryCall, see ir/kernel.h):
// matmul, cat, index_select, gather, scatter_add, strided writes, device
// copies, rand/randn, linspace, argsort and scans. Same semantics as kernels/cpu (the
// reference backend's).
//
// Two halves: library_source() is the CUDA C of every kernel (built from
// library_kernels.cu, meta_layout.h and ir/philox.h, embedded at build
// time), and plan_library() turns one call into the launches that compute
// it. The executor compiles the source, uploads each launch's meta and
// launches them in order. Nothing here touches a GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/kernel.h"

namespace loom::kernels::cuda {

// CUDA C source of every library kernel: self-contained (no #include;
// NVRTC compiles it once per process and GPU architecture).
const std::string& library_source();
// The library source with only the kernel `name` (one plan_library
// launches: loom_copy_2d, loom_index_select, loom_scatter_add_f32, ...), a
// module of its own: a program compiles only the library kernels it
// launches. Throws loom::Error for any other name.
std::string library_function_source(const std::string& name);
// The attention kernels' source (attention.cu + attention_library.cu) with
// every bfloat16 kernel: the functions named loom_attention_* are not in
// library_source(), so a program without attention never compiles them; at
// run time each is a module of its own (attention_function_source).
const std::string& attention_source();
// The same kernels for float16 (loom_attention_*_f16_*): that source with
// LOOM_ATTENTION_F16 defined, a module of its own.
const std::string& attention_f16_source();
// The attention source with only the kernel `name` (loom_attention_{fwd,
// grad_q,grad_kv}_{bf16,f16}_d{32,64,128}_{none,causal,window,tensor}), a
// module of its own: a program compiles only the attention kernels it
// launches. Throws loom::Error for any other name.
std::string attention_function_source(const std::string& name);
// The convolution kernels' source (conv.cu: loom_conv2d_*), all twelve;
// conv_function_source(name) holds one, a module of its own likewise.
const std::string& conv_source();
std::string conv_function_source(const std::string& name);
// The module source of the kernel `name`, any plan_library launches: one
// of the three above by its prefix. Throws loom::Error for an unknown name.
std::string function_source(const std::string& name);

// One kernel launch implementing (part of) a LibraryCall.
struct Launch {
  std::string function;          // an extern "C" __global__ name in library_source()
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_bytes = 0;
  std::vector<int64_t> meta;     // the launch's constant parameters, uploaded once to device memory
};

// The launches, in stream order, that compute `call` (a call of program
// `p`). An empty output gets none, or only an index check (index_select,
// scatter_add), as the reference still checks the index. Handles the ops
// kernels/cpu's run_library handles; others throw loom::Error naming the op.
//
// Every kernel takes (void* const* bufs, const double* fs, const long long* is,
// long long* err, const long long* meta):
//   bufs[b]  device pointer of buffer id b (input offsets are in meta);
//   fs, is   every runtime scalar of the graph as double and int64;
//   err      the error block: on an index out of range a kernel sets
//            err[1] = call.node (if still -1) and err[0] = 2, skips the
//            element and goes on; the host finds the bad index itself;
//   meta     this launch's Launch::meta, laid out as meta_layout.h says.
// A kernel may read and write an output that the executor bound to the
// same memory as input 0 (ScatterStrided, ScatterAdd updating their base).
std::vector<Launch> plan_library(const ir::LibraryCall& call, const ir::KernelProgram& p, uint32_t call_index);

}  // namespace loom::kernels::cuda
