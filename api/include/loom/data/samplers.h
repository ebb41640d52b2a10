// Samplers, as torch::data::samplers: which indices each batch holds.
// SequentialSampler walks 0..n-1; RandomSampler a permutation drawn from
// loom's generator (loom::manual_seed decides it, as torch::manual_seed
// decides libtorch's), anew at each reset (each epoch of a DataLoader);
// the distributed samplers give replica `rank` of `num_replicas` its share,
// shuffled by epoch (set_epoch). Saving a sampler's state (libtorch's
// save/load to an archive) is not provided.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <loom/dtype.h>

#pragma GCC visibility push(default)
namespace loom::data::samplers {

template <typename BatchRequest = std::vector<size_t>>
class Sampler {
 public:
  using BatchRequestType = BatchRequest;
  virtual ~Sampler() = default;
  // Starts over, with a new dataset size when given.
  virtual void reset(std::optional<size_t> new_size) = 0;
  // The next batch of at most batch_size indices; nullopt when exhausted.
  virtual std::optional<BatchRequest> next(size_t batch_size) = 0;
};

class SequentialSampler : public Sampler<> {
 public:
  explicit SequentialSampler(size_t size) : size_(size) {}
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  size_t index() const noexcept { return index_; }

 private:
  size_t size_, index_ = 0;
};

class RandomSampler : public Sampler<> {
 public:
  // index_dtype is accepted for libtorch's signature; indices are size_t.
  explicit RandomSampler(int64_t size, ScalarType index_dtype = kLong);
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  size_t index() const noexcept { return index_; }

 private:
  std::vector<size_t> indices_;
  size_t index_ = 0;
};

class DistributedSampler : public Sampler<> {
 public:
  DistributedSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true)
      : size_(size), num_replicas_(num_replicas), rank_(rank), allow_duplicates_(allow_duplicates) {}
  void set_epoch(size_t epoch) { epoch_ = epoch; }
  size_t epoch() const { return epoch_; }
  size_t index() const noexcept { return sample_index_; }

 protected:
  // Samples this replica draws: the share rounded up (duplicates fill the
  // last replicas) or down (the remainder is never drawn).
  size_t local_sample_count() const;
  // Takes the new size, and this replica's share [begin_index_, end_index_)
  // of the epoch's order; the next sample is its first.
  void start_share(std::optional<size_t> new_size);
  size_t size_, num_replicas_, rank_, epoch_ = 0;
  bool allow_duplicates_;
  size_t begin_index_ = 0, end_index_ = 0, sample_index_ = 0;
};

class DistributedRandomSampler : public DistributedSampler {
 public:
  DistributedRandomSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true);
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;

 private:
  std::vector<size_t> all_indices_;
};

class DistributedSequentialSampler : public DistributedSampler {
 public:
  DistributedSequentialSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true);
  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
};

}  // namespace loom::data::samplers
#pragma GCC visibility pop
