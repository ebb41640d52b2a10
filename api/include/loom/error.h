// loom::Error and the check helpers every layer uses to report bad input.
// An error names the op, what was wrong (shapes, dtypes, dims) and the
// caller's file:line, captured at the API call by SourceLoc.
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#pragma GCC visibility push(default)
namespace loom {

// Where a call was written: what std::source_location gives, for C++17
// programs too (the compiler builtins behind it: a default argument
// `SourceLoc loc = SourceLoc::current()` takes the caller's file and line).
// One layout whatever the standard a program builds with, so a C++17
// program and the C++20 library agree on every function taking one; two
// words, passed in registers.
class SourceLoc {
 public:
  constexpr SourceLoc() noexcept = default;
  static constexpr SourceLoc current(const char* file = __builtin_FILE(), std::uint32_t line = __builtin_LINE()) noexcept {
    SourceLoc l;
    l.file_ = file;
    l.line_ = line;
    return l;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr std::uint32_t line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  std::uint32_t line_ = 0;
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... R>
void append(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  append(os, rest...);
}
// "add: shapes [2, 3] and [4] cannot be broadcast (called from main.cpp:12)"
[[noreturn]] void throw_error(const char* op, const std::string& msg, const SourceLoc& loc);
}  // namespace detail

// LOOM_CHECK(cond, op, loc, message parts...): throws loom::Error when cond is false.
#define LOOM_CHECK(cond, op, loc, ...)                                     \
  do {                                                                     \
    if (__builtin_expect(!(cond), 0)) {                                    \
      std::ostringstream loom_check_os_;                                   \
      ::loom::detail::append(loom_check_os_, __VA_ARGS__);                 \
      ::loom::detail::throw_error(op, loom_check_os_.str(), loc);          \
    }                                                                      \
  } while (0)

}  // namespace loom
#pragma GCC visibility pop
