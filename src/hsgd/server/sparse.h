// Row-sparse push and pull for embedding tables (issue 16). Torch-free.
//
// A row-sparse model's flat parameters are [dense part | rows x dim]
// (model.h, RowLayout). With row-sparse push/pull the server's dense part
// is an ordinary Server (over the dense prefix only: same policies,
// versions, waits, mitigations), and the rows are a RowTable attached to it
// through Server::ServerHook, so the rows of a push are buffered exactly
// when its dense part is, and applied in the same update:
//
//  - A worker pulls the dense part and only the rows its next batch reads
//    (RowTable::pull), and pushes the dense gradient plus a RowPush: the
//    touched rows' gradients, ids sorted, duplicates summed (make_row_push).
//  - Aggregation, row by row: with policy.aggregation = sum, a row's update
//    is the sum of the buffered pushes' gradients for it; with mean, that
//    sum divided by the number of pushes in the update (all of them, not
//    only those that touched the row: a push that did not touch a row
//    counts as a zero gradient for it). This is the dense path's mean, so
//    sparse and dense give the same parameters where the optimizer is
//    stateless in zero gradients (sgd, adagrad).
//  - The optimizer is lazy: only the rows of the update move, and only
//    their state changes (RowOptimizer). sgd, adagrad: the same as the
//    dense optimizer on those rows (a zero gradient leaves a row alone
//    there too, weight decay aside). momentum: a row's velocity decays only
//    in updates that touch it. adam ("lazy Adam"): m and v of a row decay
//    only in updates that touch it, and the bias correction uses the row's
//    own count of updates. Weight decay acts on the touched rows only.
//    nesterov is refused.
//  - Staleness: the dense part's (the server version). With
//    staleness.scaled_lr a push's rows are scaled by 1 / max(1, tau) like
//    its dense part; DC-ASGD and Gap-Aware are dense only (refused by
//    check_sparse_supported). clip_norm clips the dense part only.
//  - A push whose rows hold a NaN or Inf is dropped whole (the caller gives
//    the Server a NaN loss, so it is counted as non-finite).
//  - Per-row staleness (RowStats): every row carries a version, the number
//    of updates that moved it. A pull by worker w records the versions of
//    the rows it reads; when w's next push joins the buffer, each pushed
//    row that w pulled has staleness = its version now - its version at
//    w's pull (the updates that moved that row in between). The dense
//    staleness (server version) counts every update; this counts only the
//    ones that touched the row.
//
// Thread-safety: none; the caller serialises calls with the Server's.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hsgd/core/state.h"
#include "hsgd/optim/optimizer.h"
#include "hsgd/policy/policy.h"
#include "hsgd/server/server.h"

namespace hsgd {

// What a RowTable counted since the start (saved with it). Bytes on the
// wire follow from these: a push carries pushed_rows x (8 + 4 x dim) bytes
// of rows, a pull pulled_rows x (8 + 4 x dim) (ids up, rows down).
struct RowStats {
  int64_t pulls = 0;         // pulls through pull(worker, ...)
  int64_t pulled_rows = 0;   // rows they read
  int64_t pushes = 0;        // pushes staged (dropped ones included)
  int64_t pushed_rows = 0;   // rows they carried
  int64_t row_updates = 0;   // rows moved by updates (one per row per update)
  double staleness_sum = 0;  // per-row staleness over the buffered pushes' rows
  int64_t staleness_count = 0;
  int64_t staleness_max = 0;
  // Adds `o` (another shard's counts); pushes and pulls: the larger (every
  // shard sees every push and pull).
  void merge(const RowStats& o);
};

// The rows part of one push: sorted unique ids and their gradients.
struct RowPush {
  std::vector<int64_t> ids;   // sorted, unique, each in [0, rows)
  std::vector<float> values;  // ids.size() x dim, in the order of ids
  // Bytes on the wire: 8 per id + 4 per value.
  int64_t bytes() const {
    return static_cast<int64_t>(ids.size() * sizeof(int64_t) + values.size() * sizeof(float));
  }
};

// A RowPush from raw (id, row gradient) pairs in any order: `grads` holds
// ids.size() x dim floats; the gradients of a repeated id are summed (in the
// order they appear). Throws InputError "row push: id <i> outside [0,
// <rows>)" for an id out of range. Empty `ids` gives an empty push.
RowPush make_row_push(std::span<const int64_t> ids, std::span<const float> grads, int64_t dim,
                      int64_t rows);

// Throws InputError naming the key if the options cannot run row-sparse:
// optim.kind = nesterov, DC-ASGD or Gap-Aware on.
void check_sparse_supported(const OptimizerOptions& o, const MitigationOptions& m);

// Lazy per-row optimizer state over a rows x dim table (see the header
// comment). State is allocated for the whole table up front: rows x dim
// floats per moment (momentum, adagrad: 1; adam: 2, plus a per-row count).
class RowOptimizer {
 public:
  RowOptimizer(const OptimizerOptions& o, int64_t rows, int64_t dim);
  // table[id] -= lr * direction(grads row), for each id (sorted, unique).
  void step(std::span<float> table, std::span<const int64_t> ids, std::span<const float> grads,
            double lr);
  void save(StateWriter& w) const;
  void load(StateReader& r);
  int64_t state_bytes() const;

