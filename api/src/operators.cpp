// C++ operators, each the named op it spells (a + b is add(a, b)).
#include <loom/functions.h>

#include "api/src/record.h"

namespace loom {

Tensor operator-(TensorArg a) { return neg(a.t, a.loc); }
Tensor operator+(const Tensor& a, TensorArg b) { return add(a, b.t, 1, b.loc); }
Tensor operator+(const Tensor& a, const ScalarArg& b) { return add(a, b.s, 1, b.loc); }
Tensor operator+(const ScalarArg& a, const Tensor& b) { return add(b, a.s, 1, a.loc); }
Tensor operator-(const Tensor& a, TensorArg b) { return sub(a, b.t, 1, b.loc); }
Tensor operator-(const Tensor& a, const ScalarArg& b) { return sub(a, b.s, 1, b.loc); }
// s - t and s / t: the scalar becomes a 0-dim tensor of the pair's result
// type, so promotion and the bool checks are those of t - s and t / s.
Tensor operator-(const ScalarArg& a, const Tensor& b) {
  detail::impl_of(b, "sub", a.loc);
  return sub(scalar_tensor(a.s, TensorOptions(result_type(b, a.s)).device(b.device()), a.loc), b, 1, a.loc);
}
Tensor operator*(const Tensor& a, TensorArg b) { return mul(a, b.t, b.loc); }
Tensor operator*(const Tensor& a, const ScalarArg& b) { return mul(a, b.s, b.loc); }
Tensor operator*(const ScalarArg& a, const Tensor& b) { return mul(b, a.s, a.loc); }
Tensor operator/(const Tensor& a, TensorArg b) { return div(a, b.t, b.loc); }
Tensor operator/(const Tensor& a, const ScalarArg& b) { return div(a, b.s, b.loc); }
Tensor operator/(const ScalarArg& a, const Tensor& b) {
  detail::impl_of(b, "div", a.loc);
  return div(scalar_tensor(a.s, TensorOptions(result_type(b, a.s)).device(b.device()), a.loc), b, a.loc);
}
Tensor operator%(const Tensor& a, TensorArg b) { return remainder(a, b.t, b.loc); }
Tensor operator%(const Tensor& a, const ScalarArg& b) { return remainder(a, b.s, b.loc); }
Tensor operator==(const Tensor& a, TensorArg b) { return eq(a, b.t, b.loc); }
Tensor operator==(const Tensor& a, const ScalarArg& b) { return a.eq(b.s, b.loc); }
Tensor operator!=(const Tensor& a, TensorArg b) { return ne(a, b.t, b.loc); }
Tensor operator!=(const Tensor& a, const ScalarArg& b) { return a.ne(b.s, b.loc); }
Tensor operator<(const Tensor& a, TensorArg b) { return lt(a, b.t, b.loc); }
Tensor operator<(const Tensor& a, const ScalarArg& b) { return a.lt(b.s, b.loc); }
Tensor operator<=(const Tensor& a, TensorArg b) { return le(a, b.t, b.loc); }
Tensor operator<=(const Tensor& a, const ScalarArg& b) { return a.le(b.s, b.loc); }
Tensor operator>(const Tensor& a, TensorArg b) { return gt(a, b.t, b.loc); }
Tensor operator>(const Tensor& a, const ScalarArg& b) { return a.gt(b.s, b.loc); }
Tensor operator>=(const Tensor& a, TensorArg b) { return ge(a, b.t, b.loc); }
Tensor operator>=(const Tensor& a, const ScalarArg& b) { return a.ge(b.s, b.loc); }
Tensor operator&(const Tensor& a, TensorArg b) { return logical_and(a, b.t, b.loc); }
Tensor operator|(const Tensor& a, TensorArg b) { return logical_or(a, b.t, b.loc); }
Tensor operator~(TensorArg a) { return logical_not(a.t, a.loc); }
Tensor operator!(TensorArg a) { return logical_not(a.t, a.loc); }

}  // namespace loom
