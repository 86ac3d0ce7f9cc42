// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/tensor/npy_format.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail {

// The OS's text for an errno value (what strerror says, but thread-safe).
inline std::string os_error_text(int e) { return std::generic_category().message(e); }

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

// Writes `path + ".tmp"` and renames it over `path` on commit(), so readers of
// `path` never see a half-written file. Without commit() (an exception on the
// way) the temporary file is closed and removed.
class atomic_file_writer {
 public:
  atomic_file_writer(std::string path, std::string where)
      : path_(std::move(path)), tmp_(path_ + ".tmp"), where_(std::move(where)), f_(std::fopen(tmp_.c_str(), "wb")) {
    if (!f_) fail("cannot create the temporary file '" + tmp_ + "'", errno);
  }
  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;
  ~atomic_file_writer() {
    if (!committed_) {
      f_.reset();
      std::remove(tmp_.c_str());
    }
  }

  void write(const void* p, std::size_t bytes) {
    if (bytes != 0 && std::fwrite(p, 1, bytes, f_.get()) != bytes) fail("write to '" + tmp_ + "' failed", errno);
  }

  void commit() {
    // fclose flushes; a full disk often shows up only here.
    const int rc = std::fclose(f_.release());
    if (rc != 0) fail("write to '" + tmp_ + "' failed", errno);
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);  // replaces an existing file, also on Windows
    if (ec) throw io_error(where_ + ": cannot rename '" + tmp_ + "' to it: " + ec.message());
    committed_ = true;
  }

 private:
  [[noreturn]] void fail(const std::string& what, int err) const {
    throw io_error(where_ + ": " + what + ": " + os_error_text(err));
  }

  std::string path_, tmp_, where_;
  file_ptr f_;
  bool committed_ = false;
};

// Reads exactly n bytes or says how many were there.
inline std::size_t read_bytes(std::FILE* f, void* p, std::size_t n) { return n ? std::fread(p, 1, n, f) : 0; }
}  // namespace detail

//! Writes a host view to a NumPy .npy file: format 1.0 (loom's ranks never
//! need 2.0's longer header), little-endian descr ('<f4', '<f8', '<f2', '|i1',
//! '|u1', '<i4', '<i8', '|b1'), C order, data aligned to 64 bytes. bf16 has no
//! NumPy dtype and is written as '<V2' (raw 2 bytes, as ml_dtypes does): NumPy
//! reads it as void16, and `np.load(p).view(ml_dtypes.bfloat16)` recovers it.
//! The fp8 types are written as '|V1' (ml_dtypes writes '<V1'), recovered
//! by `.view(ml_dtypes.float8_e4m3fn)` and the like.
//! Non-contiguous (strided, negative-stride, broadcast) views are written in
//! row-major element order. The file is written as `path + ".tmp"` and then
//! renamed over `path`, so a failed call never leaves a half-written file at
//! `path` (no fsync: a power loss may still lose the new file). Throws io_error
//! naming the path and the OS error, value_error for a view with elements but
//! no data pointer. An empty view is written as an empty array. One pass over
//! the data; no kernel.
//! Example: `loom::save_npy("w.npy", h.view().t());`
template <class T, std::size_t R>
void save_npy(const std::string& path, const view<T, R, host>& v) {
  using value_type = std::remove_const_t<T>;
  const std::string where = "loom: save_npy('" + path + "')";
  if (v.size() != 0 && v.data() == nullptr)
    throw value_error(where + ": the view has elements but no data (a view of a default-constructed or moved-from "
                              "rank-0 tensor)");
  detail::atomic_file_writer out(path, where);
  const std::string preamble = detail::npy_preamble(dtype_of<value_type>, v.extents());
  out.write(preamble.data(), preamble.size());
  const auto n = static_cast<std::size_t>(v.size());
  if (v.is_contiguous()) {
    out.write(v.data(), n * sizeof(value_type));
  } else {
    // Gather into a bounded buffer so a strided view needs no full-size copy.
    const std::size_t chunk = std::min<std::size_t>(n, std::size_t{1} << 16);
    const auto buf = std::make_unique_for_overwrite<value_type[]>(chunk);
    for (std::size_t done = 0; done < n; done += chunk) {
      const std::size_t m = std::min(chunk, n - done);
      for (std::size_t j = 0; j < m; ++j) buf[j] = v.data()[v.offset_of(static_cast<index_t>(done + j))];
      out.write(buf.get(), m * sizeof(value_type));
    }
  }
  out.commit();
}

namespace detail {
// save_npy of a tensor without storage (default-constructed or moved from).
template <class T, std::size_t R, class S>
void require_storage_to_save(const std::string& path, const tensor<T, R, S>& t) {
  if (!t.has_storage())
    throw value_error("loom: save_npy('" + path +
                      "'): the tensor holds no data (default-constructed or moved from); a tensor made with a "
                      "shape of 0 elements is saved as an empty array");
}
}  // namespace detail

