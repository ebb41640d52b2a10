// softmax(q kᵀ · s, masked) v written out, recognized as it is recorded.
//
// A model that writes attention by hand (minGPT's
//   att = (q @ k.transpose(-2, -1)) * scale;
//   att = att.masked_fill(bias == 0, -inf);
//   y = softmax(att, -1) @ v)
// records two products and loom's softmax. When the second product is
// recorded, matmul asks recognize_attention whether its first operand is
// that softmax (read off the recorded nodes: Mul(Exp(Sub(y, Max(y))),
// Reciprocal(Sum(Exp(...)))) over the scores, with the casts of bfloat16
// and autocast around it) of a scaled, optionally masked product; if so the
// product becomes one fused Attention node over q, k and v, and the [L, S]
// probabilities are never computed unless something else reads them.
//
// Where, and why here: it runs at recording, not on the finished graph,
// because that is where the new node can take the operands as tensors (and
// the scale and the mask's value as they are). It runs only when nothing
// needs a gradient (inference, NoGradGuard): in training, autograd has
// already saved the probabilities for the backward, so a graph rewrite
// could not remove them; a training model gets the fused op by calling
// scaled_dot_product_attention. A row the mask hides wholly stays NaN, as
// the written-out softmax gives it.
#include <loom/functions.h>
#include <loom/nn/transformer.h>

#include <cmath>
#include <limits>

#include "api/src/autograd/meta.h"
#include "api/src/nn/attention.h"
#include "api/src/record.h"

