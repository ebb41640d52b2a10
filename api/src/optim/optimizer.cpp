// Optimizer: groups, state, zero_grad, and step() as one recorded update
// followed by a sync (see loom/optim/optimizer.h).
#include <loom/autograd.h>
#include <loom/optim.h>
#include <loom/runtime.h>

#include <algorithm>

#include "api/src/lazy.h"
#include "api/src/record.h"

namespace loom::optim {

// What step() recorded in one loom::compile trace. Its guard checks, per
// group the trace updated, the numbers a replay keeps (replay_numbers), and
// advances every stepped state; its replay scalars (value(i)) are the
// numbers replay_recomputes marked, at the step a replay stands for.
struct Optimizer::TracedSteps final : detail::ReplayScalarSource {
  struct Group {
    size_t index;
    bool known;  // replay_numbers gave them, the same at every step() of the trace
    std::vector<double> numbers;
  };
  struct Live {
    Updating update;
    StepNumber of;
  };
  const Optimizer* owner;
  std::weak_ptr<const bool> alive;
  std::vector<Group> groups;
  std::vector<OptimizerParamState*> stepped;  // one per traced update
  std::vector<Live> live;
  bool replayable = true;  // every replay_recomputes found its number
  std::vector<double> scratch;  // a replay's numbers, reused

  TracedSteps(const Optimizer* o, std::weak_ptr<const bool> a) : owner(o), alive(std::move(a)) {}
  // The numbers group `gi` keeps, noted at each traced update of it.
  void note_group(size_t gi) {
    const OptimizerOptions& options = owner->groups_[gi].options();
    for (Group& g : groups)
      if (g.index == gi) {
        g.known = g.known && owner->replay_numbers(options, scratch) && scratch == g.numbers;
        return;
      }
    Group g{gi, false, {}};
    g.known = owner->replay_numbers(options, g.numbers);
    groups.push_back(std::move(g));
  }
  int64_t nth(const OptimizerParamState& state) const {
    return 1 + std::count(stepped.begin(), stepped.end(), &state);
  }
  bool unchanged() {
    if (!replayable || alive.expired()) return false;
    for (const Group& g : groups)
      if (!g.known || g.index >= owner->groups_.size() ||
          !owner->replay_numbers(owner->groups_[g.index].options(), scratch) || scratch != g.numbers)
        return false;
    return true;
  }
  void advance() {
    for (OptimizerParamState* s : stepped) ++s->step;
  }
  double value(uint32_t i) const override {
    if (alive.expired()) return 0;  // the guard refuses this replay first
    const Live& l = live[i];
    return l.of(owner->groups_[l.update.group].options(), l.update.state->step + l.update.nth);
  }
};

bool Optimizer::replay_numbers(const OptimizerOptions&, std::vector<double>&) const { return false; }

// This trace's record, made on its first traced update together with the
// trace's replay guard (api/src/lazy.h).
Optimizer::TracedSteps& Optimizer::traced_steps() {
  if (!traced_ || traced_in_ != detail::trace_number()) {
    traced_ = std::make_shared<TracedSteps>(this, alive_);
    traced_in_ = detail::trace_number();
    std::shared_ptr<TracedSteps> steps = traced_;
    detail::add_replay_guard({[steps] { return steps->unchanged(); }, [steps] { steps->advance(); }});
  }
  return *traced_;
}

void Optimizer::note_replay_scalar(const Tensor& t, double now, StepNumber of) {
  TracedSteps& steps = *traced_;
  const auto index = static_cast<uint32_t>(steps.live.size());
  steps.live.push_back({updating_, of});
  if (!detail::add_replay_scalar(t, now, traced_, index)) steps.replayable = false;  // every call traces
}

Optimizer::Optimizer(std::unique_ptr<OptimizerOptions> defaults) : defaults_(std::move(defaults)) {}

Optimizer::~Optimizer() = default;

void Optimizer::adopt(OptimizerParamGroup& group) {
  const SourceLoc loc = SourceLoc::current();
  for (Tensor& p : group.params()) {
    detail::impl_of(p, "optimizer", loc);
    LOOM_CHECK(p.is_floating_point(), "optimizer", loc, "can only optimize floating-point tensors, got ",
               detail::describe(p));
    LOOM_CHECK(p.is_leaf(), "optimizer", loc, "can't optimize a non-leaf tensor (", detail::describe(p),
               ", made by ", p.grad_fn()->name(), "); optimize the leaf it was computed from");
    auto& slot = state_[p.impl().get()];
    LOOM_CHECK(!slot, "optimizer", loc, "a parameter (", detail::describe(p),
               ") appears in more than one parameter group (or twice in one)");
    slot = make_state(p, group.options());
  }
}

void Optimizer::add_param_group(const OptimizerParamGroup& group) {
  OptimizerParamGroup g = group;
  if (!g.has_options()) g.set_options(defaults_->clone());
  adopt(g);
  groups_.push_back(std::move(g));
  // Parameters and state are values from here on, not pending graphs, so
  // every step records the same graph (and replays one executable).
  sync_all();
}

Tensor Optimizer::step(LossClosure closure) {
  Tensor loss;
  if (closure) {
    AutoGradMode enabled(true);
    loss = closure();
  }
  {
    NoGradGuard no_grad;
    const bool traced = detail::tracing();
    for (size_t gi = 0; gi < groups_.size(); ++gi)
      for (Tensor& p : groups_[gi].params()) {
        if (!p.grad().defined()) continue;  // as PyTorch: a parameter without a gradient is left alone
        OptimizerParamState& st = *state_.at(p.impl().get());
        ++st.step;
        if (!traced) {
          update(p, st, groups_[gi].options());
          continue;
        }
        TracedSteps& steps = traced_steps();
        steps.note_group(gi);
        updating_ = {&st, gi, steps.nth(st)};
        struct Done {
          Updating& u;
          ~Done() { u = {}; }
        } done{updating_};
        update(p, st, groups_[gi].options());
        steps.stepped.push_back(&st);
      }
  }
  if (sync_on_step_) sync_all();
  return loss;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (OptimizerParamGroup& g : groups_)
    for (Tensor& p : g.params()) {
      Tensor& grad = p.mutable_grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        grad = Tensor();
        continue;
      }
      NoGradGuard no_grad;
      grad.detach_();
      grad.zero_();
    }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> all;
  for (const OptimizerParamGroup& g : groups_) all.insert(all.end(), g.params().begin(), g.params().end());
  return all;
}

size_t Optimizer::size() const {
  size_t n = 0;
  for (const OptimizerParamGroup& g : groups_) n += g.params().size();
  return n;
}

OptimizerParamState* Optimizer::state_of(const Tensor& p) {
  auto it = state_.find(p.impl().get());
  return it == state_.end() ? nullptr : it->second.get();
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::state_tensors(OptimizerParamState&) { return {}; }

}  // namespace loom::optim
