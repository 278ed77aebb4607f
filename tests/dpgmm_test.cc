// model dpgmm (issue 31): the SVI step against an independent CAVI
// iteration, the ELBO, the positivity of every Beta and Gamma parameter
// under asynchrony, stragglers and churn, and exact resume on sim.
#include "hsgd/model/dpgmm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/config/config.h"
#include "hsgd/core/rng.h"
#include "hsgd/data/readers.h"
#include "hsgd/metrics/recorder.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/policy.h"
#include "hsgd/runtime/gossip_sim.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/runtime/sim_runtime.h"
#include "hsgd/server/server.h"
#include "linear_job.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

using dpgmm::Layout;
using testing_helpers::slurp;
namespace fs = std::filesystem;

Dataset gmm_data(int64_t samples, int64_t dims, int components, double sep, uint64_t seed = 3) {
  SyntheticOptions o;
  o.samples = samples;
  o.features = dims;
  o.classes = components;
  o.class_sep = sep;
  o.noise = 1.0;
  o.seed = seed;
  return make_synthetic_gmm(o);
}

std::vector<double> as_double(std::span<const float> v) { return {v.begin(), v.end()}; }

TEST(Dpgmm, DigammaMatchesKnownValues) {
  const double euler = 0.57721566490153286;
  EXPECT_NEAR(dpgmm::digamma(1.0), -euler, 1e-13);
  EXPECT_NEAR(dpgmm::digamma(0.5), -euler - 2 * std::log(2.0), 1e-13);
  EXPECT_NEAR(dpgmm::digamma(10.0), 2.2517525890667211, 1e-13);
  // psi(x + 1) = psi(x) + 1 / x across the recurrence's edge.
  for (double x : {0.01, 0.3, 7.5, 9.99, 10.0, 123.4, 1e6}) {
    EXPECT_NEAR(dpgmm::digamma(x + 1), dpgmm::digamma(x) + 1 / x, 1e-12 * std::max(1.0, 1 / x));
  }
}

// A conventional CAVI iteration, written from the textbook updates in (m,
// kappa, a, b) form, independent of the natural-parameter code: the
// responsibilities, then N_k, the weighted mean and scatter, and
//   kappa' = kappa0 + N, m' = (kappa0 m0 + N xbar) / kappa', a' = a0 + N/2,
//   b' = b0 + S/2 + kappa0 N (xbar - m0)^2 / (2 kappa'),
//   g1 = 1 + N_k, g2 = alpha + sum_{j > k} N_j.
struct Conventional {
  std::vector<double> g1, g2, kappa, a, m, b;  // m, b: K x D
};

Conventional conventional(const Layout& l, std::span<const double> lam) {
  const int64_t D = l.dims;
  Conventional c;
  for (int64_t k = 0; k < l.truncation; ++k) {
    const double* p = lam.data() + l.component(k);
    c.g1.push_back(p[0]);
    c.g2.push_back(p[1]);
    c.kappa.push_back(p[2]);
    c.a.push_back(p[3]);
    for (int64_t d = 0; d < D; ++d) {
      const double m = p[4 + d] / p[2];
      c.m.push_back(m);
      c.b.push_back(0.5 * (p[4 + D + d] - p[2] * m * m));
    }
  }
  return c;
}

