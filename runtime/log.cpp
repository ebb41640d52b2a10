#include "runtime/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace loom::runtime {

namespace {
unsigned parse_topics(const char* env) {
  if (!env) return 0;
  unsigned mask = 0;
  static const std::pair<const char*, LogTopic> kNames[] = {{"graph", LogTopic::Graph},     {"cache", LogTopic::Cache},
                                                            {"passes", LogTopic::Passes},   {"fusion", LogTopic::Fusion},
                                                            {"kernels", LogTopic::Kernels}, {"donation", LogTopic::Donation},
                                                            {"profile", LogTopic::Profile},
                                                            {"recompiles", LogTopic::Recompiles}};
  for (auto& [name, topic] : kNames)
    if (std::strstr(env, name) || std::strcmp(env, "all") == 0) mask |= static_cast<unsigned>(topic);
  return mask;
}
const char* topic_name(LogTopic t) {
  switch (t) {
    case LogTopic::Graph: return "graph";
    case LogTopic::Cache: return "cache";
    case LogTopic::Passes: return "passes";
    case LogTopic::Fusion: return "fusion";
    case LogTopic::Kernels: return "kernels";
    case LogTopic::Donation: return "donation";
    case LogTopic::Profile: return "profile";
    case LogTopic::Recompiles: return "recompiles";
  }
  return "?";
}
std::mutex g_log_mu;
std::atomic<unsigned>& topics() {
  static std::atomic<unsigned> mask{parse_topics(std::getenv("LOOM_LOG"))};
  return mask;
}
}  // namespace

bool log_enabled(LogTopic t) { return topics().load(std::memory_order_relaxed) & static_cast<unsigned>(t); }

void set_log_topics(const char* names) { topics().store(parse_topics(names), std::memory_order_relaxed); }

void log_line(LogTopic t, const char* fmt, ...) {
  std::lock_guard lock(g_log_mu);
  std::fprintf(stderr, "[loom:%s] ", topic_name(t));
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}

void log_block(LogTopic t, const std::string& text) {
  std::lock_guard lock(g_log_mu);
  std::fprintf(stderr, "[loom:%s]\n%s", topic_name(t), text.c_str());
}

}  // namespace loom::runtime