 private:
  OptimizerOptions o_;
  int64_t rows_, dim_;
  std::vector<float> m_, v_;    // momentum: m_ = velocity; adagrad: v_ = sum g^2; adam: both
  std::vector<int64_t> count_;  // adam: updates that touched each row
  // adam: 1 - beta1^t and 1 - beta2^t for the counts seen so far (derived
  // from o_, not state: not saved).
  void bias_corrections(int64_t t, float* c1, float* c2);
  std::vector<float> bias_;
};

// The server side of the rows: the table (a view into the caller's flat
// parameters), the buffer of the pushes waiting for an update, the lazy
// optimizer. Attach it to the Server over the dense prefix with
// server.set_hook(&table); then, per push: table.stage(push), then
// server.on_push(...). The server calls the hook: on_buffered moves the
// staged rows into the buffer (a dropped push never gets there and is
// discarded at the next stage()), on_apply applies the buffer.
class RowTable final : public ServerHook {
 public:
  RowTable(std::span<float> table, int64_t dim, const OptimizerOptions& o, Aggregation aggregation,
           const MitigationOptions& staleness);

  // The push whose dense part is about to go to Server::on_push. Checks the
  // ids (InputError as make_row_push) and sizes. Returns false if a value is
  // not finite: the caller must then push a NaN loss (the push is dropped).
  bool stage(RowPush push);
  // Copies the rows `ids` of the table into `out` (ids.size() x dim).
  // Throws InputError for an id out of range.
  void pull(std::span<const int64_t> ids, std::span<float> out) const;
  // The same for worker `worker` (>= 0), recording the versions of the rows
  // (ids sorted) for the per-row staleness of its next push, and counting.
  void pull(int worker, std::span<const int64_t> ids, std::span<float> out);

  void on_buffered(int worker, int64_t tau) override;
  void on_apply(size_t pushes, double lr) override;
  void save(StateWriter& w) const override;
  void load(StateReader& r) override;

  int64_t rows() const { return rows_; }
  int64_t dim() const { return dim_; }
  // Row updates applied (one per row per update) since the start.
  int64_t row_updates() const { return stats_.row_updates; }
  const RowStats& stats() const { return stats_; }
  // Bytes of server state the table holds: its rows, their optimizer state
  // and versions (not the buffer of a pending update).
  int64_t state_bytes() const;

 private:
  void check_ids(std::span<const int64_t> ids) const;

  std::span<float> table_;
  int64_t rows_, dim_;
  Aggregation aggregation_;
  MitigationOptions staleness_;
  RowOptimizer optimizer_;
  RowPush staged_;
  bool has_staged_ = false;
  RowPush buffer_;                // sum of the buffered pushes' rows (sorted ids)
  RowPush merged_;                // scratch
  std::vector<int64_t> version_;  // per row: updates that moved it
  // Per worker: the ids of its last pull (sorted) and their versions then.
  struct Pulled {
    std::vector<int64_t> ids, versions;
  };
  std::vector<Pulled> pulled_;
  RowStats stats_;
};

}  // namespace hsgd
