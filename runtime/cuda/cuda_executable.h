// CudaExecutable: a lowered graph with its loaded kernels on one GPU.
//
// Kernels read buffer addresses from an *argument block* in device memory
// (buffer addresses, runtime scalars, the error word), not from launch
// parameters. So the launch sequence is the same on every run, and from
// the second run on it is built into a CUDA graph bound to that block,
// each launch after only the launches it depends on
// (launch_graph.h): a cache-hit replay is one cuGraphLaunch (a program of one
// kernel too: on an H100 a one-node graph launch + wait took 7.2 us, a
// direct launch + wait 10.0). There are two argument blocks, each with its
// own graph (an *argument set*): a run whose words equal a set's launches
// that set's graph with no upload; otherwise it writes the least recently
// used set. Two sets cover the common loop `y = f(x)` whose output
// alternates between two buffers (the old y is freed after the new one is
// allocated), which would otherwise upload every run (+2.5 us on an H100).
// A run writes the block in pinned host memory and copies it to the GPU;
// the copy is ordered on the stream after the previous runs' kernels, so
// it never overwrites arguments still being read. Two pinned slots
// alternate, so filling one never waits for the other's copy. The one
// exception: an FFMA GEMM takes its operands' addresses (and its shape) as
// parameters, which ptxas schedules its main loop better with
// (jit/cuda/gemm.h, GemmArgs); a run that moves them updates that node of
// the set's graph (update_gemm_nodes).
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ir/kernel.h"
#include "ir/local_kernel.h"
#include "jit/cuda/gemm.h"
#include "runtime/backend.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/function_modules.h"
#include "runtime/output_plan.h"

namespace loom::runtime::cuda {

// A loaded cubin; unloaded never (its functions may be in built graphs).
struct LoadedModule {
  CUmodule module = nullptr;   // a single-block program's: unloaded by the executable's destructor
  int64_t cubin_bytes = 0;     // its size (Executable::bytes)
  // Otherwise one module per function (shared.first), shared with every
  // executable that runs the same function (runtime/cuda/function_modules.h).
  std::vector<FunctionModulePtr> functions;
  std::vector<CUfunction> kernels;  // generated kernel i (kernels alike: the same shared function)
  // Per generated kernel, its local form (ir::LocalKernel: its tables); a
  // kernel with a local buffer table is launched with its own tables.
  // Empty for a single-block program.
  ir::SharedKernels shared;
  std::vector<jit::cuda::GemmConfig> gemm;  // kernel i's tile configuration, if it is a GEMM
  std::vector<CUfunction> reduce;           // kernel i's split-K reduce kernel, if it has one
  CUfunction single_block = nullptr;        // a single-block program's one kernel (jit/cuda/codegen.h)
};

class CudaExecutable final : public Executable {
 public:
  CudaExecutable(ir::KernelProgram program, int device, LoadedModule module);
  ~CudaExecutable() override;
  void run(const RunArgs& args, std::vector<BufferPtr>& result) override;
  int64_t kernel_count() const override { return static_cast<int64_t>(launches_.size()); }
  int64_t bytes() const override;

