// Recording helpers shared by every op file in api/src/ops_*.cpp: read a
// tensor's value as a node, make a node, wrap a node as a new tensor, and
// the argument checks every op uses (so their messages read alike).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include <loom/tensor.h>

#include "api/src/tensor_impl.h"
#include "ir/node.h"

namespace loom::detail {

// Whether view `v` walks its elements in storage order from offset 0
// (dims of extent 1 have any stride).
inline bool in_storage_order(const ViewSpec& v) {
  int64_t expect = 1;
  for (int d = static_cast<int>(v.sizes.n) - 1; d >= 0; --d) {
    if (v.sizes[d] != 1 && v.strides[d] != expect) return false;
    expect *= v.sizes[d];
  }
  return v.offset == 0;
}
// Whether view `v` reads all of `base` in order (no AsStrided node needed).
inline bool is_plain_read(const ViewSpec& v, const ir::Node& base) {
  return v.offset == 0 && v.sizes == base.shape && in_storage_order(v);
}
// Whether view `v` covers all of a storage of `numel` elements in order,
// whatever the shape the storage's node has (a bias gradient made [1, n] by
// a keepdim sum and seen as [n]): a write through it replaces the whole
// value, no scatter.
inline bool covers_in_order(const ViewSpec& v, int64_t numel) {
  return v.offset == 0 && v.sizes.numel() == numel && in_storage_order(v);
}
// An AsStrided node reading view `im` of `base`.
ir::NodePtr read_view(const TensorImpl& im, ir::NodePtr base, const SourceLoc& loc);
// The node whose value is `t` (contiguous, t's shape): the storage's node
// itself, or an AsStrided read of it for a view. Inline: every op reads its
// operands, almost always whole tensors.
inline ir::NodePtr read(const Tensor& t, const SourceLoc& loc) {
  const TensorImpl& im = *t.impl();
  ir::NodePtr base = im.storage->node();
  if (is_plain_read(im.view, *base)) [[likely]]
    return base;
  return read_view(im, std::move(base), loc);
}
// read() converted to dtype (no node if it already is).
ir::NodePtr read_as(const Tensor& t, ScalarType dtype, const SourceLoc& loc);

std::shared_ptr<ir::Node> new_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                   const SourceLoc& loc);

// The inputs of a new node: a braced list of one to three nodes, or a vector.
// The braced form moves each node in and needs no heap (a std::initializer_list
// would copy every shared_ptr: two atomic operations per input per op);
// new_node then moves them into the node's own, usually recycled, vector.
class NodeInputs {
 public:
  NodeInputs() = default;
  NodeInputs(std::vector<ir::NodePtr> v) : many_(std::move(v)) {}  // NOLINT: implicit by design
  NodeInputs(ir::NodePtr a) : few_{std::move(a)}, count_(1) {}      // NOLINT
  NodeInputs(ir::NodePtr a, ir::NodePtr b) : few_{std::move(a), std::move(b)}, count_(2) {}
  NodeInputs(ir::NodePtr a, ir::NodePtr b, ir::NodePtr c) : few_{std::move(a), std::move(b), std::move(c)}, count_(3) {}
  // Appends the inputs to `to`, leaving this empty.
  void move_into(ir::NodeList& to) {
    for (uint8_t i = 0; i < count_; ++i) to.push_back(std::move(few_[i]));
    for (auto& n : many_) to.push_back(std::move(n));
    count_ = 0;
    many_.clear();
  }

 private:
  std::array<ir::NodePtr, 3> few_;
  uint8_t count_ = 0;
  std::vector<ir::NodePtr> many_;
};

// A node with inputs, in one call.
std::shared_ptr<ir::Node> new_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                   NodeInputs inputs, const SourceLoc& loc);
// A node with one input (`{x}` picks this one): no NodeInputs to build and take apart.
std::shared_ptr<ir::Node> new_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                   ir::NodePtr input, const SourceLoc& loc);
// The same for two inputs (every binary op).
std::shared_ptr<ir::Node> new_node2(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape, ir::NodePtr a,
                                    ir::NodePtr b, const SourceLoc& loc);
// A fresh node with n's value (clone): a Cast to the same dtype.
ir::NodePtr copy_node(ir::NodePtr n, const SourceLoc& loc);
// n itself when it already has `dtype` (inline: every binary op calls this
// twice, almost always for nothing), else a new Cast node.
ir::NodePtr make_cast_node(ir::NodePtr n, ScalarType dtype, const SourceLoc& loc);
inline ir::NodePtr cast_node(ir::NodePtr n, ScalarType dtype, const SourceLoc& loc) {
  if (n->dtype == dtype) return n;
  return make_cast_node(std::move(n), dtype, loc);
}
// s as a node's runtime scalar. Its two fields are read with one 8-byte load
// each: the caller usually built `s` just now field by field, and a 16-byte
// load of both (what GCC would emit for the copy) cannot be forwarded from
// those stores; the stall was a large part of recording `x * 0.99`.
inline ir::RtScalar rt_scalar(const Scalar& s) {
  double f = s.toDouble();
  int64_t i = s.toLong();
  __asm__("" : "+r"(i));  // keeps the loads apart
  return ir::RtScalar{f, i};
}

