#include "api/src/record.h"

#include <atomic>
#include <sstream>

#include <loom/runtime.h>

#include "api/src/block_pool.h"
#include "api/src/lazy.h"
#include "runtime/cuda/context.h"
#include "runtime/metrics.h"

namespace loom::detail {

namespace {
// initial-exec: a plain %fs-relative load instead of a __tls_get_addr call
// on every recorded node (libloom is a shared library; this costs a few
// bytes of the static TLS block that glibc reserves for such variables).
__attribute__((tls_model("initial-exec"))) thread_local int64_t t_nodes_since_wrap = 0;
// RecordAt's location, or null: the caller's own.
__attribute__((tls_model("initial-exec"))) thread_local const SourceLoc* t_record_at = nullptr;

// A view node's strides and offset (ir/node.h, view_offset_is_scalar): the
// offset into a stored tensor (a storage that owns a buffer: a data set, a
// parameter, a cache, also while writes to it are pending) is a runtime
// scalar, so a loop over `data[i]` or writing `cache[t]` replays one
// executable; into a value computed afresh it is an attribute, part of the
// key.
void set_view(ir::Node& n, const ViewSpec& v, bool stored) {
  ir::Attrs a;
  for (size_t d = 0; d < v.strides.n; ++d) a.push_back(v.strides[d]);
  if (stored) {
    n.scalar[0].i = v.offset;
    n.scalar[0].f = static_cast<double>(v.offset);
    n.num_scalars = 1;
    a.push_back(0);
  } else {
    a.push_back(v.offset);
  }
  n.attr = a;
}
}  // namespace

void throw_undefined(const char* op, const SourceLoc& loc) {
  detail::throw_error(op, "expected a defined tensor but got an undefined one (a default-constructed loom::Tensor)",
                      loc);
}

namespace {
// A recycled node (no zero-fill, no malloc: block_pool.h) with its common fields.
inline std::shared_ptr<ir::Node> fresh_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                            const SourceLoc& loc) {
  auto n = make_node();
  n->op = op;
  n->dtype = dtype;
  n->device = device;
  n->shape = shape;
  const SourceLoc& at = t_record_at ? *t_record_at : loc;
  n->file = at.file_name();
  n->line = at.line();
  runtime::count_node_recorded();
  ++t_nodes_since_wrap;
  return n;
}
}  // namespace

RecordAt::RecordAt(const SourceLoc& loc) : prev_(t_record_at) { t_record_at = &loc; }
RecordAt::~RecordAt() { t_record_at = prev_; }

std::shared_ptr<ir::Node> new_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                   const SourceLoc& loc) {
  return fresh_node(op, dtype, device, shape, loc);
}

std::shared_ptr<ir::Node> new_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                   NodeInputs inputs, const SourceLoc& loc) {
  auto n = fresh_node(op, dtype, device, shape, loc);
  inputs.move_into(n->inputs);
  return n;
}

std::shared_ptr<ir::Node> new_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                   ir::NodePtr input, const SourceLoc& loc) {
  auto n = fresh_node(op, dtype, device, shape, loc);
  n->inputs.push_back(std::move(input));
  return n;
}

std::shared_ptr<ir::Node> new_node2(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape, ir::NodePtr a,
                                    ir::NodePtr b, const SourceLoc& loc) {
  auto n = fresh_node(op, dtype, device, shape, loc);
  n->inputs.push_back(std::move(a));
  n->inputs.push_back(std::move(b));
  return n;
}

ir::NodePtr read_view(const TensorImpl& im, ir::NodePtr base, const SourceLoc& loc) {
  auto n = new_node(ir::Op::AsStrided, im.storage->dtype, im.storage->device, im.view.sizes, {std::move(base)}, loc);
  set_view(*n, im.view, im.storage->stored());
  return n;
}

ir::NodePtr make_cast_node(ir::NodePtr n, ScalarType dtype, const SourceLoc& loc) {
  // Copied first: argument evaluation order is unspecified, and the braced
  // list below moves n.
  const Device dev = n->device;
  const ir::Dims shape = n->shape;
  return new_node(ir::Op::Cast, dtype, dev, shape, {std::move(n)}, loc);
}

ir::NodePtr copy_node(ir::NodePtr n, const SourceLoc& loc) {
  const ScalarType dt = n->dtype;
  const Device dev = n->device;
  const ir::Dims shape = n->shape;
  return new_node(ir::Op::Cast, dt, dev, shape, {std::move(n)}, loc);
}

ir::NodePtr read_as(const Tensor& t, ScalarType dtype, const SourceLoc& loc) { return cast_node(read(t, loc), dtype, loc); }

ir::NodePtr scalar_node(const Scalar& s, ScalarType dtype, Device device, const SourceLoc& loc) {
  auto n = new_node(ir::Op::Full, dtype, device, ir::Dims{}, loc);
  n->scalar[0] = detail::rt_scalar(s);
  n->num_scalars = 1;
  return n;
}

Tensor wrap(ir::NodePtr n) {
  // A storage never adopts another storage's Input leaf: that would alias
  // two storages' buffers behind the user's back.
  if (n->op == ir::Op::Input) n = copy_node(std::move(n), SourceLoc::current());
  const ir::Node& node = *n;
  // The storage first, then the impl built around it (no null to replace).
  auto storage = make_pooled<Storage>(std::move(n), node.dtype, node.device, node.shape.numel());
  int64_t recorded = t_nodes_since_wrap;
  t_nodes_since_wrap = 0;
  note_new_pending(storage, recorded);
  return Tensor(make_pooled<TensorImpl>(std::move(storage), node.shape));
}

