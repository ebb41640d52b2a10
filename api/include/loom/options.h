// TensorOptions: dtype, device and requires_grad of a new tensor, as in libtorch.
#pragma once
#include <optional>

#include <loom/device.h>
#include <loom/dtype.h>

#pragma GCC visibility push(default)
namespace loom {

// The device of tensors made without one (factories, tensor({...})):
// kCPU unless changed, as torch.set_default_device does. Process-wide.
Device default_device();
void set_default_device(Device d);

class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(ScalarType t) : dtype_(t) {}  // NOLINT: implicit as in libtorch
  TensorOptions(DeviceType d) : device_(Device(d)) {}  // NOLINT
  TensorOptions(Device d) : device_(d) {}  // NOLINT

  TensorOptions dtype(ScalarType t) const { auto o = *this; o.dtype_ = t; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r) const { auto o = *this; o.requires_grad_ = r; return o; }

  // Unset fields fall back to the defaults: float32, default_device(), no grad.
  ScalarType dtype() const { return dtype_.value_or(kFloat); }
  Device device() const { return device_ ? *device_ : default_device(); }
  bool requires_grad() const { return requires_grad_; }
  bool has_dtype() const { return dtype_.has_value(); }
  bool has_device() const { return device_.has_value(); }

 private:
  std::optional<ScalarType> dtype_;
  std::optional<Device> device_;
  bool requires_grad_ = false;
};

inline TensorOptions dtype(ScalarType t) { return TensorOptions(t); }
inline TensorOptions device(Device d) { return TensorOptions(d); }
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }

}  // namespace loom
#pragma GCC visibility pop
