// train_mlp: trains an MLP classifier with loom, the libtorch way
// (nn::Sequential, F::cross_entropy, optim::Adam), on a data set it makes
// itself (a seeded five-arm spiral, with a held-out split) or on MNIST idx
// files. Every training step (forward, backward, update) is one lazy graph:
// compiled once, replayed every later step; the end of the run prints how
// often each happened.
//
//   train_mlp                          # the spiral, a few seconds on two cores
//   train_mlp --mnist DIR              # DIR holds the four MNIST idx files
//   train_mlp --epochs 30 --batch 256 --lr 0.002 --hidden 256 --seed 7 --sgd
//   train_mlp --compiled               # steps replayed by loom::compile: no recording
//
// Exits with status 1 if the test accuracy ends below --target (default
// 0.95 for the spiral, 0.97 for MNIST).
#include <loom/loom.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace nn = loom::nn;
namespace F = loom::nn::functional;
using Clock = std::chrono::steady_clock;

struct Dataset {
  std::vector<float> x;        // rows of `features` floats
  std::vector<int64_t> y;
  int64_t features = 0, classes = 0;
  int64_t size() const { return static_cast<int64_t>(y.size()); }
};

// `arms` interleaved spiral arms in the plane, with Gaussian noise; every
// point is a class-`arm` sample. Deterministic for a seed.
Dataset spiral(int64_t per_class, int arms, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.f, 0.25f);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  Dataset d{{}, {}, 2, arms};
  for (int arm = 0; arm < arms; ++arm)
    for (int64_t i = 0; i < per_class; ++i) {
      const float r = unit(rng);  // radius in [0, 1): angle grows with it
      const float angle = 2.f * static_cast<float>(M_PI) * (static_cast<float>(arm) / arms + 0.75f * r);
      d.x.push_back(4.f * r * std::cos(angle) + noise(rng) * r);
      d.x.push_back(4.f * r * std::sin(angle) + noise(rng) * r);
      d.y.push_back(arm);
    }
  return d;
}

// MNIST's idx files: images scaled to [0, 1] and normalized as is usual.
uint32_t big_endian(std::ifstream& f) {
  unsigned char b[4];
  f.read(reinterpret_cast<char*>(b), 4);
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
}
Dataset mnist(const std::string& dir, bool train) {
  const std::string images = dir + (train ? "/train-images-idx3-ubyte" : "/t10k-images-idx3-ubyte");
  const std::string labels = dir + (train ? "/train-labels-idx1-ubyte" : "/t10k-labels-idx1-ubyte");
  std::ifstream fi(images, std::ios::binary), fl(labels, std::ios::binary);
  if (!fi || !fl) throw std::runtime_error("cannot open " + images + " and " + labels + " (unpacked idx files)");
  if (big_endian(fi) != 2051 || big_endian(fl) != 2049) throw std::runtime_error(dir + ": not MNIST idx files");
  const uint32_t n = big_endian(fi), rows = big_endian(fi), cols = big_endian(fi);
  if (big_endian(fl) != n) throw std::runtime_error(dir + ": image and label counts differ");
  Dataset d{{}, {}, int64_t(rows) * cols, 10};
  std::vector<unsigned char> pixels(size_t(n) * rows * cols), tags(n);
  fi.read(reinterpret_cast<char*>(pixels.data()), std::streamsize(pixels.size()));
  fl.read(reinterpret_cast<char*>(tags.data()), n);
  if (!fi || !fl) throw std::runtime_error(dir + ": truncated idx file");
  d.x.reserve(pixels.size());
  for (unsigned char p : pixels) d.x.push_back((p / 255.f - 0.1307f) / 0.3081f);
  d.y.assign(tags.begin(), tags.end());
  return d;
}