// A 0-dim Full node holding s (a runtime scalar, not part of the key).
ir::NodePtr scalar_node(const Scalar& s, ScalarType dtype, Device device, const SourceLoc& loc);

// While alive, the nodes this thread records carry `loc` instead of their
// own call site: a built-in gradient rule's ops point at the forward op
// they differentiate (OpGrad::apply), so an error in the backward graph (a
// label out of range found by its index_check) names the user's line, not
// a line of loom's rule files. Nests.
class RecordAt {
 public:
  explicit RecordAt(const SourceLoc& loc);
  ~RecordAt();
  RecordAt(const RecordAt&) = delete;
  RecordAt& operator=(const RecordAt&) = delete;

 private:
  const SourceLoc* prev_;
};

// A fresh tensor owning a new storage whose value is `n`; registers it as pending.
Tensor wrap(ir::NodePtr n);
// x (int64 in [0, size)) where `ok` holds; where it does not, reading the
// result fails as an index out of [0, size) at loc. Checks of argument
// values (a distribution's weights, a bag's offsets) made where the values
// are computed, without waiting for them on the host. (api/src/ops_sampling.cpp)
Tensor checked_where(const Tensor& x, const Tensor& ok, int64_t size, const SourceLoc& loc);
// An int64 index's values as an IndexCheck node against [0, size): reading
// the result fails as an index out of range at loc where one is not in it
// (the kernel that reads it sees 0 there). For a check that must survive
// the gather it belongs to leaving the graph (a gradient rule's onehot).
Tensor checked_index(const Tensor& index, int64_t size, const SourceLoc& loc);
// Writes `value` (the full shape of `self`) into self's storage through its view.
void write_through(const Tensor& self, ir::NodePtr value, const char* op, const SourceLoc& loc);

ir::Dims to_dims(IntArrayRef a, const char* op, const SourceLoc& loc);
IntArrayRef to_ref(const ir::Dims& d);
std::string shape_str(const ir::Dims& d);
// "x: Float[2, 3]" for error messages.
std::string describe(const Tensor& t);

[[noreturn]] void throw_undefined(const char* op, const SourceLoc& loc);
// t's impl; throws naming `op` if t is undefined. Inline: every op calls it.
inline const TensorImpl& impl_of(const Tensor& t, const char* op, const SourceLoc& loc) {
  if (!t.defined()) [[unlikely]]
    throw_undefined(op, loc);
  return *t.impl();
}
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, const SourceLoc& loc);
[[noreturn]] void throw_device_mismatch(const Tensor& a, const Tensor& b, const char* op, const SourceLoc& loc);
// Inline: every binary op calls it, almost always with one device.
inline void check_same_device(const Tensor& a, const Tensor& b, const char* op, const SourceLoc& loc) {
  // Storage devices directly: Tensor::device() is an out-of-line call per operand.
  if (impl_of(a, op, loc).storage->device != impl_of(b, op, loc).storage->device) [[unlikely]]
    throw_device_mismatch(a, b, op, loc);
}
// NumPy broadcast of two shapes, or an error naming both.
ir::Dims broadcast_shapes_general(const ir::Dims& a, const ir::Dims& b, const char* op, const SourceLoc& loc);
// Inline for the common case, two equal shapes, without the per-dim checks.
inline ir::Dims broadcast_shapes(const ir::Dims& a, const ir::Dims& b, const char* op, const SourceLoc& loc) {
  if (a == b) [[likely]]
    return a;
  return broadcast_shapes_general(a, b, op, loc);
}
inline ir::Dims shape_of(const Tensor& t) { return t.impl()->view.sizes; }

// Resolves an unset device index to 0 and rejects malformed devices.
Device resolve_device(Device d, const char* op, const SourceLoc& loc);

// Reserves `n` counters of loom's random stream: (seed, first offset), as
// every random op takes them (ops_factory.cpp); loom::compile's replays too.
std::pair<uint64_t, uint64_t> take_random(int64_t n);

// Wraps an existing buffer (already holding the values) as a materialized tensor.
Tensor from_buffer(runtime::BufferPtr buf, const ir::Dims& sizes, const ir::Dims& strides, int64_t storage_numel,
                   ScalarType dt, Device dev);

}  // namespace loom::detail
