// Where the docs restate the code, they agree with it: the lowering's pass
// table in docs/ARCHITECTURE.md is the list Lowering::passes() runs, and the
// files the how-to guides name exist.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ir/lower/lower.h"

namespace {

std::string read_doc(const std::string& relative) {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/" + relative);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The text of the section whose heading starts with `heading`, up to the
// next heading of the same level.
std::string section(const std::string& doc, const std::string& heading) {
  const size_t at = doc.find("\n" + heading);
  if (at == std::string::npos) return "";
  const size_t end = doc.find("\n## ", at + 1);
  return doc.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST(Docs, ArchitecturePassTableIsTheLoweringsPassList) {
  const std::string doc = read_doc("docs/ARCHITECTURE.md");
  ASSERT_FALSE(doc.empty()) << "docs/ARCHITECTURE.md not found under " << LOOM_SOURCE_DIR;
  const std::string s3 = section(doc, "## 3.");
  ASSERT_FALSE(s3.empty()) << "no section '## 3.' in docs/ARCHITECTURE.md";
  // A pass row starts with the pass's name in bold: "| **vertical** | ...".
  std::vector<std::string> documented;
  const std::regex row(R"(\n\| \*\*([^*]+)\*\*)");
  for (auto it = std::sregex_iterator(s3.begin(), s3.end(), row); it != std::sregex_iterator(); ++it)
    documented.push_back((*it)[1]);
  std::vector<std::string> code;
  for (const loom::ir::PassInfo& p : loom::ir::lowering_passes()) code.push_back(p.name);
  EXPECT_EQ(documented, code) << "docs/ARCHITECTURE.md section 3 lists the passes of ir/lower/lower.cpp "
                                 "Lowering::passes(), in order, one bold row each";
}

// Every repository path a guide names in backticks (`ir/ops.def`,
// `runtime/interp/interp_kernel.cpp`) exists.
TEST(Docs, GuidesNameFilesThatExist) {
  for (const char* guide : {"docs/ADDING_AN_OP.md", "docs/ADDING_A_BACKEND.md", "docs/ARCHITECTURE.md",
                            "docs/PERFORMANCE.md", "README.md", "ir/README.md", "jit/README.md", "runtime/README.md",
                            "api/README.md", "kernels/README.md", "bench/README.md"}) {
    const std::string doc = read_doc(guide);
    ASSERT_FALSE(doc.empty()) << guide;
    const std::regex path(R"(`((?:api|ir|jit|kernels|runtime|tests|samples|bench|docs|cmake|scripts)/[A-Za-z0-9_./]+\.(?:h|cpp|def|md|cu|cuh|inc|cmake|sh|py))`)");
    int named = 0;
    for (auto it = std::sregex_iterator(doc.begin(), doc.end(), path); it != std::sregex_iterator(); ++it, ++named)
      EXPECT_TRUE(std::filesystem::exists(std::string(LOOM_SOURCE_DIR) + "/" + (*it)[1].str()))
          << guide << " names " << (*it)[1] << ", which does not exist";
    EXPECT_GT(named, 1) << guide;
  }
}

// docs/PERFORMANCE.md is today's figures, short enough to scan, with a chart
// that exists; its history is git's.
TEST(Docs, PerformanceIsTodaysFiguresWithCharts) {
  const std::string doc = read_doc("docs/PERFORMANCE.md");
  ASSERT_FALSE(doc.empty());
  EXPECT_LE(std::count(doc.begin(), doc.end(), '\n'), 600) << "docs/PERFORMANCE.md is over 600 lines";
  const std::regex chart(R"(!\[[^\]]*\]\(([^)]+\.png)\))");
  int charts = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), chart); it != std::sregex_iterator(); ++it, ++charts)
    EXPECT_TRUE(std::filesystem::exists(std::string(LOOM_SOURCE_DIR) + "/docs/" + (*it)[1].str())) << (*it)[1];
  EXPECT_GE(charts, 1);
  EXPECT_FALSE(std::regex_search(doc, std::regex("[Ss]ession [0-9]+"))) << "a numbered work-log heading";
}

}  // namespace
