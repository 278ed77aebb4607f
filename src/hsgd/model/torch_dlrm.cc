#include "hsgd/model/torch_dlrm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/data/ctr.h"
#include "hsgd/model/torch_model.h"

namespace hsgd {
namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr uint64_t kDlrmRowStream = 0x646c726d;  // "dlrm"

nn::Sequential mlp(int64_t in, const std::vector<int64_t>& hidden, int64_t out, bool relu_last) {
  nn::Sequential seq;
  for (int64_t w : hidden) {
    seq->push_back(nn::Linear(in, w));
    seq->push_back(nn::ReLU());
    in = w;
  }
  seq->push_back(nn::Linear(in, out));
  if (relu_last) seq->push_back(nn::ReLU());
  return seq;
}

struct Net {
  std::shared_ptr<nn::Module> root;
  nn::Sequential bottom{nullptr}, top{nullptr};
};

class DlrmModel final : public Model {
 public:
  explicit DlrmModel(const ModelSpec& s) : spec_(s) {
    const auto& shape = s.sample_shape;
    if (shape.size() != 1 || shape[0] < 1) {
      throw InputError(
          "--model dlrm: expects dense features of shape {d} with d >= 1, the data "
          "has " +
          shape_string(shape));
    }
    if (s.table_rows.empty()) {
      throw InputError(
          "--model dlrm: needs categorical features (--data synthetic-ctr or "
          "criteo:FILE); the data has none");
    }
    if (s.num_classes != 2) {
      throw InputError("--model dlrm: needs binary labels (2 classes), the data has " +
                       std::to_string(s.num_classes));
    }
    if (s.embedding_dim < 1) throw InputError("--model dlrm: model.embedding_dim must be >= 1");
    for (int64_t w : s.hidden) {
      if (w < 1) throw InputError("--model dlrm: model.hidden widths must be >= 1");
    }
    for (int64_t w : s.top_hidden) {
      if (w < 1) throw InputError("--model dlrm: model.top_hidden widths must be >= 1");
    }
    nd_ = shape[0];
    nf_ = static_cast<int64_t>(s.table_rows.size());
    dim_ = s.embedding_dim;
    const int64_t m = nf_ + 1;
    pairs_ = m * (m - 1) / 2;
    auto tri = torch::triu_indices(m, m, 1);
    li_ = tri[0].contiguous();
    lj_ = tri[1].contiguous();
    {
      std::lock_guard<std::mutex> lock(torch_global_rng_mutex());
      net_ = build();
    }
    params_ = net_.root->parameters();
    for (const auto& p : params_) layout_.dense += p.numel();
    layout_.dim = dim_;
    for (int64_t r : s.table_rows) {
      if (r < 1) throw InputError("--model dlrm: table rows must be >= 1");
      layout_.table_offset.push_back(layout_.rows);
      layout_.rows += r;
    }
    num_params_ = layout_.dense + layout_.rows * dim_;
  }

  int64_t num_params() const override { return num_params_; }
  RowLayout row_layout() const override { return layout_; }

  void bind(std::span<float> params, std::span<float> grads) override {
    HSGD_ASSERT(static_cast<int64_t>(params.size()) == num_params_, "params size != num_params");
    HSGD_ASSERT(static_cast<int64_t>(grads.size()) == num_params_, "grads size != num_params");
    flat_ = params;
    grads_ = grads;
    const auto d = static_cast<size_t>(layout_.dense);
    bind_views(params_, params.first(d), grads.first(d));
  }

  void init_params(uint64_t seed) override {
    init_dense(seed);
    const auto d = static_cast<size_t>(dim_);
    for (int64_t r = 0; r < layout_.rows; ++r) {
      init_row(seed, r,
               flat_.subspan(static_cast<size_t>(layout_.dense) + static_cast<size_t>(r) * d, d));
    }
  }

  void init_dense(uint64_t seed) override {
    HSGD_ASSERT(!flat_.empty(), "init_params before bind");
    Net fresh;
    {
      std::lock_guard<std::mutex> lock(torch_global_rng_mutex());
      torch::manual_seed(seed);
      fresh = build();
    }
    torch::NoGradGuard no_grad;
    const auto fp = fresh.root->parameters();
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(fp[i]);
  }

  // Row r: dim uniforms in +-1/sqrt(rows of its table) from its own stream
  // Rng(Rng(seed, kDlrmRowStream).next_u64(), r), so any rank can produce
  // any row without the others.
  void init_row(uint64_t seed, int64_t row, std::span<float> out) const override {
    HSGD_ASSERT(row >= 0 && row < layout_.rows, "init_row: row outside the tables");
    HSGD_ASSERT(static_cast<int64_t>(out.size()) == dim_, "init_row: out must hold dim floats");
    const auto it = std::upper_bound(layout_.table_offset.begin(), layout_.table_offset.end(), row);
    const auto j = static_cast<size_t>(it - layout_.table_offset.begin() - 1);
    const double bound = 1.0 / std::sqrt(static_cast<double>(spec_.table_rows[j]));
    Rng rng(Rng(seed, kDlrmRowStream).next_u64(), static_cast<uint64_t>(row));
    for (float& v : out) v = static_cast<float>((2 * rng.uniform() - 1) * bound);
  }