//! Writes a host tensor to a .npy file; see save_npy(path, view). A tensor
//! that holds no data (default-constructed or moved from, any rank:
//! has_storage() is false) throws value_error and writes nothing; a tensor
//! made with a shape of 0 elements is written as a valid empty array.
//! Example: `loom::save_npy("x.npy", h);`
template <class T, std::size_t R>
void save_npy(const std::string& path, const tensor<T, R, host>& t) {
  detail::require_storage_to_save(path, t);
  save_npy(path, t.view());
}

//! Writes a device tensor to a .npy file: copies it to the host with
//! loom::to_host first (one transfer; synchronizes the current stream), then
//! as save_npy(path, view). A tensor that holds no data throws value_error,
//! as for host tensors. Example: `loom::save_npy("y.npy", y);`
template <class T, std::size_t R>
void save_npy(const std::string& path, const tensor<T, R, device>& t) {
  detail::require_storage_to_save(path, t);
  save_npy(path, to_host(t));
}

//! Device views are not saved directly, so that the copy stays visible:
//! `loom::save_npy(path, loom::to_host(v))`.
template <class T, std::size_t R>
void save_npy(const std::string&, const view<T, R, device>&) {
  static_assert(detail::always_false<T>,
                "loom: save_npy() cannot read a device view; copy it first: loom::save_npy(path, loom::to_host(v))");
}

namespace detail {
// What the preamble and the header dict of a .npy file say.
struct npy_file_header {
  npy_header header;
  std::size_t data_start = 0;  // the data's offset in the file
  bool size_known = false;     // the OS knows the file's size (not for a pipe)
  std::uintmax_t file_size = 0;
};

// Reads and checks the magic string, the version, the header length and the
// header dict of the file `f` opened at `path`; leaves `f` at the data.
inline npy_file_header read_npy_header(std::FILE* f, const std::string& path, const std::string& where) {
  std::array<char, 12> pre{};
  std::size_t got = read_bytes(f, pre.data(), 8);
  if (got < 8 || std::string_view(pre.data(), 6) != npy_magic)
    throw io_error(where +
                   ": not a .npy file: expected it to start with \"\\x93NUMPY\" and a version, it starts with \"" +
                   printable_bytes(std::string_view(pre.data(), std::min<std::size_t>(got, 8))) + "\"");
  const int major = static_cast<unsigned char>(pre[6]), minor = static_cast<unsigned char>(pre[7]);
  if (minor != 0 || major < 1 || major > 3)
    throw io_error(where + ": unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  got = read_bytes(f, pre.data() + 8, len_bytes);
  if (got < len_bytes)
    throw io_error(where + ": truncated header: expected a " + std::to_string(len_bytes) +
                   "-byte header length after the version, the file ends after " + std::to_string(got));
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i)
    header_len |= static_cast<std::size_t>(static_cast<unsigned char>(pre[8 + i])) << (8 * i);
  // The file's size, when the OS knows it, lets a truncated file fail before
  // anything as large as its header or shape claims is allocated.
  npy_file_header out;
  std::error_code size_ec;
  out.file_size = std::filesystem::file_size(path, size_ec);
  out.size_known = !size_ec;
  out.data_start = 8 + len_bytes + header_len;
  auto truncated_header = [&](std::size_t present) {
    return io_error(where + ": truncated header: expected " + std::to_string(header_len) + " bytes, the file has " +
                    std::to_string(present));
  };
  if (out.size_known && out.file_size < out.data_start)
    throw truncated_header(static_cast<std::size_t>(out.file_size - 8 - len_bytes));
  std::string text(header_len, '\0');
  got = read_bytes(f, text.data(), header_len);
  if (got < header_len) throw truncated_header(got);
  out.header = npy_header_parser(text, where).parse();
  return out;
}

// Checks that the header's descr is T's, little-endian where the byte order
// matters; dtype_error naming both otherwise.
template <class T>
void require_npy_dtype(const npy_header& h, const std::string& where) {
  constexpr dtype want = dtype_of<T>::value;
  const std::string want_descr = npy_descr(want);
  const std::string want_text = "'" + want_descr + "' (" + std::string(dtype_name(want)) + ")";
  if (h.structured)
    throw dtype_error(where + ": expected " + want_text + ", file has a structured dtype (a list of fields)");
  const bool has_order = !h.descr.empty() && std::string_view("<>|=").find(h.descr[0]) != std::string_view::npos;
  const std::string_view code = std::string_view(h.descr).substr(has_order ? 1 : 0);
  const std::string have_text = "'" + h.descr + "' (" + npy_type_name(code) + ")";
  if (code != npy_type_code(want)) throw dtype_error(where + ": expected " + want_text + ", file has " + have_text);
  if (h.descr[0] == '>' && sizeof(T) > 1)
    throw dtype_error(where + ": expected little-endian " + want_text + ", file has big-endian " + have_text +
                      "; convert it in NumPy with arr.astype('" + want_descr + "')");
}

// The header's shape, checked to have rank R (shape_error) and to fit in
// memory as elements of T (io_error).
template <class T, std::size_t R>
shape<R> npy_extents(const npy_header& h, const std::string& where) {
  if (h.shape.size() != R)
    throw shape_error(where + ": expected rank " + std::to_string(R) + ", file has shape " + shape_string(h.shape));
  shape<R> ext{};
  std::copy(h.shape.begin(), h.shape.end(), ext.begin());
  std::size_t n = 1;
  for (index_t e : ext) {
    if (e != 0 && n > static_cast<std::size_t>(std::numeric_limits<index_t>::max()) / sizeof(T) /
                          static_cast<std::size_t>(e))
      throw io_error(where + ": shape " + shape_string(ext) + " is too large to hold in memory");
    n *= static_cast<std::size_t>(e);
  }
  return ext;
}

// Reads the data of shape `ext` (stored for the reversed shape when
// `fortran`) into a new host tensor; io_error when the file holds less.
template <class T, std::size_t R>
tensor<T, R, host> read_npy_data(std::FILE* f, const npy_file_header& fh, const shape<R>& ext, bool fortran,
                                 host_memory kind, const std::string& where) {
  const std::size_t n = static_cast<std::size_t>(shape_size(ext));
  const std::size_t bytes = n * sizeof(T);
  auto truncated = [&](std::size_t present) {
    return io_error(where + ": truncated data: shape " + shape_string(ext) + " of " +
                    std::string(dtype_name(dtype_of<T>::value)) + " needs " + std::to_string(bytes) +
                    " bytes after the header, the file has " + std::to_string(present));
  };
  if (fh.size_known && fh.file_size - fh.data_start < bytes)
    throw truncated(static_cast<std::size_t>(fh.file_size - fh.data_start));
  shape<R> file_ext = ext;
  if (fortran) std::reverse(file_ext.begin(), file_ext.end());
  tensor<T, R, host> t(file_ext, kind);
  const std::size_t got = read_bytes(f, t.data(), bytes);
  if (got < bytes) {
    if (std::ferror(f))
      throw io_error(where + ": reading the data failed after " + std::to_string(got) + " of " + std::to_string(bytes) +
                     " bytes: " + os_error_text(errno));
    throw truncated(got);
  }
  if constexpr (std::is_same_v<T, bool>) {
    // Any byte other than 0 or 1 in a bool is undefined behaviour; NumPy treats non-zero as True.
    auto* b = reinterpret_cast<unsigned char*>(t.data());
    for (std::size_t i = 0; i < n; ++i) b[i] = b[i] != 0;
  }
  return t;
}
}  // namespace detail