namespace loom::detail {

namespace {

using ir::NodePtr;
using ir::Op;

bool reduces_last_dim(const ir::Node& n) {
  return op_family(n.op) == ir::Family::Reduce && n.attr.n >= 1 && n.shape.n >= 1 &&
         n.attr[0] == (int64_t{1} << (n.shape.n - 1)) && n.shape[n.shape.n - 1] == 1;
}
bool is_neg_inf(const ir::Node& n) {
  return n.op == Op::Full && n.num_scalars >= 1 && n.scalar[0].f == -std::numeric_limits<double>::infinity();
}
// A Cast between a 16-bit float and float32 (softmax's and autocast's), or nothing.
NodePtr skip_widening(NodePtr n) {
  if (n->op == Op::Cast && n->inputs.size() == 1 && is_reduced_floating_point(n->inputs[0]->dtype) &&
      n->dtype == kFloat)
    return n->inputs[0];
  return n;
}
// An AsStrided that only reshapes its whole contiguous input (matmul's
// [N, L, S] product viewed as [..., L, S]), or nothing.
NodePtr skip_reshape(NodePtr n) {
  if (n->op != Op::AsStrided || n->inputs.size() != 1 || ir::view_offset_is_scalar(*n) ||
      ir::static_view_offset(*n) != 0 || n->shape.numel() != n->inputs[0]->shape.numel())
    return n;
  int64_t stride = 1;
  for (int64_t d = n->shape.n - 1; d >= 0; --d) {
    if (n->shape[d] != 1 && n->attr[static_cast<size_t>(d)] != stride) return n;
    stride *= n->shape[d];
  }
  return n->inputs[0];
}

// The pieces of the written-out form.
struct Pattern {
  NodePtr q, kt;   // the first product's operands: [N, L, D], [N, D, S]
  NodePtr cond;    // the mask's condition, or null
  bool cond_shows = true;  // where(cond, scores, -inf); false: masked_fill(cond, -inf)
  double scale = 1;
  ir::Dims scores;  // [..., L, S]
};

// The scores under loom's softmax: the probabilities' node back to them.
NodePtr softmax_input(NodePtr p) {
  if (p->op == Op::Cast && p->inputs.size() == 1 && p->inputs[0]->dtype == kFloat) p = p->inputs[0];  // to bfloat16
  if (p->op != Op::Mul || p->inputs.size() != 2) return nullptr;
  NodePtr e = p->inputs[0], r = p->inputs[1];
  if (e->op == Op::Reciprocal) std::swap(e, r);
  if (e->op != Op::Exp || r->op != Op::Reciprocal || r->inputs[0]->op != Op::Sum || r->inputs[0]->inputs[0] != e ||
      !reduces_last_dim(*r->inputs[0]))
    return nullptr;
  const NodePtr& sub = e->inputs[0];
  if (sub->op != Op::Sub || sub->inputs.size() != 2 || sub->inputs[1]->op != Op::Max ||
      sub->inputs[1]->inputs[0] != sub->inputs[0] || !reduces_last_dim(*sub->inputs[1]))
    return nullptr;
  return skip_widening(sub->inputs[0]);
}

bool match(NodePtr y, Pattern& out) {
  out.scores = y->shape;
  // The mask and the scale, in either order.
  for (int peel = 0; peel < 2; ++peel) {
    if (y->op == Op::Where && !out.cond && y->inputs.size() == 3 && y->inputs[0]->dtype == kBool) {
      if (is_neg_inf(*y->inputs[1])) {
        out.cond = y->inputs[0], out.cond_shows = false, y = y->inputs[2];
      } else if (is_neg_inf(*y->inputs[2])) {
        out.cond = y->inputs[0], out.cond_shows = true, y = y->inputs[1];
      } else {
        return false;
      }
    } else if ((y->op == Op::Mul || y->op == Op::Div) && ir::has_scalar_operand(*y) && out.scale == 1) {
      const double v = y->scalar[0].f;
      if (!(v > 0) || !std::isfinite(v)) return false;  // a negative scale turns -inf into +inf
      out.scale = y->op == Op::Mul ? v : 1 / v;
      y = y->inputs[0];
    }
  }
  y = skip_reshape(y);
  if (y->op != Op::MatMul || y->shape.n != 3 || y->inputs.size() != 2) return false;
  out.q = y->inputs[0], out.kt = y->inputs[1];
  return out.q->shape.n == 3 && out.kt->shape.n == 3 && out.scores.n >= 2 &&
         out.scores.numel() == y->shape.numel() && out.scores[out.scores.n - 1] == y->shape[2];
}

}  // namespace

std::optional<Tensor> recognize_attention(const Tensor& a, const Tensor& b, const SourceLoc& loc) {
  if (!backends::flash_sdp_enabled() || needs_grad(a) || needs_grad(b) || a.dim() < 3 || b.dim() != a.dim() ||
      a.dtype() != b.dtype() || a.device() != b.device())
    return std::nullopt;
  for (int64_t d = 0; d + 2 < a.dim(); ++d)
    if (a.size(d) != b.size(d)) return std::nullopt;
  // The probabilities are a value of their own (loom's softmax): a whole
  // storage's node. Any other view is not the pattern, and reading it would
  // record a node on every batched product for nothing.
  const TensorImpl& im = *a.impl();
  const NodePtr base = im.storage->node();
  if (!is_plain_read(im.view, *base)) return std::nullopt;
  const NodePtr y = softmax_input(base);
  Pattern m;
  if (!y || !match(y, m)) return std::nullopt;
  const int64_t n = m.q->shape[0], l = m.q->shape[1], s = m.kt->shape[2];
  if (m.kt->shape[0] != n || l != a.size(-2) || s != a.size(-1) || b.size(-2) != s || n * l * s != a.numel())
    return std::nullopt;
  const Tensor q = wrap(m.q), k = wrap(m.kt).transpose(1, 2, loc), v = b.reshape({n, s, b.size(-1)}, loc);
  if (q.dtype() != a.dtype() || !fused_attention_applies(q, k, v)) return std::nullopt;
  MaskPlanes planes;
  Tensor any_visible;
  if (m.cond) {
    const Tensor cond = wrap(m.cond);
    const IntArrayRef sizes = a.sizes();
    const IntArrayRef batch(sizes.data(), sizes.size() - 2);
    if (!mask_broadcasts(cond, batch, l, s)) return std::nullopt;
    const Tensor visible = m.cond_shows ? cond : cond.logical_not(loc);
    planes = mask_planes(visible, batch, l, s, "matmul", loc);
    any_visible = visible.any(-1, true, loc);
  }
  std::vector<int64_t> shape = a.sizes().vec();
  shape.back() = b.size(-1);
  Tensor out = fused_attention(q, k, v, {ir::AttentionMask::None, 0}, m.scale, loc, planes).view(shape, loc);
  // The written-out softmax of a row with no visible key is NaN: keep it so.
  if (any_visible.defined()) out = loom::where(any_visible, out, std::numeric_limits<double>::quiet_NaN(), loc);
  return out;
}

}  // namespace loom::detail