 private:
  struct Launch {
    CUfunction function = nullptr;
    uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, shared = 0;
    int64_t meta = -1;  // library kernels: element offset of their meta in meta_
    int workspace = -1;  // split-K GEMM and reduce: the fifth parameter is this slot of workspace_
    uint32_t step = 0;   // the program step it belongs to (a single-block launch: all of them)
    int64_t tables = -1;  // a shared function's launch: word offset of the kernel's local tables
    // A GEMM (not its reduce): parameters six to eight, the product's
    // sizes and strides by value (jit::cuda::GemmArgs), then the addresses
    // of its operands' buffers (the program's buffers a_buffer, b_buffer).
    std::optional<jit::cuda::GemmArgs> shape;
    uint32_t a_buffer = 0, b_buffer = 0;
    std::string label;   // for LOOM_CUDA_KERNEL_TIMES and errors
  };
  std::string launch_description(const Launch& l) const;
  // A device argument block, what it holds (or will, in stream order) and
  // the graph built against it.
  struct ArgSet {
    BufferPtr block;
    std::vector<int64_t> uploaded;
    CUgraphExec graph = nullptr;
    CUgraph source = nullptr;  // what `graph` was instantiated from: its nodes name what an update changes
    std::vector<int32_t> graph_written_into;  // the aliasing the graph's dependencies assume (launch_memory)
    // Per GEMM launch (launch index, node): the operand addresses the graph
    // holds as parameters. A run whose words move an operand updates the
    // node (update_gemm_nodes) instead of building the graph again.
    struct GemmNode {
      size_t launch;
      CUgraphNode node;
      CUdeviceptr operands[2];
    };
    std::vector<GemmNode> gemm_nodes;
    int64_t last_run = -1;
    // The error words on the GPU are (0, -1): uploaded so, and every run
    // since read them back clean. A program that can fail uploads its block
    // again only when they are not (a failed run wrote them).
    bool errors_clean = false;
  };
  struct Slot {
    void* host = nullptr;     // pinned argument block
    CUevent done = nullptr;   // recorded after the copy out of it
    bool in_flight = false;
  };

  void plan_launches();
  void launch_all(const ArgSet& set);
  // The launch's parameters: five pointers (values), then a GEMM's shape
  // and operands; `params` points at them, as cuLaunchKernel takes them.
  struct Params {
    CUdeviceptr values[5];
    jit::cuda::GemmArgs shape;
    CUdeviceptr operands[2];
    void* params[8];
    Params() = default;
    Params(const Params&) = delete;  // `params` points into the object itself
    Params& operator=(const Params&) = delete;
  };
  void kernel_params(const ArgSet& set, const Launch& l, Params& out) const;
  static CudaKernelNodeParams node_params(const Launch& l, Params& kp);
  std::vector<std::vector<uint32_t>> dependencies(const ArgSet& set, const std::vector<int32_t>& written_into) const;
  void build_graph(ArgSet& set, const std::vector<int32_t>& written_into);
  void drop_graph(ArgSet& set);
  void update_gemm_nodes(ArgSet& set);
  void check_errors();
  // What a late check (RunArgs::late) reads the last run's error words with.
  std::unique_ptr<LateCheck> check_later();
  class Late;
  // The failure that error words `err` report, if any.
  // The error words after the buffers and scalars: err[0] the code, err[1]
  // the failing node, err[2] and err[3] a bad index and its bound
  // (jit/cuda/codegen.h).
  static constexpr size_t kErrorWords = 4;
  std::optional<RunError> error_of(const int64_t (&err)[kErrorWords]);
  std::string out_of_range_message(const ir::LibraryCall& call);

  ir::KernelProgram program_;
  int device_;
  LoadedModule module_;
  OutputPlan outputs_;
  std::vector<Launch> launches_;
  BufferPtr arena_;  // temporaries, planned by ir/lower/fusion.cpp
  BufferPtr meta_;   // library kernels' constant parameters
  BufferPtr workspace_;  // split-K partial sums (never an output: outputs may be donated), kWorkspaceSlots slots
  int64_t workspace_slot_bytes_ = 0;
  size_t arg_words_ = 0, scalar_at_ = 0, err_at_ = 0;  // argument block layout, in 8-byte words
  // Per generated kernel, where its local tables start (-1: none): buffer
  // addresses, node table, scalars as double, as int64 (after the error words).
  std::vector<int64_t> tables_at_;
  ArgSet sets_[2];
  ArgSet* last_set_ = nullptr;  // the last run's (for error reports)
  Slot slots_[2];
  int next_slot_ = 0;
  // The last run's error words, copied back in stream order after its
  // launches when the caller reads them later (made on first use).
  struct ErrorCopy {
    int64_t* host = nullptr;  // pinned, kErrorWords words
    CUevent done = nullptr;   // recorded after the copy
  } err_copy_;
  std::vector<CUevent> timing_events_;  // LOOM_CUDA_KERNEL_TIMES: one before each launch, one after the last
  int64_t runs_ = 0;
  std::mutex mu_;  // one run at a time: the arena and the slots are shared
};

}  // namespace loom::runtime::cuda
