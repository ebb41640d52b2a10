// Backend registry: which backend runs a device's graphs. Backends register
// themselves from their own files (LOOM_REGISTER_BACKEND); nothing here
// names one.
#include "runtime/backend.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <loom/error.h>

namespace loom::runtime {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::unique_ptr<Backend>, int>> backends;  // with their priorities
  Backend* cpu = nullptr;  // chosen on first use: LOOM_BACKEND, else the highest priority

  Backend* by_name(const std::string& name) {
    for (auto& [b, priority] : backends)
      if (name == b->name()) return b.get();
    return nullptr;
  }
  std::string available(DeviceType type) {
    std::string s;
    for (auto& [b, priority] : backends)
      if (b->device_type() == type) s += (s.empty() ? "" : ", ") + std::string(b->name());
    return s;
  }
  Backend* cpu_backend() {  // under mu
    if (cpu) return cpu;
    if (const char* env = std::getenv("LOOM_BACKEND"); env && *env) {
      Backend* b = by_name(env);
      if (!b || b->device_type() != kCPU)
        throw Error(std::string("loom: LOOM_BACKEND=") + env + " names no CPU backend of this build (available: " +
                    available(kCPU) + ")");
      return cpu = b;
    }
    for (auto& [b, priority] : backends)
      if (b->device_type() == kCPU) return cpu = b.get();  // sorted by priority
    throw Error("loom: this build has no CPU backend");
  }
};

// Never destroyed: registrations run during static initialization, in
// whatever order the objects were linked, and executables may outlive it.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

BackendRegistration::BackendRegistration(std::unique_ptr<Backend> backend, int priority) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.backends.emplace_back(std::move(backend), priority);
  std::stable_sort(r.backends.begin(), r.backends.end(), [](auto& a, auto& b) { return a.second > b.second; });
}

Backend& backend_for(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (device.is_cpu()) return *r.cpu_backend();
  for (auto& [b, priority] : r.backends)
    if (b->device_type() == device.type()) return *b;
  throw Error("loom: this build has no backend for " + device.str());
}

Backend* find_backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.by_name(name);
}

std::vector<std::string> backend_names(DeviceType type) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (auto& [b, priority] : r.backends)
    if (b->device_type() == type) names.push_back(b->name());
  return names;
}

std::string select_cpu_backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  Backend* b = r.by_name(name);
  if (!b || b->device_type() != kCPU)
    throw Error("loom: set_backend: unknown backend '" + name + "' (available: " + r.available(kCPU) + ")");
  std::string previous = r.cpu_backend()->name();
  r.cpu = b;
  return previous;
}

}  // namespace loom::runtime
