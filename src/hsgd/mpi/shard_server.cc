#include "hsgd/mpi/shard_server.h"

#include <fmt/format.h>

#include "hsgd/runtime/row.h"

namespace hsgd::mpi {
namespace {

std::vector<int> worker_ranks(const Layout& l) {
  std::vector<int> r;
  for (int w = 0; w < l.workers; ++w) r.push_back(l.worker_rank(w));
  return r;
}

// Shard `range`'s replica of the server state machine over `params`.
void make_server(const Job& job, const Layout& l, Shard range, std::span<float> params,
                 std::optional<Server>* server) {
  const Config& c = *job.config;
  server->emplace(params, server_options(job), server_policy(c, l.workers),
                  make_optimizer(server_optimizer(c), range.size));
}

// A shard's state as save() wrote it: the server's (with its rows, when a
// RowTable is attached), then the compression's.
void decode(StateReader& r, Server& server, ShardCompression* z) {
  server.load(r);
  if (z) z->load(r);
  r.expect_end();
}

}  // namespace

ShardServer::ShardServer(const Job& job, const Layout& l, int shard,
                         const std::vector<float>& initial)
    : l_(l),
      shard_(shard),
      range_(l.shards[static_cast<size_t>(shard)]),
      params_(
          std::vector<float>(initial.begin() + static_cast<ptrdiff_t>(range_.begin),
                             initial.begin() + static_cast<ptrdiff_t>(range_.begin + range_.size)),
          l.comm, worker_ranks(l), shard != 0 ? 0 : -1, l.timeout,
          fmt::format("server shard {}", shard), l.chunk),
      chunks_(chunks_of(range_.size, l.chunk)) {
  const Config& c = *job.config;
  noise_ = c.train.noise_scale;
  make_server(job, l, range_, params_.live(), &server_);
  // The step overlaps the sends only where it writes the plain slice alone.
  server_->set_deferred_updates(!c.compress.on() && l.rows.rows == 0);
  const auto nw = static_cast<size_t>(l.workers);
  grads_.assign(nw, std::vector<float>(range_.size));
  grad_recv_.assign(nw, {});
  if (c.compress.on()) {  // [compress] (issue 14): mpi/compressed.h
    z_ = std::make_unique<ShardCompression>(c.compress, job.make_model()->param_shapes(), range_,
                                            shard, l.servers, l.workers, c.train.seed,
                                            params_.live(), l.comm, l.timeout);
  }
  for (int w = 0; w < l.workers; ++w) {
    const auto i = static_cast<size_t>(w);
    if (z_ && z_->push_on()) {
      z_->init_push_recv(w, &grad_recv_[i].emplace_back(MPI_REQUEST_NULL));
    } else {
      for (const Chunk& ch : chunks_) {
        check(MPI_Recv_init(grads_[i].data() + ch.begin, as_count(ch.size), MPI_FLOAT,
                            l.worker_rank(w), kTagGradient, l_.comm,
                            &grad_recv_[i].emplace_back(MPI_REQUEST_NULL)),
              "MPI_Recv_init");
      }
    }
    start_receive(w);
  }
  if (l.rows.rows > 0) {  // model.sparse: this rank's rows (mpi/sparse.h)
    sparse_ =
        std::make_unique<SparseShard>(job, l.rows, l.row_link(c.train.batch), shard, *server_);
  }
}

ShardServer::~ShardServer() {
  for (std::vector<MPI_Request>& rs : grad_recv_) {
    for (MPI_Request& r : rs) cancel_and_free(&r);
  }
}

void ShardServer::start_receive(int w) {
  std::vector<MPI_Request>& rs = grad_recv_[static_cast<size_t>(w)];
  check(MPI_Startall(as_count(rs.size()), rs.data()), "MPI_Startall");
}

Decision ShardServer::push(int w, uint64_t version, int64_t batch, double loss, double seconds,
                           bool finite) {
  flush();
  take_gradient(w);
  writable(w);
  if (sparse_) loss = sparse_->stage(w, loss);  // its rows join with its dense part
  // A plain push was screened by its worker as it sent it (every shard
  // gets the same verdict); a compressed one is screened whole here.
  const std::span<const float> g = grads_[static_cast<size_t>(w)];
  Decision d = z_ && z_->push_on()
                   ? server_->on_push(w, version, g, batch, loss, seconds)
                   : server_->on_screened_push(w, version, g, batch, loss, seconds, finite);
  // The step may still read this gradient (an update of one push).
  if (stepping()) {
    receives_due_.push_back(w);
  } else {
    start_receive(w);
  }
  return d;
}

void ShardServer::discard(int w) {
  flush();
  take_gradient(w);
}

Decision ShardServer::leave(int w, double seconds) {
  flush();
  writable();
  return server_->on_leave(w, seconds);
}

void ShardServer::send_params(int w) {
  if (z_ && z_->pull_on()) {  // [compress]: the compressed difference, from its own buffer
    flush();
    z_->send_pull(w, params_.live(), server_->version());
    return;
  }
  if (stepping()) {  // chunk by chunk as the step finishes them
    params_.begin_send(w);
    queued_.push_back({w, 0});
    send_finished_chunks();
    return;
  }
  release_waiting();
  params_.send(w);
  if (sparse_) sparse_->send_rows(w);
}

void ShardServer::send_finished_chunks() {
  const size_t done = server_->update_done();
  for (Queued& q : queued_) {
    for (; q.next < chunks_.size() && chunks_[q.next].begin + chunks_[q.next].size <= done;
         ++q.next) {
      params_.send_chunk(q.worker, q.next);
    }
  }
}

void ShardServer::release_waiting() {
  if (queued_.empty() && receives_due_.empty()) return;
  send_finished_chunks();
  queued_.clear();
  for (int w : receives_due_) start_receive(w);
  receives_due_.clear();
}

bool ShardServer::advance() {
  if (!stepping()) {
    // The server may have finished the step itself (an event that reads the
    // parameters, e.g. a pull DC-ASGD copies): what waited for it goes now.
    release_waiting();
    return false;
  }
  const size_t done = server_->update_done();
  size_t end = range_.size;  // the end of the chunk holding `done`
  for (const Chunk& ch : chunks_) {
    if (ch.begin + ch.size > done) {
      end = ch.begin + ch.size;
      break;
    }
  }
  server_->update_to(end);
  send_finished_chunks();
  if (!stepping()) release_waiting();
  return true;
}

void ShardServer::wait_advancing(MPI_Request* r, const std::function<std::string()>& what) {
  for (;;) {
    int done = 0;
    check(MPI_Test(r, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (!advance()) break;
  }
  wait_one(r, l_.timeout, what);
}

void ShardServer::send_gather() {
  flush();
  params_.send_gather();
  if (sparse_) sparse_->send_gather();
  if (noise_) {  // train.noise_scale: this shard's part of the sums
    const NoiseSums n = server_->take_noise();
    const double v[3] = {n.trace, n.norm, static_cast<double>(n.pairs)};
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Isend(v, 3, MPI_DOUBLE, 0, kTagNoise, l_.comm, &r), "MPI_Isend");
    wait_one(&r, l_.timeout, [&] {
      return fmt::format("sending server shard {}'s noise-scale sums to rank 0", shard_);
    });
  }
  if (z_) {  // [compress]: this shard's seconds, for the compress_s column
    const double s = z_->seconds();
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Isend(&s, 1, MPI_DOUBLE, 0, kTagCompressTime, l_.comm, &r), "MPI_Isend");
    wait_one(&r, l_.timeout, [&] {
      return fmt::format("sending server shard {}'s compression seconds to rank 0", shard_);
    });
  }
}

NoiseSums ShardServer::gather_noise() {
  NoiseSums total = server_->take_noise();
  if (!noise_) return total;
  for (int s = 1; s < l_.servers; ++s) {
    double v[3] = {0, 0, 0};
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Irecv(v, 3, MPI_DOUBLE, s, kTagNoise, l_.comm, &r), "MPI_Irecv");
    wait_one(&r, l_.timeout, [&] {
      return fmt::format("on server shard 0 waiting for shard {}'s noise-scale sums", s);
    });
    total.add_part({.trace = v[0], .norm = v[1]});
    if (static_cast<int64_t>(v[2]) != total.pairs) {
      throw MpiError(
          fmt::format("server shard {} counted {} pairs of pushes since the last evaluation, "
                      "shard 0 {}: the shards saw different pushes",
                      s, static_cast<int64_t>(v[2]), total.pairs));
    }
  }
  return total;
}

