// SPDX-License-Identifier: Apache-2.0
// A tour of loom's tensors and views: make host tensors, slice, transpose,
// reshape and broadcast them without copying, copy between views, fill, print,
// save and load .npy files, and (when a GPU is present) move data to the
// device and back on streams. Without a GPU the same computation runs on host
// tensors, and the example says so; every line of it compiles either way.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <type_traits>

#include <loom/loom.hpp>

using namespace loom;

// The same code for either memory space: loom::device when a GPU is present,
// loom::host otherwise. Returns the result on the host.
template <memory_space Space>
host_tensor<float, 2> transpose_and_mark(const host_tensor<float, 2>& a) {
  tensor<float, 2, Space> x = [&] {
    if constexpr (std::is_same_v<Space, device>)
      return to_device(a);  // one host-to-device transfer on the current stream
    else
      return contiguous(a);  // a host copy
  }();
  tensor<float, 2, Space> y({a.extent(1), a.extent(0)});
  copy(x.t(), y);           // a strided copy: one kernel on the device, one loop on the host
  fill(y.slice(0), -1.0f);  // row 0 of y
  return to_host(y);        // waits for the device work; then the data is on the host
}

int main() {
  // --- Host tensors -----------------------------------------------------------
  // The rank is part of the type, the extents are run-time values; row-major.
  host_tensor<float, 2> a({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  std::cout << "a:\n" << a << "\n";
  a(0, 0) = 100;     // unchecked access
  a.at(2, 3) = 111;  // checked access: throws index_error when out of range
  std::printf("a(0, 0) = %g, a.at(2, 3) = %g, a.size() = %lld\n", a(0, 0), a.at(2, 3),
              static_cast<long long>(a.size()));

  // Element types: bool, int8/uint8, int32/int64, half, bf16, float, double.
  // half and bf16 are stored in 16 bits and computed in float.
  host_tensor<bf16, 1> b({3}, {1.5f, -2.0f, 3.25f});
  float b0 = b(0);  // converts to float
  std::cout << "b: " << b << "  b(0) as float: " << b0 << "\n";

  // --- Slicing: views, never copies ---------------------------------------------
  auto row1 = a.slice(1);                             // an integer drops the axis: rank 1
  auto last_col = a.slice(whole, -1);                 // negative indices count from the end
  auto odd_cols = a.slice(whole, range(1, none, 2));  // from 1 to the end, step 2
  auto flipped = a.slice(range(none, none, -1));      // the rows in reverse order (negative stride)
  auto empty = a.slice(range(2, 2));                  // empty slices are fine
  std::cout << "a[1]: " << row1 << "\n";
  std::cout << "a[:, -1]: " << last_col << "\n";
  std::cout << "a[:, 1::2]:\n" << odd_cols << "\n";
  std::cout << "a[::-1]:\n" << flipped << "\n";
  std::cout << "a[2:2] has shape " << shape_string(empty.extents()) << "\n";
  row1(0) = 40;  // writes through to a
  std::cout << "after row1(0) = 40, a(1, 0) = " << a(1, 0) << "\n";

  // --- Axes: transpose, permute, reshape, broadcast, squeeze, unsqueeze -------------
  auto at = a.t();                               // swaps extents and strides: [4, 3]
  auto p = a.permute({1, 0});                    // the same as t() for rank 2
  auto flat = a.reshape(shape<1>{-1});           // contiguous views only; -1 is inferred: [12]
  auto r26 = a.reshape(shape<2>{2, -1});         // [2, 6]
  auto col = last_col.unsqueeze(1);              // [3, 1]
  auto wide = col.broadcast_to(shape<2>{3, 5});  // stride 0 along the broadcast axis: [3, 5]
  auto back = col.squeeze(1);                    // [3]
  std::cout << "a.t():\n" << at << "\n";
  std::cout << "a.permute({1, 0}) has strides " << shape_string(p.strides()) << "\n";
  std::cout << "a.reshape({-1}) has shape " << shape_string(flat.extents()) << ", a.reshape({2, -1}) "
            << shape_string(r26.extents()) << "\n";
  std::cout << "a[:, -1] as a column, broadcast to [3, 5]:\n" << wide << "\n";
  std::cout << "squeeze(1) gives back shape " << shape_string(back.extents()) << "\n";

  // --- Copies and fills ---------------------------------------------------------------
  auto z = zeros<float, 2, host>({3, 4});
  copy(a.slice(0), z.slice(2));                   // copy(src, dst): row 0 of a into row 2 of z
  fill(z.slice(range(0, 2), range(1, 3)), 7.0f);  // a 2 x 2 block
  std::cout << "z:\n" << z << "\n";
  host_tensor<float, 1> c({3});
  copy(last_col, c);  // a strided column into a contiguous tensor
  auto sevens = full<float, 1, host>({4}, 7.0f);
  auto at_copy = contiguous(a.t());  // a new row-major tensor: [4, 3]
  std::cout << "c: " << c << "\nsevens: " << sevens << "\n";
  std::cout << "contiguous(a.t()) has strides " << shape_string(at_copy.strides()) << "\n";

  // --- .npy files, readable by NumPy ------------------------------------------------------
  const std::string path = (std::filesystem::temp_directory_path() / "loom_01_tensors.npy").string();
  save_npy(path, a.t());  // any host view; written in row-major element order
  auto loaded = load_npy<float, 2>(path);
  std::cout << "loaded back from " << path << ":\n" << loaded << "\n";
  std::filesystem::remove(path);

  // --- The same computation on the device, or on the host without a GPU ------------------
  if (gpu::is_available()) {
    std::cout << "GPU found: running transpose_and_mark on device tensors\n";
    std::cout << transpose_and_mark<device>(a) << "\n";
  } else {
    std::cout << "no GPU (" << gpu::unavailable_reason() << "): running transpose_and_mark on host tensors\n";
    std::cout << transpose_and_mark<host>(a) << "\n";
  }

  // --- Devices, streams and events (GPU only) ---------------------------------------------
  if (gpu::is_available()) {
    auto d = to_device(a);  // a device tensor from the current stream's pool
    auto h = to_host(d);    // synchronizes the current stream
    std::cout << "round trip to the device and back: h(2, 3) = " << h(2, 3) << "\n";

    stream s;
    event start, stop;
    start.record(s);
    {
      stream_guard on(s);                                  // s is the current stream inside this scope
      auto big = full<float, 1, device>({1 << 20}, 2.0f);  // allocated and filled on s
      auto pinned = host_tensor<float, 1>({1 << 20}, host_memory::pinned);
      copy_async(big, pinned, s);  // truly asynchronous: pinned memory
      stop.record(s);
      s.synchronize();
      std::printf("pinned(12345) = %g after %.3f ms on stream s\n", pinned(12345), elapsed_ms(start, stop));
      const memory_stats m = device_memory_stats(0);
      std::printf("device 0: %zu bytes in use in %zu allocations, peak %zu\n", m.in_use, m.allocations, m.peak);
    }  // big is freed in s's order; the guard restores the previous stream
  } else {
    std::cout << "no GPU: skipping to_device/to_host, streams and events\n";
    const memory_stats m = device_memory_stats(0);  // the counters exist without a GPU: all zero
    std::printf("device 0: %zu bytes in use, peak %zu\n", m.in_use, m.peak);
  }

  // --- Errors are exceptions that say what went wrong ---------------------------------------
  try {
    auto bad = a.reshape(shape<2>{5, 5});
    (void)bad;
  } catch (const shape_error& e) {
    std::cout << "shape_error: " << e.what() << "\n";
  }
  try {
    auto bad = a.slice(range(0, 10));  // loom does not clamp: a has 3 rows
    (void)bad;
  } catch (const index_error& e) {
    std::cout << "index_error: " << e.what() << "\n";
  }
  try {
    a.at(3, 0) = 1;
  } catch (const error& e) {  // loom::error is the base of them all
    std::cout << "error: " << e.what() << "\n";
  }
  return 0;
}
