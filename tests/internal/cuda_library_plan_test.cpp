// The CUDA library kernels without a GPU: library_source() compiles with
// NVRTC for sm_90 (skipped when libnvrtc cannot be loaded), every kernel
// plan_library names is in the compiled code, and plan_library's decisions
// (launch order, grid sizes, meta, the overlap check, errors) are right.
// Numeric results: cuda_library_emulated_test.cpp here, the GPU tests there.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <loom/error.h>

#include <initializer_list>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/library.h"
#include "kernels/cuda/meta_layout.h"

namespace {

using loom::ScalarType;
using loom::ir::Attrs;
using loom::ir::Dims;
using loom::ir::LibraryCall;
using loom::ir::Op;
namespace cuda = loom::kernels::cuda;
namespace ml = loom::kernels::cuda::meta_layout;

constexpr ScalarType kAll[] = {ScalarType::Bool, ScalarType::Int, ScalarType::Long, ScalarType::Float,
                               ScalarType::Double};

Dims dims(std::initializer_list<int64_t> v) { return Dims(v.begin(), v.size()); }
Attrs attrs(std::initializer_list<int64_t> v) { return Attrs(v.begin(), v.size()); }

// A program of `inputs` input buffers (ids 0..) and one output (the last id),
// and a call of `op` reading them all at offset 0.
struct Fixture {
  loom::ir::KernelProgram program;
  LibraryCall call;
  Fixture(Op op, ScalarType t, Dims out, std::vector<Dims> ins, Attrs attr = {}, uint32_t scalars = 0) {
    for (uint32_t i = 0; i < ins.size(); ++i) {
      const bool attention = op == Op::Attention || op == Op::AttentionGradQ || op == Op::AttentionGradKV;
      const ScalarType it = (op == Op::IndexSelect || op == Op::Gather || op == Op::ScatterAdd || op == Op::ScatterReduce) && i == 1
                                ? ScalarType::Long
                            : attention && attr.n > 1 && attr[1] > 0 && i + 1 == ins.size() ? ScalarType::Bool  // its mask
                                                                                             : t;
      program.buffers.push_back({loom::ir::BufferKind::Input, i, it, ins[i].numel()});
      call.inputs.push_back(i);
      call.input_offsets.push_back(0);
      call.input_shapes.push_back(ins[i]);
      call.input_dtypes.push_back(it);
    }
    program.buffers.push_back({loom::ir::BufferKind::Output, 0, t, out.numel()});
    call.op = op;
    call.node = 7;
    call.output = static_cast<uint32_t>(ins.size());
    call.dtype = t;
    call.shape = out;
    call.attr = attr;
    call.scalar_begin = 3;
    call.num_scalars = scalars;
  }
  std::vector<cuda::Launch> plan() const { return cuda::plan_library(call, program, 0); }
};

// One call of every op the planner handles, in every dtype where it matters.
std::vector<Fixture> one_of_each() {
  std::vector<Fixture> all;
  for (ScalarType t : kAll) {
    all.emplace_back(Op::MatMul, t, dims({2, 3, 5}), std::vector{dims({2, 3, 4}), dims({2, 4, 5})});
    all.emplace_back(Op::ScatterAdd, t, dims({4, 3}), std::vector{dims({4, 3}), dims({2, 3}), dims({2, 3})}, attrs({0}));
    all.emplace_back(Op::ScatterReduce, t, dims({4, 3}), std::vector{dims({4, 3}), dims({2, 3}), dims({2, 3})},
                     attrs({0, 2}));
    all.emplace_back(Op::Linspace, t, dims({9}), std::vector<Dims>{}, Attrs{}, 2);
    all.emplace_back(Op::RandUniform, t, dims({9}), std::vector<Dims>{}, Attrs{}, 2);
    all.emplace_back(Op::RandNormal, t, dims({9}), std::vector<Dims>{}, Attrs{}, 2);
    all.emplace_back(Op::ArgSort, t, dims({4, 3}), std::vector{dims({4, 3})}, attrs({1, 0}));
    all.emplace_back(Op::Scan, t, dims({4, 3}), std::vector{dims({4, 3})}, attrs({0, 0}));
  }
  // bfloat16's four typed kernels (its products are GEMM kernels).
  const ScalarType bf = ScalarType::BFloat16;
  all.emplace_back(Op::ArgSort, bf, dims({4, 3}), std::vector{dims({4, 3})}, attrs({0, 1}));
  all.emplace_back(Op::Scan, bf, dims({4, 3}), std::vector{dims({4, 3})}, attrs({1, 1}));
  all.emplace_back(Op::ScatterAdd, bf, dims({4, 3}), std::vector{dims({4, 3}), dims({2, 3}), dims({2, 3})}, attrs({0}));
  all.emplace_back(Op::ScatterReduce, bf, dims({4, 3}), std::vector{dims({4, 3}), dims({2, 3}), dims({2, 3})},
                   attrs({0, 1}));
  all.emplace_back(Op::Linspace, bf, dims({9}), std::vector<Dims>{}, Attrs{}, 2);
  const ScalarType f = ScalarType::Float;
  all.emplace_back(Op::ToDevice, f, dims({6}), std::vector{dims({6})});
  all.emplace_back(Op::Concat, f, dims({2, 5}), std::vector{dims({2, 2}), dims({2, 3})}, attrs({1}));
  all.emplace_back(Op::IndexSelect, f, dims({2, 3}), std::vector{dims({4, 3}), dims({2})}, attrs({0}));
  all.emplace_back(Op::Gather, f, dims({2, 3}), std::vector{dims({4, 3}), dims({2, 3})}, attrs({0}));
  all.emplace_back(Op::ScatterStrided, f, dims({4, 4}), std::vector{dims({4, 4}), dims({2, 2})}, attrs({4, 1, 5}));
  return all;
}

// ------------------------------------------------------------------ NVRTC

// The few NVRTC entry points used, declared here rather than from nvrtc.h:
// a program is an opaque pointer, a result an int (0 = success).
struct Nvrtc {
  using Program = struct OpaqueProgram*;
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*cubin_size)(Program, size_t*) = nullptr;
  int (*cubin)(Program, char*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  void* handle = nullptr;

  Nvrtc() {
    for (const char* name : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"})
      if ((handle = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!handle) return;
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name)); };
    sym(create, "nvrtcCreateProgram");
    sym(compile, "nvrtcCompileProgram");
    sym(log_size, "nvrtcGetProgramLogSize");
    sym(log, "nvrtcGetProgramLog");
    sym(cubin_size, "nvrtcGetCUBINSize");
    sym(cubin, "nvrtcGetCUBIN");
    sym(destroy, "nvrtcDestroyProgram");
  }
  bool usable() const { return create && compile && log_size && log && cubin_size && cubin && destroy; }
};

