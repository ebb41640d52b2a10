// Autocast's state and casts (api/include/loom/autocast.h, api/src/autocast.h).
//
// Which ops are on which list is decided where each op records: the op calls
// lower() or to_float() on its inputs first. The lists, as PyTorch's
// (torch/csrc/autocast_mode.cpp), for both devices:
//   lower precision: matmul, mm, bmm, baddbmm, addmm, mv, linear, einsum,
//                    conv1d, conv2d, conv_transpose2d,
//                    scaled_dot_product_attention
//   float32:         softmax, log_softmax, logsumexp, layer_norm, group_norm,
//                    cross_entropy, nll_loss, mse_loss, l1_loss, huber_loss,
//                    smooth_l1_loss, kl_div, binary_cross_entropy_with_logits,
//                    exp, expm1, log, log1p, log2, log10, reciprocal, rsqrt,
//                    pow, sinh, cosh, tan, asin, acos, softplus,
//                    sum, prod, cumsum and cumprod without a dtype
// tests/autocast_test.cpp checks each op's result dtype against this list.
#include "api/src/autocast.h"

#include <unordered_map>

#include "api/src/record.h"

namespace loom {

namespace detail::autocast {
namespace {

// A float32 leaf that requires grad (a weight) is cast once per region; the
// entry remembers the storage version it was cast at, so a weight written in
// place inside the region (an optimizer step) is cast again, not read stale.
struct CacheEntry {
  Tensor source;  // keeps the key's TensorImpl alive, so its address is not reused
  uint32_t version;
  Tensor cast;
};
thread_local std::unordered_map<const TensorImpl*, CacheEntry> tls_cache;

int device_index(DeviceType d) { return static_cast<int>(d); }

}  // namespace

// Neither checks `t` when no region is open: the op that calls them does.
Tensor lower(const Tensor& t, const SourceLoc& loc) {
  if (!any_region() || !t.defined()) return t;
  const TensorImpl& im = impl_of(t, "autocast", loc);
  const DeviceType dev = im.storage->device.type();
  if (!active(dev)) return t;
  const ScalarType from = im.storage->dtype, to = tls_state.dtype[device_index(dev)];
  if (!is_floating_point(from) || from == kDouble || from == to) return t;
  const bool cacheable = tls_state.cache && from == kFloat && t.is_leaf() && t.requires_grad() && !im.view_base;
  if (!cacheable) return t.to(to, loc);
  const uint32_t version = im.storage->version.load(std::memory_order_relaxed);
  auto it = tls_cache.find(&im);
  if (it != tls_cache.end() && it->second.version == version && it->second.cast.dtype() == to) return it->second.cast;
  Tensor cast = t.to(to, loc);
  tls_cache[&im] = CacheEntry{t, version, cast};
  return cast;
}

Tensor to_float(const Tensor& t, const SourceLoc& loc) {
  if (!any_region() || !t.defined()) return t;
  const TensorImpl& im = impl_of(t, "autocast", loc);
  if (!active(im.storage->device.type()) || !is_reduced_floating_point(im.storage->dtype)) return t;
  return t.to(kFloat, loc);
}

}  // namespace detail::autocast

namespace autocast {

using detail::autocast::tls_state;

bool is_autocast_enabled(DeviceType device_type) { return tls_state.enabled[static_cast<int>(device_type)]; }
void set_autocast_enabled(DeviceType device_type, bool enabled) {
  tls_state.enabled[static_cast<int>(device_type)] = enabled;
}
ScalarType get_autocast_dtype(DeviceType device_type) { return tls_state.dtype[static_cast<int>(device_type)]; }
void set_autocast_dtype(DeviceType device_type, ScalarType dtype, SourceLoc loc) {
  LOOM_CHECK(is_reduced_floating_point(dtype), "autocast", loc, "autocast runs products in BFloat16 or Half, got ",
             dtype, " for ", Device(device_type));
  tls_state.dtype[static_cast<int>(device_type)] = dtype;
}
bool is_autocast_cache_enabled() { return tls_state.cache; }
void set_autocast_cache_enabled(bool enabled) { tls_state.cache = enabled; }
void clear_cache() { detail::autocast::tls_cache.clear(); }
int increment_nesting() { return ++tls_state.nesting; }
int decrement_nesting() { return --tls_state.nesting; }

AutocastMode::AutocastMode(DeviceType device_type, std::optional<ScalarType> dtype, bool enabled,
                           std::optional<bool> cache_enabled, SourceLoc loc)
    : device_type_(device_type),
      prev_enabled_(is_autocast_enabled(device_type)),
      prev_dtype_(get_autocast_dtype(device_type)),
      prev_cache_(is_autocast_cache_enabled()) {
  if (dtype) set_autocast_dtype(device_type, *dtype, loc);  // checked before anything changes
  set_autocast_enabled(device_type, enabled);
  if (cache_enabled) set_autocast_cache_enabled(*cache_enabled);
  increment_nesting();
}

AutocastMode::~AutocastMode() {
  if (decrement_nesting() == 0) clear_cache();
  set_autocast_enabled(device_type_, prev_enabled_);
  tls_state.dtype[static_cast<int>(device_type_)] = prev_dtype_;
  set_autocast_cache_enabled(prev_cache_);
}

}  // namespace autocast
}  // namespace loom
