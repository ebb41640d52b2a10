// "Compiling" for the reference backend copies the graph into a list of
// Steps (so the executable outlives the nodes it came from) and records when
// each value is last used, so intermediates are freed as soon as possible.
#include "runtime/reference/reference_backend.h"

#include <cstring>

#include "runtime/reference/eval.h"

namespace loom::runtime::reference {

namespace {

class Program final : public Executable {
 public:
  explicit Program(const ir::Graph& g) {
    steps_.resize(g.size());
    last_use_.assign(g.size(), 0);
    int32_t slot = 0;
    for (uint32_t i = 0; i < g.size(); ++i) {
      const ir::Node& n = *g.nodes[i];
      Step& s = steps_[i];
      s.op = n.op;
      s.dtype = n.dtype;
      s.shape = n.shape;
      s.attr = n.attr;
      auto ins = g.inputs_of(i);
      s.inputs.assign(ins.begin(), ins.end());
      s.scalar_begin = g.scalar_begin[i];
      num_scalars_.push_back(g.scalar_begin[i + 1] - g.scalar_begin[i]);
      if (n.op == ir::Op::Input) s.input_slot = slot++;
      for (uint32_t in : ins) last_use_[in] = i;
    }
    outputs_ = g.outputs;
    for (uint32_t o : outputs_) last_use_[o] = UINT32_MAX;
  }

  // Its steps; every value is allocated by the run and freed after it.
  int64_t bytes() const override {
    return static_cast<int64_t>(steps_.size() * (sizeof(Step) + sizeof(uint32_t) * 4) + sizeof(*this));
  }

  void run(const RunArgs& args, std::vector<BufferPtr>& result) override {
    const size_t n = steps_.size();
    std::vector<Value> values(n);
    std::vector<BufferPtr> owned(n);
    std::vector<const Value*> in_ptrs;
    for (uint32_t i = 0; i < n; ++i) {
      const Step& s = steps_[i];
      Value& v = values[i];
      v.dtype = s.dtype;
      v.shape = &s.shape;
      if (s.op == ir::Op::Input) {
        v.data = args.inputs[s.input_slot]->data();
        continue;
      }
      owned[i] = Buffer::allocate(Device(kCPU, 0), s.shape.numel() * element_size(s.dtype));
      v.data = owned[i]->data();
      in_ptrs.clear();
      for (uint32_t in : s.inputs) in_ptrs.push_back(&values[in]);
      EvalContext c{s, in_ptrs, args.scalars.subspan(s.scalar_begin, num_scalars_[i]), owned[i]->data(), i};
      switch (ir::op_family(s.op)) {
        case ir::Family::Leaf: eval_leaf(c); break;
        case ir::Family::Unary: eval_unary(c); break;
        case ir::Family::Binary: eval_binary(c); break;
        case ir::Family::Ternary: eval_where(c); break;
        case ir::Family::Reduce: eval_reduce(c); break;
        case ir::Family::Move: eval_move(c); break;
      }
      for (uint32_t in : s.inputs)
        if (last_use_[in] == i) owned[in].reset();
    }
    // Each output gets its own buffer: a node asked for twice is copied.
    result.clear();
    result.reserve(outputs_.size());
    std::vector<bool> taken(n, false);
    for (uint32_t o : outputs_) {
      if (owned[o] && !taken[o]) {
        taken[o] = true;
        result.push_back(owned[o]);
        continue;
      }
      size_t bytes = steps_[o].shape.numel() * element_size(steps_[o].dtype);
      BufferPtr copy = Buffer::allocate(Device(kCPU, 0), bytes);
      if (bytes) std::memcpy(copy->data(), values[o].data, bytes);
      result.push_back(std::move(copy));
    }
  }

  int64_t kernel_count() const override {
    int64_t k = 0;
    for (const Step& s : steps_) k += s.op != ir::Op::Input;
    return k;
  }

 private:
  std::vector<Step> steps_;
  std::vector<uint32_t> num_scalars_;
  std::vector<uint32_t> last_use_;
  std::vector<uint32_t> outputs_;
};

}  // namespace

LOOM_REGISTER_BACKEND(ReferenceBackend, 10);  // the oracle: chosen by name, never by default

std::unique_ptr<Executable> ReferenceBackend::compile(const ir::Graph& g, const CompileHints&) {
  return std::make_unique<Program>(g);
}

}  // namespace loom::runtime::reference
