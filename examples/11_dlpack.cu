// SPDX-License-Identifier: Apache-2.0
// DLPack: lending loom tensors to other frameworks (torch, NumPy, CuPy, JAX)
// and borrowing theirs, without copies. A consumer's own export arrives as a
// managed tensor like the ones made here. Runs on the host executor, and on
// the GPU too when there is one; checks what it reads against plain loops.
#include <loom/loom.hpp>

#include <cstdint>
#include <cstdio>

// What a Python binding's __dlpack__(stream=...) does for a device tensor:
// order the consumer's stream after loom's work (an event, no host wait),
// then lend the tensor, moved into the managed tensor.
loom::dlpack::managed_tensor_versioned* lend(loom::device_tensor<float, 2>&& y, std::intptr_t consumer_stream) {
  loom::dlpack::make_ready_for(consumer_stream);
  return loom::to_dlpack(std::move(y));
}

int main() {
  using namespace loom;
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%-58s %s\n", what, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  };

  host_tensor<float, 2> t({3, 5});
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>(i);
  const float* p = t.data();

  // Lend a tensor: it moves into the managed tensor and lives until the
  // consumer calls the deleter, which frees it.
  dlpack::managed_tensor_versioned* m = to_dlpack(std::move(t));

  // Borrow one (here loom's own export): dtype, rank and device are checked
  // against the type asked for; the view is the producer's memory.
  auto x = from_dlpack<float, 2, host>(m);
  host_tensor<float, 2> y({3, 5});
  y = x.view() * 2.0f + 1.0f;  // an imported view enters expressions like any view

  // Lend a view onward: the transpose, keeping the borrowed tensor alive.
  dlpack::managed_tensor_versioned* mt = to_dlpack(x.view().t(), x);
  expect(x.data() == p && mt->dl_tensor.data == p, "borrowed and lent again without a copy");
  expect(mt->dl_tensor.strides[0] == 1 && mt->dl_tensor.strides[1] == 5, "the transpose's strides, in elements");
  expect(y(2, 4) == 29.0f, "an expression over the borrowed view");
  mt->deleter(mt);  // what the consumer does when it is done

  // Read-only data: a view of const elements is flagged READ_ONLY, and a
  // read-only tensor imports only as const elements.
  const auto c = from_dlpack<const float, 2, host>(to_dlpack(x));
  try {
    auto w = from_dlpack<float, 2, host>(to_dlpack(c));
  } catch (const value_error& e) {
    std::printf("%s\n", e.what());
  }
  try {
    auto d = from_dlpack<double, 2, host>(to_dlpack(x));
  } catch (const dtype_error& e) {
    std::printf("%s\n", e.what());
  }

  if (gpu::is_available()) {
    auto dy = to_device(y);
    const float* dp = dy.data();
    auto dx = from_dlpack<const float, 2, device>(lend(std::move(dy), dlpack::stream_argument()));
    expect(dx.data() == dp, "a device tensor lent and borrowed on one stream");
    expect(to_host(dx.view())(2, 4) == 29.0f, "its values");
  }
  return failures == 0 ? 0 : 1;
}
