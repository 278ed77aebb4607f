// summary.json's "network" object (issue 27): the simulator's network.
#pragma once
#include <nlohmann/json.hpp>

#include "hsgd/runtime/runtime.h"

namespace hsgd {

nlohmann::json network_summary(const NetworkResult& n);

}  // namespace hsgd
