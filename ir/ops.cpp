// Names, families and costs of the op kinds in ir/ops.def.
#include "ir/node.h"

namespace loom::ir {

namespace {
struct OpInfo {
  const char* name;
  Family family;
  double cost;
};
constexpr OpInfo kOps[] = {
#define X(name, str, family, cost) {str, Family::family, cost},
#include "ir/ops.def"
#undef X
};
}  // namespace

const char* op_name(Op op) { return kOps[static_cast<int>(op)].name; }
Family op_family(Op op) { return kOps[static_cast<int>(op)].family; }
double op_cost(Op op) { return kOps[static_cast<int>(op)].cost; }

}  // namespace loom::ir