Conventional cavi(const Layout& l, std::span<const double> lam, const Dataset& x) {
  const int64_t D = l.dims, K = l.truncation, n = x.size();
  const double alpha = lam[0], kappa0 = lam[1], a0 = lam[2];
  const double* m0 = lam.data() + 3;
  const double* b0 = lam.data() + 3 + D;
  const Conventional q = conventional(l, lam);
  std::vector<double> r(static_cast<size_t>(n * K));
  for (int64_t i = 0; i < n; ++i) {
    double prefix = 0, top = -INFINITY;
    for (int64_t k = 0; k < K; ++k) {
      const double s = dpgmm::digamma(q.g1[k] + q.g2[k]);
      double v = dpgmm::digamma(q.g1[k]) - s + prefix;
      prefix += dpgmm::digamma(q.g2[k]) - s;
      for (int64_t d = 0; d < D; ++d) {
        const double b = q.b[k * D + d], z = x.features[i * D + d] - q.m[k * D + d];
        v += 0.5 * (dpgmm::digamma(q.a[k]) - std::log(b) - std::log(2 * M_PI) - 1 / q.kappa[k] -
                    q.a[k] / b * z * z);
      }
      r[i * K + k] = v;
      top = std::max(top, v);
    }
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += (r[i * K + k] = std::exp(r[i * K + k] - top));
    for (int64_t k = 0; k < K; ++k) r[i * K + k] /= sum;
  }
  Conventional out;
  std::vector<double> nk(K, 0.0);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t i = 0; i < n; ++i) nk[k] += r[i * K + k];
  }
  for (int64_t k = 0; k < K; ++k) {
    double tail = 0;
    for (int64_t j = k + 1; j < K; ++j) tail += nk[j];
    out.g1.push_back(1 + nk[k]);
    out.g2.push_back(alpha + tail);
    const double kap = kappa0 + nk[k];
    out.kappa.push_back(kap);
    out.a.push_back(a0 + nk[k] / 2);
    for (int64_t d = 0; d < D; ++d) {
      double mean = 0;
      for (int64_t i = 0; i < n; ++i) mean += r[i * K + k] * x.features[i * D + d];
      mean = nk[k] > 0 ? mean / nk[k] : 0;
      double scatter = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double z = x.features[i * D + d] - mean;
        scatter += r[i * K + k] * z * z;
      }
      out.m.push_back((kappa0 * m0[d] + nk[k] * mean) / kap);
      out.b.push_back(b0[d] + scatter / 2 +
                      kappa0 * nk[k] * (mean - m0[d]) * (mean - m0[d]) / (2 * kap));
    }
  }
  return out;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-10 * std::max(1.0, std::abs(b[i]))) << what << "[" << i << "]";
  }
}

// One full-batch SVI step with rho = 1 is one CAVI iteration (double).
TEST(Dpgmm, FullBatchStepWithRhoOneIsOneCaviIteration) {
  const Dataset data = gmm_data(400, 3, 4, 3.0);
  const Layout l{3, 6};
  auto model = make_dpgmm_model(3, 6, 0.7, &data);
  std::vector<float> params(model->num_params()), grads(params.size());
  model->bind(params, grads);
  model->init_params(5);
  std::vector<double> lam = as_double(params);
  for (int iteration = 0; iteration < 3; ++iteration) {
    SCOPED_TRACE(iteration);
    const Conventional want = cavi(l, lam, data);
    // The SVI step lambda - rho (lambda - lambda_hat), rho = 1, scale N / |B| = 1.
    const std::vector<double> hat =
        dpgmm::local_update(l, lam, data.features.data(), data.size(), 1.0);
    const double rho = 1.0;
    for (size_t i = 0; i < lam.size(); ++i) lam[i] = lam[i] - rho * (lam[i] - hat[i]);
    const Conventional got = conventional(l, lam);
    expect_close(got.g1, want.g1, "g1");
    expect_close(got.g2, want.g2, "g2");
    expect_close(got.kappa, want.kappa, "kappa");
    expect_close(got.a, want.a, "a");
    expect_close(got.m, want.m, "m");
    expect_close(got.b, want.b, "b");
  }
}

