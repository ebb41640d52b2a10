// The one header a user includes. Like <torch/torch.h>, it also brings in
// the standard headers libtorch programs use without including them: a
// program ported by changing its include finds them still there.
#pragma once
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <loom/array_ref.h>
#include <loom/cuda.h>
#include <loom/autocast.h>
#include <loom/autograd.h>
#include <loom/compile.h>
#include <loom/data.h>
#include <loom/device.h>
#include <loom/dtype.h>
#include <loom/error.h>
#include <loom/functions.h>
#include <loom/macros.h>
#include <loom/nn.h>
#include <loom/optim.h>
#include <loom/options.h>
#include <loom/runtime.h>
#include <loom/scalar.h>
#include <loom/tensor.h>
