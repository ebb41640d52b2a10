// Decoding with a key/value cache (samples/gpt2_model.h: gpt2::KVCache,
// GPT::forward(idx, cache, pos), gpt2::generate): each step's logits are
// the full forward's at the last position, and every step after the first
// replays one executable.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <vector>

#include "../samples/gpt2_model.h"
#include "test_util.h"

namespace {

gpt2::Config tiny() { return {2, 2, 16, 32, 24}; }  // layers, heads, width, vocabulary, context

TEST(KvCache, EachStepsLogitsAreTheFullForwardsAtTheLastPosition) {
  loom::manual_seed(1);
  gpt2::GPT model(tiny());
  model->eval();
  loom::NoGradGuard no_grad;
  std::vector<int64_t> seq = {3, 17, 5, 9, 30};
  gpt2::KVCache cache(model->config, 1, 24, loom::kCPU);
  loom::Tensor logits = model->forward(loom::tensor(seq).view({1, 5}), cache, 0);
  for (int step = 0; step < 6; ++step) {
    const loom::Tensor full = model->forward(loom::tensor(seq).view({1, static_cast<int64_t>(seq.size())}));
    const std::vector<double> want = full.select(1, static_cast<int64_t>(seq.size()) - 1).to_vector<double>();
    EXPECT_TRUE(loom_test::all_close(logits.to_vector<double>(), want, 1e-4, 1e-5)) << "step " << step;
    const int64_t next = logits.argmax(-1).item<int64_t>();
    seq.push_back(next);
    logits = model->forward(loom::tensor({next}).view({1, 1}), cache, static_cast<int64_t>(seq.size()) - 1);
  }
}

TEST(KvCache, EveryDecodingStepAfterTheFirstReplaysOneExecutable) {
  loom::manual_seed(2);
  gpt2::GPT model(tiny());
  const loom::Tensor prompt = loom::tensor(std::vector<int64_t>{1, 2, 3, 4}).view({1, 4});
  loom::sync();  // the weights: else the first prompt's graph initializes them too
  gpt2::generate(model, prompt, 3, 24);  // the prompt's graph and the first step's, compiled
  const loom::Metrics before = loom::metrics();
  const std::vector<int64_t> out = gpt2::generate(model, prompt, 16, 24);
  const loom::Metrics after = loom::metrics();
  EXPECT_EQ(out.size(), 16u);
  EXPECT_EQ(after.cache_misses, before.cache_misses) << "a decoding step compiled";
  EXPECT_GE(after.cache_hits - before.cache_hits, 16);
  // The same tokens as without the warm-up: the cache starts empty each time.
  EXPECT_EQ(gpt2::generate(model, prompt, 16, 24), out);
}

}  // namespace
