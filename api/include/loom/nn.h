// loom::nn, as torch::nn: Module and its holders, the layers, Sequential,
// the losses (as modules and in nn::functional), init, save/load.
#pragma once
#include <loom/nn/activation.h>
#include <loom/nn/containers.h>
#include <loom/nn/conv_pad.h>
#include <loom/nn/functional.h>
#include <loom/nn/init.h>
#include <loom/nn/layers.h>
#include <loom/nn/loss.h>
#include <loom/nn/module.h>
#include <loom/nn/normalization.h>
#include <loom/nn/options.h>
#include <loom/nn/rnn.h>
#include <loom/nn/sequential.h>
#include <loom/nn/serialize.h>
#include <loom/nn/top_level.h>
#include <loom/nn/transformer.h>
#include <loom/nn/upsample.h>
#include <loom/nn/grid_sample.h>
#include <loom/nn/embedding_bag.h>
#include <loom/nn/utils.h>