// `source` compiled by NVRTC for sm_90: its cubin, or empty with a test
// failure saying why (`what` names the source).
std::string compile_for_sm90(const Nvrtc& nvrtc, const std::string& source, const char* what) {
  Nvrtc::Program prog = nullptr;
  if (nvrtc.create(&prog, source.c_str(), what, 0, nullptr, nullptr) != 0) {
    ADD_FAILURE() << "nvrtcCreateProgram failed on " << what;
    return "";
  }
  const char* options[] = {"--gpu-architecture=sm_90", "-std=c++17"};
  const int compiled = nvrtc.compile(prog, 2, options);
  size_t log_size = 0;
  nvrtc.log_size(prog, &log_size);
  std::string log(log_size, '\0');
  nvrtc.log(prog, log.data());
  std::string cubin;
  if (compiled != 0) {
    ADD_FAILURE() << "NVRTC failed on " << what << ":\n" << log;
  } else {
    if (log.find_first_not_of(std::string(1, '\0') + " \n") != std::string::npos)
      std::cout << "NVRTC's log for " << what << ":\n" << log << "\n";  // warnings: worth reading, not failing on
    size_t size = 0;
    if (nvrtc.cubin_size(prog, &size) == 0) {
      cubin.assign(size, '\0');
      if (nvrtc.cubin(prog, cubin.data()) != 0) cubin.clear();
    }
    if (cubin.empty()) ADD_FAILURE() << "no cubin for " << what;
  }
  nvrtc.destroy(&prog);
  return cubin;
}

// Compiles each kernel of `names` as the runtime does, a module of its own
// (function_source), and checks that its cubin holds it and not `other`.
void expect_modules_of_their_own(const Nvrtc& nvrtc, std::initializer_list<const char*> names, const std::string& other) {
  for (const std::string name : names) {
    const std::string cubin = compile_for_sm90(nvrtc, cuda::function_source(name), name.c_str());
    ASSERT_FALSE(cubin.empty()) << name;
    EXPECT_NE(cubin.find(name + '\0'), std::string::npos) << name << " is not in its cubin";
    EXPECT_EQ(cubin.find(other + '\0'), std::string::npos) << name << "'s cubin holds " << other;
  }
}

TEST(CudaLibrarySource, CompilesWithNvrtcForSm90AndHasEveryPlannedKernel) {
  Nvrtc nvrtc;
  if (!nvrtc.usable())
    GTEST_SKIP() << "libnvrtc.so not found (searched the loader path and /usr/local/cuda/lib64): "
                    "the CUDA library kernels were not compiled";
  const std::string cubin = compile_for_sm90(nvrtc, cuda::library_source(), "library_source()");
  ASSERT_FALSE(cubin.empty());
  // Kernel names sit NUL-terminated in the cubin's symbol table.
  std::set<std::string> names;
  for (const Fixture& f : one_of_each())
    for (const cuda::Launch& l : f.plan()) names.insert(l.function);
  Fixture empty(Op::ScatterAdd, ScalarType::Float, dims({0}), std::vector{dims({0}), dims({2}), dims({2})}, attrs({0}));
  for (const cuda::Launch& l : empty.plan()) names.insert(l.function);
  // copy_2d, index_select, gather, scatter_strided, check_index + 8 typed kernels x 5 dtypes + 5 for bfloat16
  EXPECT_EQ(names.size(), 5u + 8u * 5u + 5u);
  for (const std::string& name : names)
    EXPECT_NE(cubin.find(std::string(name) + '\0'), std::string::npos) << name << " is not in the cubin";
}

// At run time each library kernel is a module of its own
// (library_function_source): every name the planner launches has one, a
// few compile alone and hold only their kernel, and another name is an
// error naming it.
TEST(CudaLibrarySource, EachPlannedKernelIsAModuleOfItsOwn) {
  std::set<std::string> names;
  for (const Fixture& f : one_of_each())
    for (const cuda::Launch& l : f.plan()) names.insert(l.function);
  for (const std::string& name : names) EXPECT_NO_THROW(cuda::library_function_source(name)) << name;
  EXPECT_THROW(cuda::library_function_source("loom_matmul_bf16"), loom::Error);  // products of 16 bits are GEMM kernels
  EXPECT_THROW(cuda::library_function_source("loom_index_select_f32"), loom::Error);
  Nvrtc nvrtc;
  if (!nvrtc.usable())
    GTEST_SKIP() << "libnvrtc.so not found (searched the loader path and /usr/local/cuda/lib64): "
                    "the CUDA library kernels were not compiled";
  expect_modules_of_their_own(nvrtc, {"loom_index_select", "loom_scatter_add_bf16", "loom_rand_normal_f32"},
                              "loom_copy_2d");
}

