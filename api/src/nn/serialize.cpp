// save/load of a module's parameters and buffers (loom/nn/serialize.h).
// The file: "loom-params 1\n", a count, then per tensor: name length and
// bytes, dtype, ndim, sizes, byte count, contiguous data (native
// little-endian, which is every machine loom builds for).
#include <loom/autograd.h>
#include <loom/functions.h>
#include <loom/nn/serialize.h>
#include <loom/runtime.h>

#include <cstring>
#include <fstream>

#include "api/src/record.h"

namespace loom {

namespace {

constexpr char kMagic[] = "loom-params 1\n";

struct Entry {
  std::string name;
  Tensor value;
};

template <class T>
void put(std::ofstream& f, T v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T get(std::ifstream& f, const std::string& path) {
  T v{};
  f.read(reinterpret_cast<char*>(&v), sizeof v);
  LOOM_CHECK(f.good(), "load", SourceLoc::current(), path, " ends early: it is truncated or not a loom parameter file");
  return v;
}

void write_file(const std::vector<Entry>& entries, const std::string& path) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  LOOM_CHECK(f.good(), "save", SourceLoc::current(), "cannot open ", path, " for writing");
  f.write(kMagic, sizeof kMagic - 1);
  put<uint64_t>(f, entries.size());
  for (const Entry& e : entries) {
    Tensor t = e.value.detach().contiguous().cpu();
    put<uint64_t>(f, e.name.size());
    f.write(e.name.data(), static_cast<std::streamsize>(e.name.size()));
    put<uint8_t>(f, static_cast<uint8_t>(t.dtype()));
    put<uint8_t>(f, static_cast<uint8_t>(t.dim()));
    for (int64_t s : t.sizes()) put<int64_t>(f, s);
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    put<uint64_t>(f, bytes);
    const void* data = nullptr;
    switch (t.dtype()) {
      case kBool: data = t.data_ptr<bool>(); break;
      case kInt: data = t.data_ptr<int32_t>(); break;
      case kLong: data = t.data_ptr<int64_t>(); break;
      case kFloat: data = t.data_ptr<float>(); break;
      case kDouble: data = t.data_ptr<double>(); break;
      case kBFloat16: data = t.data_ptr<BFloat16>(); break;
      case kHalf: data = t.data_ptr<Half>(); break;
      case kByte: data = t.data_ptr<uint8_t>(); break;
      case kChar: data = t.data_ptr<int8_t>(); break;
      case kShort: data = t.data_ptr<int16_t>(); break;
    }
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  }
  LOOM_CHECK(f.good(), "save", SourceLoc::current(), "writing ", path, " failed");
}

std::vector<Entry> read_file(const std::string& path) {
  const SourceLoc loc = SourceLoc::current();
  std::ifstream f(path, std::ios::binary);
  LOOM_CHECK(f.good(), "load", loc, "cannot open ", path);
  char magic[sizeof kMagic - 1];
  f.read(magic, sizeof magic);
  LOOM_CHECK(f.good() && std::memcmp(magic, kMagic, sizeof magic) == 0, "load", loc, path,
             " is not a loom parameter file (written by loom::save)");
  const uint64_t count = get<uint64_t>(f, path);
  std::vector<Entry> out;
  for (uint64_t i = 0; i < count; ++i) {
    Entry e;
    e.name.resize(get<uint64_t>(f, path));
    f.read(e.name.data(), static_cast<std::streamsize>(e.name.size()));
    const auto dtype = static_cast<ScalarType>(get<uint8_t>(f, path));
    LOOM_CHECK(static_cast<int>(dtype) < kNumDTypes, "load", loc, path, ": unknown dtype for '", e.name, "'");
    std::vector<int64_t> sizes(get<uint8_t>(f, path));
    for (int64_t& s : sizes) s = get<int64_t>(f, path);
    const uint64_t bytes = get<uint64_t>(f, path);
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    LOOM_CHECK(bytes == static_cast<uint64_t>(numel) * element_size(dtype), "load", loc, path, ": '", e.name,
               "' has ", bytes, " bytes for shape ", IntArrayRef(sizes));
    std::vector<char> data(bytes);
    f.read(data.data(), static_cast<std::streamsize>(bytes));
    LOOM_CHECK(f.good() || (bytes == 0 && !f.bad()), "load", loc, path, " ends early in '", e.name, "'");
    e.value = from_blob(data.data(), sizes, dtype).clone();
    sync();  // the copy is made before `data` goes away
    out.push_back(std::move(e));
  }
  return out;
}

// Checks every name, shape and dtype first, then copies all the values in.
void assign(const std::vector<Entry>& from_file, std::vector<Entry>& into, const std::string& path) {
  const SourceLoc loc = SourceLoc::current();
  LOOM_CHECK(from_file.size() == into.size(), "load", loc, path, " holds ", from_file.size(), " tensors, the module ",
             into.size());
  for (size_t i = 0; i < into.size(); ++i) {
    const Entry* match = nullptr;
    for (const Entry& e : from_file)
      if (e.name == into[i].name) match = &e;
    LOOM_CHECK(match, "load", loc, path, " has no tensor named '", into[i].name, "'");
    const Tensor& dst = into[i].value;
    if (!dst.defined()) continue;
    LOOM_CHECK(match->value.sizes() == dst.sizes() && match->value.dtype() == dst.dtype(), "load", loc, path, ": '",
               into[i].name, "' is ", detail::describe(match->value), " in the file but ", detail::describe(dst),
               " in the module");
  }
  NoGradGuard no_grad;
  for (Entry& e : into) {
    const Entry* match = nullptr;
    for (const Entry& f : from_file)
      if (f.name == e.name) match = &f;
    if (e.value.defined()) e.value.copy_(match->value);
    else e.value = match->value;
  }
  sync_all();
}

std::vector<Entry> entries_of(const nn::Module& module) {
  std::vector<Entry> out;
  for (const auto& p : module.named_parameters()) out.push_back({p.key(), p.value()});
  for (const auto& b : module.named_buffers()) out.push_back({b.key(), b.value()});
  return out;
}

}  // namespace

void save(const nn::Module& module, const std::string& path) { write_file(entries_of(module), path); }

void load(nn::Module& module, const std::string& path) {
  std::vector<Entry> into = entries_of(module);
  assign(read_file(path), into, path);
}

void save(const std::vector<Tensor>& tensors, const std::string& path) {
  std::vector<Entry> entries;
  for (size_t i = 0; i < tensors.size(); ++i) entries.push_back({std::to_string(i), tensors[i]});
  write_file(entries, path);
}

void load(std::vector<Tensor>& tensors, const std::string& path) {
  std::vector<Entry> from_file = read_file(path);
  if (tensors.empty()) tensors.resize(from_file.size());
  std::vector<Entry> into;
  for (size_t i = 0; i < tensors.size(); ++i) into.push_back({std::to_string(i), tensors[i]});
  assign(from_file, into, path);
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i] = into[i].value;
}

