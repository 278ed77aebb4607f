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
  std::string name;                   // where it came from, for messages
  std::vector<int64_t> sample_shape;  // per-sample shape
  int num_classes = 0;
  std::vector<float> features;  // size() * sample_size(), row-major
  std::vector<int32_t> labels;  // size()

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

// The mean and standard deviation over every feature value of `d` (one
// scalar each; std is 1 when all values are equal).
void feature_moments(const Dataset& d, double* mean, double* std);

// Replaces every feature x by (x - mean) / std (std > 0).
void standardize(Dataset* d, double mean, double std);

// Copies the samples `indices` of `d` into `out`.
void gather(const Dataset& d, std::span<const int64_t> indices, Batch* out);

// Where a ShardSampler is in its sample order: enough to resume exactly.
struct SamplerState {
  int64_t epoch = 0;       // epochs of the shard started so far, minus one
  int64_t position = 0;    // samples of the current epoch already handed out
  uint64_t epoch_rng = 0;  // Rng state at the start of the current epoch
};

// One worker's shard of a data set and its sample order. The shard is the
// contiguous range [w*N/n, (w+1)*N/n) of a permutation of the data set that
// is the same for every worker (seeded by `seed`); every epoch of the shard
// (the first included) is reshuffled by the worker's own stream
// Rng(seed, 1000 + worker). The state (epoch, position, rng) can be saved
// and restored.
// `d` is borrowed and must outlive the sampler. Not thread-safe: one sampler
// per worker.
class ShardSampler {
 public:
  // Throws InputError "<name>: N samples cannot be split over W workers" if a
  // shard would be empty. Requires 0 <= worker < num_workers.
  ShardSampler(const Dataset& d, int worker, int num_workers, uint64_t seed);
  // Fills `out` with the next `batch_size` samples (wrapping into the next
  // epoch of the shard as needed).
  void next(int64_t batch_size, Batch* out);
  int64_t shard_size() const { return static_cast<int64_t>(order_.size()); }
  int64_t epoch() const { return epoch_; }

  SamplerState state() const;
  // Resumes from a state saved by a sampler built with the same arguments.
  void restore(const SamplerState& s);

 private:
  void start_epoch(uint64_t rng_state);

  const Dataset* data_;
  std::vector<int64_t> shard_;  // the shard, in global-permutation order
  std::vector<int64_t> order_;  // this epoch's order of shard_
  size_t pos_ = 0;
  int64_t epoch_ = 0;
  uint64_t epoch_rng_ = 0;
  Rng rng_;
  std::vector<int64_t> idx_;
};

}  // namespace hsgd
