#include "hsgd/cli/sparse_summary.h"

#include <algorithm>

namespace hsgd::cli {

nlohmann::json sparse_summary(const SparseResult& s, const std::string& runtime) {
  const RowStats& st = s.stats;
  const double row_bytes = 8.0 + 4.0 * static_cast<double>(s.dim);
  const double pushes = static_cast<double>(std::max<int64_t>(1, st.pushes));
  const double pulls = static_cast<double>(std::max<int64_t>(1, st.pulls));
  const double per_push =
      4.0 * static_cast<double>(s.dense) + row_bytes * static_cast<double>(st.pushed_rows) / pushes;
  const double per_pull =
      4.0 * static_cast<double>(s.dense) + row_bytes * static_cast<double>(st.pulled_rows) / pulls;
  const double dense_bytes = 4.0 * static_cast<double>(s.num_params);
  nlohmann::json j = {
      {"pushes", st.pushes},
      {"pulls", st.pulls},
      {"rows_per_push", static_cast<double>(st.pushed_rows) / pushes},
      {"bytes_per_push", per_push},
      {"bytes_per_pull", per_pull},
      {"dense_bytes_per_message", dense_bytes},
      {"dense_over_sparse_push", per_push > 0 ? dense_bytes / per_push : 0.0},
      {"row_updates", st.row_updates},
      {"row_staleness_mean",
       st.staleness_count > 0 ? st.staleness_sum / static_cast<double>(st.staleness_count) : 0.0},
      {"row_staleness_max", st.staleness_max},
      {"server_rows", s.server_rows},
      {"server_state_bytes", s.server_state_bytes}};
  j["row_partition"] = runtime == "mpi" ? "id mod servers" : "none (one server)";
  if (s.eval_rows >= 0) j["eval_rows"] = s.eval_rows;
  if (!s.server_peak_rss_bytes.empty()) j["server_peak_rss_bytes"] = s.server_peak_rss_bytes;
  return j;
}

}  // namespace hsgd::cli
