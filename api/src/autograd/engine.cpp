// The backward engine: walks the graph of autograd::Nodes from the roots in
// dependency order (later nodes first among the ready ones, as PyTorch),
// sums the gradients arriving at each node, calls its rule, and routes the
// results on. Every rule only records ops, so a backward pass computes
// nothing: its gradients are pending tensors until the next sync.
#include <loom/autograd.h>
#include <loom/functions.h>

#include <algorithm>
#include <cstdint>
#include <queue>
#include <vector>

#include "api/src/autocast.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::autograd {

namespace {

// Node* -> a dense index, by open addressing. A backward pass looks each of
// its nodes up a few times; std::unordered_map and unordered_set allocated
// an entry per node and per map (a tenth of recording W4's backward).
class NodeIndex {
 public:
  // n's index, added if new; `added` says whether it was.
  uint32_t insert(Node* n, bool* added = nullptr) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    for (size_t i = slot_of(n);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].node == n) {
        if (added) *added = false;
        return slots_[i].index;
      }
      if (!slots_[i].node) {
        slots_[i] = {n, count_};
        if (added) *added = true;
        return count_++;
      }
    }
  }
  // n's index, or kAbsent.
  static constexpr uint32_t kAbsent = ~0u;
  uint32_t find(const Node* n) const {
    if (slots_.empty()) return kAbsent;
    for (size_t i = slot_of(n);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].node == n) return slots_[i].index;
      if (!slots_[i].node) return kAbsent;
    }
  }
  uint32_t size() const { return count_; }

 private:
  struct Slot {
    const Node* node = nullptr;
    uint32_t index = 0;
  };
  size_t slot_of(const Node* n) const {
    return (reinterpret_cast<uintptr_t>(n) * 0x9E3779B97F4A7C15ull >> 32) & (slots_.size() - 1);
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(64, 2 * old.size()), Slot{});
    for (const Slot& s : old)
      if (s.node) {
        size_t i = slot_of(s.node);
        while (slots_[i].node) i = (i + 1) & (slots_.size() - 1);
        slots_[i] = s;
      }
  }
  std::vector<Slot> slots_;
  uint32_t count_ = 0;
};

struct Capture {
  Edge edge;
  Tensor grad;
  bool reached = false;
};

struct Task {
  SourceLoc loc;  // the user's call: backward(), autograd::grad()
  bool keep_graph = false;
  bool create_graph = false;
  // With targets, only nodes leading to a target run (grad(), backward(inputs)).
  std::vector<Capture> captures;
  bool accumulate = true;  // AccumulateGrad nodes run (backward) or are only captured (grad)
  bool restrict = false;
  // Per reachable node, by its index: edges pointing at it not yet
  // followed, the gradients arrived for its inputs, whether it leads to a
  // target (restrict).
  NodeIndex index;
  std::vector<int> deps;
  std::vector<variable_list> buffers;
  std::vector<char> needed;
};

void add_to(variable_list& buf, size_t slot, Tensor g) {
  if (buf[slot].defined()) buf[slot] = buf[slot] + g;
  else buf[slot] = std::move(g);
}

// Every node reachable from the roots (indexed in task.index in this
// order), with how many edges point at it.
std::vector<Node*> discover(Task& task, const std::vector<Edge>& roots) {
  std::vector<Node*> order, stack;
  bool added = false;
  for (const Edge& r : roots) {
    task.index.insert(r.function.get(), &added);
    if (added) stack.push_back(r.function.get());
  }
  task.deps.assign(task.index.size(), 0);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next_functions()) {
      if (!e.is_valid()) continue;
      const uint32_t j = task.index.insert(e.function.get(), &added);
      if (j >= task.deps.size()) task.deps.resize(j + 1, 0);
      ++task.deps[j];
      if (added) stack.push_back(e.function.get());
    }
  }
  return order;
}