double ShardServer::gather_compress_seconds() {
  if (!z_) return 0;
  double total = z_->seconds();
  for (int s = 1; s < l_.servers; ++s) {
    double v = 0;
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Irecv(&v, 1, MPI_DOUBLE, s, kTagCompressTime, l_.comm, &r), "MPI_Irecv");
    wait_one(&r, l_.timeout, [&] {
      return fmt::format("on server shard 0 waiting for shard {}'s compression seconds", s);
    });
    total += v;
  }
  return total;
}

std::string ShardServer::save() {
  settle();  // and the pending step
  StateWriter w;
  server_->save(w);
  if (z_) z_->save(w);
  return w.take();
}

void ShardServer::load(const std::string& bytes, const std::string& what, double seconds) {
  flush();
  StateReader r(bytes, what);
  decode(r, *server_, z_.get());
  for (int w = l_.workers; w < server_->known_workers(); ++w) server_->on_leave(w, seconds);
  for (int w = 0; w < l_.workers; ++w) {
    if (server_->is_live(w)) continue;
    server_->on_join(w, seconds);
    if (z_) z_->forget(w);  // [compress]: it starts afresh at the initial parameters
  }
  if (server_->known_workers() > l_.workers) grads_.resize(grads_.size());
}

void ShardServer::settle() {
  flush();
  params_.settle();
  if (z_) z_->settle();
}

