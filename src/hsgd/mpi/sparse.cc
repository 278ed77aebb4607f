#include "hsgd/mpi/sparse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "hsgd/core/error.h"
#include "hsgd/core/memory.h"
#include "hsgd/core/simd.h"
#include "hsgd/mpi/transport.h"
#include "hsgd/runtime/row.h"

namespace hsgd::mpi {
namespace {

// A row message to rank s: int64 n_push, int64 n_pull, n_push int64 local
// ids, n_push x dim floats, n_pull int64 local ids. Its largest size: at
// most batch x fields rows (and at most the rank's rows) each way.
size_t message_capacity(const RowLayout& layout, const RowPartition& part, int s, int64_t batch) {
  const auto fields = static_cast<int64_t>(layout.table_offset.size());
  const int64_t r = std::min(batch * fields, part.rows_of(s));
  const size_t cap = 16 + static_cast<size_t>(r) * (8 + 4 * static_cast<size_t>(layout.dim) + 8);
  if (cap > static_cast<size_t>(INT_MAX)) {
    throw InputError(fmt::format(
        "model.sparse = true: a row message of up to {} bytes is larger than one MPI message "
        "(2 GiB); lower train.batch or raise train.servers",
        cap));
  }
  return cap;
}

int as_int(size_t n) {
  HSGD_ASSERT(n <= static_cast<size_t>(INT_MAX), "an MPI message over 2^31 elements");
  return static_cast<int>(n);
}

}  // namespace

void parse_row_message(std::span<const char> msg, int64_t dim, int64_t rows, RowPush* push,
                       std::vector<int64_t>* pull, const std::string& from) {
  const auto bad = [&](const std::string& why) {
    return MpiError(
        fmt::format("{}: a malformed row message ({} bytes): {}", from, msg.size(), why));
  };
  if (msg.size() < 16) throw bad("shorter than its two counts");
  int64_t n_push = 0, n_pull = 0;
  std::memcpy(&n_push, msg.data(), 8);
  std::memcpy(&n_pull, msg.data() + 8, 8);
  const size_t body = msg.size() - 16;
  const auto row_bytes = 8 + 4 * static_cast<size_t>(dim);
  // Bounded first, so that the size below cannot overflow.
  if (n_push < 0 || n_pull < 0 || static_cast<uint64_t>(n_push) > body / row_bytes ||
      static_cast<uint64_t>(n_pull) > body / 8) {
    throw bad(fmt::format("{} pushed and {} pulled rows do not fit", n_push, n_pull));
  }
  const size_t np = static_cast<size_t>(n_push), nq = static_cast<size_t>(n_pull);
  if (np * row_bytes + nq * 8 != body) {
    throw bad(fmt::format("{} pushed and {} pulled rows of width {} need {} bytes", n_push, n_pull,
                          dim, 16 + np * row_bytes + nq * 8));
  }
  const char* p = msg.data() + 16;
  push->ids.resize(np);
  push->values.resize(np * static_cast<size_t>(dim));
  std::memcpy(push->ids.data(), p, np * 8);
  p += np * 8;
  std::memcpy(push->values.data(), p, push->values.size() * 4);
  p += push->values.size() * 4;
  pull->resize(nq);
  std::memcpy(pull->data(), p, nq * 8);
  for (size_t k = 0; k < np; ++k) {
    const int64_t id = push->ids[k];
    if (id < 0 || id >= rows) throw bad(fmt::format("pushed row {} not in [0, {})", id, rows));
    if (k > 0 && id <= push->ids[k - 1]) throw bad("pushed rows not sorted and unique");
  }
  for (const int64_t id : *pull) {
    if (id < 0 || id >= rows) throw bad(fmt::format("pulled row {} not in [0, {})", id, rows));
  }
}

SparseShard::SparseShard(const Job& job, const RowLayout& layout, const RowLink& link, int shard,
                         Server& server)
    : layout_(layout),
      link_(link),
      shard_(shard),
      part_{link.servers, layout.rows},
      capacity_(message_capacity(layout, part_, shard, link.batch)) {
  const Config& c = *job.config;
  const auto d = static_cast<size_t>(layout.dim);
  const int64_t mine = part_.rows_of(shard);
  // Only this rank's rows, each from its own stream (Model::init_row): the
  // same values as the whole-vector initialisation of threads and sim.
  rows_.resize(static_cast<size_t>(mine) * d);
  {
    const std::unique_ptr<Model> model = job.make_model();
    for (int64_t k = 0; k < mine; ++k) {
      model->init_row(c.train.seed, part_.global(shard, k),
                      std::span<float>(rows_).subspan(static_cast<size_t>(k) * d, d));
    }
  }
  // The rows the evaluation reads: those of the first train.eval_samples
  // test samples (the same on every rank), by owner.
  eval_rows_.resize(static_cast<size_t>(link.servers));
  {
    const Dataset& t = *job.test;
    const int64_t n =
        c.train.eval_samples > 0 ? std::min(c.train.eval_samples, t.size()) : t.size();
    const auto nf = static_cast<size_t>(t.num_categorical());
    std::vector<int64_t> all;
    all.reserve(static_cast<size_t>(n) * nf);
    for (size_t k = 0; k < static_cast<size_t>(n) * nf; ++k) {
      all.push_back(layout.table_offset[k % nf] + t.categorical[k]);
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    for (int64_t r : all) {
      if (r >= 0 && r < layout.rows) eval_rows_[static_cast<size_t>(part_.owner(r))].push_back(r);
    }
  }
  table_ = std::make_unique<RowTable>(rows_, layout.dim, server_optimizer(c), c.policy.aggregation,
                                      c.staleness);
  server.set_hook(table_.get());
  const auto nw = static_cast<size_t>(link.workers);
  recv_buf_.assign(nw, std::vector<char>(capacity_));
  recv_.assign(nw, MPI_REQUEST_NULL);
  push_.resize(nw);
  pull_.resize(nw);
  send_buf_.resize(nw);
  send_.assign(nw, MPI_REQUEST_NULL);
  for (int w = 0; w < link.workers; ++w) {
    const auto i = static_cast<size_t>(w);
    check(MPI_Recv_init(recv_buf_[i].data(), as_int(capacity_), MPI_BYTE, link.worker_rank(w),
                        kTagRows, link.comm, &recv_[i]),
          "MPI_Recv_init");
    check(MPI_Start(&recv_[i]), "MPI_Start");
  }
}

SparseShard::~SparseShard() {
  for (MPI_Request& r : recv_) cancel_and_free(&r);
  for (MPI_Request& r : send_) free_request(&r);
}

void SparseShard::take(int w) {
  const auto i = static_cast<size_t>(w);
  const auto deadline_what = [&] {
    return fmt::format("waiting for the row message of {} on server shard {}",
                       worker_name(w, link_.servers), shard_);
  };
  const size_t n = wait_count(&recv_[i], link_.timeout, deadline_what);
  parse_row_message(std::span<const char>(recv_buf_[i].data(), n), layout_.dim,
                    part_.rows_of(shard_), &push_[i], &pull_[i],
                    fmt::format("server shard {}, from {}", shard_, worker_name(w, link_.servers)));
  check(MPI_Start(&recv_[i]), "MPI_Start");
}

double SparseShard::stage(int w, double loss) {
  RowPush p = std::move(push_[static_cast<size_t>(w)]);
  push_[static_cast<size_t>(w)] = RowPush{};
  return table_->stage(std::move(p)) ? loss : std::nan("");
}

void SparseShard::send_rows(int w) {
  const auto i = static_cast<size_t>(w);
  wait_one(&send_[i], link_.timeout, [&] {
    return fmt::format("sending shard {}'s rows to {}", shard_, worker_name(w, link_.servers));
  });
  std::vector<float>& buf = send_buf_[i];
  buf.resize(pull_[i].size() * static_cast<size_t>(layout_.dim));
  table_->pull(w, pull_[i], buf);
  check(MPI_Isend(buf.data(), as_int(buf.size()), MPI_FLOAT, link_.worker_rank(w), kTagRowValues,
                  link_.comm, &send_[i]),
        "MPI_Isend");
}

void SparseShard::pack(std::vector<float>* out) const {
  const auto d = static_cast<size_t>(layout_.dim);
  const std::vector<int64_t>& ids = eval_rows_[static_cast<size_t>(shard_)];
  out->resize(ids.size() * d);
  for (size_t j = 0; j < ids.size(); ++j) {
    std::copy_n(rows_.data() + static_cast<size_t>(part_.local(ids[j])) * d, d,
                out->data() + j * d);
  }
}

void SparseShard::send_gather() {
  Head h;
  h.rows = table_->rows();
  h.state_bytes = table_->state_bytes();
  h.stats = table_->stats();
  std::vector<float> buf;
  pack(&buf);
  h.sent = static_cast<int64_t>(buf.size()) / layout_.dim;
  h.peak_rss = peak_rss_bytes();
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  check(MPI_Isend(&h, sizeof(Head), MPI_BYTE, 0, kTagRowGather, link_.comm, &r[0]), "MPI_Isend");
  check(MPI_Isend(buf.data(), as_int(buf.size()), MPI_FLOAT, 0, kTagRowGather, link_.comm, &r[1]),
        "MPI_Isend");
  wait_all(r, link_.timeout,
           [&] { return fmt::format("sending shard {}'s rows to rank 0", shard_); });
}

void SparseShard::gather(std::span<float> params) {
  const auto d = static_cast<size_t>(layout_.dim);
  // Rank s's evaluation rows, in eval_rows_[s] order, into `params`.
  const auto scatter = [&](int s, const float* rows) {
    const std::vector<int64_t>& ids = eval_rows_[static_cast<size_t>(s)];
    for (size_t j = 0; j < ids.size(); ++j) {
      std::copy_n(rows + j * d, d, params.data() + layout_.dense + ids[j] * layout_.dim);
    }
  };
  const auto expected = [&](int s) {
    return static_cast<int64_t>(eval_rows_[static_cast<size_t>(s)].size());
  };
  SparseResult g;
  g.on = true;
  g.dense = layout_.dense;
  g.dim = layout_.dim;
  g.num_params = layout_.dense + layout_.rows * layout_.dim;
  g.stats = table_->stats();
  g.server_rows = {table_->rows()};
  g.server_state_bytes = {table_->state_bytes()};
  std::vector<float> buf;
  pack(&buf);
  g.server_peak_rss_bytes = {peak_rss_bytes()};
  scatter(0, buf.data());
  int64_t sent = expected(0);
  for (int s = 1; s < link_.servers; ++s) {
    Head h;
    buf.resize(static_cast<size_t>(expected(s)) * d);
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    check(MPI_Irecv(&h, sizeof(Head), MPI_BYTE, s, kTagRowGather, link_.comm, &r[0]), "MPI_Irecv");
    check(MPI_Irecv(buf.data(), as_int(buf.size()), MPI_FLOAT, s, kTagRowGather, link_.comm, &r[1]),
          "MPI_Irecv");
    wait_all(r, link_.timeout, [&] {
      return fmt::format("on server shard 0 gathering shard {}'s rows for evaluation", s);
    });
    if (h.rows != part_.rows_of(s) || h.sent != expected(s)) {
      throw MpiError(fmt::format("server shard {} holds {} rows and sent {}, expected {} and {}", s,
                                 h.rows, h.sent, part_.rows_of(s), expected(s)));
    }
    scatter(s, buf.data());
    sent += expected(s);
    g.stats.merge(h.stats);
    g.server_rows.push_back(h.rows);
    g.server_state_bytes.push_back(h.state_bytes);
    g.server_peak_rss_bytes.push_back(h.peak_rss);
  }
  g.eval_rows = sent;
  gathered_ = std::move(g);
}

namespace {
// Local rows per rank in a chunk of the final rows: about 2^20 floats on
// rank 0 per chunk.
int64_t chunk_rows(const RowLayout& layout, int servers) {
  return std::max<int64_t>(1, (int64_t{1} << 20) / (layout.dim * servers));
}
}  // namespace

void SparseShard::send_chunks() {
  const int64_t L = chunk_rows(layout_, link_.servers);
  const int64_t mine = part_.rows_of(shard_);
  const auto d = static_cast<size_t>(layout_.dim);
  for (int64_t begin = 0; begin < mine; begin += L) {
    const int64_t n = std::min(L, mine - begin);
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Isend(rows_.data() + static_cast<size_t>(begin) * d,
                    as_int(static_cast<size_t>(n) * d), MPI_FLOAT, 0, kTagRowChunk, link_.comm, &r),
          "MPI_Isend");
    wait_one(&r, link_.timeout,
             [&] { return fmt::format("sending shard {}'s final rows to rank 0", shard_); });
  }
}

void SparseShard::write_chunks(const std::string& path) {
  const int S = link_.servers;
  const int64_t L = chunk_rows(layout_, S);
  const auto d = static_cast<size_t>(layout_.dim);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw InputError(path + ": cannot create: " + std::strerror(errno));
  struct Close {
    std::FILE* f;
    ~Close() { std::fclose(f); }
  } close{f};
  std::vector<std::vector<float>> got(static_cast<size_t>(S));
  std::vector<float> out;
  std::vector<MPI_Request> reqs(static_cast<size_t>(S), MPI_REQUEST_NULL);
  for (int64_t begin = 0; begin < part_.rows_of(0); begin += L) {
    // This chunk's global rows: [begin S, min((begin + L) S, rows)).
    const int64_t g0 = begin * S, g1 = std::min((begin + L) * S, layout_.rows);
    for (int s = 0; s < S; ++s) {
      const int64_t n = std::max<int64_t>(0, std::min(begin + L, part_.rows_of(s)) - begin);
      auto& buf = got[static_cast<size_t>(s)];
      buf.resize(static_cast<size_t>(n) * d);
      if (s == 0) {
        std::copy_n(rows_.data() + static_cast<size_t>(begin) * d, buf.size(), buf.data());
      } else if (n > 0) {
        check(MPI_Irecv(buf.data(), as_int(buf.size()), MPI_FLOAT, s, kTagRowChunk, link_.comm,
                        &reqs[static_cast<size_t>(s)]),
              "MPI_Irecv");
      }
    }
    wait_all(reqs, link_.timeout,
             [&] { return std::string("on server shard 0 gathering the final rows"); });
    out.resize(static_cast<size_t>(g1 - g0) * d);
    for (int64_t g = g0; g < g1; ++g) {
      const auto& buf = got[static_cast<size_t>(part_.owner(g))];
      std::copy_n(buf.data() + static_cast<size_t>(part_.local(g) - begin) * d, d,
                  out.data() + static_cast<size_t>(g - g0) * d);
    }
    if (std::fwrite(out.data(), sizeof(float), out.size(), f) != out.size()) {
      throw InputError(path + ": write failed");
    }
  }
  if (!gathered_.server_peak_rss_bytes.empty())
    gathered_.server_peak_rss_bytes[0] = peak_rss_bytes();
}

SparseWorkerLink::SparseWorkerLink(Model& model, const RowLayout& layout, const RowLink& link,
                                   int id, std::span<float> params)
    : model_(model),
      layout_(layout),
      link_(link),
      id_(id),
      part_{link.servers, layout.rows},
      params_(params) {
  const auto S = static_cast<size_t>(link.servers);
  msg_.resize(S);
  where_.resize(S);
  values_.resize(S);
  send_.assign(S, MPI_REQUEST_NULL);
  recv_.assign(S, MPI_REQUEST_NULL);
  for (int s = 0; s < link.servers; ++s) {
    msg_[static_cast<size_t>(s)].reserve(message_capacity(layout, part_, s, link.batch));
  }
}

SparseWorkerLink::~SparseWorkerLink() {
  for (MPI_Request& r : send_) free_request(&r);
  for (MPI_Request& r : recv_) cancel_and_free(&r);
}

void SparseWorkerLink::prepare(ShardSampler& sampler, int64_t batch_size) {
  if (has_next_) return;
  before_ = sampler.state();
  sampler.next(batch_size, &next_);
  model_.batch_rows(next_, &next_rows_);
  has_next_ = true;
}

double SparseWorkerLink::compute(int64_t* samples) {
  *samples = cur_.size();
  cur_grads_.resize(cur_rows_.size() * static_cast<size_t>(layout_.dim));
  const double loss = model_.sparse_gradient(cur_, cur_rows_, cur_grads_, {});
  return all_finite(cur_grads_) ? loss : std::nan("");
}

void SparseWorkerLink::start(bool push) {
  HSGD_ASSERT(has_next_, "SparseWorkerLink::start before prepare");
  const auto S = static_cast<size_t>(link_.servers);
  const auto d = static_cast<size_t>(layout_.dim);
  // Which rank serves which of the next batch's rows, and which of the
  // pushed rows each rank owns (both lists stay sorted per rank).
  std::vector<std::vector<size_t>> pushed(S);
  for (auto& w : where_) w.clear();
  for (size_t k = 0; k < next_rows_.size(); ++k) {
    where_[static_cast<size_t>(part_.owner(next_rows_[k]))].push_back(k);
  }
  if (push) {
    for (size_t k = 0; k < cur_rows_.size(); ++k) {
      pushed[static_cast<size_t>(part_.owner(cur_rows_[k]))].push_back(k);
    }
  }
  for (size_t s = 0; s < S; ++s) {
    // The pulled rows first (their receive must be posted before the
    // request can be answered).
    values_[s].resize(where_[s].size() * d);
    check(MPI_Irecv(values_[s].data(), as_int(values_[s].size()), MPI_FLOAT, static_cast<int>(s),
                    kTagRowValues, link_.comm, &recv_[s]),
          "MPI_Irecv");
    std::vector<char>& m = msg_[s];
    const auto n_push = static_cast<int64_t>(pushed[s].size());
    const auto n_pull = static_cast<int64_t>(where_[s].size());
    m.resize(16 + pushed[s].size() * (8 + 4 * d) + where_[s].size() * 8);
    char* p = m.data();
    std::memcpy(p, &n_push, 8);
    std::memcpy(p + 8, &n_pull, 8);
    p += 16;
    for (size_t k : pushed[s]) {
      const int64_t local = part_.local(cur_rows_[k]);
      std::memcpy(p, &local, 8);
      p += 8;
    }
    for (size_t k : pushed[s]) {
      std::memcpy(p, cur_grads_.data() + k * d, 4 * d);
      p += 4 * d;
    }
    for (size_t k : where_[s]) {
      const int64_t local = part_.local(next_rows_[k]);
      std::memcpy(p, &local, 8);
      p += 8;
    }
    check(MPI_Isend(m.data(), as_int(m.size()), MPI_BYTE, static_cast<int>(s), kTagRows, link_.comm,
                    &send_[s]),
          "MPI_Isend");
  }
}

void SparseWorkerLink::finish(bool go) {
  const auto d = static_cast<size_t>(layout_.dim);
  if (!go) {
    for (MPI_Request& r : recv_) cancel_and_free(&r);
    return;
  }
  wait_all(recv_, link_.timeout, [&] {
    return fmt::format("on {} waiting for its rows", worker_name(id_, link_.servers));
  });
  for (size_t s = 0; s < where_.size(); ++s) {
    for (size_t j = 0; j < where_[s].size(); ++j) {
      const int64_t r = next_rows_[where_[s][j]];
      std::copy_n(values_[s].data() + j * d, d,
                  params_.data() + layout_.dense + static_cast<size_t>(r) * d);
    }
  }
  std::swap(cur_, next_);
  std::swap(cur_rows_, next_rows_);
  has_next_ = false;
}

void SparseWorkerLink::settle() {
  wait_all(send_, link_.timeout, [&] {
    return fmt::format("on {} sending its rows to the server shards",
                       worker_name(id_, link_.servers));
  });
}

}  // namespace hsgd::mpi
