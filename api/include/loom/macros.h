// The macros and small helpers libtorch programs use, so that a port
// compiles unchanged: TORCH_MODULE (LOOM_MODULE), TORCH_CHECK and AT_ASSERT
// (a loom::Error with the message parts, as c10::Error), torch::str,
// torch::optional.
// Each is defined only where libtorch's own is not.
#pragma once
#include <optional>
#include <sstream>
#include <string>

#include <loom/error.h>

namespace loom {
// torch::optional and torch::nullopt are std's, as in libtorch.
using std::nullopt;
using std::optional;

// The parts streamed into one string, as c10::str.
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}
}  // namespace loom

#ifndef TORCH_MODULE
#define TORCH_MODULE(Name) LOOM_MODULE(Name)
#endif

#ifndef TORCH_CHECK
#define TORCH_CHECK(cond, ...)                                                                          \
  do {                                                                                                  \
    if (!(cond))                                                                                        \
      throw ::loom::Error(::loom::str("Expected " #cond " to be true, but got false. ", ##__VA_ARGS__, \
                                      " (", __FILE__, ":", __LINE__, ")"));                             \
  } while (0)
#endif

#ifndef AT_ASSERT
#define AT_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#endif

#ifndef TORCH_INTERNAL_ASSERT
#define TORCH_INTERNAL_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#endif
