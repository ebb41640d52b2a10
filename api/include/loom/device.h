// Devices: kCPU and kCUDA with an index, spelled as in libtorch.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#pragma GCC visibility push(default)
namespace loom {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;

class Device {
 public:
  Device(DeviceType type, int8_t index = -1) : type_(type), index_(index) {}  // NOLINT: implicit as in libtorch
  explicit Device(const std::string& spec);  // "cpu", "cuda", "cuda:1"
  DeviceType type() const { return type_; }
  // -1 means "the current device"; loom resolves it to 0 when a tensor is made.
  int8_t index() const { return index_; }
  bool has_index() const { return index_ >= 0; }
  bool is_cpu() const { return type_ == kCPU; }
  bool is_cuda() const { return type_ == kCUDA; }
  std::string str() const;
  bool operator==(const Device& o) const { return type_ == o.type_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  DeviceType type_;
  int8_t index_;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace loom
#pragma GCC visibility pop
