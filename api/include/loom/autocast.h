// Automatic mixed precision: libtorch's at::autocast functions and a scoped
// guard shaped like Python's `torch.autocast(device_type, dtype)`.
//
//   {
//     loom::autocast::AutocastMode amp(loom::kCUDA, loom::kBFloat16);
//     loss = loom::nn::functional::cross_entropy(model->forward(x), y);
//   }
//   loss.backward();   // gradients come back in each weight's own float32
//
// Inside an enabled region, ops on the lower-precision list (products,
// linear, convolutions, attention) cast their floating inputs to the
// region's dtype and compute in it; ops on the float32 list (softmax,
// log_softmax, logsumexp, layer and group norm, the losses, exp/log/pow and
// friends, sums and products without a dtype) cast lower-precision inputs to
// float32. Every other op runs in the dtypes it is given (type promotion
// decides mixed inputs). float64 is never narrowed. The lists are
// PyTorch's, the same for both devices; they live in
// api/src/autocast.cpp, and docs/ARCHITECTURE.md says how an op joins one.
//
// The state is per thread, as in PyTorch. The backward pass never casts:
// autograd runs each gradient in the dtypes its forward recorded, so a
// weight's gradient arrives in the weight's dtype. A float32 leaf that
// requires grad is cast once per region (the cast cache) unless it is
// written in place meanwhile; leaving the outermost enabled region, or
// clear_cache(), empties the cache.
#pragma once

#include <loom/device.h>
#include <loom/dtype.h>
#include <loom/error.h>

#include <optional>

#pragma GCC visibility push(default)
namespace loom::autocast {

bool is_autocast_enabled(DeviceType device_type);
void set_autocast_enabled(DeviceType device_type, bool enabled);
// The dtype products run in: kBFloat16 or kHalf. Defaults as PyTorch's:
// kHalf on CUDA, kBFloat16 on the CPU. Anything else is a loom::Error.
ScalarType get_autocast_dtype(DeviceType device_type);
void set_autocast_dtype(DeviceType device_type, ScalarType dtype, SourceLoc loc = SourceLoc::current());
bool is_autocast_cache_enabled();
void set_autocast_cache_enabled(bool enabled);
void clear_cache();
// Nesting depth of enabled regions (PyTorch counts it to know when the
// outermost one ends and the cache can go).
int increment_nesting();
int decrement_nesting();

// The scoped form: enables (or, with enabled = false, disables) autocast for
// one device type, sets its dtype, and restores the previous state when it
// goes out of scope, clearing the cache as the outermost region ends.
class AutocastMode {
 public:
  explicit AutocastMode(DeviceType device_type, std::optional<ScalarType> dtype = std::nullopt, bool enabled = true,
                        std::optional<bool> cache_enabled = std::nullopt,
                        SourceLoc loc = SourceLoc::current());
  ~AutocastMode();
  AutocastMode(const AutocastMode&) = delete;
  AutocastMode& operator=(const AutocastMode&) = delete;

 private:
  DeviceType device_type_;
  bool prev_enabled_;
  ScalarType prev_dtype_;
  bool prev_cache_;
};

}  // namespace loom::autocast
#pragma GCC visibility pop