//! Reads a NumPy .npy file (format 1.0, 2.0 or 3.0) into a new row-major host
//! tensor of element type T and rank R (pageable, or pinned with `kind`).
//! Byte order '<', '|' or '=' is accepted ('>' only for one-byte types, where
//! it means nothing); `fortran_order: True` files are read and transposed into
//! row-major order (a second host buffer for the conversion). bf16 reads
//! '<V2'/'|V2' files (ml_dtypes' bfloat16) and the fp8 types '|V1' files
//! (ml_dtypes' float8 types; the file does not say which format). Bytes after the data are ignored
//! (NumPy writes none). Throws, naming the path and both the expected and the
//! actual value, and returning nothing on error: io_error when the file cannot
//! be opened (with the OS error), has a bad magic string or version, a
//! truncated or malformed header, or less data than the shape needs (bytes
//! expected vs present); dtype_error for another dtype or big-endian data;
//! shape_error for another rank. One read of the file; no kernel.
//! Example: `auto w = loom::load_npy<float, 2>("w.npy");`
template <class T, std::size_t R>
tensor<T, R, host> load_npy(const std::string& path, host_memory kind = host_memory::pageable) {
  static_assert(element<T> && !std::is_const_v<T>,
                "loom: load_npy<T, R>() needs a non-const element type T (bool, int8_t, uint8_t, int32_t, int64_t, "
                "loom::half, loom::bf16, float, double)");
  const std::string where = "loom: load_npy('" + path + "')";
  const detail::file_ptr f(std::fopen(path.c_str(), "rb"));
  if (!f) throw io_error(where + ": cannot open the file: " + detail::os_error_text(errno));
  const detail::npy_file_header fh = detail::read_npy_header(f.get(), path, where);
  detail::require_npy_dtype<T>(fh.header, where);
  const shape<R> ext = detail::npy_extents<T, R>(fh.header, where);
  // A Fortran-order file holds the row-major data of the reversed shape.
  const bool fortran = fh.header.fortran_order && R > 1 && shape_size(ext) > 0;
  tensor<T, R, host> t = detail::read_npy_data<T, R>(f.get(), fh, ext, fortran, kind, where);
  if (!fortran) return t;
  shape<R> col_major{};
  index_t acc = 1;
  for (std::size_t d = 0; d < R; ++d) {
    col_major[d] = acc;
    acc *= ext[d];
  }
  tensor<T, R, host> out(ext, kind);
  copy(view<const T, R, host>(t.data(), ext, col_major), out);
  return out;
}
}  // namespace loom
