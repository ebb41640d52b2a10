// Optimizer: groups, state, zero_grad, and step() as one recorded update
// followed by a sync (see loom/optim/optimizer.h).
#include <loom/autograd.h>
#include <loom/optim.h>
#include <loom/runtime.h>

#include "api/src/lazy.h"
#include "api/src/record.h"

namespace loom::optim {

// What step() recorded in one loom::compile trace: per updated parameter
// an Entry (its state, its group, which of this trace's steps of that state
// it was, 1 for the first, and the numbers a replay keeps), and per number
// a replay recomputes a Live. The trace's guard reads the entries; its
// replay scalars read the Live numbers (value(i)).
struct Optimizer::TracedSteps final : detail::ReplayScalarSource {
  // A number replay_recomputes marked: the update it belongs to and how to
  // compute it. value(i) is live[i]'s at the step a replay stands for.
  struct Live {
    Updating update;
    StepNumber of;
  };
  const Optimizer* owner;
  std::weak_ptr<const bool> alive;
  std::vector<Live> live;
  TracedSteps(const Optimizer* o, std::weak_ptr<const bool> a) : owner(o), alive(std::move(a)) {}
  double value(uint32_t i) const override {
    if (alive.expired()) return 0;  // the guard refuses this replay first
    const Live& l = live[i];
    return l.of(owner->groups_[l.update.group].options(), l.update.state->step + l.update.nth);
  }
  struct Entry {
    OptimizerParamState* state;
    size_t group;
    int64_t nth;
    bool known;  // replay_numbers gave its numbers (and every replay scalar was found)
    bool as_previous;  // the previous entry's group, step and numbers: checked once for both
    std::vector<double> numbers;
  };
  std::vector<Entry> entries;
  std::vector<double> scratch;  // the numbers a replay would record, reused
};

bool Optimizer::replay_numbers(const OptimizerOptions&, int64_t, std::vector<double>&) const { return false; }

// Which of this trace's steps of `state` the next is (1 for the first). The
// first call of a trace starts its record and registers its replay guard
// (api/src/lazy.h): before a replay, each parameter's numbers at the step
// the replay stands for must be those the trace recorded; then the replay
// moves the step counts on.
int64_t Optimizer::traced_nth(const OptimizerParamState& state) {
  if (!traced_ || traced_in_ != detail::trace_number()) {
    traced_ = std::make_shared<TracedSteps>(this, alive_);
    traced_in_ = detail::trace_number();
    std::weak_ptr<const bool> alive = alive_;
    std::shared_ptr<TracedSteps> steps = traced_;
    detail::add_replay_guard({[this, alive, steps] {
                                if (alive.expired()) return false;
                                int64_t previous_at = -1;
                                for (const TracedSteps::Entry& e : steps->entries) {
                                  const int64_t at = e.state->step + e.nth;
                                  if (e.as_previous && at == previous_at) continue;
                                  previous_at = at;
                                  if (!e.known || e.group >= groups_.size() ||
                                      !replay_numbers(groups_[e.group].options(), at, steps->scratch) ||
                                      steps->scratch != e.numbers)
                                    return false;
                                }
                                return true;
                              },
                              [steps] {
                                for (const TracedSteps::Entry& e : steps->entries) ++e.state->step;
                              }});
  }
  int64_t nth = 1;
  for (const TracedSteps::Entry& e : traced_->entries) nth += e.state == &state;
  return nth;
}

// After update() recorded a traced step of u.state.
void Optimizer::note_traced_step(const Updating& u) {
  TracedSteps::Entry entry{u.state, u.group, u.nth, false, false, {}};
  entry.known = u.replayable && replay_numbers(groups_[u.group].options(), u.state->step, entry.numbers);
  if (!traced_->entries.empty()) {
    const TracedSteps::Entry& p = traced_->entries.back();
    entry.as_previous = entry.known && p.known && p.group == u.group && p.nth == u.nth && p.numbers == entry.numbers &&
                        p.state->step == u.state->step;
  }
  traced_->entries.push_back(std::move(entry));
}

void Optimizer::replay_recomputes(const Tensor& t, double now, StepNumber of) {
  if (!detail::tracing() || !updating_.state) return;
  const auto index = static_cast<uint32_t>(traced_->live.size());
  traced_->live.push_back({updating_, std::move(of)});
  if (!detail::add_replay_scalar(t, now, traced_, index))
    updating_.replayable = false;  // its guard refuses replays: every call traces
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
        updating_ = {&st, gi, traced_nth(st), true};
        struct Done {
          Updating& u;
          ~Done() { u = {}; }
        } done{updating_};
        update(p, st, groups_[gi].options());
        note_traced_step(updating_);
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

}  // namespace loom::optim
