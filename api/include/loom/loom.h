// The one header a user includes.
#pragma once
#include <loom/array_ref.h>
#include <loom/cuda.h>
#include <loom/autograd.h>
#include <loom/compile.h>
#include <loom/device.h>
#include <loom/dtype.h>
#include <loom/error.h>
#include <loom/functions.h>
#include <loom/nn.h>
#include <loom/optim.h>
#include <loom/options.h>
#include <loom/runtime.h>
#include <loom/scalar.h>
#include <loom/tensor.h>
