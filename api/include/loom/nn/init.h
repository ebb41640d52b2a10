// Parameter initialization, as torch::nn::init: each writes the tensor in
// place under NoGradGuard and returns it.
#pragma once
#include <loom/tensor.h>

#pragma GCC visibility push(default)
namespace loom {

enum class FanMode { FanIn, FanOut };
inline constexpr FanMode kFanIn = FanMode::FanIn;
inline constexpr FanMode kFanOut = FanMode::FanOut;
// Also what an RNN (Tanh, ReLU) or a Transformer layer (ReLU, GELU) applies.
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU, GELU };
inline constexpr Nonlinearity kLinear = Nonlinearity::Linear;
inline constexpr Nonlinearity kSigmoid = Nonlinearity::Sigmoid;
inline constexpr Nonlinearity kTanh = Nonlinearity::Tanh;
inline constexpr Nonlinearity kReLU = Nonlinearity::ReLU;
inline constexpr Nonlinearity kLeakyReLU = Nonlinearity::LeakyReLU;
inline constexpr Nonlinearity kGELU = Nonlinearity::GELU;

namespace nn::init {

double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
Tensor uniform_(Tensor tensor, double low = 0, double high = 1);
Tensor normal_(Tensor tensor, double mean = 0, double std = 1);
Tensor constant_(Tensor tensor, const Scalar& value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);
// std = gain(nonlinearity, a) / sqrt(fan); uniform on +-sqrt(3) std.
Tensor kaiming_uniform_(Tensor tensor, double a = 0, FanMode mode = kFanIn, Nonlinearity nonlinearity = kLeakyReLU);
Tensor kaiming_normal_(Tensor tensor, double a = 0, FanMode mode = kFanIn, Nonlinearity nonlinearity = kLeakyReLU);
Tensor xavier_uniform_(Tensor tensor, double gain = 1);
Tensor xavier_normal_(Tensor tensor, double gain = 1);

}  // namespace nn::init
}  // namespace loom
#pragma GCC visibility pop