void ShardServer::writable(int pusher) {
  if (params_.prepare_write(pusher)) server_->set_params(params_.live());
}

void ShardServer::take_gradient(int w) {
  const auto i = static_cast<size_t>(w);
  if (z_ && z_->push_on()) {  // [compress]: decodes into grads_[w]
    z_->take_push(w, &grad_recv_[i][0], grads_[i]);
    return;
  }
  for (size_t c = 0; c < chunks_.size(); ++c) {
    wait_one(&grad_recv_[i][c], l_.timeout, [&] {
      return fmt::format("waiting for the gradient of {} on server shard {}",
                         worker_name(w, l_.servers), shard_);
    });
  }
}

void check_shard_state(const Job& job, const Layout& l, int shard, const std::string& bytes,
                       const std::string& what) {
  const Config& c = *job.config;
  const Shard range = l.shards[static_cast<size_t>(shard)];
  std::vector<float> params(range.size);
  std::optional<Server> server;
  make_server(job, l, range, params, &server);
  std::unique_ptr<ShardCompression> z;
  if (c.compress.on()) {  // its constructor sends nothing
    z = std::make_unique<ShardCompression>(c.compress, job.make_model()->param_shapes(), range,
                                           shard, l.servers, l.workers, c.train.seed, params,
                                           l.comm, l.timeout);
  }
  // model.sparse: this shard's rows, as SparseShard attaches them.
  std::vector<float> rows;
  std::unique_ptr<RowTable> table;
  if (l.rows.rows > 0) {
    const RowPartition part{l.servers, l.rows.rows};
    rows.resize(static_cast<size_t>(part.rows_of(shard)) * static_cast<size_t>(l.rows.dim));
    table = std::make_unique<RowTable>(rows, l.rows.dim, server_optimizer(c), c.policy.aggregation,
                                       c.staleness);
    server->set_hook(table.get());
  }
  StateReader r(bytes, what);
  decode(r, *server, z.get());
}

}  // namespace hsgd::mpi