  void batch_rows(const Batch& batch, std::vector<int64_t>* rows) const override {
    check_batch(batch);
    rows->resize(batch.categorical.size());
    for (size_t k = 0; k < batch.categorical.size(); ++k) {
      (*rows)[k] = layout_.table_offset[k % static_cast<size_t>(nf_)] + batch.categorical[k];
    }
    std::sort(rows->begin(), rows->end());
    rows->erase(std::unique(rows->begin(), rows->end()), rows->end());
  }

  double gradient(const Batch& batch, std::span<float> losses) override {
    HSGD_ASSERT(!flat_.empty(), "gradient before bind");
    check_batch(batch);
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    torch::Tensor emb_grad;
    const double loss = forward_backward(batch, losses, &emb_grad);
    if (!emb_grad.defined()) return loss;
    const float* g = emb_grad.data_ptr<float>();
    for (size_t k = 0; k < batch.categorical.size(); ++k) {
      float* dst = row_ptr(grads_, global_row(k, batch));
      const float* src = g + k * static_cast<size_t>(dim_);
      for (int64_t c = 0; c < dim_; ++c) dst[c] += src[c];
    }
    return loss;
  }

  double sparse_gradient(const Batch& batch, std::span<const int64_t> rows,
                         std::span<float> row_grads, std::span<float> losses) override {
    HSGD_ASSERT(!flat_.empty(), "gradient before bind");
    check_batch(batch);
    HSGD_ASSERT(static_cast<int64_t>(row_grads.size()) == static_cast<int64_t>(rows.size()) * dim_,
                "sparse_gradient: row_grads must hold rows.size() x dim floats");
    std::fill(grads_.begin(), grads_.begin() + layout_.dense, 0.0f);
    std::fill(row_grads.begin(), row_grads.end(), 0.0f);
    torch::Tensor emb_grad;
    const double loss = forward_backward(batch, losses, &emb_grad);
    if (!emb_grad.defined()) return loss;
    const float* g = emb_grad.data_ptr<float>();
    for (size_t k = 0; k < batch.categorical.size(); ++k) {
      const int64_t r = global_row(k, batch);
      const auto it = std::lower_bound(rows.begin(), rows.end(), r);
      HSGD_ASSERT(it != rows.end() && *it == r, "sparse_gradient: a batch row missing from rows");
      float* dst = row_grads.data() + (it - rows.begin()) * dim_;
      const float* src = g + k * static_cast<size_t>(dim_);
      for (int64_t c = 0; c < dim_; ++c) dst[c] += src[c];
    }
    return loss;
  }

  EvalResult evaluate(const Dataset& data) override {
    HSGD_ASSERT(!flat_.empty(), "evaluate before bind");
    if (data.sample_shape != spec_.sample_shape || data.categorical_rows != spec_.table_rows) {
      throw InputError(data.name + ": its features do not match the dlrm model's (dense " +
                       shape_string(spec_.sample_shape) + ", tables " +
                       shape_string(spec_.table_rows) + ")");
    }
    EvalResult r;
    const int64_t n = data.size();
    if (n == 0) return r;
    torch::NoGradGuard no_grad;
    std::vector<float> logits(static_cast<size_t>(n));
    double loss_sum = 0;
    int64_t correct = 0;
    Batch b;
    for (int64_t begin = 0; begin < n; begin += kEvalChunk) {
      const int64_t m = std::min(kEvalChunk, n - begin);
      b.features.assign(data.features.begin() + begin * nd_,
                        data.features.begin() + (begin + m) * nd_);
      b.labels.assign(data.labels.begin() + begin, data.labels.begin() + begin + m);
      b.categorical.assign(data.categorical.begin() + begin * nf_,
                           data.categorical.begin() + (begin + m) * nf_);
      check_batch(b);
      const torch::Tensor logit = forward(b, gather_rows(b));
      const torch::Tensor y = labels_tensor(b);
      loss_sum += F::binary_cross_entropy_with_logits(
                      logit, y, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum))
                      .item<double>();
      correct += logit.gt(0).to(torch::kFloat32).eq(y).sum().item<int64_t>();
      std::memcpy(logits.data() + begin, logit.contiguous().data_ptr<float>(),
                  static_cast<size_t>(m) * sizeof(float));
    }
    r.loss = loss_sum / static_cast<double>(n);
    r.log_loss = r.loss;
    r.accuracy = static_cast<double>(correct) / static_cast<double>(n);
    r.auc = binary_auc(logits.data(), data.labels.data(), n);
    return r;
  }

  static constexpr int64_t kEvalChunk = 2000;

 private:
  Net build() const {
    Net n;
    n.root = std::make_shared<nn::Module>();
    n.bottom = mlp(nd_, spec_.hidden, dim_, /*relu_last=*/true);
    n.top = mlp(dim_ + pairs_, spec_.top_hidden, 1, /*relu_last=*/false);
    n.root->register_module("bottom", n.bottom);
    n.root->register_module("top", n.top);
    return n;
  }

