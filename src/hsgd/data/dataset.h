// In-memory data sets and shard views. No torch here: models turn batches into
// tensors themselves.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hsgd/core/rng.h"
#include "hsgd/data/importance.h"

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
  // Instead of `features`: size() * sample_size() values borrowed from the
  // caller, who keeps them alive and unchanged while the data set is used
  // (the Python module's float32 NumPy arrays, used without a copy). Such a
  // data set is never written: standardize() records its affine map below,
  // which gather() applies to each value it copies. Read the raw values
  // through values(), which serves both kinds; a model's evaluate() takes
  // only owned data (the test set, which standardize() writes).
  std::span<const float> borrowed;
  bool lazy_standardize = false;  // set by standardize() on a borrowed set
  float lazy_mean = 0, lazy_inv_std = 1;
  std::vector<int32_t> labels;  // size()
  // Categorical features (click-through data, data/ctr.h): every sample has
  // num_categorical() ids after its dense features, id j in
  // [0, categorical_rows[j]) (the rows of embedding table j). Empty for
  // dense-only data.
  std::vector<int32_t> categorical;       // size() * num_categorical(), row-major
  std::vector<int64_t> categorical_rows;  // per categorical field
  // synthetic-ctr: the AUC of the planted model that drew the labels, over
  // all the samples generated (kept by the train/test split and head(): a
  // property of the generator, the best a model can expect); NaN otherwise.
  double planted_auc = std::nan("");

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t sample_size() const;
  int64_t num_categorical() const { return static_cast<int64_t>(categorical_rows.size()); }
  // The values as stored (before a lazy standardization).
  std::span<const float> values() const {
    return borrowed.empty() ? std::span<const float>(features) : borrowed;
  }
  std::span<const float> sample(int64_t i) const {
    return {values().data() + i * sample_size(), static_cast<size_t>(sample_size())};
  }
};

// A mini-batch gathered into contiguous buffers (owned by the caller, reused).
struct Batch {
  std::vector<float> features;       // n * sample_size
  std::vector<int32_t> labels;       // n
  std::vector<int32_t> categorical;  // n * num_categorical (empty for dense-only data)
  // Per-example loss weights (importance sampling's 1 / (N p)); empty means
  // every weight is 1. The model's loss is mean_i(weights[i] * loss_i).
  std::vector<float> weights;
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

// Replaces every feature x by (x - mean) / std (std > 0); on a borrowed data
// set, records it for gather() instead (the same float operations, so the
// batches hold the same bits).
void standardize(Dataset* d, double mean, double std);

// Copies the samples `indices` of `d` into `out` (weights cleared: all 1).
void gather(const Dataset& d, std::span<const int64_t> indices, Batch* out);

// Where a ShardSampler is in its sample order: enough to resume exactly.
struct SamplerState {
  int64_t epoch = 0;       // epochs of the shard started so far, minus one
  int64_t position = 0;    // samples of the current epoch already handed out
  uint64_t epoch_rng = 0;  // Rng state at the start of the current epoch
  // sampling.kind = loss: the state of the importance draws' Rng (unused,
  // 0, for uniform sampling).
  uint64_t draw_rng = 0;
  // sampling.kind = loss: the importance scores of the shard (see
  // ImportanceTable::scores); empty for uniform sampling.
  std::vector<float> scores;
};

// Time a worker spent, for the sampling-overhead report. Filled by the
// caller (the runtime's worker loop reads the clock; the sampler does not).
struct SamplerCost {
  int64_t batches = 0;
  double sampling_s = 0;  // drawing + gathering batches, recording scores
  double gradient_s = 0;  // the model's gradient calls
  SamplerCost& operator+=(const SamplerCost& o) {
    batches += o.batches;
    sampling_s += o.sampling_s;
    gradient_s += o.gradient_s;
    return *this;
  }
};

// One worker's shard of a data set and its sample order. The shard is a list
// of sample indices (from make_partition, data/partition.h: the worker's own
// shard followed by the global pool); every epoch of the shard (the first
// included) is reshuffled by the worker's own stream
// Rng(seed, 1000 + worker). With sampling.kind = loss, after `warmup`
// uniform epochs the batches are drawn with replacement by ImportanceTable
// (stream Rng(seed, 100000 + worker)), carry weights 1 / (N p), and an
// "epoch" is N draws. The state (epoch, position, rngs, scores) can be saved
// and restored.
// `d` is borrowed and must outlive the sampler. Not thread-safe: one sampler
// per worker.
class ShardSampler {
 public:
  // The IID shard: the contiguous range [w*N/n, (w+1)*N/n) of a permutation
  // of the data set that is the same for every worker (seeded by `seed`).
  // Throws InputError "<name>: N samples cannot be split over W workers" if a
  // shard would be empty. Requires 0 <= worker < num_workers.
  ShardSampler(const Dataset& d, int worker, int num_workers, uint64_t seed);
  // A given shard (indices into `d`, not empty). Requires worker >= 0.
  ShardSampler(const Dataset& d, int worker, std::vector<int64_t> shard, uint64_t seed,
               const SamplingOptions& sampling = {});
  // Fills `out` with the next `batch_size` samples (wrapping into the next
  // epoch of the shard as needed), and out->weights under importance
  // sampling past the warm-up (cleared otherwise).
  void next(int64_t batch_size, Batch* out);
  // Records the per-example losses of the batch last returned by next()
  // (losses.size() == that batch's size) as the samples' scores. A no-op
  // for uniform sampling.
  void observe(std::span<const float> losses);
  // Whether observe() wants per-example losses.
  bool wants_losses() const { return sampling_.kind == "loss"; }
  int64_t shard_size() const { return static_cast<int64_t>(shard_.size()); }
  int64_t epoch() const { return epoch_; }

  SamplerState state() const;
  // Resumes from a state saved by a sampler built with the same arguments.
  void restore(const SamplerState& s);

  SamplerCost cost;  // the caller's timing of this worker's batches

 private:
  void start_epoch(uint64_t rng_state);
  bool importance_phase() const { return wants_losses() && epoch_ >= sampling_.warmup; }

  const Dataset* data_;
  SamplingOptions sampling_;
  std::vector<int64_t> shard_;  // the shard's sample indices
  std::vector<int64_t> order_;  // this epoch's order: positions in shard_
  size_t pos_ = 0;
  int64_t epoch_ = 0;
  uint64_t epoch_rng_ = 0;
  Rng rng_;
  Rng draw_rng_;
  ImportanceTable table_;
  std::vector<int64_t> last_;  // positions in shard_ of the last batch
  std::vector<int64_t> idx_;
};

}  // namespace hsgd
