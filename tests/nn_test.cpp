// nn: Module bookkeeping, the layers against loops written in the test,
// dropout's reproducibility, save/load, and every layer's gradient against
// finite differences (gradcheck.h).
#include <cstdio>
#include <filesystem>

#include "gradcheck.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;
using V = std::vector<double>;
namespace nn = loom::nn;
namespace F = loom::nn::functional;

class NnTest : public loom_test::BackendTest {};

struct Net : nn::Module {
  Net() {
    fc1 = register_module("fc1", nn::Linear(4, 8));
    body = register_module("body", nn::Sequential(nn::ReLU(), nn::Linear(nn::LinearOptions(8, 3).bias(false))));
    scale = register_parameter("scale", loom::ones({3}));
    register_buffer("steps", loom::zeros({1}));
  }
  Tensor forward(const Tensor& x) { return body->forward(fc1->forward(x)) * scale; }
  nn::Linear fc1{nullptr};
  nn::Sequential body{nullptr};
  Tensor scale;
};

TEST_P(NnTest, ModuleBookkeeping) {
  auto net = std::make_shared<Net>();
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "body.1.weight"}));
  EXPECT_EQ(net->parameters().size(), 4u);
  EXPECT_EQ(net->named_buffers().keys(), std::vector<std::string>{"steps"});
  EXPECT_EQ(net->modules().size(), 5u);  // net, fc1, body, relu, linear
  EXPECT_EQ(net->name(), "Net");
  EXPECT_EQ(net->fc1->name(), "Linear");
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  net->eval();
  EXPECT_FALSE(net->body->ptr(1)->is_training());
  net->train();
  EXPECT_TRUE((*net->body)[1].is_training());
  std::ostringstream os;
  os << *net;
  EXPECT_NE(os.str().find("(fc1): Linear(in_features=4, out_features=8, bias=true)"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("(1): Linear(in_features=8, out_features=3, bias=false)"), std::string::npos) << os.str();
  EXPECT_LOOM_ERROR(net->register_parameter("scale", loom::ones({1})), "register_parameter", "already registered");
  // Tied weights: one tensor registered in two places is one parameter.
  auto tied = std::make_shared<nn::Module>();
  nn::Linear a(3, 3);
  tied->register_module("a", a);
  tied->register_parameter("head", a->weight);
  EXPECT_EQ(tied->named_parameters().keys(), (std::vector<std::string>{"head", "a.bias"}));
  // to(kDouble) converts in place: tensors held elsewhere (an optimizer) follow.
  Tensor w = net->fc1->weight;
  net->to(loom::kDouble);
  EXPECT_EQ(w.dtype(), loom::kDouble);
  EXPECT_TRUE(w.is_same(net->fc1->weight));
  EXPECT_EQ(net->forward(loom::ones({2, 4}, loom::kDouble)).dtype(), loom::kDouble);
}

TEST_P(NnTest, LinearAndSequential) {
  loom::manual_seed(3);
  nn::Linear fc(5, 3);
  EXPECT_EQ(fc->weight.sizes().vec(), (std::vector<int64_t>{3, 5}));
  const double bound = 1 / std::sqrt(5.0);
  for (double v : fc->weight.to_vector<double>()) EXPECT_LE(std::abs(v), bound);
  for (double v : fc->bias.to_vector<double>()) EXPECT_LE(std::abs(v), bound);
  Tensor x = input({2, 5}, 7).to(loom::kFloat);
  Tensor y = fc(x);
  const auto w = fc->weight.to_vector<double>(), b = fc->bias.to_vector<double>(), xv = x.to_vector<double>();
  V want;
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 3; ++o) {
      double acc = b[o];
      for (int k = 0; k < 5; ++k) acc += xv[i * 5 + k] * w[o * 5 + k];
      want.push_back(acc);
    }
  EXPECT_TRUE(all_close(y, want, 1e-5, 1e-6));
  EXPECT_FALSE(nn::Linear(nn::LinearOptions(5, 3).bias(false))->bias.defined());
  nn::Sequential seq(fc, nn::Tanh(), nn::Linear(3, 2), nn::Sigmoid());
  EXPECT_EQ(seq->size(), 4u);
  Tensor manual = loom::sigmoid(seq->ptr<nn::LinearImpl>(2)->forward(loom::tanh(fc(x))));
  EXPECT_TRUE(all_close(seq->forward(x), manual.to_vector<double>(), 1e-6));
  // A seed gives the same parameters again.
  loom::manual_seed(3);
  EXPECT_TRUE(all_close(nn::Linear(5, 3)->weight, w, 0, 0));
}

