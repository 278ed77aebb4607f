// In-memory data sets and shard views. No torch here: models turn batches into
// tensors themselves.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hsgd/core/rng.h"

namespace hsgd {

// A classification data set held in memory: `size()` samples, each a dense
// float vector of `sample_size()` values laid out as `sample_shape`
// (e.g. {1, 28, 28} for Fashion-MNIST, {3, 32, 32} for CIFAR-10, {f} for
// tabular data), and an integer label in [0, num_classes).
struct Dataset {
  std::string name;                    // where it came from, for messages
  std::vector<int64_t> sample_shape;   // per-sample shape
  int num_classes = 0;
  std::vector<float> features;         // size() * sample_size(), row-major
  std::vector<int32_t> labels;         // size()

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t sample_size() const;
  std::span<const float> sample(int64_t i) const {
    return {features.data() + i * sample_size(), static_cast<size_t>(sample_size())};
  }
};

// A mini-batch gathered into contiguous buffers (owned by the caller, reused).
struct Batch {
  std::vector<float> features;  // n * sample_size
  std::vector<int32_t> labels;  // n
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

// Splits `all` into train and test: a seeded shuffle, then the last
// `test_fraction` of samples become the test set. Throws InputError if
// test_fraction is outside (0, 1) or either side would be empty.
void split_train_test(Dataset all, double test_fraction, uint64_t seed, Dataset* train,
                      Dataset* test);

// Copies the samples `indices` of `d` into `out`.
void gather(const Dataset& d, std::span<const int64_t> indices, Batch* out);

// One worker's shard of a data set and its sample order. The shard is the
// contiguous range [begin, end) of a permutation of the data set that is the
// same for every worker (seeded by `seed`); every epoch of the shard is
// reshuffled by the worker's own random stream. The state (epoch, position,
// rng) can be saved and restored.
class ShardSampler {
 public:
  ShardSampler(const Dataset& d, int worker, int num_workers, uint64_t seed);
  // Fills `out` with the next `batch_size` samples (wrapping into the next
  // epoch of the shard as needed).
  void next(int64_t batch_size, Batch* out);
  int64_t shard_size() const { return static_cast<int64_t>(order_.size()); }

 private:
  const Dataset* data_;
  std::vector<int64_t> order_;
  size_t pos_ = 0;
  Rng rng_;
  std::vector<int64_t> idx_;
};

}  // namespace hsgd