// Marks the nodes that lead to a target: they are the only ones that run.
void mark_needed(Task& task, const std::vector<Node*>& nodes) {
  const NodeIndex& index = task.index;
  std::vector<char> target(index.size(), 0), state(index.size(), 0);  // state: 1 = open, 2 = done
  for (const Capture& c : task.captures)
    if (uint32_t j = index.find(c.edge.function.get()); j != NodeIndex::kAbsent) target[j] = 1;
  task.needed.assign(index.size(), 0);
  // Post-order over the reachable graph (iterative: graphs can be deep).
  for (Node* root : nodes) {
    if (state[index.find(root)]) continue;
    std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
    state[index.find(root)] = 1;
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->num_outputs()) {
        const Edge& e = n->next_edge(i++);
        if (e.is_valid() && !state[index.find(e.function.get())]) {
          state[index.find(e.function.get())] = 1;
          stack.push_back({e.function.get(), 0});
        }
        continue;
      }
      const uint32_t j = index.find(n);
      bool need = target[j];
      for (const Edge& e : n->next_functions()) need = need || (e.is_valid() && task.needed[index.find(e.function.get())]);
      task.needed[j] = need;
      state[j] = 2;
      stack.pop_back();
    }
  }
}

// The call being run on this thread (Node::where's fallback); nested runs
// (a hook calling grad()) restore the outer one.
thread_local const SourceLoc* t_call_site = nullptr;
struct CallSite {
  const SourceLoc* prev;
  explicit CallSite(const SourceLoc& loc) : prev(t_call_site) { t_call_site = &loc; }
  ~CallSite() { t_call_site = prev; }
};

void run(Task& task, const std::vector<Edge>& roots, variable_list root_grads) {
  // Gradients run in their forward's dtypes, even when backward() is called inside an autocast region.
  loom::detail::autocast::Suspend no_autocast;
  const CallSite site(task.loc);
  const std::vector<Node*> nodes = discover(task, roots);
  if (task.restrict) mark_needed(task, nodes);
  task.buffers.resize(task.index.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    auto& buf = task.buffers[task.index.find(roots[i].function.get())];
    buf.resize(roots[i].function->num_inputs());
    add_to(buf, roots[i].input_nr, std::move(root_grads[i]));
  }
  auto later_first = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  for (Node* n : nodes)
    if (task.deps[task.index.find(n)] == 0) ready.push(n);

  AutoGradMode mode(task.create_graph);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    const uint32_t at = task.index.find(n);
    variable_list grads = std::move(task.buffers[at]);
    task.buffers[at] = variable_list();
    grads.resize(n->num_inputs());
    for (Capture& c : task.captures)
      if (c.edge.function.get() == n) {
        c.reached = true;
        c.grad = grads[c.edge.input_nr];
      }
    const bool runs = (!task.restrict || task.needed[at]) &&
                      (task.accumulate || dynamic_cast<loom::detail::AccumulateGrad*>(n) == nullptr);
    variable_list outs;
    if (runs) {
      for (const auto& [slot, hook] : n->pre_hooks())
        if (grads[slot].defined()) {
          Tensor h = hook(grads[slot]);
          if (h.defined()) grads[slot] = std::move(h);
        }
      bool any = false;
      for (const Tensor& g : grads) any = any || g.defined();
      if (any) {
        outs = n->apply(std::move(grads));
        LOOM_CHECK(outs.empty() || outs.size() == n->num_outputs(), "backward", n->where(), n->name(),
                   " returned ", outs.size(), " gradients, expected ", n->num_outputs());
      }
      if (!task.keep_graph) n->release_variables();
    }
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      const Edge& e = n->next_edge(i);
      if (!e.is_valid()) continue;
      Node* next = e.function.get();
      const uint32_t j = task.index.find(next);
      if (i < outs.size() && outs[i].defined()) {
        auto& buf = task.buffers[j];
        buf.resize(next->num_inputs());
        add_to(buf, e.input_nr, loom::detail::fit_gradient(outs[i], next->input_metadata(e.input_nr), *n));
      }
      if (--task.deps[j] == 0) ready.push(next);
    }
  }
}

