// SPDX-License-Identifier: Apache-2.0
// Data parallelism with loom::dist: run as `mpirun -np 2 ./14_data_parallel`
// (alone it is one rank). Every rank starts from rank 0's weights, averages
// the ranks' gradients, and takes ZeRO-1 AdamW steps (each rank keeps the
// moments of its shard only); the weights then equal AdamW on the average
// gradient, which the example checks. With a GPU, a gradient on the device is
// averaged over NCCL the same way. Exits non-zero on a mismatch.
#include <cmath>
#include <cstdio>
#include <random>

#include <loom/core/device.hpp>
#include <loom/dist/communicator.hpp>
#include <loom/dist/zero.hpp>
#include <loom/optim/optim.hpp>
#include <loom/tensor/tensor.hpp>

#if LOOM_HAS_MPI
namespace {
// A stand-in for the gradient of rank r's part of the batch.
void fake_gradient(loom::tensor<float, 1, loom::host>& g, int rank, int step) {
  std::mt19937 gen(static_cast<unsigned>(1000 * step + rank));
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (loom::index_t i = 0; i < g.size(); ++i) g(i) = d(gen);
}
}  // namespace
#endif

int main(int argc, char** argv) {
#if !LOOM_HAS_MPI
  (void)argc;
  (void)argv;
  std::printf("loom::dist was built without MPI (Debian: libopenmpi-dev): this example needs it\n");
  return 0;
#else
  loom::dist::mpi_environment mpi(argc, argv);
  auto comm = loom::dist::communicator::from_mpi();
  std::printf("rank %d of %d\n", comm.rank(), comm.size());

  const loom::index_t n = 1001;
  loom::tensor<float, 1, loom::host> w({n}), g({n});
  loom::fill(w, 0.5f + static_cast<float>(comm.rank()));
  comm.broadcast(w, 0);  // every rank starts from rank 0's weights

  loom::dist::zero1_adamw<float, loom::host> opt(comm, w.view(), g.view(), {.lr = 1e-2});
  std::printf("rank %d keeps AdamW's moments of elements [%ld, %ld)\n", comm.rank(), static_cast<long>(opt.begin()),
              static_cast<long>(opt.begin() + opt.shard_size()));

  // The same steps in one process: AdamW on the average of all ranks' gradients.
  loom::tensor<float, 1, loom::host> w_ref({n}), g_ref({n}), g_rank({n});
  loom::fill(w_ref, 0.5f);
  loom::optim::adamw<loom::host> ref({.lr = 1e-2});
  ref.add(w_ref, g_ref);
  for (int step = 0; step < 3; ++step) {
    fake_gradient(g, comm.rank(), step);
    opt.step();  // averages the gradients, updates this rank's shard, gathers the weights
    loom::fill(g_ref, 0.0f);
    for (int r = 0; r < comm.size(); ++r) {
      fake_gradient(g_rank, r, step);
      for (loom::index_t i = 0; i < n; ++i) g_ref(i) += g_rank(i) / static_cast<float>(comm.size());
    }
    ref.step();
  }
  double worst = 0;
  for (loom::index_t i = 0; i < n; ++i) worst = std::fmax(worst, std::fabs(w(i) - w_ref(i)));
  std::printf("rank %d: largest difference from AdamW on the average gradient: %g\n", comm.rank(), worst);

  if (loom::gpu::is_available()) {  // device tensors: NCCL, on the current stream
    loom::gpu::set_device(comm.local_rank() % loom::gpu::device_count());
    auto grad = loom::to_device(g);
    comm.all_reduce(grad, loom::dist::reduce_op::average);
    comm.synchronize();  // waits within the timeout; a dead rank gives timeout_error
    std::printf("rank %d: averaged a gradient of %ld elements over NCCL\n", comm.rank(), static_cast<long>(n));
  }
  return worst <= 1e-5 ? 0 : 1;
#endif
}
