// The samplers of loom/data/samplers.h.
#include <loom/data/samplers.h>
#include <loom/functions.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace loom::data::samplers {

namespace {
std::optional<std::vector<size_t>> take(const std::vector<size_t>* indices, size_t& index, size_t end,
                                        size_t batch_size) {
  if (index >= end) return std::nullopt;
  const size_t stop = std::min(end, index + batch_size);
  std::vector<size_t> out;
  out.reserve(stop - index);
  for (size_t i = index; i < stop; ++i) out.push_back(indices ? (*indices)[i] : i);
  index = stop;
  return out;
}
}  // namespace

void SequentialSampler::reset(std::optional<size_t> new_size) {
  if (new_size) size_ = *new_size;
  index_ = 0;
}

std::optional<std::vector<size_t>> SequentialSampler::next(size_t batch_size) {
  return take(nullptr, index_, size_, batch_size);
}

RandomSampler::RandomSampler(int64_t size, ScalarType) : indices_(static_cast<size_t>(std::max<int64_t>(size, 0))) {
  reset(std::nullopt);
}

void RandomSampler::reset(std::optional<size_t> new_size) {
  const size_t n = new_size.value_or(indices_.size());
  const std::vector<int64_t> perm = loom::randperm(static_cast<int64_t>(n)).to_vector<int64_t>();
  indices_.assign(perm.begin(), perm.end());
  index_ = 0;
}

std::optional<std::vector<size_t>> RandomSampler::next(size_t batch_size) {
  return take(&indices_, index_, indices_.size(), batch_size);
}

size_t DistributedSampler::local_sample_count() const {
  return allow_duplicates_ ? (size_ + num_replicas_ - 1) / num_replicas_ : size_ / num_replicas_;
}

void DistributedSampler::start_share(std::optional<size_t> new_size) {
  size_ = new_size.value_or(size_);
  begin_index_ = rank_ * local_sample_count();
  end_index_ = begin_index_ + local_sample_count();
  sample_index_ = begin_index_;
}

DistributedRandomSampler::DistributedRandomSampler(size_t size, size_t num_replicas, size_t rank,
                                                   bool allow_duplicates)
    : DistributedSampler(size, num_replicas, rank, allow_duplicates) {
  reset(size_);
}

// Every replica shuffles all indices with the same epoch-seeded engine and
// takes its own contiguous share, so the shares never overlap (but for the
// duplicates that pad the last ones).
void DistributedRandomSampler::reset(std::optional<size_t> new_size) {
  start_share(new_size);
  const size_t count = num_replicas_ == 1 ? size_ : local_sample_count() * num_replicas_;
  all_indices_.resize(count);
  std::iota(all_indices_.begin(), all_indices_.end(), size_t{0});
  for (size_t i = size_; i < count; ++i) all_indices_[i] = i - size_;
  std::mt19937_64 engine(epoch_);
  std::shuffle(all_indices_.begin(), all_indices_.end(), engine);
}

std::optional<std::vector<size_t>> DistributedRandomSampler::next(size_t batch_size) {
  return take(&all_indices_, sample_index_, end_index_, batch_size);
}

DistributedSequentialSampler::DistributedSequentialSampler(size_t size, size_t num_replicas, size_t rank,
                                                           bool allow_duplicates)
    : DistributedSampler(size, num_replicas, rank, allow_duplicates) {
  reset(size_);
}

void DistributedSequentialSampler::reset(std::optional<size_t> new_size) { start_share(new_size); }

// Indices past the dataset's end (the padding of the last replica) wrap to
// its start, as the random sampler's duplicates do.
std::optional<std::vector<size_t>> DistributedSequentialSampler::next(size_t batch_size) {
  std::optional<std::vector<size_t>> out = take(nullptr, sample_index_, end_index_, batch_size);
  if (out && size_ > 0)
    for (size_t& i : *out) i %= size_;
  return out;
}

}  // namespace loom::data::samplers
