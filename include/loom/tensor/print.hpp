// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {

//! How loom prints tensors; the defaults are NumPy's.
//! Example: `loom::to_string(x, {.edge_items = 2, .precision = 6})`
struct print_options {
  index_t edge_items = 3;    //!< items shown at each end of a summarized axis
  index_t threshold = 1000;  //!< summarize (show edges and `...`) when there are more elements than this
  int precision = 4;         //!< digits after the decimal point of floating-point values
  index_t line_width = 75;   //!< rows of the innermost axis wrap before this many characters
};

namespace detail {

// What every printed line is indented against: the text before the outer '['.
inline constexpr std::string_view print_prefix = "tensor(";

// Calls shown(i) for each index of an axis of extent n that is printed, and
// gap() once where `...` stands in for the hidden middle (NumPy's rule: an axis
// is cut only when the whole tensor is summarized and the axis is longer than
// 2 * edge).
template <class Shown, class Gap>
void for_each_shown(index_t n, index_t edge, bool summarize, Shown&& shown, Gap&& gap) {
  if (summarize && n > 2 * edge) {
    for (index_t i = 0; i < edge; ++i) shown(i);
    gap();
    for (index_t i = n - edge; i < n; ++i) shown(i);
  } else {
    for (index_t i = 0; i < n; ++i) shown(i);
  }
}

// Fixed or scientific text of a finite double, with `precision` digits after the point.
inline std::string format_finite(double x, int precision, bool scientific) {
  // Fixed notation is only chosen for magnitudes below 1e8 (see format_floats),
  // so 32 characters plus the fraction always suffice.
  std::string buf(static_cast<std::size_t>(precision) + 32, '\0');
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), x,
                               scientific ? std::chars_format::scientific : std::chars_format::fixed, precision);
  buf.resize(static_cast<std::size_t>(r.ptr - buf.data()));
  return buf;
}

// NumPy's choice of notation: scientific when the finite non-zero magnitudes
// reach 1e8, go below 1e-4, or span more than three decades. In scientific
// notation all exponents get the same number of digits, so columns line up.
inline std::vector<std::string> format_floats(const std::vector<double>& xs, int precision) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (double x : xs)
    if (std::isfinite(x) && x != 0) {
      lo = std::min(lo, std::fabs(x));
      hi = std::max(hi, std::fabs(x));
    }
  const bool scientific = hi > 0 && (hi >= 1e8 || lo < 1e-4 || hi / lo > 1e3);
  std::vector<std::string> cells;
  cells.reserve(xs.size());
  std::size_t exp_digits = 2;
  for (double x : xs) {
    if (std::isnan(x))
      cells.emplace_back("nan");
    else if (std::isinf(x))
      cells.emplace_back(x > 0 ? "inf" : "-inf");
    else
      cells.push_back(format_finite(x, precision, scientific));
    if (scientific && std::isfinite(x))
      exp_digits = std::max(exp_digits, cells.back().size() - cells.back().find('e') - 2);
  }
  if (scientific)
    for (auto& c : cells) {
      const std::size_t e = c.find('e');
      if (e == std::string::npos) continue;
      const std::size_t digits = c.size() - e - 2;
      c.insert(e + 2, exp_digits - digits, '0');
    }
  return cells;
}

// Renders one host view; the body of every public printing function.
template <class T, std::size_t R>
class tensor_printer {
 public:
  using value_type = std::remove_const_t<T>;

  tensor_printer(const view<T, R, host>& v, const print_options& o) : v_(v), o_(o) {
    if (o.precision < 0 || o.edge_items < 0)
      throw value_error("loom: print_options needs precision >= 0 and edge_items >= 0 (got precision " +
                        std::to_string(o.precision) + ", edge_items " + std::to_string(o.edge_items) + ")");
    summarize_ = v.size() > o.threshold;
  }

  std::string str() {
    out_ = print_prefix;
    // A tensor without storage (default-constructed) prints as empty rather than reading a null pointer.
    if (v_.size() == 0 || v_.data() == nullptr) {
      out_ += "[]";
    } else {
      make_cells();
      next_ = 0;
      if constexpr (R == 0)
        out_ += cells_[0];
      else
        layout(0);
    }
    out_ += ", shape=" + shape_string(v_.extents()) + ", dtype=" + std::string(dtype_name(loom::dtype_of<value_type>)) +
            ", space=host)";
    return std::move(out_);
  }

 private:
  // Visits the printed elements in row-major order (walking coordinates, so any strides work).
  template <class F>
  void walk(std::size_t d, index_t off, F& f) const {
    if (d == R) {
      f(v_.data()[off]);
      return;
    }
    for_each_shown(
        v_.extent(d), o_.edge_items, summarize_, [&](index_t i) { walk(d + 1, off + i * v_.stride(d), f); }, [] {});
  }

  void make_cells() {
    if constexpr (is_floating_v<value_type>) {
      std::vector<double> xs;
      auto take = [&](value_type x) { xs.push_back(static_cast<double>(static_cast<compute_t<value_type>>(x))); };
      walk(0, 0, take);
      cells_ = format_floats(xs, o_.precision);
    } else {
      auto take = [&](value_type x) {
        if constexpr (std::is_same_v<value_type, bool>)
          cells_.emplace_back(x ? "True" : "False");
        else  // through long long so int8/uint8 print as numbers, not characters
          cells_.push_back(std::to_string(static_cast<long long>(x)));
      };
      walk(0, 0, take);
    }
    for (const auto& c : cells_) width_ = std::max(width_, c.size());
  }

