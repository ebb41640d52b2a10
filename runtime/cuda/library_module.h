// The library kernels (kernels/cuda/), each a module of its own per GPU:
// compiled by NVRTC when first launched (or loaded from the disk cache),
// then shared by every executable on that device; and the cubin caches
// every CUDA compile goes through.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/cuda/driver.h"

namespace loom::runtime::cuda {

// The library kernel `name` (kernels/cuda/library.h function_source) on
// `device`, its module compiled or loaded on the first call. Throws
// loom::Error for an unknown name or a module that cannot be built.
CUfunction library_function(int device, const std::string& name);

// Loads a cubin for `what` from memory (what this process compiled or
// loaded before) or the disk cache, or compiles `source` with NVRTC and
// stores it in both. The key: the device's architecture and NVRTC's
// version (ns), loom's version and this code generator's build (version),
// and `canonical` (the graph's canonical form, or the source's own words).
std::vector<char> cached_cubin(const std::string& source, int device, std::span<const uint64_t> canonical,
                               const std::string& what, const std::string& dump_folder, int64_t kernels);
// A source as LOOM_LOG=kernels names it: the comment line before its last
// entry point (a generated kernel's name and loop), else that entry point.
std::string source_title(const std::string& source);
// Loads a cubin into `device`'s context.
CUmodule load_module(const std::vector<char>& cubin, int device, const std::string& what);

// A source as the words of its cache key (a program that is its own
// canonical form: a function, a tuning module, the library).
std::vector<uint64_t> source_words(const std::string& source);
// The cubins of `sources` (each its own key: source_words) that neither
// memory nor the disk cache holds, compiled by NVRTC side by side on
// every core; afterwards cached_cubin finds each in memory.
void compile_cubins(const std::vector<std::string>& sources, int device, const std::string& what);

}  // namespace loom::runtime::cuda
