// einsum, as torch.einsum: an equation over labelled dimensions, lowered to
// the ops loom already has. Each operand first loses its repeated labels
// (a diagonal) and the labels no one else needs (a sum); then operands are
// contracted left to right, two at a time, as one batched product
// ([batch, m, k] x [batch, k, n]) for floating types, or a broadcast product
// and a sum for integers; last, the result is permuted to the output's
// order. Gradients are those of the views, sums and products it records.
#include <loom/functions.h>
#include <loom/tensor.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "api/src/autocast.h"
#include "api/src/record.h"

namespace loom {
namespace {

// A label: 0..51 for a-z and A-Z, 52 + i for the i-th dim of the ellipsis
// counted from its left end (the widest operand's ellipsis).
using Labels = std::vector<int>;

struct Operand {
  Tensor t;
  Labels labels;  // one per dim of t
};

int letter(char c, const SourceLoc& loc) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  LOOM_CHECK(false, "einsum", loc, "invalid subscript given in the equation: '", std::string(1, c),
             "' (subscripts are letters a-z and A-Z)");
  return -1;
}

// Parses one operand's subscripts; `ellipsis` (its dim count) is known
// once the operand's rank is.
Labels parse_term(const std::string& term, int64_t rank, int64_t ell_width, const SourceLoc& loc, bool* has_ellipsis) {
  Labels out;
  int64_t letters = 0;
  bool seen = false;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      LOOM_CHECK(!seen && term.compare(i, 3, "...") == 0, "einsum", loc,
                 "found '.' for operand that is not part of any ellipsis, or more than one ellipsis, in \"", term, "\"");
      seen = true;
      i += 2;
      continue;
    }
    ++letters;
  }
  *has_ellipsis = seen;
  const int64_t covered = rank - letters;
  LOOM_CHECK(seen ? covered >= 0 : covered == 0, "einsum", loc, "the subscripts \"", term, "\" name ", letters,
             " dimensions", seen ? " and an ellipsis" : "", " but the operand has ", rank);
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      for (int64_t k = ell_width - covered; k < ell_width; ++k) out.push_back(52 + static_cast<int>(k));
      i += 2;
      continue;
    }
    out.push_back(letter(term[i], loc));
  }
  return out;
}

// Removes repeated labels of one operand by taking the diagonal over them.
void take_diagonals(Operand& op, const SourceLoc& loc) {
  for (size_t i = 0; i < op.labels.size(); ++i) {
    for (size_t j = i + 1; j < op.labels.size(); ++j) {
      if (op.labels[i] != op.labels[j]) continue;
      const int64_t n = op.t.size(static_cast<int64_t>(i));
      LOOM_CHECK(op.t.size(static_cast<int64_t>(j)) == n, "einsum", loc, "subscript repeated in one operand for "
                 "dimensions of sizes ", n, " and ", op.t.size(static_cast<int64_t>(j)), " of ", detail::describe(op.t));
      // Move dims i and j last, flatten them, and step through the n*n by n + 1.
      std::vector<int64_t> perm;
      Labels rest;
      for (size_t d = 0; d < op.labels.size(); ++d)
        if (d != i && d != j) perm.push_back(static_cast<int64_t>(d)), rest.push_back(op.labels[d]);
      perm.push_back(static_cast<int64_t>(i));
      perm.push_back(static_cast<int64_t>(j));
      Tensor moved = op.t.permute(perm, loc).flatten(-2, -1, loc);
      op.t = n == 0 ? moved.slice(-1, 0, 0, 1, loc) : moved.slice(-1, 0, n * n, n + 1, loc);
      rest.push_back(op.labels[i]);
      op.labels = rest;
      take_diagonals(op, loc);
      return;
    }
  }
}

bool contains(const Labels& l, int x) { return std::find(l.begin(), l.end(), x) != l.end(); }