  std::string next_cell() {
    const std::string& c = cells_[next_++];
    return std::string(width_ - c.size(), ' ') + c;
  }

  // Writes the sub-tensor at axis d; cells are consumed in the order walk() made them.
  void layout(std::size_t d) {
    out_ += '[';
    const std::size_t first_col = print_prefix.size() + d + 1;
    bool first = true;
    if (d + 1 == R) {
      // NumPy's wrapping rule: a word (and the ',' or ']'s after it) must end
      // within line_width, counting one closing bracket per axis.
      const auto limit = static_cast<std::size_t>(std::max<index_t>(o_.line_width - static_cast<index_t>(R), 0));
      std::size_t col = first_col;
      auto put = [&](const std::string& word) {
        if (!first) {
          out_ += ',';
          ++col;
          if (col + 1 + word.size() > limit) {
            out_ += '\n';
            out_.append(first_col, ' ');
            col = first_col;
          } else {
            out_ += ' ';
            ++col;
          }
        }
        out_ += word;
        col += word.size();
        first = false;
      };
      for_each_shown(
          v_.extent(d), o_.edge_items, summarize_, [&](index_t) { put(next_cell()); }, [&] { put("..."); });
    } else {
      // Rows of a matrix are separated by a newline; blocks of higher axes by
      // one more blank line per axis, as NumPy does.
      const std::string sep = ",\n" + std::string(R - d - 2, '\n') + std::string(first_col, ' ');
      auto sub = [&](auto&& body) {
        if (!first) out_ += sep;
        body();
        first = false;
      };
      for_each_shown(
          v_.extent(d), o_.edge_items, summarize_,
          [&](index_t) { sub([&] { layout(d + 1); }); },
          [&] { sub([&] { out_ += "..."; }); });
    }
    out_ += ']';
  }

  view<T, R, host> v_;
  print_options o_;
  bool summarize_ = false;
  std::vector<std::string> cells_;
  std::size_t next_ = 0, width_ = 0;
  std::string out_;
};

// A host copy of a device tensor for printing or saving; a default-constructed
// rank-0 tensor has no element to copy.
template <class T, std::size_t R>
tensor<T, R, host> host_copy_of(const tensor<T, R, device>& t) {
  if constexpr (R == 0)
    if (t.data() == nullptr) return {};
  return to_host(t);
}
}  // namespace detail

//! The NumPy-like text of a host view: values right-aligned to the widest
//! element, floats (half and bf16 via float) in fixed notation with
//! `o.precision` digits or in scientific notation when magnitudes are very
//! large, very small or span more than three decades; nan/inf/-inf spelled so;
//! bools as True/False. When the view has more than `o.threshold` elements,
//! each axis longer than 2 * `o.edge_items` shows only its first and last
//! `o.edge_items` entries around `...`. Strided, negative-stride and broadcast
//! views print their logical elements. One pass over the shown elements on
//! the host; no kernel.
//! Example: `to_string(h)` gives
//! "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]], shape=[2, 2], dtype=float32, space=host)".
template <class T, std::size_t R>
std::string to_string(const view<T, R, host>& v, const print_options& o = {}) {
  return detail::tensor_printer<T, R>(v, o).str();
}

//! The text of a host tensor; see to_string(view). Example: `std::string s = loom::to_string(h);`
template <class T, std::size_t R>
std::string to_string(const tensor<T, R, host>& t, const print_options& o = {}) {
  return to_string(t.view(), o);
}

//! The text of a device tensor: copies it to the host with loom::to_host first,
//! which synchronizes the current stream (one transfer), then formats as
//! to_string(view). Example: `std::string s = loom::to_string(d);`
template <class T, std::size_t R>
std::string to_string(const tensor<T, R, device>& t, const print_options& o = {}) {
  return to_string(detail::host_copy_of(t), o);
}

//! Device views are not printed directly, so that the copy and the
//! synchronization it needs stay visible: print `loom::to_host(v)` instead.
template <class T, std::size_t R>
std::string to_string(const view<T, R, device>&, const print_options& = {}) {
  static_assert(detail::always_false<T>,
                "loom: a device view cannot be printed directly; copy it first: loom::to_string(loom::to_host(v))");
  return {};
}

//! Writes to_string(v) with default print_options (the stream's own format
//! flags are ignored). Example: `std::cout << h.view().t() << '\n';`
template <class T, std::size_t R>
std::ostream& operator<<(std::ostream& os, const view<T, R, host>& v) {
  return os << to_string(v);
}

//! Writes to_string(t) for a host tensor. Example: `std::cout << h << '\n';`
template <class T, std::size_t R>
std::ostream& operator<<(std::ostream& os, const tensor<T, R, host>& t) {
  return os << to_string(t);
}

//! Writes a device tensor: copies it to the host with loom::to_host first,
//! which synchronizes the current stream. Example: `std::cout << d << '\n';`
template <class T, std::size_t R>
std::ostream& operator<<(std::ostream& os, const tensor<T, R, device>& t) {
  return os << to_string(t);
}

//! Device views cannot be streamed; `std::cout << loom::to_host(v)` copies and prints.
template <class T, std::size_t R>
std::ostream& operator<<(std::ostream& os, const view<T, R, device>&) {
  static_assert(detail::always_false<T>,
                "loom: a device view cannot be printed directly; copy it first: std::cout << loom::to_host(v)");
  return os;
}
}  // namespace loom
