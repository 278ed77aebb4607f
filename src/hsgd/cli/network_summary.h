// summary.json's "network" object (issue 27): the simulator's network; and
// the gossip policies' "gossip" object.
#pragma once
#include <nlohmann/json.hpp>

#include "hsgd/runtime/runtime.h"

namespace hsgd {

nlohmann::json network_summary(const NetworkResult& n);
// summary.json's "gossip" object (issue 28): the graph (spectral gap null
// for a time-varying one) and the bytes a node moved per step.
nlohmann::json gossip_summary(const GossipResult& g);

}  // namespace hsgd