void write_through(const Tensor& self, ir::NodePtr value, const char* op, const SourceLoc& loc) {
  const TensorImpl& im = impl_of(self, op, loc);
  for (size_t d = 0; d < im.view.sizes.n; ++d)
    LOOM_CHECK(!(im.view.strides[d] == 0 && im.view.sizes[d] > 1), op, loc,
               "unsupported operation: more than one element of the written-to tensor ", describe(self),
               " refers to a single memory location (it is an expanded view); call .clone() first");
  Storage& st = *im.storage;
  st.version.fetch_add(1, std::memory_order_relaxed);  // autograd: saved tensors check it
  value = cast_node(std::move(value), st.dtype, loc);
  ir::NodePtr base = st.node();
  if (covers_in_order(im.view, base->shape.numel())) {
    // The storage's node takes the view's shape: readers through this view
    // then read it plainly, and others through an AsStrided, which indexes
    // the flat buffer whatever the node's shape. A storage never adopts
    // another storage's Input leaf (see wrap()); one arrives here when a
    // graph cut computed the value already: copy it in.
    if (value->op == ir::Op::Input && value != base) value = copy_node(std::move(value), loc);
    st.set_node(std::move(value));
  } else {
    auto n = new_node(ir::Op::ScatterStrided, st.dtype, st.device, base->shape, {base, std::move(value)}, loc);
    set_view(*n, im.view, st.stored());
    st.set_node(std::move(n));
  }
  int64_t recorded = t_nodes_since_wrap;
  t_nodes_since_wrap = 0;
  note_pending(im.storage, recorded);
}

ir::Dims to_dims(IntArrayRef a, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(a.size() <= ir::kMaxDims, op, loc, "tensors of ", a.size(), " dims are not supported (at most ",
             ir::kMaxDims, ")");
  return ir::Dims(a.data(), a.size());
}

IntArrayRef to_ref(const ir::Dims& d) { return IntArrayRef(d.data(), d.size()); }

std::string shape_str(const ir::Dims& d) {
  std::ostringstream os;
  os << to_ref(d);
  return os.str();
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream os;
  os << t.dtype() << shape_str(t.impl()->view.sizes);
  if (!t.device().is_cpu()) os << "@" << t.device();
  return os.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, const SourceLoc& loc) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-dim tensor accepts dim 0 and -1, as in PyTorch
  LOOM_CHECK(dim >= -n && dim < n, op, loc, "dimension out of range (expected to be in range of [", -n, ", ", n - 1,
             "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

void throw_device_mismatch(const Tensor& a, const Tensor& b, const char* op, const SourceLoc& loc) {
  std::ostringstream os;
  append(os, "expected all tensors to be on the same device, but found at least two devices, ", a.device(), " and ",
         b.device(), " (", describe(a), " and ", describe(b), ")");
  throw_error(op, os.str(), loc);
}

ir::Dims broadcast_shapes_general(const ir::Dims& a, const ir::Dims& b, const char* op, const SourceLoc& loc) {
  ir::Dims out;
  const int n = std::max(a.n, b.n);
  out.n = static_cast<uint8_t>(n);
  for (int i = 0; i < n; ++i) {
    int ia = a.n - n + i, ib = b.n - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    LOOM_CHECK(da == db || da == 1 || db == 1, op, loc, "the size of tensor a (", da,
               ") must match the size of tensor b (", db, ") at non-singleton dimension ", i, ": shapes ",
               shape_str(a), " and ", shape_str(b), " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Device resolve_device(Device d, const char* op, const SourceLoc& loc) {
  if (d.is_cpu()) return Device(kCPU, 0);
  // As in libtorch, asking for a GPU that is not there fails where it is asked.
  LOOM_CHECK(runtime::cuda::available(), op, loc, "CUDA is not available: ", runtime::cuda::unavailable_reason());
  const int count = runtime::cuda::device_count();
  LOOM_CHECK(d.index() < count, op, loc, "invalid device index ", int(d.index()), " for ", d, " (", count,
             " CUDA device", count == 1 ? "" : "s", ")");
  return d.has_index() ? d : Device(d.type(), 0);
}

// Wraps an existing buffer as a materialized tensor.
Tensor from_buffer(runtime::BufferPtr buf, const ir::Dims& sizes, const ir::Dims& strides, int64_t storage_numel,
                   ScalarType dt, Device dev) {
  // A tensor that is its whole storage, contiguous, gets a leaf of its own
  // shape: then reading it is the leaf itself and writing it in place (an
  // optimizer's update of a parameter moved with .to()) replaces the leaf,
  // so the update can be donated. Otherwise the leaf is the flat storage
  // and the tensor a view of it.
  const bool whole = storage_numel == sizes.numel() && strides == ir::contiguous_strides(sizes);
  ir::NodePtr input = detail::input_node(buf, dt, dev, whole ? sizes : ir::Dims(&storage_numel, 1));
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->storage = std::make_shared<detail::Storage>(std::move(input), dt, dev, storage_numel);
  impl->storage->adopt_buffer(std::move(buf));
  impl->view.sizes = sizes;
  impl->view.strides = strides;
  return Tensor(std::move(impl));
}

}  // namespace loom::detail

