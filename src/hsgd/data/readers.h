// Data set readers. Each throws InputError with one line naming the file, the
// byte offset or line number, and what was expected, on any malformed input.
#pragma once
#include <cstdint>
#include <string>

#include "hsgd/data/dataset.h"

namespace hsgd {

// IDX (MNIST/Fashion-MNIST layout), gzip-compressed or raw (detected by magic
// bytes, not by name). Images: magic 0x00000803, dims n,rows,cols, ubyte
// pixels scaled to [0,1]. Labels: magic 0x00000801. 10 classes.
Dataset read_idx(const std::string& images_path, const std::string& labels_path);

// Reads the train or test pair from a directory holding the standard file
// names (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]).
Dataset read_idx_dir(const std::string& dir, bool train);

// CIFAR-10 binary batches (data_batch_1..5.bin / test_batch.bin in `dir`):
// records of 1 label byte + 3072 pixel bytes, scaled to [0,1], shape {3,32,32}.
Dataset read_cifar10_dir(const std::string& dir, bool train);

// CSV: `label,f1,...,fn` per line, no header; every row the same width.
// Labels are integers >= 0; num_classes = max label + 1.
Dataset read_csv(const std::string& path);

// LIBSVM: `label idx:val idx:val ...`, 1-based strictly increasing indices.
// Labels are integers >= 0; num_features = max index seen.
Dataset read_libsvm(const std::string& path);

struct SyntheticOptions {
  int64_t samples = 10000;
  int64_t features = 20;
  int classes = 10;
  double class_sep = 1.0;  // distance scale between class centres
  double noise = 1.0;      // std of the per-sample Gaussian noise
  uint64_t seed = 1;
};
// A Gaussian-mixture classification set like the paper's (20 dims, 10
// classes, 10 000 samples): class centres drawn once, samples around them.
Dataset make_synthetic(const SyntheticOptions& o);

// Checks labels are in [0, expected_classes) and shapes agree with `like`
// (used for a separate --test-data). Throws InputError naming `what`.
void check_compatible(const Dataset& train, const Dataset& test);

}  // namespace hsgd