// The model's float path: gradient() on the whole training set is
// lambda - lambda_hat with scale 1, to float precision.
TEST(Dpgmm, GradientIsLambdaMinusLambdaHat) {
  const Dataset data = gmm_data(300, 4, 3, 3.0);
  const Layout l{4, 5};
  auto model = make_dpgmm_model(4, 5, 1.0, &data);
  std::vector<float> params(model->num_params()), grads(params.size());
  model->bind(params, grads);
  model->init_params(1);
  Batch b;
  b.features = data.features;
  b.labels = data.labels;
  model->gradient(b);
  const std::vector<double> lam = as_double(params);
  const std::vector<double> hat = dpgmm::local_update(l, lam, b.features.data(), b.size(), 1.0);
  for (int64_t i = 0; i < l.prior_size(); ++i) EXPECT_EQ(grads[i], 0.0f) << i;
  for (size_t i = 0; i < lam.size(); ++i) {
    EXPECT_NEAR(lam[i] - grads[i], hat[i], 2e-6 * std::max(1.0, std::abs(hat[i]))) << i;
  }
}

// CAVI never lowers the ELBO: the loss (negative ELBO per point) of
// successive full-batch rho = 1 steps does not rise. Checks the KL terms.
TEST(Dpgmm, FullBatchStepsNeverRaiseTheNegativeElbo) {
  const Dataset data = gmm_data(600, 2, 3, 2.0);
  const Layout l{2, 8};
  auto model = make_dpgmm_model(2, 8, 1.0, &data);
  std::vector<float> params(model->num_params()), grads(params.size());
  model->bind(params, grads);
  model->init_params(2);
  std::vector<double> lam = as_double(params);
  double previous = INFINITY;
  for (int it = 0; it < 20; ++it) {
    double neg = 0;
    const std::vector<double> hat =
        dpgmm::local_update(l, lam, data.features.data(), data.size(), 1.0, &neg);
    const double loss = neg / data.size() + dpgmm::global_kl(l, lam) / data.size();
    EXPECT_LE(loss, previous + 1e-9) << it;
    previous = loss;
    lam = hat;
  }
}

TEST(Dpgmm, AdjustedRandIndex) {
  const std::vector<int32_t> a = {0, 0, 1, 1, 2, 2};
  const std::vector<int32_t> relabeled = {5, 5, 3, 3, 9, 9};
  EXPECT_DOUBLE_EQ(dpgmm::adjusted_rand_index(a, relabeled), 1.0);
  // sklearn.metrics.adjusted_rand_score([0,0,1,1,2,2], [0,0,1,2,2,2]) = 0.4444...
  const std::vector<int32_t> b = {0, 0, 1, 2, 2, 2};
  EXPECT_NEAR(dpgmm::adjusted_rand_index(a, b), 4.0 / 9.0, 1e-12);
}

TEST(Dpgmm, EvaluateReportsLikelihoodEffectiveComponentsAndAri) {
  Dataset all = gmm_data(3000, 3, 4, 4.0);
  Dataset train, test;
  split_train_test(std::move(all), 0.2, 1, &train, &test);
  const Layout l{3, 10};
  auto model = make_dpgmm_model(3, 10, 1.0, &train);
  std::vector<float> params(model->num_params()), grads(params.size());
  model->bind(params, grads);
  model->init_params(1);
  std::vector<double> lam = as_double(params);
  for (int it = 0; it < 50; ++it) {
    lam = dpgmm::local_update(l, lam, train.features.data(), train.size(), 1.0);
  }
  for (size_t i = 0; i < lam.size(); ++i) params[i] = static_cast<float>(lam[i]);
  const EvalResult e = model->evaluate(test);
  EXPECT_TRUE(std::isnan(e.accuracy));
  EXPECT_TRUE(std::isfinite(e.loss));
  EXPECT_EQ(e.effective_k, 4);
  EXPECT_GT(e.ari, 0.95);
}

TEST(Dpgmm, RefusesBadShapes) {
  testing_helpers::expect_input_error([] { make_dpgmm_model(0, 5, 1.0, nullptr); },
                                      {"dpgmm", "truncation"});
  const Dataset data = gmm_data(50, 3, 2, 1.0);
  auto model = make_dpgmm_model(4, 5, 1.0, nullptr);
  std::vector<float> params(model->num_params()), grads(params.size());
  model->bind(params, grads);
  model->init_params(1);
  testing_helpers::expect_input_error([&] { model->evaluate(data); }, {"3 values", "expects 4"});
}

