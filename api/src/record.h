// Recording helpers shared by every op file in api/src/ops_*.cpp: read a
// tensor's value as a node, make a node, wrap a node as a new tensor, and
// the argument checks every op uses (so their messages read alike).
#pragma once
#include <memory>
#include <string>

#include <loom/tensor.h>

#include "api/src/tensor_impl.h"
#include "ir/node.h"

namespace loom::detail {

// The node whose value is `t` (contiguous, t's shape): the storage's node
// itself, or an AsStrided read of it for a view.
ir::NodePtr read(const Tensor& t, const SourceLoc& loc);
// read() converted to dtype (no node if it already is).
ir::NodePtr read_as(const Tensor& t, ScalarType dtype, const SourceLoc& loc);

std::shared_ptr<ir::Node> new_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                   const SourceLoc& loc);
// A node with inputs, in one call.
std::shared_ptr<ir::Node> new_node(ir::Op op, ScalarType dtype, Device device, const ir::Dims& shape,
                                   std::vector<ir::NodePtr> inputs, const SourceLoc& loc);
// A fresh node with n's value (clone): a Cast to the same dtype.
ir::NodePtr copy_node(ir::NodePtr n, const SourceLoc& loc);
ir::NodePtr cast_node(ir::NodePtr n, ScalarType dtype, const SourceLoc& loc);
// A 0-dim Full node holding s (a runtime scalar, not part of the key).
ir::NodePtr scalar_node(const Scalar& s, ScalarType dtype, Device device, const SourceLoc& loc);

// A fresh tensor owning a new storage whose value is `n`; registers it as pending.
Tensor wrap(ir::NodePtr n);
// Writes `value` (the full shape of `self`) into self's storage through its view.
void write_through(const Tensor& self, ir::NodePtr value, const char* op, const SourceLoc& loc);

ir::Dims to_dims(IntArrayRef a, const char* op, const SourceLoc& loc);
IntArrayRef to_ref(const ir::Dims& d);
std::string shape_str(const ir::Dims& d);
// "x: Float[2, 3]" for error messages.
std::string describe(const Tensor& t);

const TensorImpl& impl_of(const Tensor& t, const char* op, const SourceLoc& loc);  // checks defined
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, const SourceLoc& loc);
void check_same_device(const Tensor& a, const Tensor& b, const char* op, const SourceLoc& loc);
// NumPy broadcast of two shapes, or an error naming both.
ir::Dims broadcast_shapes(const ir::Dims& a, const ir::Dims& b, const char* op, const SourceLoc& loc);
ir::Dims shape_of(const Tensor& t);

// Resolves an unset device index to 0 and rejects malformed devices.
Device resolve_device(Device d, const char* op, const SourceLoc& loc);

}  // namespace loom::detail
