// loom::data, as torch::data: datasets, transforms, samplers and the data
// loader (loom/data/*.h). Included by loom.h.
#pragma once
#include <loom/data/dataloader.h>
#include <loom/data/datasets.h>
#include <loom/data/example.h>
#include <loom/data/samplers.h>
#include <loom/data/transforms.h>
