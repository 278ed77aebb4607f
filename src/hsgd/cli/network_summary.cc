#include "hsgd/cli/network_summary.h"

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

}  // namespace hsgd
