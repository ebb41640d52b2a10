// LOOM_ARG: an option of an options struct with libtorch's accessors (as
// TORCH_ARG): `const T& name() const` and a chainable `Self& name(T)`, so
// that `LinearOptions(784, 1024).bias(false)` reads as it does in libtorch.
// Used by loom/nn/options.h and the optimizers' options (loom/optim/).
#pragma once

#define LOOM_ARG(Self, T, name, init)       \
 public:                                    \
  Self& name(const T& v) {                  \
    name##_ = v;                            \
    return *this;                           \
  }                                         \
  const T& name() const { return name##_; } \
                                            \
 private:                                   \
  T name##_ = init;