  float* row_ptr(std::span<float> flat, int64_t row) const {
    return flat.data() + layout_.dense + row * dim_;
  }
  int64_t global_row(size_t k, const Batch& b) const {
    return layout_.table_offset[k % static_cast<size_t>(nf_)] + b.categorical[k];
  }

  void check_batch(const Batch& b) const {
    const int64_t n = b.size();
    if (static_cast<int64_t>(b.features.size()) != n * nd_ ||
        static_cast<int64_t>(b.categorical.size()) != n * nf_) {
      throw InputError("batch: " + std::to_string(b.features.size()) + " dense values and " +
                       std::to_string(b.categorical.size()) + " ids for " + std::to_string(n) +
                       " samples, the dlrm model expects " + std::to_string(nd_) + " and " +
                       std::to_string(nf_) + " per sample");
    }
    for (int64_t i = 0; i < n; ++i) {
      if (b.labels[static_cast<size_t>(i)] != 0 && b.labels[static_cast<size_t>(i)] != 1) {
        throw InputError("batch: label " + std::to_string(b.labels[static_cast<size_t>(i)]) +
                         " is not 0 or 1");
      }
    }
    for (size_t k = 0; k < b.categorical.size(); ++k) {
      const int64_t rows = spec_.table_rows[k % static_cast<size_t>(nf_)];
      if (b.categorical[k] < 0 || b.categorical[k] >= rows) {
        throw InputError("batch: id " + std::to_string(b.categorical[k]) + " of field " +
                         std::to_string(k % static_cast<size_t>(nf_)) + " outside [0, " +
                         std::to_string(rows) + ")");
      }
    }
  }

  // The batch's rows as an {n, fields, dim} tensor (a copy).
  torch::Tensor gather_rows(const Batch& b) const {
    const int64_t n = b.size();
    torch::Tensor e = torch::empty({n, nf_, dim_}, torch::kFloat32);
    float* dst = e.data_ptr<float>();
    for (size_t k = 0; k < b.categorical.size(); ++k) {
      std::memcpy(dst + k * static_cast<size_t>(dim_), row_ptr(flat_, global_row(k, b)),
                  static_cast<size_t>(dim_) * sizeof(float));
    }
    return e;
  }

  torch::Tensor labels_tensor(const Batch& b) const {
    torch::Tensor y = torch::empty({b.size()}, torch::kFloat32);
    float* p = y.data_ptr<float>();
    for (int64_t i = 0; i < b.size(); ++i)
      p[i] = static_cast<float>(b.labels[static_cast<size_t>(i)]);
    return y;
  }

  // The logits {n} of a batch whose rows are `emb` {n, fields, dim}.
  torch::Tensor forward(const Batch& b, const torch::Tensor& emb) {
    const int64_t n = b.size();
    const torch::Tensor x =
        torch::from_blob(const_cast<float*>(b.features.data()), {n, nd_}, torch::kFloat32);
    const torch::Tensor z = net_.bottom->forward(x);                               // {n, dim}
    const torch::Tensor t = torch::cat({z.unsqueeze(1), emb}, 1);                  // {n, m, dim}
    const torch::Tensor dots = torch::bmm(t, t.transpose(1, 2));                   // {n, m, m}
    const torch::Tensor inter = dots.index({torch::indexing::Slice(), li_, lj_});  // {n, pairs}
    return net_.top->forward(torch::cat({z, inter}, 1)).squeeze(1);
  }

  double forward_backward(const Batch& b, std::span<float> losses, torch::Tensor* emb_grad) {
    const int64_t n = b.size();
    HSGD_ASSERT(b.weights.empty() || static_cast<int64_t>(b.weights.size()) == n,
                "batch: one weight per sample");
    HSGD_ASSERT(losses.empty() || static_cast<int64_t>(losses.size()) == n,
                "gradient: one loss slot per sample");
    if (n == 0) return 0.0;
    torch::Tensor emb = gather_rows(b).requires_grad_(true);
    const torch::Tensor logit = forward(b, emb);
    const torch::Tensor each = F::binary_cross_entropy_with_logits(
        logit, labels_tensor(b),
        F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
    if (!losses.empty()) {
      const torch::Tensor l = each.detach().contiguous();
      std::copy_n(l.data_ptr<float>(), n, losses.begin());
    }
    torch::Tensor loss;
    if (b.weights.empty()) {
      loss = each.mean();
    } else {
      const torch::Tensor w =
          torch::from_blob(const_cast<float*>(b.weights.data()), {n}, torch::kFloat32);
      loss = (each * w).mean();
    }
    loss.backward();
    *emb_grad = emb.grad().contiguous();
    return loss.item<double>();
  }

  ModelSpec spec_;
  int64_t nd_ = 0, nf_ = 0, dim_ = 0, pairs_ = 0;
  torch::Tensor li_, lj_;
  Net net_;
  std::vector<torch::Tensor> params_;
  RowLayout layout_;
  int64_t num_params_ = 0;
  std::span<float> flat_, grads_;
};

}  // namespace

std::unique_ptr<Model> make_dlrm_model(const ModelSpec& spec) {
  return std::make_unique<DlrmModel>(spec);
}

}  // namespace hsgd
