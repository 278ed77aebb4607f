// Row-sparse push and pull in the runtimes (model.sparse = true; issue 16).
// The server side is server/sparse.h (RowTable attached to a Server over
// the dense prefix); this is the glue the runtimes share: which span the
// Server gets, the table, and the worker's step (pull the dense part and
// the rows of its next batch, compute the row-sparse gradient, push the
// dense gradient and the rows).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hsgd/data/dataset.h"
#include "hsgd/model/model.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/server/server.h"
#include "hsgd/server/sparse.h"

namespace hsgd {

// A zeroed float buffer from calloc, for a worker's parameter and gradient
// buffers. Buffers as large as dlrm's tables (above malloc's mmap
// threshold) are then backed by the kernel's zero pages, so a row-sparse
// worker faults in only the pages of the rows its batches read, where
// std::vector<float>(n) writes every page first (measured: ~1.2 s of a
// 2-worker threads run's training clock at 8 x 100k x 16; BENCHMARKS.md).
class ZeroedFloats {
 public:
  explicit ZeroedFloats(size_t n);
  ~ZeroedFloats();
  ZeroedFloats(const ZeroedFloats&) = delete;
  ZeroedFloats& operator=(const ZeroedFloats&) = delete;
  std::span<float> span() const { return {p_, n_}; }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

// The model's row layout when the job runs row-sparse (model.sparse and a
// model with rows), else a layout with rows = 0. Builds one model.
RowLayout sparse_layout(const Job& job);

// The span the Server is built over: the dense prefix of `params` when
// `layout` has rows, else all of it.
std::span<float> server_span(const RowLayout& layout, std::vector<float>& params);

// The table over the rows of `params`, attached to `server` (null when
// `layout` has no rows). The table must outlive the server's use of it.
std::unique_ptr<RowTable> attach_rows(const Job& job, const RowLayout& layout,
                                      std::vector<float>& params, Server& server);

// The run's row-sparse figures for RunResult::sparse (threads and sim: one
// table on one server).
SparseResult sparse_result(const RowLayout& layout, const RowTable& table, int64_t num_params);

// Per-push traffic of a row-sparse step, for the cost model and the figures.
struct SparseTraffic {
  int64_t pull_bytes = 0;  // dense part + ids + rows
  int64_t push_bytes = 0;  // dense gradient + ids + row gradients
  int64_t rows = 0;        // unique rows of the batch
};

// The worker side. Owns the batch and the row scratch; borrows the model
// and the worker's parameter/gradient buffers (which the model is bound to).
// Not thread-safe: one per worker.
class SparseWorker {
 public:
  SparseWorker(Model& model, const RowLayout& layout, std::span<float> params,
               std::span<float> grads);
  // Draws the next batch and lists its rows, unless a batch drawn before is
  // still waiting for its gradient (a pull that waited under SSP).
  void prepare(ShardSampler& sampler, int64_t batch_size);
  // Copies the server's dense part and the batch's rows into worker
  // `worker`'s parameters (the table records the rows' versions for the
  // per-row staleness). Call under the server's serialisation.
  void pull(int worker, const Server& server, RowTable& table);
  // The row-sparse gradient of the batch; returns the loss, *samples = the
  // batch size.
  double compute(int64_t* samples);
  // Stages the batch's rows into the table (moving them out of this
  // worker); returns the loss to push (NaN when a row gradient is not
  // finite, so the server drops the push). Call under the server's
  // serialisation, right before Server::on_push with dense_grads().
  double stage(RowTable& table, double loss);
  // Moves the batch's rows and their gradients (after compute()) into *out,
  // for a push applied later (the simulator).
  void take_rows(RowPush* out);
  std::span<const float> dense_grads() const {
    return grads_.first(static_cast<size_t>(layout_.dense));
  }
  const SparseTraffic& traffic() const { return traffic_; }

 private:
  Model& model_;
  RowLayout layout_;
  std::span<float> params_, grads_;
  Batch batch_;
  bool pending_ = false;
  std::vector<int64_t> rows_;
  std::vector<float> row_buf_;  // pulled rows, then row gradients
  SparseTraffic traffic_;
  SamplerCost* cost_ = nullptr;  // the sampler's: sampling and gradient time
};

}  // namespace hsgd