// The attention kernels of a dtype as one source (attention_source()):
// it compiles too, and holds every kernel the planner names for attention.
std::vector<Fixture> attention_calls(ScalarType bf) {
  std::vector<Fixture> all;
  for (int64_t d : {32, 64, 128})
    for (int64_t mask : {0, 1, 2}) {
      const Dims q = dims({2, 70, d}), k = dims({2, 90, d}), rows = dims({2, 70});
      all.emplace_back(Op::Attention, bf, dims({2 * 70 * (d + 1)}), std::vector{q, k, k}, attrs({mask, 0}), 2);
      all.emplace_back(Op::AttentionGradQ, bf, q, std::vector{q, k, k, q, rows, rows}, attrs({mask, 0}), 2);
      all.emplace_back(Op::AttentionGradKV, bf, dims({2, 90, 2 * d}), std::vector{q, k, k, q, rows, rows}, attrs({mask, 0}), 2);
    }
  for (int64_t d : {32, 64, 128}) {  // a mask tensor: one [70, 90] plane, and a padding mask per batch
    const Dims q = dims({2, 70, d}), k = dims({2, 90, d}), rows = dims({2, 70});
    all.emplace_back(Op::Attention, bf, dims({2 * 70 * (d + 1)}), std::vector{q, k, k, dims({1, 70, 90})}, attrs({0, 1}), 2);
    all.emplace_back(Op::AttentionGradQ, bf, q, std::vector{q, k, k, q, rows, rows, dims({2, 1, 90})}, attrs({0, 1}), 2);
    all.emplace_back(Op::AttentionGradKV, bf, dims({2, 90, 2 * d}), std::vector{q, k, k, q, rows, rows, dims({2, 1, 90})},
                     attrs({0, 1}), 2);
  }
  return all;
}

TEST(CudaAttentionSource, CompilesWithNvrtcForSm90AndHasEveryPlannedKernel) {
  Nvrtc nvrtc;
  if (!nvrtc.usable())
    GTEST_SKIP() << "libnvrtc.so not found (searched the loader path and /usr/local/cuda/lib64): "
                    "the CUDA attention kernels were not compiled";
  // bfloat16 in attention_source(), float16 in attention_f16_source().
  for (const bool f16 : {false, true}) {
    const std::string cubin = f16 ? compile_for_sm90(nvrtc, cuda::attention_f16_source(), "attention_f16_source()")
                                  : compile_for_sm90(nvrtc, cuda::attention_source(), "attention_source()");
    ASSERT_FALSE(cubin.empty());
    std::set<std::string> names;
    for (const Fixture& f : attention_calls(f16 ? ScalarType::Half : ScalarType::BFloat16))
      for (const cuda::Launch& l : f.plan()) names.insert(l.function);
    EXPECT_EQ(names.size(), 36u);  // fwd, grad_q, grad_kv x 3 head dims x 4 masks (none, causal, window, tensor)
    for (const std::string& name : names) {
      EXPECT_NE(cubin.find(name + '\0'), std::string::npos) << name << " is not in the cubin";
      EXPECT_NE(name.find(f16 ? "_f16_" : "_bf16_"), std::string::npos) << name;
    }
  }
}

// At run time each attention kernel is a module of its own
// (attention_function_source): it compiles alone and holds that kernel.
// A few of the 72 (the whole sources above hold them all); a name that is
// not a kernel's is an error naming it.
TEST(CudaAttentionSource, EachKernelCompilesAsAModuleOfItsOwn) {
  EXPECT_THROW(cuda::attention_function_source("loom_attention_fwd_bf16_d48_causal"), loom::Error);
  EXPECT_THROW(cuda::attention_function_source("loom_attention_fwd_bf16_d64_causal_extra"), loom::Error);
  Nvrtc nvrtc;
  if (!nvrtc.usable())
    GTEST_SKIP() << "libnvrtc.so not found (searched the loader path and /usr/local/cuda/lib64): "
                    "the CUDA attention kernels were not compiled";
  expect_modules_of_their_own(nvrtc,
                              {"loom_attention_fwd_bf16_d64_causal", "loom_attention_grad_q_bf16_d64_causal",
                               "loom_attention_grad_kv_bf16_d64_causal", "loom_attention_fwd_f16_d128_tensor"},
                              "loom_attention_fwd_bf16_d32_none");
}

// The convolution kernels are a module of their own (conv_source()): every
// op in every floating dtype, 12 kernels.
std::vector<Fixture> conv_calls() {
  std::vector<Fixture> all;
  // x [2, 6, 9, 7], w [4, 3, 3, 3], groups 2, stride 2, padding 1: out [2, 4, 5, 4].
  const Dims x = dims({2, 6, 9, 7}), w = dims({4, 3, 3, 3}), out = dims({2, 4, 5, 4});
  const Attrs a = attrs({2, 2, 1, 1, 1, 1, 2, 1}), split = attrs({2, 2, 1, 1, 1, 1, 2, 2});
  for (ScalarType t : {ScalarType::Float, ScalarType::Double, ScalarType::BFloat16, ScalarType::Half}) {
    all.emplace_back(Op::Conv2d, t, out, std::vector{x, w}, a);
    all.emplace_back(Op::Conv2dGradInput, t, x, std::vector{out, w}, a);
    all.emplace_back(Op::Conv2dGradWeight, t, dims({2, 4, 3, 3, 3}), std::vector{x, out}, split);
  }
  return all;
}

