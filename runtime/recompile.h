// Why a graph compiles (LOOM_LOG=recompiles, the compiles-by-reason rows of
// loom::metrics()): the first compile of its structure, or what differs
// from the last compile of a graph with the same structure.
#pragma once
#include <cstdint>
#include <string>

#include "ir/graph.h"
#include "ir/local_kernel.h"

namespace loom::runtime {

enum class CompileReason : uint8_t {
  NewGraph,   // no graph of this structure was compiled before on this backend
  Shape,      // an input's (or another leaf's) shape differs
  Dtype,      // an input's (or another leaf's) dtype differs
  Attribute,  // an op's attributes differ (a view's strides, a reduction's dims, ...)
  Alignment,  // the same graph, whose view offsets lack the alignment the first compile's code assumed
  Evicted,    // the same graph, compiled before and dropped from the executable cache
};

struct CompileWhy {
  CompileReason reason = CompileReason::NewGraph;
  std::string text;  // "input 0 (recorded at main.cpp:12): Float[32, 10] -> Float[17, 10] (dim 0: 32 -> 17)"
};

// Says why `g` compiles on `backend` and remembers it as the last compile of
// its structure: its ops, their wiring and ranks, and the backend; not
// dtypes, sizes or attributes. `alignment_variant`: the executor compiles
// the variant for view offsets the first code could not take.
CompileWhy explain_compile(const ir::Graph& g, const char* backend, bool alignment_variant);

// The reason's name as the metrics and the log print it.
const char* compile_reason_name(CompileReason r);

// loom::set_dynamic_shapes (api/include/loom/runtime.h): when a compile
// takes sizes as arguments (CompileHints::sizes).
enum class SizesAsArgs : uint8_t { Automatic, Always, Never };
SizesAsArgs sizes_as_args_mode();
SizesAsArgs set_sizes_as_args_mode(SizesAsArgs mode);
// Which sizes the compile of `g` takes as arguments: by the mode (Always:
// all; Never: none), and in Automatic mode all when one of its inputs is
// marked (Buffer::mark_dynamic), else those its kernels had otherwise in
// earlier compiles (ir::Lift::Seen: of this graph's structure at another
// shape, or of another graph with kernels of the same shape), so the first
// compile of a process is static.
ir::Lift sizes_as_args(const ir::Graph& g);

}  // namespace loom::runtime
