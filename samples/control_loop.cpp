// control_loop: a robotics / game style loop. Every tick, a linear
// controller (a matrix product) pushes 16 simulated cart-poles and one
// physics step (explicit Euler, gym's CartPole equations, a random nudge)
// advances them; the host then reads the new state, as a controller must.
// A tick is a fixed-size graph: the first one compiles, every later one
// replays, and what a tick costs is the lazy runtime's fixed overhead
// (record, hash, look up, run, read back). It prints that latency's
// distribution, then the same again through loom::compile.
//
//   control_loop [ticks]     (default 2000)
#include <loom/loom.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using loom::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

// gym's CartPole constants.
constexpr double kGravity = 9.8, kCartMass = 1.0, kPoleMass = 0.1, kHalfLength = 0.5, kForce = 10.0, kTau = 0.02;
constexpr double kTotalMass = kCartMass + kPoleMass, kPoleMassLength = kPoleMass * kHalfLength;

// state: [poles, 4] = (x, x_dot, theta, theta_dot); gains: [4, 1].
Tensor tick(const Tensor& state, const Tensor& gains) {
  Tensor push = loom::matmul(state, gains).clamp(-1, 1).squeeze(1) * kForce;
  push = push + loom::randn({state.size(0)}) * 0.5;  // a nudge: new numbers every tick, same graph
  Tensor x = state.select(1, 0), x_dot = state.select(1, 1), theta = state.select(1, 2), theta_dot = state.select(1, 3);
  Tensor cos_t = theta.cos(), sin_t = theta.sin();
  Tensor temp = (push + theta_dot * theta_dot * sin_t * kPoleMassLength) / kTotalMass;
  Tensor theta_acc =
      (sin_t * kGravity - cos_t * temp) / ((4.0 / 3.0 - cos_t * cos_t * (kPoleMass / kTotalMass)) * kHalfLength);
  Tensor x_acc = temp - theta_acc * cos_t * (kPoleMassLength / kTotalMass);
  return loom::stack({x + x_dot * kTau, x_dot + x_acc * kTau, theta + theta_dot * kTau, theta_dot + theta_acc * kTau},
                     1);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  const int ticks = argc > 1 ? std::stoi(argv[1]) : 2000;
  constexpr int64_t kPoles = 16;
  loom::manual_seed(0);
  std::vector<float> start;
  for (int64_t i = 0; i < kPoles; ++i) start.insert(start.end(), {0.f, 0.f, -0.3f + 0.04f * i, 0.f});
  Tensor state = loom::tensor(start).view({kPoles, 4}).clone();
  Tensor gains = loom::tensor({0.5f, 1.0f, 10.0f, 2.0f}).view({4, 1}).clone();
  loom::sync();
  loom::reset_metrics();

  // Runs ticks + 1 ticks of `advance`, each timed until the host holds the
  // new state; the first (which compiles) apart. `worst_from`: the first
  // tick whose largest pole angle counts.
  struct Timing {
    std::vector<double> micros;
    double first_ms = 0, worst_angle = 0;
  };
  auto run = [&](auto&& advance, int worst_from) {
    Timing r;
    for (int t = 0; t <= ticks; ++t) {
      const auto t0 = Clock::now();
      state = advance(state);
      const float* s = state.data_ptr<float>();  // the controller reads the state: the tick runs here
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (t == 0) r.first_ms = us / 1000;
      else r.micros.push_back(us);
      if (t >= worst_from)
        for (int64_t i = 0; i < kPoles; ++i) r.worst_angle = std::max(r.worst_angle, std::abs(double(s[i * 4 + 2])));
    }
    return r;
  };
  const Timing plain = run([&](const Tensor& s) { return tick(s, gains); }, ticks / 2 + 1);
  const std::vector<double>& micros = plain.micros;
  const double first_ms = plain.first_ms, worst_angle = plain.worst_angle;

  const loom::Metrics m = loom::metrics();
  std::printf("%d ticks of %lld cart-poles (matrix-product controller + physics, %.0f nodes per tick)\n", ticks,
              static_cast<long long>(kPoles), static_cast<double>(m.graph_nodes) / m.graphs_materialized);
  std::printf("first tick (compile): %.1f ms; then %lld compiles, %lld replays\n", first_ms,
              static_cast<long long>(m.cache_misses - 1), static_cast<long long>(m.cache_hits));
  std::printf("per-tick latency, host included, µs:  min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  max %.1f\n",
              percentile(micros, 0), percentile(micros, 0.5), percentile(micros, 0.9), percentile(micros, 0.99),
              percentile(micros, 1));
  // A coarse histogram of the same numbers, on a log scale.
  const double lo = percentile(micros, 0), hi = percentile(micros, 1);
  constexpr int kBins = 8;
  std::vector<int> bins(kBins, 0);
  for (double us : micros) {
    const int b = hi > lo ? static_cast<int>(kBins * std::log(us / lo) / std::log(hi / lo * 1.0001)) : 0;
    ++bins[std::clamp(b, 0, kBins - 1)];
  }
  for (int b = 0; b < kBins; ++b) {
    const double from = lo * std::pow(hi / lo, double(b) / kBins), to = lo * std::pow(hi / lo, double(b + 1) / kBins);
    std::printf("  %8.1f - %8.1f µs | %-40s %d\n", from, to,
                std::string(static_cast<size_t>(40.0 * bins[b] / micros.size() + 0.999), '#').c_str(), bins[b]);
  }
  std::printf("largest pole angle over the second half: %.3f rad (%s)\n", worst_angle,
              worst_angle < 0.2 ? "all balanced" : "a pole is falling");

  // The same tick as a loom::compile'd function: traced on its first call,
  // then replayed without recording, hashing or looking up the graph (the
  // nudge's random numbers stay fresh every tick).
  loom::CompiledFunction compiled_tick =
      loom::compile([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tick(in[0], gains)}; });
  const Timing compiled = run([&](const Tensor& s) { return compiled_tick({s})[0]; }, 0);
  const std::vector<double>& compiled_micros = compiled.micros;
  const double compiled_worst = compiled.worst_angle;
  std::printf("the same %d ticks through loom::compile, µs:  min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  max %.1f "
              "(largest angle %.3f rad)\n",
              ticks, percentile(compiled_micros, 0), percentile(compiled_micros, 0.5), percentile(compiled_micros, 0.9),
              percentile(compiled_micros, 0.99), percentile(compiled_micros, 1), compiled_worst);
  return m.cache_misses == 1 && worst_angle < 0.2 && compiled_worst < 0.2 ? 0 : 1;
}
