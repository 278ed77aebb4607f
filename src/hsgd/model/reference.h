// A plain single-process LibTorch training loop, the yardstick the
// distributed system is compared against in end-to-end tests. This header
// does not include torch; the implementation is in hsgd_models.
#pragma once
#include <cstdint>

#include "hsgd/data/dataset.h"
#include "hsgd/model/model.h"

namespace hsgd {

// Trains softmax regression (torch::nn::Linear on the flattened input,
// torch::optim::SGD with learning rate `lr`, no momentum) for `epochs`
// passes over `train` in mini-batches of `batch` samples, and returns the
// mean loss and accuracy on `test`.
//  - Initial weights: torch::manual_seed(seed), then a default-initialized
//    Linear; identical to make_model({"softmax", ...})->init_params(seed).
//  - Sample order: each epoch is a fresh shuffle drawn from Rng(seed, 1)
//    (hsgd::shuffle); batches are consecutive slices of it, the last one
//    possibly smaller.
// Deterministic for a seed with one intra-op thread (configure_math_threads).
// Throws InputError if the data sets are empty or their sample sizes differ,
// or if batch < 1 or epochs < 0. Not thread-safe against other users of
// torch's global generator (see TorchModel).
EvalResult train_reference_softmax(const Dataset& train, const Dataset& test, int batch, double lr,
                                   int epochs, uint64_t seed);

}  // namespace hsgd
