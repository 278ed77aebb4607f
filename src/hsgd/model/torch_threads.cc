// configure_math_threads(): one torch intra-op and inter-op thread and one
// OpenBLAS thread per process; the workers are the parallelism. Also keeps
// freed activation buffers in the malloc heap (see below).
#include <torch/torch.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "hsgd/model/model.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace hsgd {

void configure_math_threads() {
  // A process-wide setting, which every thread reads when it first runs a
  // parallel torch op (at::init_num_threads), so workers started later get it.
  torch::set_num_threads(1);
  try {
    // Throws if called twice or after the inter-op pool has started; either
    // way the pool is not ours to resize any more, and one intra-op thread is
    // what matters for the workers.
    torch::set_num_interop_threads(1);
  } catch (const c10::Error&) {
  }
  // OpenBLAS keeps its own pool, sized from the core count: set it here, not
  // only through OPENBLAS_NUM_THREADS.
  openblas_set_num_threads(1);
#if defined(__GLIBC__)
  // LibTorch's CPU allocator does not cache: every gradient() allocates and
  // frees its activations (MBs for the CNNs). By default glibc serves such
  // blocks with mmap, or trims them off the heap top, and gives the pages
  // back to the OS on free; re-faulting them on the next batch cost more than
  // the convolutions on the VMs we measured (cifar-cnn: 140 ms -> 45 ms per
  // batch of 64). Keep blocks up to glibc's maximum of 32 MiB in the heap
  // and never trim below 1 GiB.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace hsgd
