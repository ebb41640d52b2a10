#include "runtime/interp/interp_executable.h"

#include "kernels/cpu/library.h"
#include "runtime/interp/interp_kernel.h"

namespace loom::runtime::interp {

void InterpExecutable::run(const RunArgs& args, std::vector<BufferPtr>& result) {
  // Every buffer of the program: the inputs bound, the outputs allocated
  // (or the caller's own, donated: an in-place update), the temporaries
  // in one arena for this run.
  const Device cpu(kCPU, 0);
  BufferPtr arena = program_.arena_bytes > 0 ? Buffer::allocate(cpu, static_cast<size_t>(program_.arena_bytes)) : nullptr;
  std::vector<BufferPtr> owned(program_.buffers.size());
  std::vector<void*> bufs(program_.buffers.size(), nullptr);
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    const ir::BufferInfo& info = program_.buffers[b];
    switch (info.kind) {
      case ir::BufferKind::Input: bufs[b] = args.inputs[info.index]->data(); break;
      case ir::BufferKind::Output:
        owned[b] = outputs_.donated(static_cast<uint32_t>(b), args);
        if (!owned[b]) owned[b] = Buffer::allocate(cpu, static_cast<size_t>(info.numel) * element_size(info.dtype));
        bufs[b] = owned[b]->data();
        break;
      case ir::BufferKind::Temp: bufs[b] = arena ? static_cast<char*>(arena->data()) + info.arena_offset : nullptr; break;
    }
  }
  // The steps in order. Bad data throws RunError at the first failing
  // step; lowering ran those first (pass "checks first") and OutputPlan
  // donates no buffer a step before it writes, so nothing the caller owns
  // has changed then.
  for (const ir::Step& step : program_.steps) {
    if (step.kind == ir::Step::Generated) {
      run_kernel(program_, program_.kernels[step.index], bufs.data(), args.scalars);
      continue;
    }
    const ir::LibraryCall& call = program_.library_calls[step.index];
    std::vector<kernels::cpu::View> ins;
    for (size_t i = 0; i < call.inputs.size(); ++i)
      ins.push_back({static_cast<char*>(bufs[call.inputs[i]]) +
                         call.input_offset(i, args.scalars.data()) * element_size(call.input_dtypes[i]),
                     call.input_dtypes[i], call.input_shapes[i]});
    try {
      kernels::cpu::run_library(call, ins, {bufs[call.output], call.dtype, call.shape},
                                args.scalars.subspan(call.scalar_begin, call.num_scalars));
    } catch (const kernels::cpu::LibraryError& e) {
      throw RunError{call.node, e.message};
    }
  }
  outputs_.results(owned, cpu, result);
}

}  // namespace loom::runtime::interp