TEST(CudaConvSource, CompilesWithNvrtcForSm90AndHasEveryPlannedKernel) {
  Nvrtc nvrtc;
  if (!nvrtc.usable())
    GTEST_SKIP() << "libnvrtc.so not found (searched the loader path and /usr/local/cuda/lib64): "
                    "the CUDA convolution kernels were not compiled";
  const std::string cubin = compile_for_sm90(nvrtc, cuda::conv_source(), "conv_source()");
  ASSERT_FALSE(cubin.empty());
  std::set<std::string> names;
  for (const Fixture& f : conv_calls())
    for (const cuda::Launch& l : f.plan()) names.insert(l.function);
  EXPECT_EQ(names.size(), 12u);  // fwd, grad_input, grad_weight x 4 dtypes
  for (const std::string& name : names)
    EXPECT_NE(cubin.find(std::string(name) + '\0'), std::string::npos) << name << " is not in the cubin";
}

// At run time each convolution kernel is a module of its own
// (conv_function_source, by way of function_source like every library
// kernel): every planned name has one, two compile alone and hold only
// their kernel.
TEST(CudaConvSource, EachKernelIsAModuleOfItsOwn) {
  std::set<std::string> names;
  for (const Fixture& f : conv_calls())
    for (const cuda::Launch& l : f.plan()) names.insert(l.function);
  EXPECT_EQ(names.size(), 12u);
  for (const std::string& name : names) EXPECT_NO_THROW(cuda::function_source(name)) << name;
  EXPECT_THROW(cuda::function_source("loom_conv2d_fwd_i32"), loom::Error);
  EXPECT_THROW(cuda::function_source("loom_no_such_kernel"), loom::Error);
  Nvrtc nvrtc;
  if (!nvrtc.usable())
    GTEST_SKIP() << "libnvrtc.so not found (searched the loader path and /usr/local/cuda/lib64): "
                    "the CUDA convolution kernels were not compiled";
  expect_modules_of_their_own(nvrtc, {"loom_conv2d_fwd_bf16", "loom_conv2d_grad_weight_f32"}, "loom_conv2d_grad_input_f16");
}

// The weight gradient's split count: one wave of blocks rather than one
// block past it (ResNet-18's 64-channel 3x3 layer on 132 SMs: 5 tiles a
// split, 264 slots; 53 splits would leave one block for a second wave),
// more than one split where the tiles alone overfill the GPU (its 4x4
// 512-channel layer), never more splits than samples.
TEST(CudaLibraryPlan, ConvWeightSplitsFillWholeWaves) {
  namespace mc = ml::conv;
  const long long l1 = mc::weight_splits(128, 128, 5, 32 * 32, 4.0 * 64 * 64 * 9, 264);
  EXPECT_LE(5 * l1, 264);
  EXPECT_GE(l1, 40);
  const long long l4 = mc::weight_splits(128, 128, 288, 4 * 4, 4.0 * 512 * 512 * 9, 264);
  EXPECT_GT(l4, 1);
  EXPECT_LE(l4, 8);
  EXPECT_EQ(mc::weight_splits(1, 1, 5, 1024, 1e6, 264), 1);
  EXPECT_LE(mc::weight_splits(3, 3, 1, 1024, 1e3, 264), 3);
}

// The GEMM each kernel computes, in tiles: rows x columns, groups x splits along z.
TEST(CudaLibraryPlan, ConvTilesAndErrors) {
  namespace mc = ml::conv;
  const Dims x = dims({2, 6, 9, 7}), w = dims({4, 3, 3, 3}), out = dims({2, 4, 5, 4});
  Fixture fwd(Op::Conv2d, ScalarType::BFloat16, out, std::vector{x, w}, attrs({2, 2, 1, 1, 1, 1, 2, 1}));
  auto l = fwd.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_conv2d_fwd_bf16");
  EXPECT_EQ(l[0].grid[0], 1u);  // 2 * 5 * 4 = 40 rows
  EXPECT_EQ(l[0].grid[1], 1u);  // 2 output channels a group
  EXPECT_EQ(l[0].grid[2], 2u);  // 2 groups
  EXPECT_EQ(l[0].block[0], static_cast<uint32_t>(mc::kThreads));
  EXPECT_EQ(l[0].meta[mc::kGroups], 2);
  EXPECT_EQ(l[0].meta[mc::kOH], 5);
  EXPECT_EQ(l[0].meta[mc::kA], 0);
  EXPECT_EQ(l[0].meta[mc::kB], 1);
  EXPECT_EQ(l[0].meta[mc::kOut], 2);
  const Dims big_x = dims({128, 64, 32, 32}), big_w = dims({64, 64, 3, 3}), big_out = dims({128, 64, 32, 32});
  Fixture gi(Op::Conv2dGradInput, ScalarType::Float, big_x, std::vector{big_out, big_w}, attrs({1, 1, 1, 1, 1, 1, 1, 1}));
  l = gi.plan();
  EXPECT_EQ(l[0].function, "loom_conv2d_grad_input_f32");
  EXPECT_EQ(l[0].grid[0], 128u * 32 * 32 / mc::kTileM);
  Fixture gw(Op::Conv2dGradWeight, ScalarType::Half, dims({16, 64, 64, 3, 3}), std::vector{big_x, big_out},
             attrs({1, 1, 1, 1, 1, 1, 1, 16}));
  l = gw.plan();
  EXPECT_EQ(l[0].function, "loom_conv2d_grad_weight_f16");
  EXPECT_EQ(l[0].grid[0], 5u);   // 64 * 9 = 576 rows (c, r, s)
  EXPECT_EQ(l[0].grid[1], 1u);   // 64 output channels
  EXPECT_EQ(l[0].grid[2], 16u);  // 16 splits of 8 samples
  // Shapes that do not follow from the attributes, a split count above N,
  // and integer inputs are planning errors naming the node.
  Fixture bad_plane(Op::Conv2d, ScalarType::Float, dims({2, 4, 6, 4}), std::vector{x, w}, attrs({2, 2, 1, 1, 1, 1, 2, 1}));
  EXPECT_THROW(bad_plane.plan(), loom::Error);
  Fixture bad_split(Op::Conv2dGradWeight, ScalarType::Float, dims({3, 4, 3, 3, 3}), std::vector{x, out},
                    attrs({2, 2, 1, 1, 1, 1, 2, 3}));
  EXPECT_THROW(bad_split.plan(), loom::Error);
  Fixture ints(Op::Conv2d, ScalarType::Int, out, std::vector{x, w}, attrs({2, 2, 1, 1, 1, 1, 2, 1}));
  EXPECT_THROW(ints.plan(), loom::Error);
  // A sample of 2^31 elements is past the kernels' 32-bit offsets.
  Fixture huge(Op::Conv2d, ScalarType::Float, dims({1, 1, 65536, 32768}),
               std::vector{dims({1, 1, 65536, 32768}), dims({1, 1, 1, 1})}, attrs({1, 1, 0, 0, 1, 1, 1, 1}));
  EXPECT_THROW(huge.plan(), loom::Error);
}

