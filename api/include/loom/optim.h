// Optimizers, as torch::optim: SGD, Adam, AdamW, RMSprop, Adagrad, LBFGS and the learning-rate
// schedulers (see optim/optimizer.h for
// what step() does in a lazy runtime).
#pragma once
#include <loom/optim/adam.h>
#include <loom/optim/lbfgs.h>
#include <loom/optim/optimizer.h>
#include <loom/optim/rmsprop_adagrad.h>
#include <loom/optim/schedulers.h>
#include <loom/optim/sgd.h>