// Sums the dims of `op` whose labels `keep` does not hold.
void sum_unneeded(Operand& op, const Labels& keep, const SourceLoc& loc) {
  std::vector<int64_t> dims;
  Labels rest;
  for (size_t d = 0; d < op.labels.size(); ++d) {
    if (contains(keep, op.labels[d])) rest.push_back(op.labels[d]);
    else dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return;
  op.t = op.t.sum(dims, false, std::nullopt, loc);
  op.labels = rest;
}

int64_t size_of(const Operand& op, int label) {
  for (size_t d = 0; d < op.labels.size(); ++d)
    if (op.labels[d] == label) return op.t.size(static_cast<int64_t>(d));
  return 1;
}

// Permutes op to `order` (labels op holds) and, where `sizes` is given,
// expands its size-1 dims to them (einsum broadcasts size 1 as PyTorch's).
Tensor arrange(const Operand& op, const Labels& order, const std::vector<int64_t>& sizes, const SourceLoc& loc) {
  std::vector<int64_t> perm;
  for (int l : order)
    perm.push_back(static_cast<int64_t>(std::find(op.labels.begin(), op.labels.end(), l) - op.labels.begin()));
  Tensor t = op.t.permute(perm, loc);
  if (!sizes.empty() && t.sizes() != sizes) t = t.expand(sizes, loc);
  return t;
}

int64_t product(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

// a x b over their shared labels; `keep` are the labels needed afterwards.
Operand contract(Operand a, Operand b, const Labels& keep, const SourceLoc& loc) {
  Labels batch, a_only, b_only, summed;
  for (int l : a.labels) {
    if (!contains(b.labels, l)) a_only.push_back(l);
    else if (contains(keep, l)) batch.push_back(l);
    else summed.push_back(l);
  }
  for (int l : b.labels)
    if (!contains(a.labels, l)) b_only.push_back(l);
  // Sizes of shared labels: equal, or one of them 1 (broadcast).
  std::map<int, int64_t> size;
  for (int l : a.labels) size[l] = size_of(a, l);
  for (int l : b.labels) {
    const int64_t sb = size_of(b, l);
    auto it = size.find(l);
    if (it != size.end()) {
      LOOM_CHECK(it->second == sb || it->second == 1 || sb == 1, "einsum", loc,
                 "operands do not broadcast: a subscript has sizes ", it->second, " and ", sb, " (",
                 detail::describe(a.t), " and ", detail::describe(b.t), ")");
      it->second = std::max(it->second, sb);
    } else {
      size[l] = sb;
    }
  }
  auto sizes_of = [&](const Labels& ls) {
    std::vector<int64_t> s;
    for (int l : ls) s.push_back(size[l]);
    return s;
  };
  Labels out_labels = batch;
  out_labels.insert(out_labels.end(), a_only.begin(), a_only.end());
  out_labels.insert(out_labels.end(), b_only.begin(), b_only.end());
  const std::vector<int64_t> nb = sizes_of(batch), na = sizes_of(a_only), nbo = sizes_of(b_only), ns = sizes_of(summed);
  std::vector<int64_t> out_sizes = sizes_of(out_labels);

  if (!is_floating_point(promote_types(a.t.dtype(), b.t.dtype()))) {
    // Integers: [batch, a, 1, summed] * [batch, 1, b, summed], summed over the last.
    Labels la = batch, lb = batch;
    la.insert(la.end(), a_only.begin(), a_only.end());
    la.insert(la.end(), summed.begin(), summed.end());
    lb.insert(lb.end(), b_only.begin(), b_only.end());
    lb.insert(lb.end(), summed.begin(), summed.end());
    std::vector<int64_t> sa = sizes_of(la), sb = sizes_of(lb);
    std::vector<int64_t> va = nb, vb = nb;
    va.insert(va.end(), na.begin(), na.end()), va.insert(va.end(), nbo.size(), 1), va.insert(va.end(), ns.begin(), ns.end());
    vb.insert(vb.end(), na.size(), 1), vb.insert(vb.end(), nbo.begin(), nbo.end()), vb.insert(vb.end(), ns.begin(), ns.end());
    Tensor prod = arrange(a, la, sa, loc).reshape(va, loc).mul(arrange(b, lb, sb, loc).reshape(vb, loc), loc);
    std::vector<int64_t> sum_dims;
    for (size_t i = 0; i < summed.size(); ++i) sum_dims.push_back(static_cast<int64_t>(out_labels.size() + i));
    Tensor r = sum_dims.empty() ? prod : prod.sum(sum_dims, false, prod.dtype(), loc);
    return {r, out_labels};
  }
  Labels la = batch, lb = batch;
  la.insert(la.end(), a_only.begin(), a_only.end());
  la.insert(la.end(), summed.begin(), summed.end());
  lb.insert(lb.end(), summed.begin(), summed.end());
  lb.insert(lb.end(), b_only.begin(), b_only.end());
  const int64_t B = product(nb, 0, nb.size()), M = product(na, 0, na.size()), N = product(nbo, 0, nbo.size()),
                K = product(ns, 0, ns.size());
  const ScalarType dt = promote_types(a.t.dtype(), b.t.dtype());
  Tensor ta = arrange(a, la, sizes_of(la), loc).reshape({B, M, K}, loc).to(dt, loc);
  Tensor tb = arrange(b, lb, sizes_of(lb), loc).reshape({B, K, N}, loc).to(dt, loc);
  return {ta.bmm(tb, loc).reshape(out_sizes, loc), out_labels};
}

}  // namespace

Tensor einsum(const std::string& equation_in, const std::vector<Tensor>& operands_in, SourceLoc loc) {
  std::vector<Tensor> operands;
  for (const Tensor& t : operands_in) operands.push_back(detail::autocast::lower(t, loc));
  std::string eq;
  for (char c : equation_in)
    if (c != ' ') eq += c;
  LOOM_CHECK(!operands.empty(), "einsum", loc, "must provide at least one operand");
  for (const Tensor& t : operands) detail::impl_of(t, "einsum", loc);
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  LOOM_CHECK(terms.size() == operands.size(), "einsum", loc, "the equation \"", equation_in, "\" has ",
             terms.size(), " operand terms but ", operands.size(), " operands were given");
  // The ellipsis covers as many dims as the widest operand's.
  int64_t ell_width = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    int64_t letters = 0;
    for (size_t c = 0; c < terms[i].size(); ++c) {
      if (terms[i][c] == '.') c += 2;
      else ++letters;
    }
    if (terms[i].find("...") != std::string::npos) ell_width = std::max(ell_width, operands[i].dim() - letters);
  }
  std::vector<Operand> ops;
  bool any_ellipsis = false;
  std::map<int, int> count;
  for (size_t i = 0; i < terms.size(); ++i) {
    bool has = false;
    Operand op{operands[i], parse_term(terms[i], operands[i].dim(), ell_width, loc, &has)};
    any_ellipsis |= has;
    for (int l : op.labels) ++count[l];
    ops.push_back(std::move(op));
  }
  Labels out;
  if (arrow != std::string::npos) {
    const std::string rhs = eq.substr(arrow + 2);
    for (size_t c = 0; c < rhs.size(); ++c) {
      if (rhs[c] == '.') {
        LOOM_CHECK(rhs.compare(c, 3, "...") == 0 && any_ellipsis, "einsum", loc,
                   "the output subscripts \"", rhs, "\" hold an ellipsis that is not an ellipsis of the inputs");
        for (int64_t k = 0; k < ell_width; ++k) out.push_back(52 + static_cast<int>(k));
        c += 2;
        continue;
      }
      const int l = letter(rhs[c], loc);
      LOOM_CHECK(count.count(l), "einsum", loc, "output subscript '", std::string(1, rhs[c]),
                 "' does not appear in the equation for any input operand");
      LOOM_CHECK(!contains(out, l), "einsum", loc, "output subscript '", std::string(1, rhs[c]),
                 "' appears more than once in the output");
      out.push_back(l);
    }
  } else {
    // Implicit: the ellipsis, then the labels seen once, in alphabetical order.
    for (int64_t k = 0; k < ell_width; ++k) out.push_back(52 + static_cast<int>(k));
    std::vector<std::pair<char, int>> once;
    for (auto [l, n] : count)
      if (n == 1 && l < 52) once.push_back({l < 26 ? static_cast<char>('a' + l) : static_cast<char>('A' + l - 26), l});
    std::sort(once.begin(), once.end());
    for (auto [c, l] : once) out.push_back(l);
  }

  for (Operand& op : ops) take_diagonals(op, loc);
  // Labels still needed by the output or a later operand.
  auto needed_after = [&](size_t i) {
    Labels keep = out;
    for (size_t j = i + 1; j < ops.size(); ++j) keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    return keep;
  };
  // A label only one operand has and no one needs is summed there first.
  for (size_t i = 0; i < ops.size(); ++i) {
    Labels keep = out;
    for (size_t j = 0; j < ops.size(); ++j)
      if (j != i) keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    sum_unneeded(ops[i], keep, loc);
  }
  Operand acc = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) acc = contract(acc, ops[i], needed_after(i), loc);
  sum_unneeded(acc, out, loc);
  return arrange(acc, out, {}, loc);
}

}  // namespace loom