TEST(CudaLibraryPlan, AttentionBlocksAndErrors) {
  namespace ma = ml::attention;
  const ScalarType bf = ScalarType::BFloat16;
  Fixture fwd(Op::Attention, bf, dims({2 * 300 * 65}), std::vector{dims({2, 300, 64}), dims({2, 200, 64}), dims({2, 200, 64})},
              attrs({1, 0}), 2);
  auto l = fwd.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_attention_fwd_bf16_d64_causal");
  EXPECT_EQ(l[0].grid[0], 2u);  // one block row per head
  EXPECT_EQ(l[0].grid[1], 3u);  // 300 query rows in blocks of 128
  EXPECT_EQ(l[0].block[0], 256u);
  EXPECT_EQ(l[0].shared_bytes, 55296u);
  EXPECT_EQ(l[0].meta[ma::kL], 300);
  EXPECT_EQ(l[0].meta[ma::kS], 200);
  EXPECT_EQ(l[0].meta[ma::kN], 2);
  EXPECT_EQ(l[0].meta[ma::kScalarBegin], 3);
  const Dims q = dims({2, 300, 64}), k = dims({2, 200, 64}), rows = dims({2, 300});
  Fixture kv(Op::AttentionGradKV, bf, dims({2, 200, 128}), std::vector{q, k, k, q, rows, rows}, attrs({2, 0}), 2);
  l = kv.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_attention_grad_kv_bf16_d64_window");
  EXPECT_EQ(l[0].grid[1], 4u);  // 200 keys in blocks of 64
  EXPECT_EQ(l[0].shared_bytes, 56320u);
  EXPECT_EQ(l[0].meta[ma::kDelta], 5);
  Fixture half(Op::Attention, ScalarType::Half, dims({2 * 300 * 65}),
               std::vector{dims({2, 300, 64}), dims({2, 200, 64}), dims({2, 200, 64})}, attrs({1, 0}), 2);
  EXPECT_EQ(half.plan()[0].function, "loom_attention_fwd_f16_d64_causal");
  // Only bfloat16 and float16 with equal head dims of 32, 64 or 128 have kernels.
  Fixture f32(Op::Attention, ScalarType::Float, dims({2 * 300 * 65}), std::vector{q, k, k}, attrs({1, 0}), 2);
  EXPECT_THROW(f32.plan(), loom::Error);
  Fixture d48(Op::Attention, bf, dims({2 * 300 * 49}), std::vector{dims({2, 300, 48}), dims({2, 200, 48}), dims({2, 200, 48})},
              attrs({1, 0}), 2);
  EXPECT_THROW(d48.plan(), loom::Error);
  Fixture missing(Op::AttentionGradQ, bf, q, std::vector{q, k, k}, attrs({1, 0}), 2);
  EXPECT_THROW(missing.plan(), loom::Error);
  Fixture no_window(Op::Attention, bf, dims({2 * 300 * 65}), std::vector{q, k, k}, attrs({2, 0}), 1);
  EXPECT_THROW(no_window.plan(), loom::Error);
  Fixture no_divisor(Op::Attention, bf, dims({2 * 300 * 65}), std::vector{q, k, k}, attrs({1}), 2);
  EXPECT_THROW(no_divisor.plan(), loom::Error);
  // A mask tensor: [P, R, S] bool, its fields in the meta; not with a mask as code, not of the wrong width.
  Fixture planes(Op::AttentionGradQ, bf, q, std::vector{q, k, k, q, rows, rows, dims({2, 1, 200})}, attrs({0, 3}), 2);
  l = planes.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_attention_grad_q_bf16_d64_tensor");
  EXPECT_EQ(l[0].meta[ma::kMask], 6);
  EXPECT_EQ(l[0].meta[ma::kMaskPlanes], 2);
  EXPECT_EQ(l[0].meta[ma::kMaskRows], 1);
  EXPECT_EQ(l[0].meta[ma::kMaskDivisor], 3);
  Fixture both(Op::Attention, bf, dims({2 * 300 * 65}), std::vector{q, k, k, dims({1, 300, 200})}, attrs({1, 1}), 2);
  EXPECT_THROW(both.plan(), loom::Error);
  Fixture narrow(Op::Attention, bf, dims({2 * 300 * 65}), std::vector{q, k, k, dims({1, 300, 199})}, attrs({0, 1}), 2);
  EXPECT_THROW(narrow.plan(), loom::Error);
  Fixture unmasked(Op::Attention, bf, dims({2 * 300 * 65}), std::vector{q, k, k}, attrs({0, 1}), 2);
  EXPECT_THROW(unmasked.plan(), loom::Error);
}