TEST_P(NnTest, Dropout) {
  Tensor x = loom::ones({2000}, loom::kDouble);
  nn::Dropout drop(0.25);
  loom::manual_seed(11);
  V a = drop(x).to_vector<double>();
  loom::manual_seed(11);
  V b = drop(x).to_vector<double>();
  EXPECT_EQ(a, b);  // reproducible
  int zeros = 0;
  for (double v : a) {
    if (v == 0) ++zeros;
    else EXPECT_DOUBLE_EQ(v, 1 / 0.75);
  }
  EXPECT_NEAR(zeros / 2000.0, 0.25, 0.04);
  EXPECT_NE(drop(x).to_vector<double>(), a);  // the next call draws a new mask
  drop->eval();
  EXPECT_TRUE(drop(x).is_same(x));
  // The gradient is the mask, scaled.
  Tensor leaf = x.clone().requires_grad_();
  loom::manual_seed(5);
  Tensor y = F::dropout(leaf, F::DropoutFuncOptions().p(0.5));
  y.sum().backward();
  EXPECT_EQ(leaf.grad().to_vector<double>(), y.to_vector<double>());
  EXPECT_LOOM_ERROR(F::dropout(x, F::DropoutFuncOptions().p(1.5)), "dropout", "between 0 and 1");
}

TEST_P(NnTest, LayerNormAndEmbedding) {
  Tensor x = input({3, 4}, 21);
  nn::LayerNorm ln(nn::LayerNormOptions({4}));
  ln->to(loom::kDouble);
  V got = ln(x).to_vector<double>(), xv = x.to_vector<double>();
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += xv[r * 4 + c] / 4;
    for (int c = 0; c < 4; ++c) var += (xv[r * 4 + c] - mean) * (xv[r * 4 + c] - mean) / 4;
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(got[r * 4 + c], (xv[r * 4 + c] - mean) / std::sqrt(var + 1e-5), 1e-12);
  }
  EXPECT_TRUE(gradcheck([](const T& v) {
    return F::layer_norm(v[0], F::LayerNormFuncOptions({2, 3}).weight(v[1]).bias(v[2]).eps(1e-3));
  }, {input({2, 2, 3}, 22), input({2, 3}, 23), input({2, 3}, 24)}));
  EXPECT_LOOM_ERROR(F::layer_norm(x, F::LayerNormFuncOptions({3})), "layer_norm", "trailing dims");

  nn::Embedding emb(nn::EmbeddingOptions(5, 3).padding_idx(1));
  emb->to(loom::kDouble);
  Tensor idx = loom::tensor({4, 1, 0, 4}, loom::kLong).reshape({2, 2});
  Tensor out = emb(idx);
  EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{2, 2, 3}));
  V w = emb->weight.to_vector<double>(), o = out.to_vector<double>();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(o[c], w[4 * 3 + c]);
    EXPECT_EQ(o[3 + c], 0);  // padding row
    EXPECT_EQ(o[6 + c], w[c]);
  }
  out.sum().backward();
  V g = emb->weight.grad().to_vector<double>();
  EXPECT_EQ(g, (V{1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2}));  // the padding row gets nothing
}

// Direct convolution, written out.
V conv_reference(const V& x, int n, int c, int h, int w, const V& k, int o, int kh, int kw, const V& bias, int stride,
                 int pad, int dil, int& oh, int& ow) {
  oh = (h + 2 * pad - dil * (kh - 1) - 1) / stride + 1;
  ow = (w + 2 * pad - dil * (kw - 1) - 1) / stride + 1;
  V out;
  for (int b = 0; b < n; ++b)
    for (int oc = 0; oc < o; ++oc)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double acc = bias.empty() ? 0 : bias[oc];
          for (int ic = 0; ic < c; ++ic)
            for (int u = 0; u < kh; ++u)
              for (int v = 0; v < kw; ++v) {
                const int r = i * stride - pad + u * dil, s = j * stride - pad + v * dil;
                if (r < 0 || r >= h || s < 0 || s >= w) continue;
                acc += x[((b * c + ic) * h + r) * w + s] * k[((oc * c + ic) * kh + u) * kw + v];
              }
          out.push_back(acc);
        }
  return out;
}

