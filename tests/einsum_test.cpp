// einsum against a naive evaluator written here: every assignment of the
// labels visited, products summed into the output, in float64.
#include <gtest/gtest.h>
#include <loom/loom.h>

#include <map>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "test_util.h"

namespace {

using loom::Tensor;
using loom_test::all_close;
using loom_test::gradcheck;
using loom_test::input;
using T = std::vector<Tensor>;
using V = std::vector<double>;

class EinsumTest : public loom_test::BackendTest {};

// "ab,bc->ac" with every label explicit (no ellipsis), sizes from the operands.
V naive_einsum(const std::string& eq, const T& ops, std::vector<int64_t>* out_shape) {
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow), out = eq.substr(arrow + 2);
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',') terms.emplace_back();
    else terms.back().push_back(c);
  }
  std::map<char, int64_t> size;
  std::vector<V> vals;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], ops[i].size(int64_t(d)));
    vals.push_back(ops[i].to_vector<double>());
  }
  std::string labels;
  for (auto [c, n] : size) labels += c;
  out_shape->clear();
  for (char c : out) out_shape->push_back(size[c]);
  int64_t out_n = 1;
  for (int64_t s : *out_shape) out_n *= s;
  V result(static_cast<size_t>(out_n), 0.0);
  std::map<char, int64_t> at;
  for (char c : labels) at[c] = 0;
  auto flat = [&](const std::string& term, const Tensor& t) {
    int64_t k = 0;
    for (size_t d = 0; d < term.size(); ++d) k = k * t.size(int64_t(d)) + (t.size(int64_t(d)) == 1 ? 0 : at[term[d]]);
    return k;
  };
  while (true) {
    double p = 1;
    for (size_t i = 0; i < terms.size(); ++i) p *= vals[i][static_cast<size_t>(flat(terms[i], ops[i]))];
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    result[static_cast<size_t>(o)] += p;
    size_t k = labels.size();
    while (k > 0 && ++at[labels[k - 1]] == size[labels[k - 1]]) at[labels[--k]] = 0;
    if (k == 0) break;
  }
  return result;
}

void expect_einsum(const std::string& eq, const T& ops) {
  SCOPED_TRACE(eq);
  std::vector<int64_t> shape;
  const V want = naive_einsum(eq, ops, &shape);
  Tensor got = loom::einsum(eq, ops);
  EXPECT_EQ(got.sizes(), shape);
  EXPECT_TRUE(all_close(got, want, 1e-12, 1e-12));
}

TEST_P(EinsumTest, MatchesANaiveSumOverEveryLabel) {
  expect_einsum("ij,jk->ik", {input({3, 4}, 1), input({4, 5}, 2)});
  expect_einsum("bij,bjk->bik", {input({2, 3, 4}, 3), input({2, 4, 5}, 4)});
  expect_einsum("bhqd,bhkd->bhqk", {input({2, 3, 4, 5}, 5), input({2, 3, 6, 5}, 6)});
  expect_einsum("ij->ji", {input({3, 4}, 7)});
  expect_einsum("ij->", {input({3, 4}, 8)});
  expect_einsum("ii->i", {input({4, 4}, 9)});
  expect_einsum("ii->", {input({4, 4}, 10)});
  expect_einsum("i,j->ij", {input({3}, 11), input({4}, 12)});
  expect_einsum("i,i->", {input({5}, 13), input({5}, 14)});
  expect_einsum("ijk,jl,lk->il", {input({2, 3, 4}, 15), input({3, 5}, 16), input({5, 4}, 17)});
  expect_einsum("bii,bj->bij", {input({2, 3, 3}, 18), input({2, 4}, 19)});
  expect_einsum("iij->j", {input({3, 3, 2}, 20)});
  expect_einsum("ab,ab->ab", {input({3, 4}, 21), input({3, 4}, 22)});
  // Size 1 broadcasts against the other operand's size.
  expect_einsum("ij,ij->ij", {input({1, 4}, 23), input({3, 4}, 24)});
  expect_einsum("ij,jk->ik", {input({3, 1}, 25), input({4, 5}, 26)});
}

