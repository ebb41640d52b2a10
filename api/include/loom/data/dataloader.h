// DataLoader, as torch::data: make_data_loader(dataset, options) pairs a
// dataset with a sampler (RandomSampler unless named) and hands out its
// batches in a range-for:
//   auto loader = make_data_loader(std::move(ds), DataLoaderOptions().batch_size(64).workers(2));
//   for (auto& batch : *loader) { ... batch.data ... batch.target ... }
// Each begin() is an epoch: the sampler resets (a RandomSampler draws a new
// order). With workers, background threads each hold a copy of the
// dataset, build up to max_jobs batches ahead (default 2 per worker) and
// sync them, so a batch's graph runs off the training thread; batches come
// out in the sampler's order unless enforce_ordering(false). A batch that
// failed rethrows its error where it would have been handed out.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <loom/arg.h>
#include <loom/data/samplers.h>
#include <loom/error.h>
#include <loom/runtime.h>

namespace loom::data {

struct DataLoaderOptions {
  DataLoaderOptions() = default;
  /* implicit */ DataLoaderOptions(size_t batch_size) : batch_size_(batch_size) {}  // NOLINT: libtorch's
  LOOM_ARG(DataLoaderOptions, size_t, batch_size, 1)
  LOOM_ARG(DataLoaderOptions, size_t, workers, 0)
  LOOM_ARG(DataLoaderOptions, std::optional<size_t>, max_jobs, std::nullopt)
  LOOM_ARG(DataLoaderOptions, std::optional<std::chrono::milliseconds>, timeout, std::nullopt)
  LOOM_ARG(DataLoaderOptions, bool, enforce_ordering, true)
  LOOM_ARG(DataLoaderOptions, bool, drop_last, false)
};

template <typename Loader>
class Iterator {
 public:
  using Batch = typename Loader::BatchType;
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = Batch*;
  using reference = Batch&;

  Iterator() = default;  // the end
  explicit Iterator(Loader* loader) : loader_(loader) { ++*this; }
  Batch& operator*() { return *batch_; }
  Batch* operator->() { return &*batch_; }
  Iterator& operator++() {
    batch_ = loader_->next();
    if (!batch_) loader_ = nullptr;
    return *this;
  }
  // Only "is it the end" is meaningful, as for libtorch's iterators.
  friend bool operator==(const Iterator& a, const Iterator& b) { return a.loader_ == b.loader_; }
  friend bool operator!=(const Iterator& a, const Iterator& b) { return !(a == b); }

 private:
  Loader* loader_ = nullptr;
  std::optional<Batch> batch_;
};

template <typename Dataset, typename Sampler>
class StatelessDataLoader {
 public:
  using BatchType = typename Dataset::BatchType;
  using BatchRequestType = typename Sampler::BatchRequestType;

  StatelessDataLoader(Dataset dataset, Sampler sampler, DataLoaderOptions options)
      : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(std::move(options)) {
    if (options_.batch_size() == 0) throw Error("DataLoader: batch_size must be positive");
    for (size_t w = 0; w < options_.workers(); ++w)
      workers_.emplace_back([this, copy = dataset_]() mutable { work(copy); });
  }
  StatelessDataLoader(const StatelessDataLoader&) = delete;
  StatelessDataLoader& operator=(const StatelessDataLoader&) = delete;
  ~StatelessDataLoader() { join(); }

  // A new epoch: the sampler starts over; batches of an unfinished epoch
  // still in flight are waited for and dropped.
  Iterator<StatelessDataLoader> begin() {
    drain();
    sampler_.reset(std::nullopt);
    sampler_done_ = false;
    for (size_t j = 0; j < max_jobs(); ++j) push_job();
    return Iterator<StatelessDataLoader>(this);
  }
  Iterator<StatelessDataLoader> end() { return {}; }

  const DataLoaderOptions& options() const noexcept { return options_; }

  // Stops the workers (the destructor does).
  void join() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    jobs_ready_.notify_all();
    for (std::thread& t : workers_)
      if (t.joinable()) t.join();
    workers_.clear();
  }

