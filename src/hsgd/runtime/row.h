// Pieces every runtime shares when it turns server state into metrics rows.
#pragma once
#include "hsgd/metrics/recorder.h"
#include "hsgd/model/model.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/server/server.h"

namespace hsgd {

// A metrics row from the server's state and counters since the last row.
// `idle_frac` is computed by the runtime, which knows its workers' waits.
MetricsRow build_row(const Server& server, const ServerStats& stats, const EvalResult& eval,
                     double time_s, double idle_frac, const Job& job);

// The first n samples of d (all of d when n <= 0 or n >= size).
Dataset head(const Dataset& d, int64_t n);

// The initial server options of a job.
ServerOptions server_options(const Job& job);

}  // namespace hsgd