TEST_P(EinsumTest, ImplicitOutputEllipsisAndSpaces) {
  Tensor a = input({3, 4}, 31), b = input({4, 5}, 32);
  // Implicit: labels seen once, alphabetical: "ij,jk" -> "ik"; "ba" -> "ab" (a transpose).
  EXPECT_TRUE(all_close(loom::einsum("ij,jk", {a, b}), loom::matmul(a, b).to_vector<double>(), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(loom::einsum("ba", {a}), a.t().contiguous().to_vector<double>(), 0, 0));
  EXPECT_TRUE(all_close(loom::einsum(" i j , j k -> i k ", {a, b}), loom::matmul(a, b).to_vector<double>(), 1e-12, 1e-12));
  // The ellipsis broadcasts as batch dims, aligned from the right.
  Tensor x = input({2, 1, 3, 4}, 33), y = input({5, 4, 6}, 34);
  Tensor r = loom::einsum("...ij,...jk->...ik", {x, y});
  EXPECT_EQ(r.sizes(), (std::vector<int64_t>{2, 5, 3, 6}));
  EXPECT_TRUE(all_close(r, loom::matmul(x, y).to_vector<double>(), 1e-12, 1e-12));
  Tensor batch_t = loom::einsum("...ij->...ji", {x});
  EXPECT_TRUE(all_close(batch_t, x.transpose(-1, -2).contiguous().to_vector<double>(), 0, 0));
  EXPECT_TRUE(all_close(loom::einsum("b...,b...->b", {x.squeeze(1), x.squeeze(1)}),
                        (x.squeeze(1) * x.squeeze(1)).sum({1, 2}).to_vector<double>(), 1e-12, 1e-12));
}

TEST_P(EinsumTest, IntegersFloatPromotionAndErrors) {
  Tensor a = loom::tensor({1, 2, 3, 4, 5, 6}, loom::kLong).view({2, 3});
  Tensor b = loom::tensor({1, 0, -1, 2, 3, 1}, loom::kLong).view({3, 2});
  Tensor r = loom::einsum("ij,jk->ik", {a, b});
  EXPECT_EQ(r.dtype(), loom::kLong);
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{8, 7, 17, 16}));
  EXPECT_EQ(loom::einsum("ij,jk->ik", {a.to(loom::kFloat), b}).dtype(), loom::kFloat);
  EXPECT_LOOM_ERROR(loom::einsum("ij,jk->ik", {a}), "einsum", "2 operand terms");
  EXPECT_LOOM_ERROR(loom::einsum("ij,jk->ik", {a, a}), "einsum", "do not broadcast");
  EXPECT_LOOM_ERROR(loom::einsum("i1->i", {a}), "einsum", "invalid subscript");
  EXPECT_LOOM_ERROR(loom::einsum("ijk->i", {a}), "einsum", "the operand has 2");
  EXPECT_LOOM_ERROR(loom::einsum("ij->iz", {a}), "einsum", "does not appear");
  EXPECT_LOOM_ERROR(loom::einsum("ij->ii", {a}), "einsum", "more than once");
}

TEST_P(EinsumTest, Gradients) {
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::einsum("ij,jk->ik", {v[0], v[1]}); },
                        {input({3, 4}, 41), input({4, 2}, 42)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::einsum("bii,bj->bij", {v[0], v[1]}); },
                        {input({2, 3, 3}, 43), input({2, 2}, 44)}));
  EXPECT_TRUE(gradcheck([](const T& v) { return loom::einsum("i,i->", {v[0], v[1]}); }, {input({5}, 45), input({5}, 46)}));
}

LOOM_INSTANTIATE_BACKENDS(EinsumTest);

}  // namespace
