// The vocabulary types' behaviour: error text, dtype names and promotion,
// device parsing, printing of scalars and sizes.
#include <loom/array_ref.h>
#include <loom/device.h>
#include <loom/dtype.h>
#include <loom/error.h>
#include <loom/scalar.h>

#include <atomic>
#include <cstring>

#include <loom/options.h>

namespace loom {

namespace detail {
[[noreturn]] void throw_error(const char* op, const std::string& msg, const SourceLoc& loc) {
  std::string file = loc.file_name();
  std::ostringstream os;
  os << "loom: " << op << ": " << msg << " (called from " << file << ":" << loc.line() << ")";
  throw Error(os.str());
}
}  // namespace detail

std::string_view to_string(ScalarType t) {
  switch (t) {
    case ScalarType::Bool: return "Bool";
    case ScalarType::Int: return "Int";
    case ScalarType::Long: return "Long";
    case ScalarType::Float: return "Float";
    case ScalarType::Double: return "Double";
    case ScalarType::BFloat16: return "BFloat16";
    case ScalarType::Half: return "Half";
    case ScalarType::Byte: return "Byte";
    case ScalarType::Char: return "Char";
    case ScalarType::Short: return "Short";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, ScalarType t) { return os << to_string(t); }

ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  // torch.promote_types: bool < uint8, int8 < int16 < int32 < int64 <
  // float16, bfloat16 < float32 < float64. The two pairs that are not
  // ordered meet above both: uint8 and int8 in int16 (the least type holding
  // both ranges), float16 and bfloat16 in float32.
  if ((a == kByte && b == kChar) || (a == kChar && b == kByte)) return kShort;
  if ((a == kHalf && b == kBFloat16) || (a == kBFloat16 && b == kHalf)) return kFloat;
  auto rank = [](ScalarType t) {
    switch (t) {
      case ScalarType::Bool: return 0;
      case ScalarType::Byte: return 1;
      case ScalarType::Char: return 1;
      case ScalarType::Short: return 2;
      case ScalarType::Int: return 3;
      case ScalarType::Long: return 4;
      case ScalarType::Half: return 5;
      case ScalarType::BFloat16: return 5;
      case ScalarType::Float: return 6;
      case ScalarType::Double: return 7;
    }
    throw Error("loom: promote_types: " + std::to_string(static_cast<int>(t)) + " is not a dtype");
  };
  return rank(a) > rank(b) ? a : b;
}

Device::Device(const std::string& spec) : type_(kCPU), index_(-1) {
  std::string kind = spec, idx;
  if (auto colon = spec.find(':'); colon != std::string::npos) {
    kind = spec.substr(0, colon);
    idx = spec.substr(colon + 1);
  }
  if (kind == "cpu") type_ = kCPU;
  else if (kind == "cuda") type_ = kCUDA;
  else throw Error("loom: Device: expected a device string like 'cpu', 'cuda' or 'cuda:1' but got '" + spec + "'");
  if (!idx.empty()) {
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    if (*end || v < 0 || v > 127) throw Error("loom: Device: bad device index in '" + spec + "'");
    index_ = static_cast<int8_t>(v);
  }
}

std::string Device::str() const {
  if (type_ == kCPU) return "cpu";
  if (index_ < 0) return "cuda";
  return "cuda:" + std::to_string(static_cast<int>(index_));
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.isBoolean()) return os << (s.toBool() ? "true" : "false");
  if (s.isIntegral()) return os << s.toLong();
  return os << s.toDouble();
}

std::ostream& operator<<(std::ostream& os, IntArrayRef a) {
  os << "[";
  for (size_t i = 0; i < a.size(); ++i) os << (i ? ", " : "") << a[i];
  return os << "]";
}

}  // namespace loom

namespace loom {

namespace {
// (type << 8) | (index + 1): one word, so reading it needs no lock.
std::atomic<uint32_t> g_default_device{0};
}  // namespace

Device default_device() {
  const uint32_t v = g_default_device.load(std::memory_order_relaxed);
  return v == 0 ? Device(kCPU) : Device(static_cast<DeviceType>(v >> 8), static_cast<int8_t>(int(v & 0xff) - 1));
}

void set_default_device(Device d) {
  g_default_device.store((static_cast<uint32_t>(d.type()) << 8) | static_cast<uint32_t>(d.index() + 1),
                         std::memory_order_relaxed);
}

}  // namespace loom