// A random split: `test_fraction` of the rows held out.
void split(const Dataset& all, double test_fraction, uint64_t seed, Dataset& train, Dataset& test) {
  std::vector<int64_t> order(all.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const int64_t n_test = static_cast<int64_t>(all.size() * test_fraction);
  train = test = Dataset{{}, {}, all.features, all.classes};
  for (int64_t i = 0; i < all.size(); ++i) {
    Dataset& to = i < n_test ? test : train;
    to.x.insert(to.x.end(), all.x.begin() + order[i] * all.features, all.x.begin() + (order[i] + 1) * all.features);
    to.y.push_back(all.y[order[i]]);
  }
}

// The whole of a data set as two tensors (materialized: graph inputs).
std::pair<loom::Tensor, loom::Tensor> tensors(const Dataset& d) {
  return {loom::tensor(d.x).view({d.size(), d.features}).clone(), loom::tensor(d.y)};
}

void progress(int epoch, int epochs, int64_t step, int64_t steps, float loss) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(steps, 1));
  std::printf("\repoch %2d/%d [%s%s] %4lld/%lld  loss %.4f", epoch, epochs, std::string(filled, '#').c_str(),
              std::string(kWidth - filled, '.').c_str(), static_cast<long long>(step), static_cast<long long>(steps),
              loss);
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  std::string mnist_dir;
  int epochs = -1;
  int64_t batch = 128, hidden = -1;
  double lr = -1, target = -1;
  uint64_t seed = 0;
  bool sgd = false, compiled = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(std::string(flag) + " needs a value");
      return argv[++i];
    };
    auto number = [&](const char* flag) {
      const std::string v = next(flag);
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end) throw std::runtime_error(std::string(flag) + " expects a number, got '" + v + "'");
      return d;
    };
    const std::string a = argv[i];
    if (a == "--mnist") mnist_dir = next("--mnist");
    else if (a == "--epochs") epochs = static_cast<int>(number("--epochs"));
    else if (a == "--batch") batch = static_cast<int64_t>(number("--batch"));
    else if (a == "--hidden") hidden = static_cast<int64_t>(number("--hidden"));
    else if (a == "--lr") lr = number("--lr");
    else if (a == "--seed") seed = static_cast<uint64_t>(number("--seed"));
    else if (a == "--target") target = number("--target");
    else if (a == "--sgd") sgd = true;
    else if (a == "--compiled") compiled = true;
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: train_mlp [--mnist DIR] [--epochs N] [--batch N] [--hidden N] [--lr X] [--seed N] "
                   "[--target ACC] [--sgd] [--compiled]\n";
      return 0;
    } else {
      std::cerr << "usage: train_mlp [--mnist DIR] [--epochs N] [--batch N] [--hidden N] [--lr X] [--seed N] "
                   "[--target ACC] [--sgd] [--compiled]\n";
      return 2;
    }
  }
  if (epochs == 0 || batch < 1 || hidden == 0) throw std::runtime_error("--epochs, --batch and --hidden must be positive");
  const bool on_mnist = !mnist_dir.empty();
  if (epochs < 0) epochs = on_mnist ? 5 : 25;
  if (hidden < 0) hidden = on_mnist ? 512 : 128;
  if (lr < 0) lr = sgd ? 0.05 : on_mnist ? 1e-3 : 3e-3;
  if (target < 0) target = on_mnist ? 0.97 : 0.95;

  Dataset train, test;
  if (on_mnist) {
    train = mnist(mnist_dir, true);
    test = mnist(mnist_dir, false);
  } else {
    split(spiral(2000, 5, seed), 0.2, seed + 1, train, test);
  }
  auto [test_x, test_y] = tensors(test);
  std::printf("%s: %lld training and %lld test samples, %lld features, %lld classes; backend %s\n",
              on_mnist ? "MNIST" : "five-arm spiral", static_cast<long long>(train.size()),
              static_cast<long long>(test.size()), static_cast<long long>(train.features),
              static_cast<long long>(train.classes), loom::backend_name().c_str());

  loom::manual_seed(seed);
  nn::Sequential model(nn::Linear(train.features, hidden), nn::ReLU(), nn::Linear(hidden, hidden), nn::ReLU(),
                       nn::Linear(hidden, train.classes));
  std::unique_ptr<loom::optim::Optimizer> opt;
  if (sgd) opt = std::make_unique<loom::optim::SGD>(model->parameters(), loom::optim::SGDOptions(lr).momentum(0.9));
  else opt = std::make_unique<loom::optim::Adam>(model->parameters(), loom::optim::AdamOptions(lr));
  std::cout << model << "\n";

  // One training step: its loss and the batch's correct predictions. With
  // --compiled, every step after the first runs as a loom::compile'd
  // function of the batch: traced once, then replayed without recording
  // (the learning rate and Adam's bias corrections are computed anew at
  // each call). The first step runs plainly: it creates the gradients,
  // which the compiled steps zero in place.
  auto train_step = [&](const loom::Tensor& x, const loom::Tensor& y) {
    opt->zero_grad(/*set_to_none=*/!compiled);
    loom::Tensor logits = model->forward(x);
    loom::Tensor loss = F::cross_entropy(logits, y);
    loom::Tensor hits = logits.argmax(1).eq(y).sum();
    loss.backward();
    opt->step();  // records the update and runs the step: forward, backward, update in one graph
    return std::vector<loom::Tensor>{loss.detach(), hits};
  };
  loom::CompiledFunction compiled_step([&](const std::vector<loom::Tensor>& in) { return train_step(in[0], in[1]); });

  const bool tty = isatty(STDOUT_FILENO);
  const int64_t steps_per_epoch = train.size() / batch;  // whole batches only: one graph shape
  if (steps_per_epoch < 1) throw std::runtime_error("--batch is larger than the training set");
  std::vector<int64_t> order(train.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 shuffle_rng(seed + 2);
  std::vector<float> xb(batch * train.features);
  std::vector<int64_t> yb(batch);
  loom::reset_metrics();
  // Compiles happen inside the first steps (and the first steps after a
  // change of graph); they are timed apart so that steps/s is the steady
  // rate and the compile time is said on its own.
  double train_seconds = 0, compile_seconds = 0, accuracy = 0;
  int64_t steps_done = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    model->train();
    double loss_sum = 0;
    int64_t correct = 0;
    const auto t0 = Clock::now();
    const int64_t compile_ns0 = loom::metrics().compile_ns;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      for (int64_t i = 0; i < batch; ++i) {
        const int64_t row = order[s * batch + i];
        std::memcpy(&xb[i * train.features], &train.x[row * train.features], train.features * sizeof(float));
        yb[i] = train.y[row];
      }
      loom::Tensor x = loom::from_blob(xb.data(), {batch, train.features});
      loom::Tensor y = loom::from_blob(yb.data(), {batch}, loom::kLong);
      const std::vector<loom::Tensor> out =
          compiled && (epoch > 1 || s > 0) ? compiled_step({x, y}) : train_step(x, y);
      const float l = out[0].item<float>();
      loss_sum += l;
      correct += out[1].item<int64_t>();
      if (tty && (s % 8 == 0 || s + 1 == steps_per_epoch)) progress(epoch, epochs, s + 1, steps_per_epoch, l);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const double compiling = static_cast<double>(loom::metrics().compile_ns - compile_ns0) / 1e9;
    train_seconds += seconds;
    compile_seconds += compiling;
    steps_done += steps_per_epoch;
    {
      loom::NoGradGuard no_grad;
      model->eval();
      accuracy = model->forward(test_x).argmax(1).eq(test_y).to(loom::kDouble).mean().item<double>();
    }
    if (tty) std::printf("\r%s\r", std::string(80, ' ').c_str());
    std::printf("epoch %2d/%d  loss %.4f  train acc %5.1f%%  test acc %5.1f%%  %6.0f steps/s", epoch, epochs,
                loss_sum / steps_per_epoch, 100.0 * correct / (steps_per_epoch * batch), 100.0 * accuracy,
                steps_per_epoch / std::max(seconds - compiling, 1e-9));
    if (compiling >= 0.005) std::printf("  (+ %.2f s compiling)", compiling);
    std::printf("\n");
  }

  const loom::Metrics m = loom::metrics();
  const double steady_seconds = std::max(train_seconds - compile_seconds, 1e-9);
  std::printf("\n%lld training steps (batch %lld) in %.2f s: %.2f s compiling, then %.0f steps/s "
              "(%.2f s of steps without their compiles)\n",
              static_cast<long long>(steps_done), static_cast<long long>(batch), train_seconds, compile_seconds,
              steps_done / steady_seconds, steady_seconds);
  std::printf("graphs run: %lld; compiled: %lld (cache misses), replayed: %lld (cache hits, %lld of them "
              "compiled steps)\n",
              static_cast<long long>(m.graphs_materialized), static_cast<long long>(m.cache_misses),
              static_cast<long long>(m.cache_hits), static_cast<long long>(m.compiled_replays));
  std::printf("compile time: %.1f ms (LLVM: %lld graphs, %lld kernels; %lld loaded from the disk cache)\n",
              m.compile_ns / 1e6, static_cast<long long>(m.jit_compiles), static_cast<long long>(m.kernels_compiled),
              static_cast<long long>(m.disk_cache_hits));
  std::printf("final test accuracy: %.1f%% (target %.0f%%)\n", 100.0 * accuracy, 100.0 * target);
  return accuracy >= target ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a bad flag, a missing file, a loom::Error
    std::cerr << "train_mlp: " << e.what() << "\n";
    return 2;
  }
}