  // The next batch of this epoch; nullopt at its end.
  std::optional<BatchType> next() {
    if (workers_.empty()) {
      std::optional<BatchRequestType> request = next_request();
      if (!request) return std::nullopt;
      return dataset_.get_batch(std::move(*request));
    }
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] {
      if (options_.enforce_ordering()) return results_.count(next_out_) > 0;
      return !results_.empty();
    };
    if (in_flight_ == 0 && results_.empty()) return std::nullopt;
    if (options_.timeout()) {
      if (!results_ready_.wait_for(lock, *options_.timeout(), ready))
        throw Error("DataLoader: no batch within the timeout of " + std::to_string(options_.timeout()->count()) +
                    " ms");
    } else {
      results_ready_.wait(lock, ready);
    }
    auto it = options_.enforce_ordering() ? results_.find(next_out_) : results_.begin();
    Result r = std::move(it->second);
    results_.erase(it);
    ++next_out_;
    lock.unlock();
    push_job();
    if (r.error) std::rethrow_exception(r.error);
    return std::move(r.batch);
  }

 private:
  struct Job {
    size_t sequence;
    BatchRequestType request;
  };
  struct Result {
    std::optional<BatchType> batch;
    std::exception_ptr error;
  };

  size_t max_jobs() const { return workers_.empty() ? 0 : options_.max_jobs().value_or(2 * workers_.size()); }

  // The sampler's next request, or nullopt at the end of the epoch (a
  // short last batch is the end under drop_last).
  std::optional<BatchRequestType> next_request() {
    if (sampler_done_) return std::nullopt;
    std::optional<BatchRequestType> request = sampler_.next(options_.batch_size());
    if (!request || (options_.drop_last() && request->size() < options_.batch_size())) {
      sampler_done_ = true;
      return std::nullopt;
    }
    return request;
  }

  void push_job() {
    std::optional<BatchRequestType> request = next_request();
    if (!request) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back({next_in_++, std::move(*request)});
      ++in_flight_;
    }
    jobs_ready_.notify_one();
  }

  void drain() {
    if (workers_.empty()) return;
    std::unique_lock<std::mutex> lock(mu_);
    jobs_.clear();  // queued jobs are dropped; running ones finish first
    results_ready_.wait(lock, [&] { return running_ == 0; });
    results_.clear();
    in_flight_ = 0;
    next_in_ = next_out_ = 0;
  }

  void work(Dataset& dataset) {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        jobs_ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
        ++running_;
      }
      Result r;
      try {
        r.batch = dataset.get_batch(std::move(job.request));
        loom::sync();  // the batch's graph runs here, off the training thread
      } catch (...) {
        r.batch.reset();
        r.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        --running_;
        --in_flight_;
        results_.emplace(job.sequence, std::move(r));
      }
      results_ready_.notify_all();
    }
  }

  Dataset dataset_;
  Sampler sampler_;
  DataLoaderOptions options_;
  bool sampler_done_ = false;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable jobs_ready_, results_ready_;
  std::deque<Job> jobs_;
  std::map<size_t, Result> results_;
  size_t in_flight_ = 0, running_ = 0, next_in_ = 0, next_out_ = 0;
  bool stopping_ = false;
};

// make_data_loader<Sampler = RandomSampler>(dataset, options): the sampler
// made from the dataset's size.
template <typename Sampler = samplers::RandomSampler, typename Dataset>
std::unique_ptr<StatelessDataLoader<Dataset, Sampler>> make_data_loader(Dataset dataset,
                                                                        DataLoaderOptions options = {}) {
  const std::optional<size_t> size = dataset.size();
  if (!size) throw Error("make_data_loader: the dataset has no size: pass a sampler");
  Sampler sampler(*size);
  return std::make_unique<StatelessDataLoader<Dataset, Sampler>>(std::move(dataset), std::move(sampler),
                                                                 std::move(options));
}

template <typename Dataset, typename Sampler,
          typename = std::enable_if_t<std::is_base_of<samplers::Sampler<typename Sampler::BatchRequestType>, Sampler>::value>>
std::unique_ptr<StatelessDataLoader<Dataset, Sampler>> make_data_loader(Dataset dataset, Sampler sampler,
                                                                        DataLoaderOptions options = {}) {
  return std::make_unique<StatelessDataLoader<Dataset, Sampler>>(std::move(dataset), std::move(sampler),
                                                                 std::move(options));
}

}  // namespace loom::data
