// ir::Node: one recorded op. A node is immutable once recorded; the api layer
// builds them, ir/graph.h walks them, backends read them through ir::Graph.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <loom/device.h>
#include <loom/dtype.h>

namespace loom::ir {

// Bump when the meaning of the canonical form changes (op numbering, attrs).
inline constexpr uint32_t kIrVersion = 4;  // 2: Binary nodes with a scalar operand; Clamp. 3: IndexCheck. 4: view offsets as runtime scalars
inline constexpr int kMaxDims = 8;

enum class Op : uint8_t {
#define X(name, str, family, cost) name,
#include "ir/ops.def"
#undef X
  kCount
};
enum class Family : uint8_t { Leaf, Unary, Binary, Ternary, Reduce, Move };
// ScatterReduce's attr[1]: how an element of src folds into its target.
// Bool folds as logic (multiply and amin: and; amax: or); floating amax and
// amin propagate NaN, as PyTorch's kernels do.
enum class ScatterKind : int64_t { Assign = 0, Multiply = 1, Max = 2, Min = 3 };

const char* op_name(Op op);
Family op_family(Op op);
// The op's rough arithmetic cost per element (ops.def's Cost column).
double op_cost(Op op);
// Ops whose value costs far more to compute than to keep (cost 8 and up,
// but a matrix product: it is never inlined): a code generator keeps such a
// value for the later phases of a row rather than compute it again (the
// row stash of jit/llvm and jit/cuda).
inline bool costly_op(Op op) { return op_cost(op) >= 8 && op != Op::MatMul; }

// Attributes of a view write: strides of every dim plus the offset.
inline constexpr int kMaxAttrs = 2 * kMaxDims + 1;

// Scan's attr[1]: what it accumulates along its dim. Sum and Prod give the
// input's dtype (cumsum, cumprod); ArgMax and ArgMin the int64 position of
// the running maximum or minimum (cummax, cummin: the last position of a
// tie, and NaN, once met, stays the extreme), whose values are a gather.
enum class ScanKind : int64_t { Sum = 0, Prod = 1, ArgMax = 2, ArgMin = 3 };

// Attention's attr[0]: which keys query row i sees, as code rather than a
// stored [L, S] tensor. Causal is PyTorch's is_causal (the top-left
// triangle, torch.ones(L, S).tril(): key j <= i); SlidingWindow is causal
// over the last `window` keys, i - window < j <= i, the window being the
// node's int64 runtime scalar 1 (a new width compiles nothing). A row that
// sees no key gives 0 and a logsumexp of -inf; its gradients are 0. The
// CPU backends read the mask through AttentionMaskCode; the GPU kernels'
// functors (kernels/cuda/attention.cu) say the same.
enum class AttentionMask : int64_t { None = 0, Causal = 1, SlidingWindow = 2 };
struct AttentionMaskCode {
  AttentionMask kind = AttentionMask::None;
  int64_t window = 0;
  constexpr bool visible(int64_t i, int64_t j) const {
    return kind == AttentionMask::None || (j <= i && (kind == AttentionMask::Causal || j > i - window));
  }
  // The keys any of query rows [i0, i1) can see lie in [key_begin(i0), key_end(i1, s)).
  constexpr int64_t key_begin(int64_t i0) const {
    return kind == AttentionMask::SlidingWindow && i0 - window + 1 > 0 ? i0 - window + 1 : 0;
  }
  constexpr int64_t key_end(int64_t i1, int64_t s) const { return kind == AttentionMask::None || i1 > s ? s : i1; }
  constexpr bool known() const {
    return kind == AttentionMask::None || kind == AttentionMask::Causal || (kind == AttentionMask::SlidingWindow && window >= 1);
  }
};
// Attention's optional mask tensor, besides the code: where attr[1] (the
// batch divisor) is above 0, the op's last input is a bool [P, R, S] tensor,
// true where query i may see key j, and batch n (of N = batch * heads) reads
// plane (n / attr[1]) % P, row i (R = L) or row 0 (R = 1: the same for every
// query, as a key padding mask). So a [B, 1, 1, S] padding mask serves
// [B, H, L, S] scores without being expanded: P = B, R = 1, divisor H. A
// pair is visible when the code and the tensor both say so.
struct AttentionMaskPlanes {
  const uint8_t* data = nullptr;  // null: no mask tensor
  int64_t planes = 1, rows = 1, s = 0, divisor = 1;
  const uint8_t* plane(int64_t n) const { return data ? data + ((n / divisor) % planes) * rows * s : nullptr; }
  // Row i of plane p (from plane()); null p: every key visible.
  const uint8_t* row(const uint8_t* p, int64_t i) const { return p ? p + (rows == 1 ? 0 : i * s) : nullptr; }
};
// The attr index of the batch divisor, and the mask tensor's position among
// the inputs (after q, k, v, or after the gradients' six).
inline constexpr size_t kAttentionMaskDivisorAttr = 1;
inline constexpr size_t attention_mask_input(bool forward) { return forward ? 3 : 6; }

// The dtype attention's statistics and gradients are kept in: float64 for
// float64 inputs, float32 otherwise.
constexpr ScalarType attention_acc(ScalarType t) { return t == kDouble ? kDouble : kFloat; }


// A fixed-capacity list of int64 (shapes, strides, attributes): no heap, so
// recording a node costs one allocation.
template <int Capacity>
struct SmallInts {
  uint8_t n = 0;  // first: the graph walk reads the count before the values
  std::array<int64_t, Capacity> v{};
  SmallInts() = default;
  SmallInts(const int64_t* p, size_t count) : n(static_cast<uint8_t>(count)) {
    for (size_t i = 0; i < count; ++i) v[i] = p[i];
  }
  int64_t operator[](size_t i) const { return v[i]; }
  int64_t& operator[](size_t i) { return v[i]; }
  size_t size() const { return n; }
  void push_back(int64_t x) { v[n++] = x; }
  const int64_t* begin() const { return v.data(); }
  const int64_t* end() const { return v.data() + n; }
  const int64_t* data() const { return v.data(); }
  int64_t numel() const {
    int64_t p = 1;
    for (size_t i = 0; i < n; ++i) p *= v[i];
    return p;
  }
  bool operator==(const SmallInts& o) const {
    if (n != o.n) return false;
    for (size_t i = 0; i < n; ++i)
      if (v[i] != o.v[i]) return false;
    return true;
  }
};

using Dims = SmallInts<kMaxDims>;
using Attrs = SmallInts<kMaxAttrs>;

// Row-major strides of a contiguous tensor of this shape.
inline Dims contiguous_strides(const Dims& shape) {
  Dims s;
  s.n = shape.n;
  int64_t acc = 1;
  for (int d = static_cast<int>(shape.n) - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= shape[d];
  }
  return s;
}

// A runtime scalar: a number the graph needs but its key ignores. Both
// representations are kept so int64 values (seeds) survive exactly.
struct RtScalar {
  double f = 0;
  int64_t i = 0;
};

// Anything that owns materialized data (runtime::Buffer). ir never looks inside.
struct DataRef {
  virtual ~DataRef() = default;
};

struct Node;
using NodePtr = std::shared_ptr<const Node>;

// A node's inputs: up to kInline of them inside the node itself (every op
// but a long cat), more on the heap. Inline, the graph walk reaches a
// node's inputs without a second dependent load (one cache miss per node,
// not two), and recording an op allocates nothing for them. Used like a
// std::vector; never copied or moved (nodes are not).
class NodeList {
 public:
  static constexpr uint32_t kInline = 3;
  NodeList() = default;
  NodeList(const NodeList&) = delete;
  NodeList& operator=(const NodeList&) = delete;
  ~NodeList() { clear(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const NodePtr* data() const { return size_ <= kInline ? inline_ : heap_.data(); }
  NodePtr* data() { return size_ <= kInline ? inline_ : heap_.data(); }
  const NodePtr& operator[](size_t i) const { return data()[i]; }
  NodePtr& operator[](size_t i) { return data()[i]; }
  const NodePtr* begin() const { return data(); }
  const NodePtr* end() const { return data() + size_; }
  NodePtr* begin() { return data(); }
  NodePtr* end() { return data() + size_; }

  void push_back(NodePtr p) {
    if (size_ < kInline) {
      inline_[size_++] = std::move(p);
      return;
    }
    if (size_ == kInline)  // spills: from now on every input lives on the heap
      for (NodePtr& q : inline_) heap_.push_back(std::move(q));
    heap_.push_back(std::move(p));
    ++size_;
  }
  // Releases every input; keeps the heap's capacity (a recycled node reuses it).
  void clear() {
    if (size_ > kInline) [[unlikely]] {
      heap_.clear();
    } else {
      for (uint32_t i = 0; i < size_; ++i) inline_[i].reset();
    }
    size_ = 0;
  }

 private:
  uint32_t size_ = 0;
  NodePtr inline_[kInline];
  std::vector<NodePtr> heap_;  // all inputs when size_ > kInline
};

// Field order follows the graph walk (ir/graph.cpp) and recording: the
// header, the walk's scratch and the inputs fill the first cache line, the
// shape the next; the walk reads the attribute count from the cached header
// word, so the attributes (rare, and the largest field) come last and are
// touched only by nodes that have some.
struct Node {
  Op op;
  ScalarType dtype;
  Device device{kCPU, 0};
  uint8_t num_scalars = 0;
  // Set on an Input leaf whose value a GPU graph failed to compute, found
  // only after the leaf was handed out (runtime/poison.h): a run reading it
  // fails instead of computing from it. In the header's padding.
  mutable std::atomic<bool> poisoned{false};
  // Graph-walk scratch, not part of the node's value: the canonical index
  // build_graph last gave this node. Only a hint: the walk trusts it only
  // when its own Graph::nodes[mark] is this node, so a stale mark (an older
  // graph, another thread's concurrent walk) costs a revisit, never a wrong
  // graph. Relaxed atomic: concurrent walks of shared nodes are no data race.
  mutable std::atomic<uint32_t> walk_mark{0};
  // Graph-walk scratch too: the node's canonical header word (ir/graph.cpp),
  // computed by the first walk that reaches the node (a node never changes
  // once recorded) with kHeaderCached set; 0 until then.
  mutable std::atomic<uint64_t> header_cache{0};
  static constexpr uint64_t kHeaderCached = 0x80;  // bit 7 of the op byte: ops number fewer than 128
  NodeList inputs;
  Dims shape;
  std::array<RtScalar, 2> scalar{}; // op-specific numbers: runtime arguments, not in the key
  std::shared_ptr<const DataRef> data;  // Input nodes only
  // Where the user recorded this node; for error messages, never hashed.
  const char* file = "";
  uint32_t line = 0;
  Attrs attr;                       // op-specific integers (dims, strides): part of the key

  int64_t numel() const { return shape.numel(); }
};

// A Binary node has two tensor inputs, or one input and a runtime scalar
// (scalar[0], num_scalars == 1) as its second operand: `x * 0.99` is one
// node, not a Full leaf plus the Mul. The scalar is converted to the input's
// dtype (the op's compute dtype) exactly as a Full leaf of that dtype would
// be; like every runtime scalar it is a run argument, never part of the key
// (the key does see the form: one input and one scalar).
inline bool has_scalar_operand(const Node& n) {
  return n.inputs.size() == 1 && op_family(n.op) == Family::Binary;
}

// A view node (AsStrided reads a view of its input's storage, ScatterStrided
// writes one into it) names the view by one stride per view dim and an
// offset into the storage: attr = strides..., then one more word.
//
// Where the storage is a stored tensor (one that owns a buffer from sync to
// sync: a data set, a parameter, a cache, also while writes to it are
// pending) the offset is a runtime scalar (scalar[0].i, num_scalars == 1),
// not part of the key, and the last word is 0: `data[i]`, `data.slice(0,
// i, i + n)` or a cache row written and read at step t replay one
// executable for every i (t). What code relies on of such an offset (the
// GPU's 16-byte vector loads and GEMM copies: its alignment) the executable
// checks at each run (Executable::offset_guards), not the key.
//
// A view of a value computed afresh keeps its offset as the last word: its
// place inside that value is part of the program (a [q|k|v] split), and
// the lowering may rely on all of it (a transpose at offset 0 is computed
// inline, no buffer: Lowering::dim_view).
inline bool is_view_op(Op op) { return op == Op::AsStrided || op == Op::ScatterStrided; }
inline bool view_offset_is_scalar(const Node& n) { return n.num_scalars == 1; }
// Dims of the view: one stride each in attr.
inline uint8_t view_rank(const Node& n) { return static_cast<uint8_t>(n.attr.n - 1); }
// The offset when it is part of the key; 0 when it is a runtime scalar.
inline int64_t static_view_offset(const Node& n) { return view_offset_is_scalar(n) ? 0 : n.attr[n.attr.n - 1]; }

}  // namespace loom::ir
