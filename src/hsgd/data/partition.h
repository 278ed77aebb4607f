// How a training set is split over the workers: IID (the default), label skew
// (dirichlet, shards), size skew (quantity), and the hybrid data regime (a
// global pool every worker also samples from). Torch-free, clock-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hsgd/data/dataset.h"

namespace hsgd {

// The [data] partition keys. All draws are seeded by train.seed.
struct PartitionOptions {
  // iid | dirichlet | shards | quantity
  std::string kind = "iid";
  // dirichlet: per-class Dirichlet(alpha) proportions over the workers;
  // quantity: Dirichlet(alpha) over the shard sizes. Small = skewed.
  double alpha = 0.5;
  // dirichlet and quantity: redraw until every worker has at least this many
  // samples (at most kMaxPartitionDraws draws, then InputError).
  int64_t min_partition_size = 10;
  // shards: the number of distinct classes each worker holds.
  int classes_per_worker = 2;
  // The fraction of the training set put in the global pool, in [0, 1).
  double global_fraction = 0;
};

inline constexpr int kMaxPartitionDraws = 1000;

// Throws InputError naming the key if a value is out of range (partition
// kind unknown, alpha <= 0, min_partition_size < 1, classes_per_worker < 1,
// global_fraction outside [0, 1)). Data-dependent checks happen in
// make_partition.
void validate(const PartitionOptions& o);

// The split of a training set over the live workers.
struct Partition {
  // shards[i]: the sample indices of the i-th live worker (in increasing
  // worker id order), each shard in the draw's order. Disjoint; together
  // with global_pool they cover [0, N) exactly once.
  std::vector<std::vector<int64_t>> shards;
  std::vector<int64_t> global_pool;  // every worker samples these too
};

// The partition as a pure function of (data set, options, seed, number of
// live workers): the same arguments give the same partition, on every rank
// and runtime. When membership changes, the runtime calls it again with the
// new count and worker i of the live workers (in id order) takes shards[i]:
// the new split is a fresh draw of the same kind with the same alpha /
// classes_per_worker over all the data, so the partition keeps its character
// and no data stops being trained on; the global pool does not depend on the
// worker count.
//
// iid with global_fraction 0 is the historical split: the contiguous range
// [w*N/n, (w+1)*N/n) of one seeded permutation.
// dirichlet: for each class, proportions p ~ Dir(alpha) over the workers,
// with the balancing of FedML's `hetero` split (a worker already holding N/n
// samples gets no more of the next classes), the class's samples cut at the
// cumulative proportions.
// shards: the classes in a seeded order; worker w holds classes
// (w*C + j) mod K, j < C (C distinct classes when C <= K), and each class's
// samples are split evenly among its holders.
// quantity: sizes ~ Dir(alpha) * N over a random permutation (labels IID).
//
// Throws InputError (one line naming the keys) when the settings cannot be
// met: a shard would be empty, dirichlet/quantity found no draw giving every
// worker min_partition_size samples within kMaxPartitionDraws draws,
// classes_per_worker > classes, or workers x classes_per_worker < classes.
Partition make_partition(const Dataset& d, const PartitionOptions& o, uint64_t seed,
                         int live_workers);

// Label histograms and skew, for summaries.
struct PartitionStats {
  std::vector<std::vector<int64_t>> histograms;  // per worker, per class
  std::vector<int64_t> shard_sizes;              // per worker (pool excluded)
  int64_t global_pool_size = 0;
  // Mean over workers of the total-variation distance between the worker's
  // label distribution and the training set's: 0 = IID, near 1 = disjoint.
  double skew_tv = 0;
  // The same for what a worker samples from: its shard plus the pool.
  double effective_skew_tv = 0;
};
PartitionStats partition_stats(const Dataset& d, const Partition& p);

}  // namespace hsgd