TEST(CudaLibrarySource, EmbedsPhiloxAndTheMetaLayout) {
  const std::string& s = cuda::library_source();
  EXPECT_NE(s.find("#line 1 \"ir/philox.h\""), std::string::npos);
  EXPECT_NE(s.find("philox4x32_10"), std::string::npos);
  const size_t own = s.find("#line 1 \"kernels/cuda/meta_layout.h\"");
  ASSERT_NE(own, std::string::npos);
  EXPECT_LT(s.find("#line 1 \"ir/philox.h\""), own) << "the kernels use Philox: it must come first";
  // philox.h includes std headers only outside NVRTC; loom's own parts none.
  EXPECT_EQ(s.find("\n#include", own), std::string::npos) << "NVRTC has no headers to include";
}

// ------------------------------------------------------------------- plans

TEST(CudaLibraryPlan, OneThreadPerElementWithBoundedGrid) {
  Fixture small(Op::ToDevice, ScalarType::Float, dims({1000}), std::vector{dims({1000})});
  auto l = small.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_copy_2d");
  EXPECT_EQ(l[0].grid[0], 4u);  // ceil(1000 / 256)
  EXPECT_EQ(l[0].block[0], 256u);
  EXPECT_EQ(l[0].grid[1] * l[0].grid[2] * l[0].block[1] * l[0].block[2], 1u);
  EXPECT_EQ(l[0].shared_bytes, 0u);
  // Past 2^31 elements the grid stays bounded and the kernel loops.
  Fixture big(Op::RandUniform, ScalarType::Float, dims({1 << 20, 1 << 13}), std::vector<Dims>{}, Attrs{}, 2);
  l = big.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].grid[0], 8192u);
  EXPECT_EQ(l[0].meta[ml::leaf::kNumel], int64_t(1) << 33);
}

// One block per row; a row in shared memory gets about one thread per
// comparator, a longer one the largest block; the kernel is named by x's dtype.
TEST(CudaLibraryPlan, ArgSortIsOneBlockPerRow) {
  using namespace ml::argsort;
  Fixture rows(Op::ArgSort, ScalarType::Int, dims({5, 100, 3}), std::vector{dims({5, 100, 3})}, attrs({1, 1}));
  auto l = rows.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_argsort_i32");
  EXPECT_EQ(l[0].grid[0], 15u);
  EXPECT_EQ(l[0].block[0], 64u);  // 128 padded / 2
  EXPECT_EQ(l[0].meta[kLen], 100);
  EXPECT_EQ(l[0].meta[kInner], 3);
  EXPECT_EQ(l[0].meta[kRows], 15);
  EXPECT_EQ(l[0].meta[kDescending], 1);
  Fixture one(Op::ArgSort, ScalarType::BFloat16, dims({7, 1}), std::vector{dims({7, 1})}, attrs({1, 0}));
  l = one.plan();
  EXPECT_EQ(l[0].function, "loom_argsort_bf16");
  EXPECT_EQ(l[0].block[0], 32u);
  Fixture lng(Op::ArgSort, ScalarType::Double, dims({1 << 20}), std::vector{dims({1 << 20})}, attrs({0, 0}));
  l = lng.plan();
  EXPECT_EQ(l[0].grid[0], 1u);
  EXPECT_EQ(l[0].block[0], 1024u);
  Fixture empty(Op::ArgSort, ScalarType::Float, dims({3, 0}), std::vector{dims({3, 0})}, attrs({1, 0}));
  EXPECT_TRUE(empty.plan().empty());
}

// One thread per row, neighbouring threads on neighbouring inner positions.
TEST(CudaLibraryPlan, ScanIsOneThreadPerRow) {
  using namespace ml::scan;
  Fixture f(Op::Scan, ScalarType::Long, dims({5, 100, 3}), std::vector{dims({5, 100, 3})}, attrs({1, kArgMin}));
  f.call.input_dtypes[0] = ScalarType::BFloat16;
  auto l = f.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_scan_bf16");
  EXPECT_EQ(l[0].grid[0], 1u);
  EXPECT_EQ(l[0].meta[kLen], 100);
  EXPECT_EQ(l[0].meta[kInner], 3);
  EXPECT_EQ(l[0].meta[kRows], 15);
  EXPECT_EQ(l[0].meta[kKind], kArgMin);
  Fixture bad(Op::Scan, ScalarType::Float, dims({4}), std::vector{dims({4})}, attrs({0, 9}));
  EXPECT_THROW(bad.plan(), loom::Error);
}

TEST(CudaLibraryPlan, CopyMetaCarriesBuffersOffsetsAndElementSize) {
  Fixture f(Op::ToDevice, ScalarType::Double, dims({10}), std::vector{dims({10})});
  f.call.input_offsets[0] = 6;
  const auto l = f.plan();
  ASSERT_EQ(l.size(), 1u);
  const std::vector<int64_t> want{/*dst*/ 1, 0, 10, /*src*/ 0, 6, 10, /*rows*/ 1, /*cols*/ 10, /*element size*/ 8};
  EXPECT_EQ(l[0].meta, want);
}

TEST(CudaLibraryPlan, ConcatCopiesEachNonEmptyInputIntoItsColumns) {
  // [2,3] ++ [2,0] ++ [2,4] along dim 1 -> [2,7]; the input at offset 5.
  Fixture f(Op::Concat, ScalarType::Int, dims({2, 7}), std::vector{dims({2, 3}), dims({2, 0}), dims({2, 4})},
            attrs({1}));
  f.call.input_offsets[2] = 5;
  const auto l = f.plan();
  ASSERT_EQ(l.size(), 2u);
  using namespace ml::copy2d;
  EXPECT_EQ(l[0].meta[kSrc], 0);
  EXPECT_EQ(l[0].meta[kDstOffset], 0);
  EXPECT_EQ(l[0].meta[kCols], 3);
  EXPECT_EQ(l[1].meta[kSrc], 2);
  EXPECT_EQ(l[1].meta[kSrcOffset], 5);
  EXPECT_EQ(l[1].meta[kDstOffset], 3);
  EXPECT_EQ(l[1].meta[kDstRowStride], 7);
  EXPECT_EQ(l[1].meta[kSrcRowStride], 4);
  EXPECT_EQ(l[1].meta[kRows], 2);
  EXPECT_EQ(l[1].meta[kElementSize], 4);
}

