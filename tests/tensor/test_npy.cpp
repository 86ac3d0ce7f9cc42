// SPDX-License-Identifier: Apache-2.0
// .npy files: round trips, files written by real NumPy (tests/data, see its
// README for the commands and values), and every kind of bad input.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <unistd.h>

#include <loom/tensor/npy.hpp>

using Catch::Matchers::Contains;
using loom::host_tensor;
using loom::index_t;
using loom::shape;
namespace fs = std::filesystem;

namespace {
const std::string data_dir = LOOM_TEST_DATA_DIR;

// A scratch directory for one test case, removed with everything in it.
struct scratch_dir {
  fs::path dir;
  scratch_dir() {
    static int counter = 0;
    dir = fs::temp_directory_path() /
          ("loom_test_npy_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A random value covering all bit patterns of T (NaNs included); bools are 0 or 1.
template <class T>
T random_bits(std::mt19937_64& g) {
  if constexpr (std::is_same_v<T, bool>) {
    return (g() & 1) != 0;
  } else {
    const std::uint64_t bits = g();
    T v;
    std::memcpy(static_cast<void*>(&v), &bits, sizeof(T));
    return v;
  }
}

// A host tensor of zeros (written element by element: loom::zeros<half, R, host>
// trips g++'s -Wclass-memaccess).
template <class T, std::size_t R>
host_tensor<T, R> zeroed(const shape<R>& s) {
  host_tensor<T, R> t(s);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = T{};
  return t;
}

// The raw bits of a half or bf16.
template <class T>
std::uint16_t bits16(const T& v) {
  static_assert(sizeof(T) == 2);
  std::uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T, std::size_t R>
void check_round_trip(const shape<R>& s, std::mt19937_64& g) {
  INFO("shape " << loom::shape_string(s));
  scratch_dir d;
  host_tensor<T, R> t(s);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = random_bits<T>(g);
  loom::save_npy(d.file("x.npy"), t);
  const auto back = loom::load_npy<T, R>(d.file("x.npy"));
  REQUIRE(back.extents() == t.extents());
  for (index_t i = 0; i < t.size(); ++i) {
    INFO("element " << i);
    REQUIRE(same_bits(back.data()[i], t.data()[i]));
  }
  CHECK(!fs::exists(d.file("x.npy.tmp")));
}

// Loads `file` from tests/data and returns the exception message it throws as E.
template <class E, class T, std::size_t R>
std::string load_error(const std::string& path) {
  try {
    (void)loom::load_npy<T, R>(path);
  } catch (const E& e) {
    return e.what();
  }
  FAIL("load_npy did not throw the expected exception type for " << path);
  return {};
}

const char* descr_of(loom::dtype d) {
  switch (d) {
    case loom::dtype::bool_: return "|b1";
    case loom::dtype::int8: return "|i1";
    case loom::dtype::uint8: return "|u1";
    case loom::dtype::int32: return "<i4";
    case loom::dtype::int64: return "<i8";
    case loom::dtype::float16: return "<f2";
    case loom::dtype::bfloat16: return "<V2";
    case loom::dtype::float32: return "<f4";
    case loom::dtype::float64: return "<f8";
    case loom::dtype::float8_e4m3fn: case loom::dtype::float8_e5m2: case loom::dtype::float8_e8m0fnu: return "|V1";
    case loom::dtype::float4_e2m1fn_x2: case loom::dtype::int4x2: return "|V1";
  }
  return "";
}
}  // namespace

TEMPLATE_TEST_CASE("save_npy then load_npy gives back the same bits for every dtype, rank and odd shape",
                   "[tensor][io]", bool, std::int8_t, std::uint8_t, std::int32_t, std::int64_t, loom::half, loom::bf16,
                   float, double) {
  std::mt19937_64 g(20240601u + sizeof(TestType));
  check_round_trip<TestType, 0>(shape<0>{}, g);
  check_round_trip<TestType, 1>(shape<1>{1}, g);
  check_round_trip<TestType, 1>(shape<1>{7}, g);
  check_round_trip<TestType, 2>(shape<2>{257, 33}, g);
  check_round_trip<TestType, 3>(shape<3>{3, 1, 7}, g);
  check_round_trip<TestType, 2>(shape<2>{0, 3}, g);
}

TEMPLATE_TEST_CASE("save_npy writes NumPy's header: descr, C order, shape tuple, 64-byte aligned data",
                   "[tensor][io]", bool, std::int8_t, std::uint8_t, std::int32_t, std::int64_t, loom::half, loom::bf16,
                   float, double) {
  scratch_dir d;
  const std::string descr = descr_of(loom::dtype_of<TestType>);
  auto header_of = [&](const std::string& bytes) {
    REQUIRE(bytes.size() >= 10);
    CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
    const std::size_t len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    CHECK((10 + len) % 64 == 0);
    REQUIRE(bytes.size() >= 10 + len);
    CHECK(bytes[10 + len - 1] == '\n');
    return bytes.substr(10, len);
  };
  SECTION("rank 2") {
    loom::save_npy(d.file("a.npy"), zeroed<TestType, 2>({2, 3}));
    const std::string bytes = read_file(d.file("a.npy"));
    CHECK_THAT(header_of(bytes), Contains("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (2, 3), }"));
    CHECK(bytes.size() == 128 + 6 * sizeof(TestType));  // the 60-character dict needs two 64-byte blocks
  }
  SECTION("rank 1 has a trailing comma") {
    loom::save_npy(d.file("b.npy"), zeroed<TestType, 1>({5}));
    CHECK_THAT(header_of(read_file(d.file("b.npy"))), Contains("'shape': (5,), }"));
  }
  SECTION("rank 0 has an empty tuple") {
    loom::save_npy(d.file("c.npy"), zeroed<TestType, 0>(shape<0>{}));
    CHECK_THAT(header_of(read_file(d.file("c.npy"))), Contains("'shape': (), }"));
  }
}

TEST_CASE("save_npy writes strided, negative-stride and broadcast views in row-major order", "[tensor][io]") {
  scratch_dir d;
  host_tensor<std::int32_t, 2> t({4, 5});
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<std::int32_t>(i * 3 + 1);
  auto check = [&](const auto& v) {
    constexpr std::size_t R = std::remove_cvref_t<decltype(v)>::rank;
    loom::save_npy(d.file("v.npy"), v);
    const auto back = loom::load_npy<std::int32_t, R>(d.file("v.npy"));
    REQUIRE(back.extents() == v.extents());
    // Row-major order of the view, by coordinates (independent of offset_of).
    index_t k = 0;
    if constexpr (R == 2) {
      for (index_t i = 0; i < v.extent(0); ++i)
        for (index_t j = 0; j < v.extent(1); ++j) CHECK(back.data()[k++] == v.at(i, j));
    } else {
      for (index_t i = 0; i < v.extent(0); ++i)
        for (index_t j = 0; j < v.extent(1); ++j)
          for (index_t l = 0; l < v.extent(2); ++l) CHECK(back.data()[k++] == v.at(i, j, l));
    }
  };
  check(t.t());
  check(t.slice(loom::range(1, loom::none, 2), loom::range(loom::none, loom::none, -2)));
  check(t.slice(loom::range(loom::none, loom::none, -1)));
  check(t.slice(2).broadcast_to(shape<3>{2, 3, 5}));
}

TEST_CASE("save_npy replaces an existing file", "[tensor][io]") {
  scratch_dir d;
  loom::save_npy(d.file("x.npy"), host_tensor<float, 1>({3}, {1.f, 2.f, 3.f}));
  loom::save_npy(d.file("x.npy"), host_tensor<float, 1>({1}, {9.f}));
  const auto back = loom::load_npy<float, 1>(d.file("x.npy"));
  REQUIRE(back.size() == 1);
  CHECK(back(0) == 9.f);
}

TEST_CASE("save_npy of a tensor that holds no data throws value_error at any rank; an empty tensor saves",
          "[tensor][io]") {
  scratch_dir d;
  const std::string path = d.file("none.npy");
  // Default-constructed or moved from: no storage, whatever the rank.
  REQUIRE_THROWS_WITH(loom::save_npy(path, host_tensor<float, 0>()), Contains("holds no data") && Contains(path));
  REQUIRE_THROWS_AS(loom::save_npy(path, host_tensor<float, 1>()), loom::value_error);
  REQUIRE_THROWS_AS(loom::save_npy(path, host_tensor<double, 3>()), loom::value_error);
  REQUIRE_THROWS_AS(loom::save_npy(path, loom::device_tensor<float, 2>()), loom::value_error);
  host_tensor<float, 2> moved({2, 3});
  const host_tensor<float, 2> taken = std::move(moved);
  CHECK(taken.has_storage());
  CHECK_FALSE(moved.has_storage());
  REQUIRE_THROWS_AS(loom::save_npy(path, moved), loom::value_error);
  CHECK(!fs::exists(path));
  CHECK(!fs::exists(path + ".tmp"));
  // A copy of a tensor without storage has none either.
  const host_tensor<float, 2> copied = moved;
  CHECK_FALSE(copied.has_storage());
  // A tensor made with a shape of 0 elements is a valid empty array of that shape.
  const host_tensor<float, 2> empty({0, 7});
  CHECK(empty.has_storage());
  CHECK(empty.data() == nullptr);
  loom::save_npy(path, empty);
  const auto back = loom::load_npy<float, 2>(path);
  CHECK(back.extents() == shape<2>{0, 7});
  CHECK(back.has_storage());
  const loom::device_tensor<float, 1> device_empty({0});  // no GPU needed: nothing to allocate
  CHECK(device_empty.has_storage());
}

TEST_CASE("save_npy throws io_error naming the path and OS error and leaves no file when the folder is missing",
          "[tensor][io]") {
  scratch_dir d;
  const std::string path = d.file("no_such_dir/x.npy");
  const host_tensor<float, 1> t({2}, {1.f, 2.f});
  REQUIRE_THROWS_AS(loom::save_npy(path, t), loom::io_error);
  REQUIRE_THROWS_WITH(loom::save_npy(path, t), Contains(path) && Contains("No such file or directory"));
  CHECK(!fs::exists(path));
  CHECK(!fs::exists(path + ".tmp"));
}

TEST_CASE("save_npy throws io_error and removes its temporary file when the rename fails", "[tensor][io]") {
  scratch_dir d;
  const std::string path = d.file("a_dir");
  fs::create_directories(fs::path(path) / "child");  // a non-empty directory cannot be replaced by a file
  const host_tensor<float, 1> t({2}, {1.f, 2.f});
  REQUIRE_THROWS_AS(loom::save_npy(path, t), loom::io_error);
  REQUIRE_THROWS_WITH(loom::save_npy(path, t), Contains(path) && Contains("rename"));
  CHECK(fs::is_directory(path));
  CHECK(!fs::exists(path + ".tmp"));
}

TEST_CASE("load_npy reads NumPy's float32 matrix with the values NumPy wrote", "[tensor][io]") {
  const auto t = loom::load_npy<float, 2>(data_dir + "/f32_2x3.npy");
  REQUIRE(t.extents() == shape<2>{2, 3});
  const float want[] = {1.5f, -2.25f, 3.0f, 0.125f, 1024.0f, -0.0f};
  for (index_t i = 0; i < 6; ++i) CHECK(same_bits(t.data()[i], want[i]));
}

TEST_CASE("load_npy reads NumPy's int64 vector including the extremes", "[tensor][io]") {
  const auto t = loom::load_npy<std::int64_t, 1>(data_dir + "/i64_1d.npy");
  REQUIRE(t.extents() == shape<1>{5});
  const std::int64_t want[] = {-3, 0, 7, 9007199254740993LL, std::numeric_limits<std::int64_t>::min()};
  for (index_t i = 0; i < 5; ++i) CHECK(t(i) == want[i]);
}

TEST_CASE("load_npy reads NumPy's bool matrix", "[tensor][io]") {
  const auto t = loom::load_npy<bool, 2>(data_dir + "/bool_2x2.npy");
  REQUIRE(t.extents() == shape<2>{2, 2});
  CHECK(t(0, 0));
  CHECK(!t(0, 1));
  CHECK(!t(1, 0));
  CHECK(t(1, 1));
}

TEST_CASE("load_npy reads NumPy's float16 bits exactly, subnormal and inf included", "[tensor][io]") {
  const auto t = loom::load_npy<loom::half, 1>(data_dir + "/f16_1d.npy");
  REQUIRE(t.extents() == shape<1>{5});
  // 0.5, -1.5, 65504 (largest finite), 2^-24 (smallest subnormal), inf
  const std::uint16_t want[] = {0x3800, 0xbe00, 0x7bff, 0x0001, 0x7c00};
  for (index_t i = 0; i < 5; ++i) CHECK(bits16(t(i)) == want[i]);
}

TEST_CASE("load_npy reads ml_dtypes' bfloat16 file as bf16", "[tensor][io]") {
  const auto t = loom::load_npy<loom::bf16, 1>(data_dir + "/bf16_1d.npy");
  REQUIRE(t.extents() == shape<1>{3});
  const std::uint16_t want[] = {0x3fc0, 0xc000, 0x4049};  // 1.5, -2, 3.140625
  for (index_t i = 0; i < 3; ++i) CHECK(bits16(t(i)) == want[i]);
}

TEST_CASE("load_npy transposes a fortran_order file into row-major order", "[tensor][io]") {
  const auto t = loom::load_npy<double, 2>(data_dir + "/f64_fortran_3x4.npy");
  REQUIRE(t.extents() == shape<2>{3, 4});
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) CHECK(t(i, j) == static_cast<double>(4 * i + j) * 0.5);
}

TEST_CASE("load_npy reads a rank-0 file", "[tensor][io]") {
  const auto t = loom::load_npy<double, 0>(data_dir + "/f64_scalar.npy");
  CHECK(t() == 3.5);
}

TEST_CASE("load_npy reads format versions 2.0 and 3.0", "[tensor][io]") {
  const auto a = loom::load_npy<float, 2>(data_dir + "/f32_v2.npy");
  REQUIRE(a.extents() == shape<2>{3, 2});
  for (index_t i = 0; i < 6; ++i) CHECK(a.data()[i] == static_cast<float>(i + 1));
  const auto b = loom::load_npy<std::int32_t, 1>(data_dir + "/i32_v3.npy");
  REQUIRE(b.extents() == shape<1>{3});
  CHECK(b(0) == 1);
  CHECK(b(1) == -2);
  CHECK(b(2) == 2147483647);
}

TEST_CASE("load_npy ignores bytes after the data and reads nonzero bool bytes as true", "[tensor][io]") {
  scratch_dir d;
  std::string bytes = read_file(data_dir + "/bool_2x2.npy");
  bytes[bytes.size() - 1] = '\x02';
  write_file(d.file("b.npy"), bytes + "trailing garbage");
  const auto t = loom::load_npy<bool, 2>(d.file("b.npy"));
  CHECK(t(1, 1));
  unsigned char raw = 0;
  std::memcpy(&raw, &t(1, 1), 1);
  CHECK(raw == 1);
}

TEST_CASE("load_npy throws io_error with the path and OS error when the file is missing", "[tensor][io]") {
  const std::string path = data_dir + "/does_not_exist.npy";
  REQUIRE_THROWS_AS((loom::load_npy<float, 1>(path)), loom::io_error);
  REQUIRE_THROWS_WITH((loom::load_npy<float, 1>(path)), Contains(path) && Contains("No such file or directory"));
}

TEST_CASE("load_npy throws io_error showing the expected and actual start when the magic is wrong", "[tensor][io]") {
  scratch_dir d;
  write_file(d.file("bad.npy"), "hello world, not numpy at all");
  const std::string msg = load_error<loom::io_error, float, 1>(d.file("bad.npy"));
  CHECK_THAT(msg, Contains(d.file("bad.npy")) && Contains("\\x93NUMPY") && Contains("hello wo"));
}

TEST_CASE("load_npy throws io_error for an unsupported format version", "[tensor][io]") {
  scratch_dir d;
  std::string bytes = read_file(data_dir + "/f32_2x3.npy");
  bytes[6] = '\x04';
  write_file(d.file("v4.npy"), bytes);
  CHECK_THAT((load_error<loom::io_error, float, 2>(d.file("v4.npy"))),
             Contains("version 4.0") && Contains("expected 1.0, 2.0 or 3.0"));
}

TEST_CASE("load_npy throws io_error with expected and present bytes when the header is truncated", "[tensor][io]") {
  scratch_dir d;
  const std::string bytes = read_file(data_dir + "/f32_2x3.npy");
  const std::size_t len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  write_file(d.file("short.npy"), bytes.substr(0, 30));
  CHECK_THAT((load_error<loom::io_error, float, 2>(d.file("short.npy"))),
             Contains(d.file("short.npy")) && Contains("truncated header") &&
                 Contains("expected " + std::to_string(len) + " bytes, the file has 20"));
  write_file(d.file("tiny.npy"), bytes.substr(0, 9));
  CHECK_THAT((load_error<loom::io_error, float, 2>(d.file("tiny.npy"))), Contains("truncated header"));
}

TEST_CASE("load_npy throws io_error naming the problem when the header dict is malformed", "[tensor][io]") {
  scratch_dir d;
  const std::string bytes = read_file(data_dir + "/f32_2x3.npy");
  auto with_header = [&](std::string dict) {
    const std::size_t len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    dict.resize(len - 1, ' ');
    return bytes.substr(0, 10) + dict + "\n" + bytes.substr(10 + len);
  };
  write_file(d.file("m1.npy"), with_header("{'descr': '<f4', 'fortran_order': False, 'shap': (2, 3), }"));
  CHECK_THAT((load_error<loom::io_error, float, 2>(d.file("m1.npy"))),
             Contains("malformed .npy header") && Contains("'shap'"));
  write_file(d.file("m2.npy"), with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }"));
  CHECK_THAT((load_error<loom::io_error, float, 2>(d.file("m2.npy"))),
             Contains("malformed .npy header") && Contains("integer"));
  write_file(d.file("m3.npy"), with_header("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }"));
  CHECK_THAT((load_error<loom::io_error, float, 2>(d.file("m3.npy"))), Contains("True or False"));
  write_file(d.file("m4.npy"), with_header("{'descr': '<f4', 'shape': (2, 3)}"));
  CHECK_THAT((load_error<loom::io_error, float, 2>(d.file("m4.npy"))), Contains("missing key"));
}

TEST_CASE("load_npy throws io_error with bytes needed and present when the data is truncated", "[tensor][io]") {
  scratch_dir d;
  const std::string bytes = read_file(data_dir + "/f32_2x3.npy");
  write_file(d.file("cut.npy"), bytes.substr(0, bytes.size() - 4));
  CHECK_THAT((load_error<loom::io_error, float, 2>(d.file("cut.npy"))),
             Contains(d.file("cut.npy")) && Contains("needs 24 bytes") && Contains("the file has 20"));
}

TEST_CASE("load_npy counts bytes in 64 bits when a shape claims more than 2^31 elements", "[tensor][io]") {
  scratch_dir d;
  std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (3000000000,), }";
  dict.resize(128 - 10 - 1, ' ');
  write_file(d.file("huge.npy"), std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size() + 1) + '\0' +
                                     dict + "\n" + "abc");
  CHECK_THAT((load_error<loom::io_error, std::uint8_t, 1>(d.file("huge.npy"))),
             Contains("needs 3000000000 bytes") && Contains("the file has 3"));
}

TEST_CASE("load_npy throws dtype_error naming both dtypes when the file holds another dtype", "[tensor][io]") {
  const std::string path = data_dir + "/i64_1d.npy";
  CHECK_THAT((load_error<loom::dtype_error, float, 1>(path)),
             Contains(path) && Contains("expected '<f4' (float32), file has '<i8' (int64)"));
  CHECK_THAT((load_error<loom::dtype_error, loom::bf16, 1>(data_dir + "/f16_1d.npy")),
             Contains("expected '<V2' (bfloat16), file has '<f2' (float16)"));
}

TEST_CASE("load_npy throws shape_error naming the rank and the file's shape when the rank differs", "[tensor][io]") {
  const std::string path = data_dir + "/f32_2x3.npy";
  CHECK_THAT((load_error<loom::shape_error, float, 1>(path)),
             Contains(path) && Contains("expected rank 1, file has shape [2, 3]"));
  CHECK_THAT((load_error<loom::shape_error, std::int64_t, 2>(data_dir + "/i64_1d.npy")),
             Contains("expected rank 2, file has shape [5]"));
}

TEST_CASE("load_npy throws dtype_error naming both byte orders when the file is big-endian", "[tensor][io]") {
  const std::string path = data_dir + "/f32_bigendian.npy";
  CHECK_THAT((load_error<loom::dtype_error, float, 1>(path)),
             Contains(path) && Contains("'<f4' (float32)") && Contains("'>f4' (float32)") && Contains("big-endian"));
}

TEST_CASE("save_npy writes the same bytes as NumPy's np.save for a float32 matrix", "[tensor][io]") {
  scratch_dir d;
  const host_tensor<float, 2> t({2, 3}, {1.5f, -2.25f, 3.0f, 0.125f, 1024.0f, -0.0f});
  loom::save_npy(d.file("x.npy"), t);
  CHECK(read_file(d.file("x.npy")) == read_file(data_dir + "/f32_2x3.npy"));
}
