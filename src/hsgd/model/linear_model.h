// "linear-test": softmax regression in plain C++ (no torch), with a
// hand-written gradient of the mean cross-entropy. Deterministic and
// single-threaded, so fast server/runtime tests and the ThreadSanitizer build
// can run real training without LibTorch.
#pragma once
#include <cstdint>
#include <memory>

#include "hsgd/model/model.h"

namespace hsgd {

// Softmax regression over `sample_size` features and `num_classes` classes.
// Parameter layout in the flat buffer: W (num_classes x sample_size,
// row-major) then b (num_classes); num_params() = num_classes * (sample_size
// + 1). init_params(seed) fills W with N(0, 0.01^2) draws from
// Rng(seed, 0) and b with zeros. gradient() and evaluate() throw InputError if
// the batch/data set does not have sample_size features per sample or a label
// is outside [0, num_classes). Same thread-safety as Model: one thread per
// instance; instances share nothing.
std::unique_ptr<Model> make_linear_model(int64_t sample_size, int num_classes);

}  // namespace hsgd
