// Sums, means or maxima of bags of embeddings, as torch::nn::EmbeddingBag and
// F::embedding_bag: a 2-D input is one bag per row; a 1-D input is split
// into bags where `offsets` start them.
#pragma once
#include <optional>

#include <loom/arg.h>
#include <loom/nn/module.h>
#include <loom/nn/options.h>

#pragma GCC visibility push(default)
namespace loom {

// kSum and kMean are the Reduction constants; kMax is the third mode.
class EmbeddingBagMode {
 public:
  enum Kind { Sum, Mean, Max };
  constexpr EmbeddingBagMode(Kind k) : kind(k) {}  // NOLINT
  EmbeddingBagMode(Reduction r);                    // NOLINT: kSum or kMean
  Kind kind;
};
inline constexpr EmbeddingBagMode::Kind kMax = EmbeddingBagMode::Max;

namespace nn {

namespace functional {
struct EmbeddingBagFuncOptions {
  LOOM_ARG(EmbeddingBagFuncOptions, Tensor, offsets, {})  // int64 [bags] (or [bags + 1] with include_last_offset)
  LOOM_ARG(EmbeddingBagFuncOptions, EmbeddingBagMode, mode, kMean)
  LOOM_ARG(EmbeddingBagFuncOptions, Tensor, per_sample_weights, {})  // input's shape; mode kSum only
  LOOM_ARG(EmbeddingBagFuncOptions, bool, include_last_offset, false)
  LOOM_ARG(EmbeddingBagFuncOptions, std::optional<int64_t>, padding_idx, std::nullopt)  // left out of every bag
};
// -> [bags, embedding_dim]; an empty bag is zeros.
Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& options = {}, LOOM_LOC);
}  // namespace functional

struct EmbeddingBagOptions {
  EmbeddingBagOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  LOOM_ARG(EmbeddingBagOptions, int64_t, num_embeddings, 0)
  LOOM_ARG(EmbeddingBagOptions, int64_t, embedding_dim, 0)
  LOOM_ARG(EmbeddingBagOptions, EmbeddingBagMode, mode, kMean)
  LOOM_ARG(EmbeddingBagOptions, bool, include_last_offset, false)
  LOOM_ARG(EmbeddingBagOptions, std::optional<int64_t>, padding_idx, std::nullopt)
};

class EmbeddingBagImpl : public Module {
 public:
  explicit EmbeddingBagImpl(const EmbeddingBagOptions& options);
  EmbeddingBagImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingBagImpl(EmbeddingBagOptions(num_embeddings, embedding_dim)) {}
  void reset_parameters();  // N(0, 1); the padding row zero
  Tensor forward(const Tensor& input, const Tensor& offsets = {}, const Tensor& per_sample_weights = {}, LOOM_LOC);
  void pretty_print(std::ostream& os) const override;
  EmbeddingBagOptions options;
  Tensor weight;  // [num_embeddings, embedding_dim]
};
LOOM_MODULE(EmbeddingBag);

}  // namespace nn
}  // namespace loom
#pragma GCC visibility pop
