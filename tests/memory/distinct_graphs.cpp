// Compiles `count` distinct graphs in one process (two scalings of a
// [2048, k] tensor joined by cat and summed: generated kernels and an arena
// of about 3 MiB for the values between them) and prints the resident
// memory it grew by. With the executable cache bounded (the default, or
// --limit BYTES), that growth stays bounded however many graphs come;
// with --limit 0 it grows with every graph.
//
//   distinct_graphs [--count N] [--limit BYTES] [--max-growth-mb MB]
//
// Exits 1 if the growth exceeds --max-growth-mb or a result is wrong.
#include <loom/loom.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace {

// Resident set size in MiB (/proc/self/statm).
double rss_mb() {
  std::ifstream f("/proc/self/statm");
  long long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * 4096.0 / (1 << 20);
}

// Graph i: k = 100 + i (a new shape, so a new key, every i); its value is
// 2048 k (2 + 3).
double run_graph(int i) {
  const int64_t k = 100 + i;
  // The sum alone is kept: the scalings and the cat are dead at the sync
  // (temporaries of the statement before), so they live in the
  // executable's arena, not in outputs a live tensor would own.
  const loom::Tensor x = loom::ones({2048, k});
  const loom::Tensor total = loom::cat({x * 2, x * 3}, 1).sum();
  return total.item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  int count = 1000;
  double max_growth_mb = -1;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (!std::strcmp(argv[a], "--count")) count = std::atoi(argv[a + 1]);
    else if (!std::strcmp(argv[a], "--limit")) loom::set_executable_cache_limit(std::atoll(argv[a + 1]));
    else if (!std::strcmp(argv[a], "--max-growth-mb")) max_growth_mb = std::atof(argv[a + 1]);
  }
  // Warm up the library's own one-time state (the JIT, thread pools) first.
  for (int i = 0; i < 5; ++i) run_graph(count + i);
  const double before = rss_mb();
  double peak = before;
  bool right = true;
  for (int i = 0; i < count; ++i) {
    const double got = run_graph(i);
    const double want = 2048.0 * static_cast<double>(100 + i) * 5;
    right = right && std::abs(got - want) < 1e-5 * want;
    if (i % 50 == 49) peak = std::max(peak, rss_mb());
  }
  const double after = rss_mb();
  const loom::Metrics m = loom::metrics();
  std::printf("graphs=%d compiles=%lld evicted=%lld cached=%lld cache_bytes=%lld limit=%lld rss_before_mb=%.1f "
              "rss_after_mb=%.1f growth_mb=%.1f peak_growth_mb=%.1f right=%d\n",
              count, static_cast<long long>(m.cache_misses), static_cast<long long>(m.executables_evicted),
              static_cast<long long>(m.executables_cached), static_cast<long long>(m.executable_cache_bytes),
              static_cast<long long>(loom::executable_cache_limit()), before, after, after - before,
              std::max(peak, after) - before, right ? 1 : 0);
  if (!right) return 1;
  if (max_growth_mb >= 0 && std::max(peak, after) - before > max_growth_mb) {
    std::printf("FAIL: resident memory grew by more than %.0f MiB\n", max_growth_mb);
    return 1;
  }
  return 0;
}
