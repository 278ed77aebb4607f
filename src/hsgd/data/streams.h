// Internal to hsgd/data: the Rng stream ids used by the data module, kept in
// one place so no two consumers of one seed ever draw the same numbers.
#pragma once
#include <cstdint>

namespace hsgd::data_internal {

inline constexpr uint64_t kSyntheticCentresStream = 1;
inline constexpr uint64_t kSyntheticLabelsStream = 2;
inline constexpr uint64_t kSyntheticNoiseStream = 3;
inline constexpr uint64_t kSplitStream = 10;
inline constexpr uint64_t kShardPermutationStream = 20;
// make_partition's draws (dirichlet proportions, class order, sizes).
inline constexpr uint64_t kPartitionStream = 30;
// Worker w's importance-sampling draws: kImportanceStream + w.
inline constexpr uint64_t kImportanceStream = 100000;
// Worker w reshuffles its shard every epoch with stream kWorkerEpochStream + w.
inline constexpr uint64_t kWorkerEpochStream = 1000;

}  // namespace hsgd::data_internal

namespace hsgd::data_internal {
// synthetic-ctr (data/ctr.cc): the planted model, the ids, the dense
// features and the labels.
inline constexpr uint64_t kCtrModelStream = 40;
inline constexpr uint64_t kCtrIdStream = 41;
inline constexpr uint64_t kCtrDenseStream = 42;
inline constexpr uint64_t kCtrLabelStream = 43;
// synthetic-gmm (data/gmm.cc) and the random projection (data/project.cc).
inline constexpr uint64_t kGmmCentresStream = 50;
inline constexpr uint64_t kGmmWeightsStream = 51;
inline constexpr uint64_t kGmmSamplesStream = 52;
inline constexpr uint64_t kProjectionStream = 60;
}  // namespace hsgd::data_internal
