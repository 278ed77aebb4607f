// A seeded Gaussian random projection of a data set's features (data.project,
// issue 31): x -> x R / sqrt(dims), R a sample_size x dims matrix of N(0, 1)
// draws from Rng(seed, kProjectionStream), the same for the training and
// the test set. Labels and the rest are kept; categorical features are not
// supported.
#pragma once
#include <cstdint>

#include "hsgd/data/dataset.h"

namespace hsgd {

// Replaces d's features by their projection to `dims` values (sample_shape
// {dims}); reads borrowed values without changing them (the result is
// owned). Throws InputError for dims < 1 or a data set with categorical
// features. Must run before standardize().
void project_features(Dataset* d, int64_t dims, uint64_t seed);

}  // namespace hsgd
