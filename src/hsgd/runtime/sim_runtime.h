// The simulator: one thread, an event queue and a virtual clock. Gradients
// are really computed (by one model instance, on the parameters each
// simulated worker pulled); time comes from a cost model (SimConfig and
// StragglerConfig):
//   pull:    request latency; the server answers at once with the parameters
//            it holds then; the reply takes latency + 4 * params / bandwidth;
//   compute: compute_time * slowdown(worker) + the worker's delay draw;
//   push:    latency + 4 * params / bandwidth to reach the server, then a
//            single FIFO server queue: each push costs
//            server_ns_per_param * params, and an update that fires costs as
//            much again; the pusher's next pull (or its wait) and any
//            released workers' pulls start when the server is done.
// Evaluation costs no virtual time. The run is deterministic: events at the
// same virtual time are taken in the order they were scheduled, and every
// random draw comes from a seeded stream. Calibrated costs (compute_time = 0,
// server_ns_per_param = -1) are measured once and returned in
// RunResult::resolved, so the written config.toml reproduces the run.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hsgd/runtime/runtime.h"

namespace hsgd {

class SimRuntime final : public Runtime {
 public:
  // Calibrates the costs left to calibration (sim.compute_time = 0,
  // sim.server_ns_per_param = -1), as overrides with 17 significant digits.
  std::vector<std::pair<std::string, std::string>> resolve(const Job& job) override;
  // Checkpoints (job.checkpoints) are cuts between events at multiples of
  // train.checkpoint_every virtual seconds and at the end; they hold the
  // event queue, the server queue and every worker's in-flight gradient, so
  // a resumed run continues byte for byte as if never stopped (same
  // train.workers required).
  RunResult run(const Job& job, Recorder* recorder, Observer* observer) override;
};

// `job` with the costs a simulator's resolve() measured (sim.compute_time,
// sim.server_ns_per_param, compress.sim_ns_per_param) set in a copy of its
// config, held by `config`, which must outlive the returned job. Both
// simulators (this one and gossip_sim.h) run on what it returns.
Job with_resolved_costs(const Job& job,
                        const std::vector<std::pair<std::string, std::string>>& resolved,
                        std::optional<Config>* config);

// Median real seconds of one gradient of `model` on batches of `batch` from
// `data` (after a warm-up).
double calibrate_compute_time(Model& model, const Dataset& data, int batch, uint64_t seed);
// Both simulators' resolve(): appends {"sim.compute_time", the calibrated
// value, in full precision} to `out` when the job leaves it unset (0).
void resolve_compute_time(const Job& job, std::vector<std::pair<std::string, std::string>>* out);

// Median nanoseconds per parameter of one async push+update on a server of
// `num_params` parameters with this job's optimizer.
double calibrate_server_ns(const Config& c, size_t num_params);

}  // namespace hsgd
