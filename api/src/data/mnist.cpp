// datasets::MNIST: the idx files (big-endian header: magic, counts, rows,
// columns; then one byte a pixel or label), read once into two tensors.
#include <loom/data/datasets.h>
#include <loom/error.h>
#include <loom/functions.h>
#include <loom/runtime.h>

#include <cstdint>
#include <fstream>
#include <vector>

namespace loom::data::datasets {

namespace {

uint32_t read_u32(std::ifstream& in, const std::string& path) {
  unsigned char b[4];
  if (!in.read(reinterpret_cast<char*>(b), 4)) throw Error("MNIST: " + path + " is truncated (its header)");
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

std::vector<uint8_t> read_idx(const std::string& path, uint32_t magic, std::vector<uint32_t>& dims) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("MNIST: cannot open " + path);
  const uint32_t m = read_u32(in, path);
  if (m != magic)
    throw Error("MNIST: " + path + " has magic number " + std::to_string(m) + ", expected " + std::to_string(magic));
  size_t n = 1;
  for (uint32_t& d : dims) {
    d = read_u32(in, path);
    n *= d;
  }
  std::vector<uint8_t> bytes(n);
  if (n && !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(n)))
    throw Error("MNIST: " + path + " is truncated: expected " + std::to_string(n) + " bytes of data");
  return bytes;
}

}  // namespace

MNIST::MNIST(const std::string& root, Mode mode) : train_(mode == Mode::kTrain) {
  const std::string prefix = root + "/" + (train_ ? "train" : "t10k");
  std::vector<uint32_t> image_dims(3), label_dims(1);
  const std::vector<uint8_t> pixels = read_idx(prefix + "-images-idx3-ubyte", 2051, image_dims);
  const std::vector<uint8_t> labels = read_idx(prefix + "-labels-idx1-ubyte", 2049, label_dims);
  if (image_dims[0] != label_dims[0])
    throw Error("MNIST: " + prefix + " has " + std::to_string(image_dims[0]) + " images but " +
                std::to_string(label_dims[0]) + " labels");
  const int64_t n = image_dims[0], rows = image_dims[1], cols = image_dims[2];
  std::vector<float> scaled(pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) scaled[i] = static_cast<float>(pixels[i]) / 255.0f;
  images_ = loom::tensor(scaled).reshape({n, 1, rows, cols});
  targets_ = loom::tensor(std::vector<int64_t>(labels.begin(), labels.end()));
  loom::sync();  // stored once: every sample is a view of these
}

Example<> MNIST::get(size_t index) {
  const auto i = static_cast<int64_t>(index);
  return {images_[i], targets_[i]};
}

std::optional<size_t> MNIST::size() const { return static_cast<size_t>(images_.size(0)); }
bool MNIST::is_train() const noexcept { return train_; }
const Tensor& MNIST::images() const { return images_; }
const Tensor& MNIST::targets() const { return targets_; }

}  // namespace loom::data::datasets