// The root edges and their gradients (ones for one-element roots).
void roots_of(const variable_list& tensors, const variable_list& grads, std::vector<Edge>& edges,
              variable_list& root_grads, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(!tensors.empty(), op, loc, "expected at least one tensor to differentiate");
  LOOM_CHECK(grads.empty() || grads.size() == tensors.size(), op, loc, "got ", grads.size(),
             " gradients for ", tensors.size(), " tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    loom::detail::impl_of(t, op, loc);
    Edge e = loom::detail::gradient_edge(t);
    LOOM_CHECK(e.is_valid(), op, loc, "element ", i, " of tensors does not require grad and does not have a grad_fn (",
               loom::detail::describe(t), ")");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      LOOM_CHECK(t.numel() == 1, op, loc, "grad can be implicitly created only for one-element outputs, got ",
                 loom::detail::describe(t), "; pass a gradient");
      g = ones_like(t);
    } else {
      LOOM_CHECK(g.sizes() == t.sizes(), op, loc, "mismatch in shape: grad_output[", i, "] has a shape of ",
                 g.sizes(), " and output[", i, "] has a shape of ", t.sizes());
      if (g.dtype() != t.dtype()) g = g.to(t.dtype(), loc);
    }
    edges.push_back(std::move(e));
    root_grads.push_back(std::move(g));
  }
}

}  // namespace

SourceLoc Node::where() const { return loc_.line() != 0 || !t_call_site ? loc_ : *t_call_site; }

variable_list grad(const variable_list& outputs, const variable_list& inputs, const variable_list& grad_outputs,
                   std::optional<bool> retain_graph, bool create_graph, bool allow_unused, SourceLoc loc) {
  Task task;
  task.loc = loc;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  task.accumulate = false;
  task.restrict = true;
  LOOM_CHECK(!inputs.empty(), "autograd::grad", loc, "expected at least one input to differentiate against");
  for (size_t i = 0; i < inputs.size(); ++i) {
    loom::detail::impl_of(inputs[i], "autograd::grad", loc);
    Edge e = loom::detail::gradient_edge(inputs[i]);
    LOOM_CHECK(e.is_valid(), "autograd::grad", loc, "one of the differentiated tensors (input ", i, ": ",
               loom::detail::describe(inputs[i]), ") does not require grad");
    task.captures.push_back({std::move(e), Tensor(), false});
  }
  std::vector<Edge> roots;
  variable_list root_grads;
  roots_of(outputs, grad_outputs, roots, root_grads, "autograd::grad", loc);
  run(task, roots, std::move(root_grads));
  variable_list result;
  for (size_t i = 0; i < task.captures.size(); ++i) {
    Capture& c = task.captures[i];
    LOOM_CHECK(allow_unused || c.grad.defined(), "autograd::grad", loc, "one of the differentiated tensors (input ",
               i, ": ", loom::detail::describe(inputs[i]), ") appears to not have been used in the graph; pass "
               "allow_unused=true if this is what you want");
    Tensor g = c.grad;
    if (g.defined()) {
      const GradInfo& want = c.edge.function->input_metadata(c.edge.input_nr);
      AutoGradMode mode(create_graph);
      g = loom::detail::fit_gradient(g, want, *c.edge.function);
      if (!create_graph) g = g.detach();
    }
    result.push_back(std::move(g));
  }
  return result;
}

void backward(const variable_list& tensors, const variable_list& grad_tensors, std::optional<bool> retain_graph,
              bool create_graph, const variable_list& inputs, SourceLoc loc) {
  Task task;
  task.loc = loc;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  for (size_t i = 0; i < inputs.size(); ++i) {
    loom::detail::impl_of(inputs[i], "backward", loc);
    Edge e = loom::detail::gradient_edge(inputs[i]);
    LOOM_CHECK(e.is_valid(), "backward", loc, "input ", i, " (", loom::detail::describe(inputs[i]),
               ") does not require grad");
    LOOM_CHECK(inputs[i].is_leaf(), "backward", loc, "input ", i, " (", loom::detail::describe(inputs[i]),
               ") is not a leaf; pass leaves as inputs (or call retain_grad() on it)");
    task.captures.push_back({std::move(e), Tensor(), false});
  }
  task.restrict = !inputs.empty();
  std::vector<Edge> roots;
  variable_list root_grads;
  roots_of(tensors, grad_tensors, roots, root_grads, "backward", loc);
  run(task, roots, std::move(root_grads));
}

}  // namespace loom::autograd
