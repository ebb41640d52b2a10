#include "runtime/dump.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace loom::runtime {

std::string dump_folder(const ir::Graph& g, const char* backend) {
  static const char* root = std::getenv("LOOM_DUMP_DIR");
  if (!root || !*root) return "";
  char name[64];
  std::snprintf(name, sizeof name, "%s-%016llx", backend, static_cast<unsigned long long>(g.hash));
  std::filesystem::path p = std::filesystem::path(root) / name;
  std::error_code ec;
  std::filesystem::create_directories(p, ec);
  if (ec) {
    std::fprintf(stderr, "[loom] LOOM_DUMP_DIR: cannot create %s: %s\n", p.c_str(), ec.message().c_str());
    return "";
  }
  return p.string();
}

void dump_file(const std::string& folder, const std::string& name, const std::string& text) {
  if (folder.empty()) return;
  std::ofstream out(std::filesystem::path(folder) / name);
  out << text;
  if (!out) std::fprintf(stderr, "[loom] LOOM_DUMP_DIR: cannot write %s/%s\n", folder.c_str(), name.c_str());
}

}  // namespace loom::runtime