// Every Beta and Gamma parameter stays positive after every update of an
// asynchronous server fed stale SVI pushes from tiny batches, with
// stragglers (pushes computed many versions ago), workers leaving and
// rejoining, and rho = 1 at the first update.
void RunChurn(const std::string& policy, const std::string& optimizer, bool* stayed_positive,
              bool rebase = true) {
  const Dataset data = gmm_data(2000, 3, 5, 3.0, 7);
  const Layout l{3, 12};
  const int workers = 6;
  auto model = make_dpgmm_model(3, 12, 1.0, &data);
  std::vector<float> server_params(model->num_params()), scratch(server_params.size());
  model->bind(server_params, scratch);
  model->init_params(3);
  ASSERT_TRUE(dpgmm::positive(l, std::span<const float>(server_params)));
  ServerOptions so;
  so.workers = workers;
  so.lr = 1.0;
  so.lr_schedule.kind = "robbins-monro";
  so.lr_schedule.tau = 1;
  so.lr_schedule.kappa = 0.6;
  so.staleness.rebase = rebase ? 1 : 0;
  PolicyOptions po;
  po.kind = policy;
  po.k = 3;
  po.s = 2;
  OptimizerOptions oo;
  oo.kind = optimizer;
  Server server(server_params, so, make_policy(po, workers, so.lr),
                make_optimizer(oo, server_params.size()));
  struct W {
    std::vector<float> params, grads;
    uint64_t version = 0;
    bool waiting = false;
    bool live = true;
    bool must_pull = true;  // every worker pulls before its first gradient
  };
  std::vector<W> w(workers);
  std::vector<std::unique_ptr<Model>> models;
  for (int i = 0; i < workers; ++i) {
    w[i].params.assign(server_params.begin(), server_params.end());
    w[i].grads.resize(server_params.size());
    models.push_back(make_dpgmm_model(3, 12, 1.0, &data));
    models.back()->bind(w[i].params, w[i].grads);
  }
  Rng rng(11, 0);
  Batch b;
  *stayed_positive = true;
  for (int step = 0; step < 3000 && *stayed_positive; ++step) {
    const int i = static_cast<int>(rng.below(workers));
    const double t = step * 0.01;
    if (rng.uniform() < 0.02) {  // churn
      const Decision d = w[i].live ? server.on_leave(i, t) : server.on_join(i, t);
      w[i].live = !w[i].live;
      w[i].waiting = false;
      for (int r : d.released) w[r].waiting = false;
      continue;
    }
    if (!w[i].live || w[i].waiting) continue;
    // Stragglers (workers 0 and 1) pull rarely: their pushes are stale.
    if (w[i].must_pull || i > 1 || rng.uniform() < 0.1) {
      const Decision d = server.on_pull(i);
      for (int r : d.released) w[r].waiting = false;
      if (d.caller_waits) {  // ssp: a pull-waiter pulls again once released
        w[i].waiting = true;
        w[i].must_pull = true;
        continue;
      }
      std::copy(server.params().begin(), server.params().end(), w[i].params.begin());
      w[i].version = server.version();
      w[i].must_pull = false;
    }
    const int64_t batch = 1 + static_cast<int64_t>(rng.below(4));
    b.features.resize(batch * 3);
    b.labels.resize(batch);
    for (int64_t j = 0; j < batch; ++j) {
      const int64_t s = static_cast<int64_t>(rng.below(data.size()));
      std::copy(data.features.begin() + s * 3, data.features.begin() + s * 3 + 3,
                b.features.begin() + j * 3);
      b.labels[j] = data.labels[s];
    }
    const double loss = models[i]->gradient(b);
    const Decision d = server.on_push(i, w[i].version, w[i].grads, batch, loss, t);
    w[i].waiting = d.caller_waits;
    for (int r : d.released) w[r].waiting = false;
    if (d.applied && !dpgmm::positive(l, server.params())) *stayed_positive = false;
  }
}

