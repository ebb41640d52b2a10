// loom::Error and the check helpers every layer uses to report bad input.
// An error names the op, what was wrong (shapes, dtypes, dims) and the
// caller's file:line, captured with std::source_location at the API call.
#pragma once
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

#pragma GCC visibility push(default)
namespace loom {

using SourceLoc = std::source_location;

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
    if (!(cond)) [[unlikely]] {                                            \
      std::ostringstream loom_check_os_;                                   \
      ::loom::detail::append(loom_check_os_, __VA_ARGS__);                 \
      ::loom::detail::throw_error(op, loom_check_os_.str(), loc);          \
    }                                                                      \
  } while (0)

}  // namespace loom
#pragma GCC visibility pop
