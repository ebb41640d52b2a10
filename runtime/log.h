// LOOM_LOG=graph,cache,... : what the runtime prints to stderr, by topic.
#pragma once
#include <string>

namespace loom::runtime {

enum class LogTopic : unsigned {
  Graph = 1,
  Cache = 2,
  Passes = 4,
  Fusion = 8,
  Kernels = 16,
  Donation = 32,
  Profile = 64,  // each step of a CPU run and its wall time (runtime/cpu/cpu_executable.cpp)
  Recompiles = 128,  // a compile of a graph like one compiled before, and what differed (runtime/recompile.cpp)
};

bool log_enabled(LogTopic t);
// Replaces the topics LOOM_LOG gave with those named in `topics` (the same
// spelling: "recompiles,cache", "all", "" for none): loom::set_log.
void set_log_topics(const char* topics);
void log_line(LogTopic t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void log_block(LogTopic t, const std::string& text);

}  // namespace loom::runtime
