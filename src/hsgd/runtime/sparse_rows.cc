#include "hsgd/runtime/sparse_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>

#include "hsgd/core/error.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/row.h"

namespace hsgd {

ZeroedFloats::ZeroedFloats(size_t n) : n_(n) {
  p_ = static_cast<float*>(std::calloc(n == 0 ? 1 : n, sizeof(float)));
  if (p_ == nullptr) throw std::bad_alloc();
}

ZeroedFloats::~ZeroedFloats() { std::free(p_); }

RowLayout sparse_layout(const Job& job) {
  if (!job.config->model.sparse) {
    RowLayout l;
    l.dense = static_cast<int64_t>(job.initial_params.size());
    return l;
  }
  RowLayout l = job.make_model()->row_layout();
  if (l.rows == 0) {
    throw InputError("model.sparse = true: the model " + job.config->model.name +
                     " has no embedding rows (row-sparse push/pull is for --model dlrm)");
  }
  return l;
}

std::span<float> server_span(const RowLayout& layout, std::vector<float>& params) {
  if (layout.rows == 0) return params;
  return std::span<float>(params).first(static_cast<size_t>(layout.dense));
}

std::unique_ptr<RowTable> attach_rows(const Job& job, const RowLayout& layout,
                                      std::vector<float>& params, Server& server) {
  if (layout.rows == 0) return nullptr;
  const Config& c = *job.config;
  auto table = std::make_unique<RowTable>(
      std::span<float>(params).subspan(static_cast<size_t>(layout.dense)), layout.dim,
      server_optimizer(c), c.policy.aggregation, c.staleness);
  server.set_hook(table.get());
  return table;
}

SparseResult sparse_result(const RowLayout& layout, const RowTable& table, int64_t num_params) {
  SparseResult r;
  r.on = true;
  r.dense = layout.dense;
  r.dim = layout.dim;
  r.num_params = num_params;
  r.stats = table.stats();
  r.server_rows = {table.rows()};
  r.server_state_bytes = {table.state_bytes()};
  return r;
}

SparseWorker::SparseWorker(Model& model, const RowLayout& layout, std::span<float> params,
                           std::span<float> grads)
    : model_(model), layout_(layout), params_(params), grads_(grads) {}

void SparseWorker::prepare(ShardSampler& sampler, int64_t batch_size) {
  if (pending_) return;
  const auto t0 = SteadyClock::now();
  sampler.next(batch_size, &batch_);
  model_.batch_rows(batch_, &rows_);
  row_buf_.resize(rows_.size() * static_cast<size_t>(layout_.dim));
  pending_ = true;
  cost_ = &sampler.cost;  // summary.json "sampling": the batch and its rows, then the gradient
  cost_->sampling_s += since(t0);
  cost_->batches += 1;
}

void SparseWorker::pull(int worker, const Server& server, RowTable& table) {
  const std::span<const float> dense = server.params();
  std::copy(dense.begin(), dense.end(), params_.begin());
  table.pull(worker, rows_, row_buf_);
  const auto d = static_cast<size_t>(layout_.dim);
  float* base = params_.data() + layout_.dense;
  for (size_t k = 0; k < rows_.size(); ++k) {
    std::copy_n(row_buf_.data() + k * d, d, base + static_cast<size_t>(rows_[k]) * d);
  }
  const auto id_bytes = static_cast<int64_t>(rows_.size() * sizeof(int64_t));
  const auto row_bytes = static_cast<int64_t>(row_buf_.size() * sizeof(float));
  traffic_.rows = static_cast<int64_t>(rows_.size());
  traffic_.pull_bytes = layout_.dense * 4 + id_bytes + row_bytes;
  traffic_.push_bytes = layout_.dense * 4 + id_bytes + row_bytes;
}

double SparseWorker::compute(int64_t* samples) {
  HSGD_ASSERT(pending_, "SparseWorker::compute before prepare");
  pending_ = false;
  *samples = batch_.size();
  const auto t0 = SteadyClock::now();
  const double loss = model_.sparse_gradient(batch_, rows_, row_buf_, {});
  if (cost_) cost_->gradient_s += since(t0);
  return loss;
}

void SparseWorker::take_rows(RowPush* out) {
  out->ids = rows_;
  out->values = row_buf_;
}

double SparseWorker::stage(RowTable& table, double loss) {
  RowPush p;  // moved, not copied: this runs under the server's lock; prepare() refills them
  p.ids = std::move(rows_);
  p.values = std::move(row_buf_);
  rows_.clear();
  row_buf_.clear();
  return table.stage(std::move(p)) ? loss : std::nan("");
}

}  // namespace hsgd