TEST(Dpgmm, EveryBetaAndGammaParameterStaysPositiveUnderAsynchronyAndChurn) {
  for (const char* policy : {"async", "kasync", "sync", "ssp"}) {
    SCOPED_TRACE(policy);
    bool ok = false;
    RunChurn(policy, "sgd", &ok);
    EXPECT_TRUE(ok);
  }
}

// Why stale pushes are rebased (staleness.rebase, on for dpgmm): applied
// as they are, lambda_now - rho (lambda_pulled - lambda_hat) is no convex
// combination once the rates applied since the pull add up to more than 1,
// and a parameter goes negative.
TEST(Dpgmm, StalePushesWithoutRebaseBreakPositivity) {
  bool ok = true;
  RunChurn("async", "sgd", &ok, /*rebase=*/false);
  EXPECT_FALSE(ok);
}

// Why momentum is refused: the same run with heavy-ball momentum drives a
// Gamma rate or Beta parameter negative.
TEST(Dpgmm, MomentumBreaksPositivity) {
  bool ok = true;
  RunChurn("async", "momentum", &ok);
  EXPECT_FALSE(ok);
}

// A dpgmm job on sim, as the runtime tests build theirs.
struct DpgmmJob {
  Config config;
  Dataset train, test;
  explicit DpgmmJob(const std::vector<Override>& o) {
    std::vector<Override> all = {{"data.spec", "synthetic-gmm"},
                                 {"model.name", "dpgmm"},
                                 {"model.truncation", "8"},
                                 {"train.runtime", "sim"},
                                 {"train.workers", "4"},
                                 {"train.batch", "20"},
                                 {"train.budget", "2"},
                                 {"train.eval_every", "0.25"},
                                 {"optim.lr", "1"},
                                 {"optim.lr_schedule", "robbins-monro"},
                                 {"optim.tau", "2"},
                                 {"optim.kappa", "0.7"},
                                 {"sim.compute_time", "0.01"},
                                 {"sim.server_ns_per_param", "100"},
                                 {"sim.latency", "0.0005"},
                                 {"sim.bandwidth", "1e8"}};
    all.insert(all.end(), o.begin(), o.end());
    config = load_config("", all);
    SyntheticOptions so = config.data.synthetic;
    so.samples = 2000;
    so.features = 3;
    so.classes = 4;
    so.class_sep = 3;
    split_train_test(make_synthetic_gmm(so), 0.2, 1, &train, &test);
  }
  Job job() const {
    Job j;
    j.config = &config;
    j.train = &train;
    j.test = &test;
    const Dataset* t = &train;
    const int64_t K = config.model.truncation;
    const double alpha = config.model.alpha;
    j.make_model = [t, K, alpha] { return make_dpgmm_model(3, K, alpha, t); };
    j.initial_params = initial_params(j.make_model, config.train.seed);
    j.identity = {config_hash(config), "dpgmm", static_cast<int64_t>(j.initial_params.size())};
    return j;
  }
  RunResult run(const std::string& dir, const Checkpoint* resume = nullptr, int64_t keep_rows = 0) {
    Job j = job();
    CheckpointStore store(dir, 2);
    if (config.train.checkpoint_every > 0) j.checkpoints = &store;
    j.resume = resume;
    std::unique_ptr<Recorder> rec =
        resume ? std::make_unique<Recorder>(dir, keep_rows) : std::make_unique<Recorder>(dir);
    RunResult r = SimRuntime().run(j, rec.get(), nullptr);
    rec->finish();
    return r;
  }
};

