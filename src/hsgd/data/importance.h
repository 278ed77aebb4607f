// Loss-proportional importance sampling (Alain et al. 2015; Katharopoulos &
// Fleuret 2018): a worker draws examples of its shard with probability
// proportional to their last seen loss, mixed with uniform, and weights each
// drawn example's loss by 1 / (N p) so the gradient stays unbiased.
// Torch-free, clock-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hsgd/core/rng.h"

namespace hsgd {

// The [sampling] keys.
struct SamplingOptions {
  std::string kind = "uniform";  // uniform | loss
  // loss: p_i = (1 - uniform_mix) s_i / sum(s) + uniform_mix / N, in (0, 1].
  double uniform_mix = 0.2;
  // loss: epochs of the worker's shard sampled uniformly (shuffled order)
  // before the scores are used; scores are recorded during the warm-up too.
  int64_t warmup = 1;
};

// Throws InputError naming the key for an unknown kind, uniform_mix outside
// (0, 1] or warmup < 0.
void validate(const SamplingOptions& o);

// The scores of N examples and draws from them. Not thread-safe.
class ImportanceTable {
 public:
  ImportanceTable() = default;
  explicit ImportanceTable(size_t n) : scores_(n, kUnseen) {}

  size_t size() const { return scores_.size(); }
  // Records example i's last seen loss (negative values count as 0).
  void set_score(size_t i, float loss) { scores_[i] = loss > 0 ? loss : 0.0f; }
  // Draws `count` examples with replacement: p_i = (1 - mix) s_i / S + mix / N
  // where an example not yet seen is scored at the mean of the seen ones (all
  // equal while none is seen, or when S = 0: uniform). Writes the positions
  // to *positions and 1 / (N p_i) to *weights. Requires mix in (0, 1].
  void draw(int64_t count, double mix, Rng& rng, std::vector<int64_t>* positions,
            std::vector<float>* weights);

  // The raw scores (negative = unseen), for checkpoints.
  const std::vector<float>& scores() const { return scores_; }
  // Throws InputError if `s` has the wrong size.
  void restore(const std::vector<float>& s);

  static constexpr float kUnseen = -1.0f;

 private:
  std::vector<float> scores_;
  std::vector<double> cdf_;  // scratch
};

}  // namespace hsgd