TEST_P(NnTest, Conv2dAndMaxPool) {
  Tensor x = input({2, 3, 6, 5}, 31), k = input({4, 3, 3, 2}, 32), b = input({4}, 33);
  for (auto [stride, pad, dil] : {std::tuple{1, 0, 1}, std::tuple{2, 1, 1}, std::tuple{1, 2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "stride " << stride << " padding " << pad << " dilation " << dil);
    int oh = 0, ow = 0;
    V want = conv_reference(x.to_vector<double>(), 2, 3, 6, 5, k.to_vector<double>(), 4, 3, 2, b.to_vector<double>(),
                            stride, pad, dil, oh, ow);
    Tensor y = F::conv2d(x, k, F::Conv2dFuncOptions().bias(b).stride(stride).padding(pad).dilation(dil));
    EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{2, 4, oh, ow}));
    EXPECT_TRUE(all_close(y, want, 1e-12, 1e-12));
  }
  EXPECT_TRUE(gradcheck([](const T& v) {
    return F::conv2d(v[0], v[1], F::Conv2dFuncOptions().bias(v[2]).stride(2).padding(1));
  }, {input({1, 2, 4, 4}, 34), input({2, 2, 2, 2}, 35), input({2}, 36)}));
  nn::Conv2d conv(nn::Conv2dOptions(3, 4, {3, 2}).padding(1));
  EXPECT_EQ(conv(x.to(loom::kFloat)).sizes().vec(), (std::vector<int64_t>{2, 4, 6, 6}));
  EXPECT_EQ(conv(x.to(loom::kFloat).select(0, 0)).sizes().vec(), (std::vector<int64_t>{4, 6, 6}));
  EXPECT_LOOM_ERROR(F::conv2d(x, input({4, 2, 3, 3}, 1)), "conv2d", "in_channels = 3");

  // Max pooling, written out.
  Tensor p = input({1, 2, 5, 4}, 37);
  V pv = p.to_vector<double>(), want;
  for (int ch = 0; ch < 2; ++ch)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        double m = -1e300;
        for (int u = 0; u < 2; ++u)
          for (int v = 0; v < 2; ++v) m = std::max(m, pv[(ch * 5 + i * 2 + u) * 4 + j * 2 + v]);
        want.push_back(m);
      }
  EXPECT_TRUE(all_close(nn::MaxPool2d(nn::MaxPool2dOptions(2))(p), want, 0, 0));
  EXPECT_EQ(F::max_pool2d(p, F::MaxPool2dFuncOptions({3, 2}).stride(1).padding({1, 1})).sizes().vec(),
            (std::vector<int64_t>{1, 2, 5, 5}));
  EXPECT_TRUE(gradcheck([](const T& v) { return F::max_pool2d(v[0], F::MaxPool2dFuncOptions(2).stride(1)); },
                        {input({1, 1, 3, 4}, 38)}));
}

LOOM_INSTANTIATE_BACKENDS(NnTest);

TEST(NnSave, RoundTripAndMismatch) {
  const std::string path = (std::filesystem::temp_directory_path() / "loom_nn_save_test.bin").string();
  loom::manual_seed(1);
  auto a = std::make_shared<Net>();
  a->named_buffers()["steps"].fill_(7);
  loom::save(a, path);
  loom::manual_seed(2);
  auto b = std::make_shared<Net>();
  Tensor w = b->fc1->weight;
  EXPECT_NE(w.to_vector<float>(), a->fc1->weight.to_vector<float>());
  loom::load(b, path);
  EXPECT_TRUE(w.is_same(b->fc1->weight));  // loaded into the module's own tensors
  for (const auto& p : a->named_parameters())
    EXPECT_EQ(p.value().to_vector<float>(), b->named_parameters()[p.key()].to_vector<float>()) << p.key();
  EXPECT_EQ(b->named_buffers()["steps"].to_vector<float>(), std::vector<float>{7});
  // A module of another shape is refused before anything is written.
  nn::Linear other(4, 9);
  const V before = other->weight.to_vector<double>();
  EXPECT_THROW(loom::load(other, path), loom::Error);
  EXPECT_EQ(other->weight.to_vector<double>(), before);
  std::vector<Tensor> list = {loom::arange(5, loom::kDouble), loom::ones({2, 2}, loom::kInt)};
  loom::save(list, path);
  std::vector<Tensor> back;
  loom::load(back, path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].to_vector<double>(), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(back[1].dtype(), loom::kInt);
  std::remove(path.c_str());
  EXPECT_THROW(loom::load(back, path), loom::Error);
}

}  // namespace