TEST(DpgmmSim, EveryRowFiniteAndParametersPositiveWithStragglersAndChurn) {
  const Layout l{3, 8};
  for (const char* policy : {"async", "hybrid", "sync", "kasync:2", "auto"}) {
    SCOPED_TRACE(policy);
    DpgmmJob j({{"policy.name", policy},
                {"policy.step", "20"},
                {"stragglers.fraction", "0.5"},
                {"stragglers.sigma", "0.05"},
                {"faults.kill", "worker:1@0.5"},
                {"faults.rejoin", "worker:1@1.2"}});
    const std::string dir =
        testing::fresh_dir(std::string("dpgmm_churn_") + (policy[0] == 'k' ? "kasync" : policy));
    const RunResult r = j.run(dir);
    EXPECT_TRUE(r.stopped.empty()) << r.stopped;
    EXPECT_TRUE(dpgmm::positive(l, std::span<const float>(r.params)));
    const std::vector<MetricsRow> rows = read_metrics_csv(dir + "/metrics.csv");
    ASSERT_FALSE(rows.empty());
    for (const MetricsRow& row : rows) {
      EXPECT_TRUE(std::isfinite(row.test_loss));
      EXPECT_TRUE(row.has_mixture);
      EXPECT_TRUE(std::isnan(row.test_acc));
    }
    // Learning: the four true components among those found, most points
    // with their own (2 s is ~10 passes: not every spare component has died).
    EXPECT_GE(rows.back().effective_k, 4);
    EXPECT_GT(rows.back().ari, 0.8);
  }
}

// Gossip rows carry the mixture's figures too (runtime/row.h put_evaluation,
// one place for every runtime's rows).
TEST(DpgmmSim, GossipRowsCarryEffectiveComponentsAndAri) {
  DpgmmJob j({{"policy.name", "dpsgd"}, {"optim.lr_schedule", "constant"}, {"optim.lr", "0.5"}});
  const std::string dir = testing::fresh_dir("dpgmm_gossip");
  {
    Recorder rec(dir);
    const RunResult r = GossipSimRuntime().run(j.job(), &rec, nullptr);
    rec.finish();
    EXPECT_TRUE(r.stopped.empty()) << r.stopped;
  }
  const std::vector<MetricsRow> rows = read_metrics_csv(dir + "/metrics.csv");
  ASSERT_FALSE(rows.empty());
  for (const MetricsRow& row : rows) {
    EXPECT_TRUE(row.has_mixture);
    EXPECT_TRUE(std::isfinite(row.effective_k));
  }
}

// Runs to 2 s in one go, and to 1 s with checkpoints then resumed to 2 s:
// the same metrics.csv byte for byte and the same parameters.
TEST(DpgmmSim, ResumeFromACheckpointIsByteExact) {
  for (const char* policy : {"async", "hybrid"}) {
    SCOPED_TRACE(policy);
    const std::vector<Override> base = {{"policy.name", policy},
                                        {"policy.step", "20"},
                                        {"stragglers.fraction", "0.5"},
                                        {"stragglers.sigma", "0.05"}};
    std::vector<Override> whole = base;
    whole.push_back({"train.budget", "2"});
    const std::string dir_whole = testing::fresh_dir(std::string("dpgmm_whole_") + policy);
    const RunResult a = DpgmmJob(whole).run(dir_whole);

    const std::string dir = testing::fresh_dir(std::string("dpgmm_resume_") + policy);
    std::vector<Override> first = base;
    first.push_back({"train.budget", "1"});
    first.push_back({"train.checkpoint_every", "0.4"});
    DpgmmJob(first).run(dir);
    std::vector<Override> second = base;
    second.push_back({"train.budget", "2"});
    second.push_back({"train.checkpoint_every", "0.4"});
    DpgmmJob j2(second);
    const Checkpoint ck = CheckpointStore::load_latest(dir, j2.job().identity);
    EXPECT_DOUBLE_EQ(ck.info.train_s, 1.0);
    const RunResult b = j2.run(dir, &ck, ck.info.rows);
    EXPECT_EQ(slurp(dir + "/metrics.csv"), slurp(dir_whole + "/metrics.csv"));
    EXPECT_EQ(b.params, a.params);
    EXPECT_EQ(b.worker_pushes, a.worker_pushes);
  }
}

}  // namespace
}  // namespace hsgd
