// How parameters are split over server shards: the one rule that the mpi
// runtime (server ranks) and the simulator (server nodes) share, so that a
// simulated train.servers = S holds exactly the slices mpi's ranks hold.
#pragma once
#include <cstddef>
#include <vector>

namespace hsgd {

// Shard s of n parameters over `servers` shards: contiguous, sizes differing
// by at most one (the first n % servers shards hold one more).
struct ParamShard {
  size_t begin = 0;
  size_t size = 0;
};
std::vector<ParamShard> split_shards(size_t num_params, int servers);

}  // namespace hsgd
