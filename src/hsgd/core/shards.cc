#include "hsgd/core/shards.h"

namespace hsgd {

std::vector<ParamShard> split_shards(size_t num_params, int servers) {
  std::vector<ParamShard> out(static_cast<size_t>(servers));
  const size_t base = num_params / static_cast<size_t>(servers);
  const size_t extra = num_params % static_cast<size_t>(servers);
  size_t at = 0;
  for (size_t s = 0; s < out.size(); ++s) {
    out[s].begin = at;
    out[s].size = base + (s < extra ? 1 : 0);
    at += out[s].size;
  }
  return out;
}

}  // namespace hsgd