TEST(CudaLibraryPlan, MatMulTilesTheOutputAndBoundsGridYZ) {
  Fixture f(Op::MatMul, ScalarType::Float, dims({3, 40, 70}), std::vector{dims({3, 40, 9}), dims({3, 9, 70})});
  auto l = f.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_matmul_f32");
  EXPECT_EQ(l[0].grid[0], 5u);  // ceil(70 / 16) column tiles
  EXPECT_EQ(l[0].grid[1], 3u);  // ceil(40 / 16) row tiles
  EXPECT_EQ(l[0].grid[2], 3u);  // batch
  EXPECT_EQ(l[0].block[0], 16u);
  EXPECT_EQ(l[0].block[1], 16u);
  using namespace ml::matmul;
  EXPECT_EQ(l[0].meta[kBatch], 3);
  EXPECT_EQ(l[0].meta[kM], 40);
  EXPECT_EQ(l[0].meta[kN], 70);
  EXPECT_EQ(l[0].meta[kK], 9);
  EXPECT_EQ(l[0].meta[kOut], 2);
  Fixture tall(Op::MatMul, ScalarType::Long, dims({100000, 2000000, 1}),
               std::vector{dims({100000, 2000000, 1}), dims({100000, 1, 1})});
  l = tall.plan();
  EXPECT_EQ(l[0].function, "loom_matmul_i64");
  EXPECT_EQ(l[0].grid[1], 65535u);
  EXPECT_EQ(l[0].grid[2], 65535u);
  Fixture plain(Op::MatMul, ScalarType::Float, dims({2, 2}), std::vector{dims({2, 2}), dims({2, 2})});
  EXPECT_EQ(plain.plan()[0].meta[kBatch], 1);  // a 2-D product is a batch of one
  Fixture bad(Op::MatMul, ScalarType::Float, dims({1, 2, 2}), std::vector{dims({1, 2, 3}), dims({1, 2, 2})});
  EXPECT_THROW(bad.plan(), loom::Error);
}

TEST(CudaLibraryPlan, ScatterStridedRunsOneThreadOnlyWhenTheViewOverlapsItself) {
  struct Case {
    Dims sizes;
    Attrs strides_and_offset;
    bool overlaps;
  };
  const Case cases[] = {
      {dims({4, 4}), attrs({8, 1, 0}), false},    // rows of a wider matrix
      {dims({4, 4}), attrs({1, 8, 2}), false},    // a transposed window
      {dims({4, 4}), attrs({2, 1, 0}), true},     // rows of 4 every 2: they overlap
      {dims({4, 4}), attrs({0, 1, 0}), true},     // expanded: every row on the same place
      {dims({4, 1, 4}), attrs({4, 0, 1, 0}), false},  // a size-1 dim's stride does not matter
      {dims({5}), attrs({-1, 4}), false},         // reversed
      {dims({}), attrs({3}), false},              // one element
  };
  for (const Case& c : cases) {
    Fixture f(Op::ScatterStrided, ScalarType::Float, dims({64}), std::vector{dims({64}), c.sizes}, c.strides_and_offset);
    const auto l = f.plan();
    ASSERT_EQ(l.size(), 2u);
    EXPECT_EQ(l[0].function, "loom_copy_2d");  // out = base first
    EXPECT_EQ(l[0].meta[ml::copy2d::kCols], 64);
    EXPECT_EQ(l[1].function, "loom_scatter_strided");
    const bool one_thread = l[1].grid[0] * l[1].block[0] == 1;
    EXPECT_EQ(one_thread, c.overlaps) << "case with offset " << c.strides_and_offset[c.sizes.n];
    using namespace ml::scatter_strided;
    EXPECT_EQ(l[1].meta[kRank], c.sizes.n);
    EXPECT_EQ(l[1].meta[kViewOffset], c.strides_and_offset[c.sizes.n]);
    for (int d = 0; d < c.sizes.n; ++d) {
      EXPECT_EQ(l[1].meta[kSizes + d], c.sizes[d]);
      EXPECT_EQ(l[1].meta[kStrides + d], c.strides_and_offset[d]);
    }
  }
}

TEST(CudaLibraryPlan, ScatterAddCopiesThenScattersWithStridesOfEachTensor) {
  Fixture f(Op::ScatterAdd, ScalarType::Long, dims({5, 6}), std::vector{dims({5, 6}), dims({2, 3}), dims({4, 4})},
            attrs({1}));
  const auto l = f.plan();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].function, "loom_copy_2d");
  EXPECT_EQ(l[1].function, "loom_scatter_add_i64");
  using namespace ml::gather_scatter;
  EXPECT_EQ(l[1].meta[kRank], 2);
  EXPECT_EQ(l[1].meta[kDim], 1);
  EXPECT_EQ(l[1].meta[kDimSize], 6);
  EXPECT_EQ(l[1].meta[kNumel], 6);
  EXPECT_EQ(l[1].meta[kNode], 7);
  EXPECT_EQ(l[1].meta[kIndexShape + 0], 2);
  EXPECT_EQ(l[1].meta[kIndexShape + 1], 3);
  EXPECT_EQ(l[1].meta[kXStrides + 0], 6);  // x is [5,6]
  EXPECT_EQ(l[1].meta[kSrcStrides + 0], 4);  // src is [4,4], larger than the index
  EXPECT_EQ(l[1].meta[kElementSize], 8);
  // An empty index leaves only the copy.
  Fixture empty(Op::ScatterAdd, ScalarType::Long, dims({5, 6}), std::vector{dims({5, 6}), dims({0, 3}), dims({0, 3})},
                attrs({0}));
  EXPECT_EQ(empty.plan().size(), 1u);
}

