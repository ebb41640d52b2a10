// operator<<(ostream, Tensor): libtorch's print format, reproduced rule for
// rule from ATen/core/Formatting.cpp (line size 80), so printed output
// diffs cleanly against a libtorch program. Materializes the tensor. As in
// libtorch 2.x the stream's own flags and precision do not change the output.
#include <loom/tensor.h>

#include <charconv>
#include <cstdlib>
#include <cmath>
#include <iomanip>
#include <span>
#include <vector>

namespace loom {

namespace {

// Restores the stream's flags and precision on exit, as libtorch's FormatGuard.
struct FormatGuard {
  std::ostream& os;
  std::ios saved{nullptr};
  explicit FormatGuard(std::ostream& s) : os(s) { saved.copyfmt(s); }
  ~FormatGuard() { os.copyfmt(saved); }
};

struct Format {
  double scale = 1;
  int sz = 11;
};

// Picks integer / fixed / scaled / scientific notation for all of `v`
// (libtorch's __printFormat, including its quirks) and sets up the stream.
Format choose_format(std::ostream& os, std::span<const double> v) {
  Format f;
  if (v.empty()) return f;
  bool int_mode = true;
  for (double z : v)
    if (std::isfinite(z) && z != std::ceil(z)) {
      int_mode = false;
      break;
    }
  size_t first = 0;
  while (first < v.size() && !std::isfinite(v[first])) ++first;
  double exp_min = 1, exp_max = 1;
  if (first != v.size()) {
    exp_min = exp_max = std::fabs(v[first]);
    for (size_t i = first; i < v.size(); ++i) {
      double z = std::fabs(v[i]);
      if (!std::isfinite(z)) continue;
      if (z < exp_min) exp_min = z;
      if (v[i] > exp_max) exp_max = z;  // signed compare: libtorch's own rule
    }
    exp_min = exp_min != 0 ? std::floor(std::log10(exp_min)) + 1 : 1;
    exp_max = exp_max != 0 ? std::floor(std::log10(exp_max)) + 1 : 1;
  }
  if (int_mode) {
    if (exp_max > 9) {
      os << std::scientific << std::setprecision(4);
    } else {
      f.sz = static_cast<int>(exp_max) + 1;
      os.unsetf(std::ios_base::floatfield);
      os.precision(6);
    }
  } else if (exp_max - exp_min > 4) {
    if (std::fabs(exp_max) > 99 || std::fabs(exp_min) > 99) f.sz = 12;
    os << std::scientific << std::setprecision(4);
  } else {
    if (exp_max > 5 || exp_max < 0) {
      f.sz = 7;
      f.scale = std::pow(10, exp_max - 1);
    } else {
      f.sz = exp_max == 0 ? 7 : static_cast<int>(exp_max) + 6;
    }
    os << std::fixed << std::setprecision(4);
  }
  return f;
}

void print_scale(std::ostream& os, double scale) {
  FormatGuard guard(os);
  os.unsetf(std::ios_base::floatfield);
  os.precision(6);
  os << scale << " *\n";
}

// A 0-dim value as fmt's "{}" writes it: the shortest text that reads back
// exactly, in fixed notation unless the exponent is below -4 or above 15.
std::string shortest(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  if (!std::isfinite(x)) return sci;
  const int exp10 = std::atoi(sci.c_str() + sci.find('e') + 1);
  if (exp10 < -4 || exp10 > 15) return sci;
  r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
  return std::string(buf, r.ptr);
}

// A rows x cols matrix, split into column blocks that fit the line.
void print_matrix(std::ostream& os, std::span<const double> v, int64_t rows, int64_t cols, int64_t indent) {
  const Format f = choose_format(os, v);
  const std::string pad(indent, ' ');  // libtorch 2.x indents every row but the first
  const int64_t per_line = (80 - indent) / (f.sz + 1);
  for (int64_t first = 0; first < cols;) {
    const int64_t last = first + per_line <= cols ? first + per_line - 1 : cols - 1;
    if (per_line < cols) {
      if (first != 0) os << "\n";
      os << "Columns " << first + 1 << " to " << last + 1 << pad;
    }
    if (f.scale != 1) {
      print_scale(os, f.scale);
      os << pad;
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = first; c <= last; ++c) {
        os << std::setw(f.sz) << v[r * cols + c] / f.scale;
        if (c != last) {
          os << " ";
        } else {
          os << "\n";
          if (r != rows - 1) os << pad << (f.scale != 1 ? " " : "");
        }
      }
    first = last + 1;
  }
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  FormatGuard guard(os);
  os.flags(std::ios_base::dec);
  os.fill(' ');
  if (!t.defined()) return os << "[ Tensor (undefined) ]";
  const std::vector<double> v = (t.device().is_cpu() ? t : t.cpu()).to_vector<double>();
  const std::string type = std::string(t.is_cuda() ? "CUDA" : "CPU") + std::string(to_string(t.dtype())) + "Type";
  const IntArrayRef s = t.sizes();
  if (s.empty()) {
    os << shortest(v[0]) << "\n";
  } else if (s.size() == 1 && !v.empty()) {
    const Format f = choose_format(os, v);
    if (f.scale != 1) print_scale(os, f.scale);
    for (double x : v) os << std::setw(f.sz) << x / f.scale << "\n";
  } else if (s.size() == 2 && !v.empty()) {
    print_matrix(os, v, s[0], s[1], 0);
  } else if (!v.empty()) {
    // One "(i,j,.,.) = " block per matrix; libtorch counts the leading
    // indices with the first one fastest.
    const int64_t rows = s[s.size() - 2], cols = s[s.size() - 1], lead = s.size() - 2;
    std::vector<int64_t> idx(lead, 0);
    for (bool first = true;; first = false) {
      int64_t off = 0;
      for (int64_t d = 0; d < lead; ++d) off = off * s[d] + idx[d];
      os << (first ? "" : "\n") << "(";
      for (int64_t i : idx) os << i + 1 << ",";
      os << ".,.) = \n";
      print_matrix(os, std::span<const double>(v).subspan(off * rows * cols, rows * cols), rows, cols, 1);
      int64_t d = 0;
      while (d < lead && ++idx[d] == s[d]) idx[d++] = 0;
      if (d == lead) break;
    }
  }
  os << "[ " << type << "{";
  for (size_t d = 0; d < s.size(); ++d) os << (d ? "," : "") << s[d];
  return os << "} ]";
}

}  // namespace loom
