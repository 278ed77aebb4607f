#include "hsgd/cli/network_summary.h"

#include <cmath>

namespace hsgd {

nlohmann::json network_summary(const NetworkResult& n) {
  nlohmann::json nodes = nlohmann::json::array();
  for (size_t i = 0; i < n.nodes.size(); ++i) {
    nodes.push_back({{"node", n.nodes[i]}, {"sent", n.sent[i]}, {"received", n.received[i]}});
  }
  return {{"model", n.model},
          {"busiest_util", n.busiest_util},
          {"busiest", n.busiest},
          {"bytes_per_node", nodes}};
}

nlohmann::json gossip_summary(const GossipResult& g) {
  return {{"topology", g.topology},
          {"weights", g.weights},
          {"spectral_gap",
           std::isfinite(g.spectral_gap) ? nlohmann::json(g.spectral_gap) : nlohmann::json()},
          {"max_degree", g.max_degree},
          {"steps", g.steps},
          {"rounds", g.rounds},
          {"global_averages", g.global_averages},
          {"bytes_per_node_step", g.bytes_per_node_step},
          {"busiest_bytes_per_step", g.busiest_bytes_per_step},
          {"busiest", g.busiest}};
}

}  // namespace hsgd