// One thread per fiber along dim: 2 * 3 of a [2, 4, 3] index along dim 1.
TEST(CudaLibraryPlan, ScatterReduceCopiesThenWalksEachFiber) {
  Fixture f(Op::ScatterReduce, ScalarType::Float, dims({2, 5, 3}),
            std::vector{dims({2, 5, 3}), dims({2, 4, 3}), dims({2, 4, 3})}, attrs({1, 3}));
  const auto l = f.plan();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].function, "loom_copy_2d");
  EXPECT_EQ(l[1].function, "loom_scatter_reduce_f32");
  using namespace ml::gather_scatter;
  EXPECT_EQ(l[1].meta[kReduce], 3);
  EXPECT_EQ(l[1].meta[kDim], 1);
  EXPECT_EQ(l[1].meta[kNumel], 24);
  EXPECT_EQ(l[1].grid[0], 1u);  // 6 fibers: one block
  Fixture bad(Op::ScatterReduce, ScalarType::Float, dims({2}), std::vector{dims({2}), dims({1}), dims({1})},
              attrs({0, 9}));
  EXPECT_THROW(bad.plan(), loom::Error);
  Fixture empty(Op::ScatterReduce, ScalarType::Float, dims({0}), std::vector{dims({0}), dims({2}), dims({2})},
                attrs({0, 0}));
  EXPECT_EQ(empty.plan().size(), 1u);  // only the index check
  EXPECT_EQ(empty.plan()[0].function, "loom_check_index");
}

TEST(CudaLibraryPlan, IndexSelectViewsXAsOuterSizeInner) {
  Fixture f(Op::IndexSelect, ScalarType::Bool, dims({2, 5, 4}), std::vector{dims({2, 3, 4}), dims({5})}, attrs({1}));
  const auto l = f.plan();
  ASSERT_EQ(l.size(), 1u);
  using namespace ml::index_select;
  EXPECT_EQ(l[0].meta[kOuter], 2);
  EXPECT_EQ(l[0].meta[kDimSize], 3);
  EXPECT_EQ(l[0].meta[kInner], 4);
  EXPECT_EQ(l[0].meta[kNumIndices], 5);
  EXPECT_EQ(l[0].meta[kElementSize], 1);
  EXPECT_EQ(l[0].meta[kNode], 7);
}

TEST(CudaLibraryPlan, LeavesReadTheirScalarsFromScalarBegin) {
  Fixture f(Op::Linspace, ScalarType::Double, dims({11}), std::vector<Dims>{}, Attrs{}, 2);
  const auto l = f.plan();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].function, "loom_linspace_f64");
  // out is buffer 0 (a leaf has no inputs), 11 elements, its scalars from 3.
  EXPECT_EQ(l[0].meta, (std::vector<int64_t>{0, 11, 3}));
  Fixture one_scalar(Op::RandNormal, ScalarType::Float, dims({4}), std::vector<Dims>{}, Attrs{}, 1);
  EXPECT_THROW(one_scalar.plan(), loom::Error);
}

TEST(CudaLibraryPlan, EmptyOutputsLaunchNothing) {
  Fixture f(Op::MatMul, ScalarType::Float, dims({2, 0, 3}), std::vector{dims({2, 0, 4}), dims({2, 4, 3})});
  EXPECT_TRUE(f.plan().empty());
  Fixture g(Op::Concat, ScalarType::Float, dims({0, 3}), std::vector{dims({0, 3})}, attrs({0}));
  EXPECT_TRUE(g.plan().empty());
  // An empty output still checks a non-empty index, as the reference does.
  Fixture sel(Op::IndexSelect, ScalarType::Float, dims({2, 0}), std::vector{dims({3, 0}), dims({2})}, attrs({0}));
  const auto check = sel.plan();
  ASSERT_EQ(check.size(), 1u);
  EXPECT_EQ(check[0].function, "loom_check_index");
  EXPECT_EQ(check[0].meta, (std::vector<int64_t>{/*index*/ 1, 0, /*count*/ 2, /*dim size*/ 3, /*node*/ 7}));
  // K == 0 still writes zeros.
  Fixture k0(Op::MatMul, ScalarType::Float, dims({1, 2, 3}), std::vector{dims({1, 2, 0}), dims({1, 0, 3})});
  EXPECT_EQ(k0.plan().size(), 1u);
}

TEST(CudaLibraryPlan, OtherOpsAndBadBuffersThrowNamingTheOp) {
  Fixture f(Op::Add, ScalarType::Float, dims({3}), std::vector{dims({3}), dims({3})});
  try {
    f.plan();
    FAIL() << "expected loom::Error";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
  Fixture g(Op::ToDevice, ScalarType::Float, dims({3}), std::vector{dims({3})});
  g.call.output = 9;
  EXPECT_THROW(g.plan(), loom::Error);
  // bfloat16 has no library product or random kernel: an error that says so.
  Fixture bf(Op::MatMul, ScalarType::BFloat16, dims({2, 5}), std::vector{dims({2, 4}), dims({4, 5})});
  try {
    bf.plan();
    FAIL() << "expected loom::Error";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no BFloat16 library kernel"), std::string::npos) << e.what();
  }
}

}  // namespace
