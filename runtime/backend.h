// The seam every backend plugs into: compile an ir::Graph into an
// Executable once, run the Executable on every cache hit.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <loom/device.h>

#include "ir/graph.h"
#include "ir/local_kernel.h"
#include "runtime/buffer.h"

namespace loom::runtime {

class LateCheck;

// What one run binds: the buffers of the graph's Input leaves (in
// Graph::input_nodes order) and its runtime scalars (Graph::scalars order).
struct RunArgs {
  std::span<const Buffer* const> inputs;
  std::span<const ir::RtScalar> scalars;
  // Per graph output, a buffer it may be written into directly (the storage
  // it belongs to already owns one: an in-place update), or null. A backend
  // may ignore it; when it uses it, it returns that same buffer.
  std::span<const BufferPtr> targets = {};
  // If set, a backend that finds bad data only after the run's work is done
  // (a GPU: the error words come back with the results) may return without
  // waiting for it and put here what reads the verdict later; it must then
  // stay ready to answer until that check is waited for, and the caller
  // waits for it before running this executable again. Null, or a backend
  // that checks at once: run() throws RunError itself.
  std::unique_ptr<LateCheck>* late = nullptr;
};

// Raised by Executable::run for bad data (an index out of range): names the
// node (canonical index) so the executor can point at the user's line.
struct RunError {
  uint32_t node;
  std::string message;
};

// The verdict of a run that returned before its bad-data check could be
// read (RunArgs::late).
class LateCheck {
 public:
  virtual ~LateCheck() = default;
  // Waits for the run's work; its failure, if it failed. Called once.
  virtual std::optional<RunError> wait() = 0;
};
// A failed index check: the index and the size it must lie below, as every
// backend and library kernel words it (PyTorch's "index 9 is out of bounds
// for dimension ... with size 4").
inline std::string index_out_of_range_message(int64_t index, int64_t size) {
  return "index " + std::to_string(index) + " is out of bounds for dimension of size " + std::to_string(size);
}

class Executable {
 public:
  virtual ~Executable() = default;
  // Fills `out` (emptied first; the caller reuses it across runs) with one
  // buffer per Graph::outputs entry, each holding that node's value
  // contiguously. Must not keep pointers to the Graph it was compiled from.
  virtual void run(const RunArgs& args, std::vector<BufferPtr>& out) = 0;
  // Kernels (or steps) one run launches, for metrics.
  virtual int64_t kernel_count() const = 0;
  // The memory it holds while cached, host and device together: compiled
  // code, the arenas it keeps for its temporaries, argument blocks (not its
  // outputs, which the tensors own). What the executable cache's bound
  // counts (runtime/executable_cache.h).
  virtual int64_t bytes() const = 0;
  // The executable cache's clock at its last use (ExecutableCache::touch).
  std::atomic<uint64_t> last_used{0};
  // Whether any of its kernels reads sizes from arguments (CompileHints::
  // sizes lifted some): the executor's counters and log line.
  bool sizes_as_args = false;
  // What its code relies on of the run's view offsets (ir::KernelProgram::
  // offset_guards: scalar slot, elements they are a multiple of).
  std::vector<std::pair<uint32_t, int64_t>> offset_guards;
  // Whether a run with these scalars may use this executable; if not, the
  // executor runs a variant compiled assuming nothing of the offsets.
  bool fits(std::span<const ir::RtScalar> scalars) const {
    for (auto [slot, multiple] : offset_guards)
      if (scalars[slot].i % multiple != 0) return false;
    return true;
  }
};

// How to compile: `unaligned_offsets` assumes nothing of the runtime view
// offsets (the variant for runs whose offsets the first one's code could
// not take: Executable::fits); `sizes`: which of the kernels' extents,
// strides and offsets other than 0 and +-1 they read from arguments
// (ir::Lift, ir::SizeArgs), so the functions compiled serve the graph's
// structure at other sizes. A backend that cannot may ignore it (its code
// is then static); one that honours it says in Executable::sizes_as_args
// whether any number became an argument (under Lift::Seen, none may).
//
// `first_of_structure`: no graph of this structure was compiled before
// (CompileReason::NewGraph). A backend may then prefer a form that cannot
// take sizes as arguments (jit/cuda's single-block program) to lifting the
// sizes its kernels had in other graphs: a control step stays one launch
// though a larger model with kernels of its shape ran before.
struct CompileHints {
  bool unaligned_offsets = false;
  ir::Lift sizes = ir::Lift::None;
  bool first_of_structure = false;
};

// A backend turns a graph into an Executable (docs/ADDING_A_BACKEND.md).
// compile() is called once per distinct graph (the executor caches the
// result by the graph's key) and may be called from several threads at
// once; it must not keep pointers into `g` (its nodes die after the sync)
// and must throw loom::Error for a graph it cannot run, never return an
// executable that computes something else.
class Backend {
 public:
  virtual ~Backend() = default;
  // The backend's one name: LOOM_BACKEND, loom::set_backend, dumps, logs.
  virtual const char* name() const = 0;
  virtual DeviceType device_type() const = 0;
  virtual std::unique_ptr<Executable> compile(const ir::Graph& g, const CompileHints& hints) = 0;
  // Whether compile() honours CompileHints::sizes.
  virtual bool takes_sizes_as_args() const { return false; }
};

// Registers a backend, once, from its own file:
//   LOOM_REGISTER_BACKEND(MyBackend, 10);
// `priority`: among the CPU backends the highest is the default (llvm 100,
// reference 10); a GPU's backend is the one registered for its device type.
struct BackendRegistration {
  BackendRegistration(std::unique_ptr<Backend> backend, int priority);
};
#define LOOM_REGISTER_BACKEND(Type, priority)                                                            \
  static const ::loom::runtime::BackendRegistration loom_backend_registration_##Type(std::make_unique<Type>(), \
                                                                                     priority)

// The backend that runs graphs for `device` now (LOOM_BACKEND / set_backend).
Backend& backend_for(Device device);
// The registered backend called `name`, or null.
Backend* find_backend(const std::string& name);
// The names of the registered backends for a device type, by priority.
std::vector<std::string> backend_names(DeviceType type);
// Selects the CPU backend by name; throws loom::Error for an unknown name.
// Returns the previous name.
std::string select_cpu_backend(const std::string& name);

}  // namespace loom::runtime
