// SPDX-License-Identifier: Apache-2.0
#pragma once

// The .npy format: NumPy's type codes of loom's dtypes, the preamble loom
// writes and the parser of the header dict NumPy writes. tensor/npy.hpp
// reads and writes the files.

#include <bit>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"

namespace loom::detail {
// .npy data is written and read as raw little-endian bytes; a big-endian host
// would need byte swaps that loom does not do.
static_assert(std::endian::native == std::endian::little, "loom: .npy files are supported on little-endian hosts only");

inline constexpr std::string_view npy_magic = "\x93NUMPY";

// NumPy's kind and item size of each loom dtype (the descr without its byte-order
// character). bfloat16 has no NumPy dtype: raw 2-byte void, as ml_dtypes writes it.
constexpr std::string_view npy_type_code(dtype d) {
  switch (d) {
    case dtype::bool_: return "b1";
    case dtype::int8: return "i1";
    case dtype::uint8: return "u1";
    case dtype::int32: return "i4";
    case dtype::int64: return "i8";
    case dtype::float16: return "f2";
    case dtype::bfloat16: return "V2";
    case dtype::float32: return "f4";
    case dtype::float64: return "f8";
    case dtype::float8_e4m3fn: case dtype::float8_e5m2: case dtype::float8_e8m0fnu: return "V1";
    case dtype::float4_e2m1fn_x2: case dtype::int4x2: return "V1";
  }
  return "";
}

// The descr loom writes: '|' (no byte order) for one-byte types, '<' otherwise.
inline std::string npy_descr(dtype d) {
  std::string out(1, dtype_size(d) == 1 ? '|' : '<');
  return out.append(npy_type_code(d));
}

// A readable name for a type code such as "i8" -> "int64", for error messages.
inline std::string npy_type_name(std::string_view code) {
  if (code == "V2") return "void16, how loom stores bfloat16";
  if (code.size() < 2) return "unknown";
  int bytes = 0;
  for (char c : code.substr(1)) {
    if (c < '0' || c > '9' || bytes > 1000) return "unknown";
    bytes = bytes * 10 + (c - '0');
  }
  const std::string bits = std::to_string(bytes * 8);
  switch (code[0]) {
    case 'b': return bytes == 1 ? "bool" : "unknown";
    case 'i': return "int" + bits;
    case 'u': return "uint" + bits;
    case 'f': return "float" + bits;
    case 'c': return "complex" + bits;
    case 'V': return "void" + bits;
    case 'U': return "unicode string";
    case 'S': return "byte string";
    default: return "unknown";
  }
}

// Bytes shown in messages: printable ASCII as is, anything else as \xNN.
inline std::string printable_bytes(std::string_view b) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (char c : b) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && u != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

// Magic, version, header length and the padded header dict of a .npy file.
template <std::size_t R>
std::string npy_preamble(dtype d, const shape<R>& s) {
  // Format 1.0 limits the header to 65535 bytes (2.0 lifts that). With at most
  // max_rank extents of at most 19 digits, loom's header stays under 300 bytes,
  // so 1.0, which every NumPy reads, always suffices.
  static_assert(max_rank * 21 + 128 < 0xffff, "loom: .npy headers of this rank need format 2.0");
  std::string dict = "{'descr': '" + npy_descr(d) + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < R; ++i) {
    if (i) dict += ", ";
    dict += std::to_string(s[i]);
  }
  dict += R == 1 ? ",), }" : "), }";
  // Pad with spaces so the data starts at a multiple of 64 bytes, as NumPy does
  // (so the data can be memory-mapped aligned); the header ends in '\n'.
  constexpr std::size_t fixed = 10;  // magic, version and the 2-byte length
  dict.append((64 - (fixed + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string out(npy_magic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xffu);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

// The three entries of a .npy header dict.
struct npy_header {
  std::string descr;
  bool structured = false;  // descr is a list (a record dtype)
  bool fortran_order = false;
  std::vector<index_t> shape;
};

// Reads the Python literal dict NumPy writes, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Accepts either quote, any key order and whitespace, trailing commas and
// Python 2's "3L" integers. Anything else is malformed.
class npy_header_parser {
 public:
  npy_header_parser(std::string_view text, std::string where) : s_(text), where_(std::move(where)) {}

  npy_header parse() {
    npy_header h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    expect('{');
    while (peek() != '}') {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr" && !seen_descr) {
        seen_descr = true;
        if (peek() == '[') {
          h.structured = true;
          skip_list();
        } else {
          h.descr = string_literal();
        }
      } else if (key == "fortran_order" && !seen_fortran) {
        seen_fortran = true;
        h.fortran_order = boolean();
      } else if (key == "shape" && !seen_shape) {
        seen_shape = true;
        h.shape = tuple();
      } else {
        bad("unexpected or repeated key '" + key + "' (expected 'descr', 'fortran_order' and 'shape')");
      }
      if (peek() != ',') break;
      ++i_;
    }
    expect('}');
    if (peek() != '\0') bad("text after the closing '}'");
    if (!seen_descr || !seen_fortran || !seen_shape)
      bad("missing key (expected 'descr', 'fortran_order' and 'shape')");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    throw io_error(where_ + ": malformed .npy header: " + what + ", at offset " + std::to_string(i_) +
                   " of header \"" + printable_bytes(s_.substr(0, 256)) + (s_.size() > 256 ? "..." : "") + "\"");
  }
  // The next non-blank character, or '\0' at the end.
  char peek() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string_literal() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string");
    const std::size_t end = s_.find(q, ++i_);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    peek();
    for (std::string_view w : {"True", "False"})
      if (s_.substr(i_, w.size()) == w) {
        i_ += w.size();
        return w == "True";
      }
    bad("expected True or False");
  }
  std::vector<index_t> tuple() {
    std::vector<index_t> out;
    expect('(');
    while (peek() != ')') {
      if (s_[i_] < '0' || s_[i_] > '9') bad("expected a non-negative integer in the shape");
      index_t v = 0;
      for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; ++i_) {
        if (v > (std::numeric_limits<index_t>::max() - 9) / 10) bad("shape entry does not fit in 64 bits");
        v = v * 10 + (s_[i_] - '0');
      }
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;
      out.push_back(v);
      if (peek() != ',') break;
      ++i_;
    }
    expect(')');
    return out;
  }
  // A structured dtype's descr (a list of tuples); only skipped, to report it.
  void skip_list() {
    int depth = 0;
    for (; i_ < s_.size(); ++i_) {
      if (s_[i_] == '[') ++depth;
      if (s_[i_] == ']' && --depth == 0) {
        ++i_;
        return;
      }
    }
    bad("unterminated list");
  }

  std::string_view s_;
  std::string where_;
  std::size_t i_ = 0;
};
}  // namespace loom::detail