void save(const Tensor& tensor, const std::string& path) { write_file({{"0", tensor}}, path); }

void load(Tensor& tensor, const std::string& path) {
  std::vector<Tensor> one = {tensor};
  load(one, path);
  tensor = one[0];
}

namespace {
// The optimizer's entries, in a fixed order; `steps` receives the step
// counts' tensors (written back to the states after a load).
std::vector<Entry> entries_of(optim::Optimizer& o, std::vector<std::pair<optim::OptimizerParamState*, Tensor>>& steps) {
  std::vector<Entry> out;
  for (size_t g = 0; g < o.param_groups().size(); ++g) {
    optim::OptimizerParamGroup& group = o.param_groups()[g];
    const std::string prefix = "group" + std::to_string(g);
    out.push_back({prefix + ".lr", full({}, group.options().get_lr(), kDouble)});
    for (size_t i = 0; i < group.params().size(); ++i) {
      optim::OptimizerParamState* st = o.state_of(group.params()[i]);
      if (!st) continue;
      const std::string name = prefix + ".param" + std::to_string(i);
      steps.push_back({st, full({}, st->step, kLong)});
      out.push_back({name + ".step", steps.back().second});
      for (auto& [field, t] : o.state_tensors(*st))
        if (t->defined()) out.push_back({name + "." + field, *t});
    }
  }
  return out;
}
}  // namespace

void save(const optim::Optimizer& optimizer, const std::string& path) {
  std::vector<std::pair<optim::OptimizerParamState*, Tensor>> steps;
  // Reads only: the accessors it uses are not const.
  write_file(entries_of(const_cast<optim::Optimizer&>(optimizer), steps), path);
}

void load(optim::Optimizer& optimizer, const std::string& path) {
  std::vector<std::pair<optim::OptimizerParamState*, Tensor>> steps;
  std::vector<Entry> into = entries_of(optimizer, steps);
  assign(read_file(path), into, path);
  // The values are in the entries' tensors (the state's own, copied in
  // place); the learning rates and step counts go back as numbers.
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g)
    for (const Entry& e : into)
      if (e.name == "group" + std::to_string(g) + ".lr") optimizer.param_groups()[g].options().set_lr(e.value.item<double>());
  for (auto& [state, t] : steps) state->step = t.item<int64_t>();
}

}  // namespace loom
