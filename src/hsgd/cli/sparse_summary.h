// summary.json's "sparse" object for a row-sparse run (model.sparse;
// issue 16). README, Sparse models, lists the fields.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "hsgd/runtime/runtime.h"

namespace hsgd::cli {

// `runtime` names the row partition ("id mod servers" on mpi).
nlohmann::json sparse_summary(const SparseResult& s, const std::string& runtime);

}  // namespace hsgd::cli
