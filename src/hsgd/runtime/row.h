// Pieces every runtime shares when it turns server state into metrics rows.
#pragma once
#include <memory>

#include "hsgd/metrics/recorder.h"
#include "hsgd/model/model.h"
#include "hsgd/policy/policy.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/server/server.h"

namespace hsgd {

// A metrics row from the server's state and counters since the last row.
// `idle_frac` is computed by the runtime, which knows its workers' waits;
// `noise` are the noise-scale sums since the last row (Server::take_noise,
// summed over the shards), written with train.noise_scale on.
MetricsRow build_row(const Server& server, const ServerStats& stats, const NoiseSums& noise,
                     const EvalResult& eval, double time_s, double idle_frac, const Job& job);

// An evaluation's figures into a row: test loss, accuracy, AUC, log loss
// and, for a mixture model (a finite effective_k), effective_k and ari. One
// place for every runtime's rows (server, hogwild and gossip).
void put_evaluation(const EvalResult& e, MetricsRow* r);

// idle_frac of a row: the idle seconds accumulated over the row's interval
// divided by interval x workers, in [0, 1] (0 for an empty interval).
double idle_fraction(double idle_delta, double interval, int workers);

// The first n samples of d (all of d when n <= 0 or n >= size).
Dataset head(const Dataset& d, int64_t n);

// The initial server options of a job. Under local:H the base lr is
// local.outer_lr with a constant schedule (optim.scale_lr and the optim.lr_*
// schedule keys are for the workers' gradients, not for model deltas).
ServerOptions server_options(const Job& job);

// The server's optimizer: optim.* normally; under local:H the outer
// optimizer local.outer (sgd | momentum | nesterov) with local.outer_lr and
// local.outer_momentum, no weight decay (default: SGD with lr 1, i.e. plain
// model averaging; DiLoCo: nesterov, e.g. lr 0.7, momentum 0.9).
OptimizerOptions server_optimizer(const Config& c);

// The server's policy for `workers` workers: policy.* with optim.lr and the
// workers' batch (train.batch, which auto's nineteenth rule reads). One
// place for the threads, sim and mpi servers.
std::unique_ptr<Policy> server_policy(const Config& c, int workers);

}  // namespace hsgd
