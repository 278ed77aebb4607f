// sparse_bench: the row-sparse figures of BENCHMARKS.md (issue 16). Not a
// test: prints, for dlrm on synthetic-ctr, the unique rows per batch, the
// bytes per push and pull against the dense equivalent, the single-thread
// gradient throughput (row-sparse and dense), and the server's row updates
// per second on one core per optimizer.
// With `seconds` > 0 it also runs the compute-only loop of a row-sparse
// worker (draw the batch, list its rows, row-sparse gradient; no server) on
// 1 thread and then on 2 concurrent threads for `seconds` each: what the
// threads runtime's 2 workers could reach on this machine at this moment.
//   sparse_bench [tables rows dim batch samples seconds]   (default 8 100000 16 2048 50000 0)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "hsgd/data/ctr.h"
#include "hsgd/model/model.h"
#include "hsgd/server/sparse.h"

using namespace hsgd;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int main(int argc, char** argv) {
  const int64_t tables = argc > 1 ? std::atoll(argv[1]) : 8;
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 100000;
  const int64_t dim = argc > 3 ? std::atoll(argv[3]) : 16;
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 2048;
  const int64_t samples = argc > 5 ? std::atoll(argv[5]) : 50000;
  const double seconds = argc > 6 ? std::atof(argv[6]) : 0;
  configure_math_threads();
  CtrOptions o;
  o.samples = samples;
  o.fields = tables;
  o.rows = rows;
  const Dataset d = make_synthetic_ctr(o);
  ModelSpec spec;
  spec.name = "dlrm";
  spec.sample_shape = d.sample_shape;
  spec.num_classes = 2;
  spec.table_rows = d.categorical_rows;
  spec.embedding_dim = dim;
  spec.hidden = {64};
  spec.top_hidden = {64};
  auto m = make_model(spec);
  std::vector<float> p(static_cast<size_t>(m->num_params())), g(p.size());
  m->bind(p, g);
  m->init_params(1);
  const RowLayout l = m->row_layout();
  std::printf(
      "dlrm: %lld tables x %lld rows x dim %lld, batch %lld, zipf %.2f: %lld params "
      "(%lld dense)\n",
      (long long)tables, (long long)rows, (long long)dim, (long long)batch, o.zipf,
      (long long)m->num_params(), (long long)l.dense);

  ShardSampler sampler(d, 0, 1, 1);
  Batch b;
  std::vector<int64_t> ids;
  std::vector<std::vector<int64_t>> row_sets;
  std::vector<int64_t> unique;
  const int batches = 20;
  double sparse_s = 0, dense_s = 0;
  for (int i = 0; i < batches; ++i) {
    sampler.next(batch, &b);
    m->batch_rows(b, &ids);
    unique.push_back(static_cast<int64_t>(ids.size()));
    row_sets.push_back(ids);
    std::vector<float> rg(ids.size() * static_cast<size_t>(dim));
    auto t0 = Clock::now();
    m->sparse_gradient(b, ids, rg, {});
    sparse_s += since(t0);
    t0 = Clock::now();
    m->gradient(b);
    dense_s += since(t0);
  }
  std::sort(unique.begin(), unique.end());
  const int64_t u = unique[unique.size() / 2];
  const double dense_bytes = 4.0 * static_cast<double>(m->num_params());
  const double sparse_bytes = 4.0 * static_cast<double>(l.dense) +
                              static_cast<double>(u) * (8.0 + 4.0 * static_cast<double>(dim));
  std::printf("unique rows per batch: median %lld of %lld ids (min %lld, max %lld)\n", (long long)u,
              (long long)(batch * tables), (long long)unique.front(), (long long)unique.back());
  std::printf("bytes per push (= per pull): row-sparse %.0f, dense %.0f, ratio %.1fx\n",
              sparse_bytes, dense_bytes, dense_bytes / sparse_bytes);
  std::printf("gradient, one thread: row-sparse %.0f samples/s, dense %.0f samples/s\n",
              static_cast<double>(batches * batch) / sparse_s,
              static_cast<double>(batches * batch) / dense_s);

  for (const char* kind : {"sgd", "adagrad", "adam"}) {
    OptimizerOptions oo;
    oo.kind = kind;
    std::vector<float> table(static_cast<size_t>(l.rows * dim), 0.01f);
    RowTable t(table, dim, oo, Aggregation::kMean, {});
    int64_t updates = 0;
    auto t0 = Clock::now();
    int rounds = 0;
    while (since(t0) < 1.0) {
      for (const auto& set : row_sets) {
        RowPush push;
        push.ids = set;
        push.values.assign(set.size() * static_cast<size_t>(dim), 0.001f);
        t.stage(std::move(push));
        t.on_buffered(0, 0);
        t.on_apply(1, 0.01);
        updates += static_cast<int64_t>(set.size());
      }
      ++rounds;
    }
    std::printf(
        "server row updates/s, one core, %s: %.2fM (stage + buffer + apply, incl. copying "
        "the push)\n",
        kind, static_cast<double>(updates) / since(t0) / 1e6);
  }
  if (seconds > 0) {
    // Compute-only: each thread its own model, parameters and shard.
    for (int threads : {1, 2}) {
      std::vector<int64_t> done(static_cast<size_t>(threads), 0);
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          auto wm = make_model(spec);
          std::vector<float> wp(p), wg(p.size());
          wm->bind(wp, wg);
          ShardSampler ws(d, t, threads, 1);
          Batch wb;
          std::vector<int64_t> wids;
          std::vector<float> wrg;
          const auto t0 = Clock::now();
          while (since(t0) < seconds) {
            ws.next(batch, &wb);
            wm->batch_rows(wb, &wids);
            wrg.resize(wids.size() * static_cast<size_t>(dim));
            wm->sparse_gradient(wb, wids, wrg, {});
            done[static_cast<size_t>(t)] += wb.size();
          }
        });
      }
      for (std::thread& th : pool) th.join();
      int64_t total = 0;
      for (int64_t n : done) total += n;
      std::printf(
          "compute-only (batch + rows + row-sparse gradient), %d concurrent thread%s: "
          "%.0f samples/s\n",
          threads, threads > 1 ? "s" : "", static_cast<double>(total) / seconds);
    }
  }
  return 0;
}
