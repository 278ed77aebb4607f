#include "hsgd/mpi/mpi_runtime.h"

#include <fmt/format.h>
#include <mpi.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "hsgd/core/error.h"
#include "hsgd/mpi/compressed.h"
#include "hsgd/mpi/fair.h"
#include "hsgd/mpi/param_buffers.h"
#include "hsgd/mpi/sparse.h"
#include "hsgd/mpi/transport.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/row.h"
#include "hsgd/runtime/sparse_rows.h"
#include "hsgd/server/server.h"

namespace hsgd {
namespace {

using namespace hsgd::mpi;
int as_count(size_t n) { return static_cast<int>(n); }

// Where this rank stands.
struct Layout {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0;
  int ranks = 1;
  int servers = 1;
  int workers = 1;
  double timeout = 120;
  size_t num_params = 0;
  std::vector<Shard> shards;
  RowLayout rows;  // model.sparse: the rows (rows = 0 otherwise); shards cover the dense part

  int worker_rank(int w) const { return servers + w; }
  RowLink row_link(int64_t batch) const { return RowLink{comm, servers, workers, timeout, batch}; }
};

// One server shard: its slice of the parameters (double-buffered for the
// sends: mpi/param_buffers.h), its replica of the server state machine, its
// gradient buffers (one per worker) and its parameter sends. Used by rank 0
// and by every other server rank.
class ShardServer {
 public:
  ShardServer(const Job& job, const Layout& l, int shard, const std::vector<float>& initial)
      : l_(l),
        shard_(shard),
        range_(l.shards[static_cast<size_t>(shard)]),
        params_(std::vector<float>(
                    initial.begin() + static_cast<ptrdiff_t>(range_.begin),
                    initial.begin() + static_cast<ptrdiff_t>(range_.begin + range_.size)),
                l.comm, worker_ranks(l), shard != 0 ? 0 : -1, l.timeout,
                fmt::format("server shard {}", shard)) {
    const Config& c = *job.config;
    server_.emplace(params_.live(), server_options(job),
                    make_policy(c.policy, l.workers, c.optim.lr),
                    make_optimizer(server_optimizer(c), range_.size));
    const auto nw = static_cast<size_t>(l.workers);
    grads_.assign(nw, std::vector<float>(range_.size));
    grad_recv_.assign(nw, MPI_REQUEST_NULL);
    if (c.compress.on()) {  // [compress] (issue 14): mpi/compressed.h
      z_ = std::make_unique<ShardCompression>(c.compress, job.make_model()->param_shapes(), range_,
                                              shard, l.servers, l.workers, c.train.seed,
                                              params_.live(), l.comm, l.timeout);
    }
    for (int w = 0; w < l.workers; ++w) {
      const auto i = static_cast<size_t>(w);
      if (z_ && z_->push_on()) {
        z_->init_push_recv(w, &grad_recv_[i]);
      } else {
        check(MPI_Recv_init(grads_[i].data(), as_count(range_.size), MPI_FLOAT, l.worker_rank(w),
                            kTagGradient, l_.comm, &grad_recv_[i]),
              "MPI_Recv_init");
      }
      check(MPI_Start(&grad_recv_[i]), "MPI_Start");
    }
    if (l.rows.rows > 0) {  // model.sparse: this rank's rows (mpi/sparse.h)
      sparse_ =
          std::make_unique<SparseShard>(job, l.rows, l.row_link(c.train.batch), shard, *server_);
    }
  }
  ~ShardServer() {
    for (MPI_Request& r : grad_recv_) cancel_and_free(&r);
  }
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  Server& server() { return *server_; }
  std::span<const float> params() const { return params_.live(); }
  SparseShard* sparse() { return sparse_.get(); }  // model.sparse, else null

  // Worker w's push, once its gradient slice is in; restarts the receive for
  // its next one.
  Decision push(int w, uint64_t version, int64_t batch, double loss, double seconds) {
    take_gradient(w);
    writable(w);
    if (sparse_) loss = sparse_->stage(w, loss);  // its rows join with its dense part
    Decision d = server_->on_push(w, version, grads_[static_cast<size_t>(w)], batch, loss, seconds);
    check(MPI_Start(&grad_recv_[static_cast<size_t>(w)]), "MPI_Start");
    return d;
  }
  // Worker w's push after the budget: received and dropped. Worker w sends
  // no more.
  void discard(int w) { take_gradient(w); }

  // Worker w leaves (may apply an update).
  Decision leave(int w, double seconds) {
    writable();
    return server_->on_leave(w, seconds);
  }

  // Sends this shard's parameters to worker w (its previous send is long
  // done: w received it before computing the push that led here).
  void send_params(int w) {
    if (z_ && z_->pull_on()) {  // [compress]: the compressed difference, from its own buffer
      z_->send_pull(w, params_.live(), server_->version());
      return;
    }
    params_.send(w);
    if (sparse_) sparse_->send_rows(w);
  }
  // Sends this shard's parameters to rank 0 for evaluation (model.sparse:
  // and the rows evaluation reads).
  void send_gather() {
    params_.send_gather();
    if (sparse_) sparse_->send_gather();
    if (z_) {  // [compress]: this shard's seconds, for the compress_s column
      const double s = z_->seconds();
      MPI_Request r = MPI_REQUEST_NULL;
      check(MPI_Isend(&s, 1, MPI_DOUBLE, 0, kTagCompressTime, l_.comm, &r), "MPI_Isend");
      wait_one(&r, l_.timeout, [&] {
        return fmt::format("sending server shard {}'s compression seconds to rank 0", shard_);
      });
    }
  }
  // [compress]: rank 0, after send_gather's event: every shard's seconds
  // decoding pushes and encoding pulls, its own included (0 when off).
  double gather_compress_seconds() {
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
  // This shard's server state (its parameters slice and all), for a
  // checkpoint; waits for the sends in flight first.
  std::string save() {
    settle();
    StateWriter w;
    server_->save(w);
    if (z_) z_->save(w);
    return w.take();
  }
  // Restores a state save() wrote, then fits the membership to this launch's
  // workers (as the threads runtime does): ids beyond them leave, missing
  // ones join. Every shard does the same, so they stay in step.
  void load(const std::string& bytes, const std::string& what, double seconds) {
    StateReader r(bytes, what);
    server_->load(r);
    if (z_) z_->load(r);
    r.expect_end();
    for (int w = l_.workers; w < server_->known_workers(); ++w) server_->on_leave(w, seconds);
    for (int w = 0; w < l_.workers; ++w) {
      if (server_->is_live(w)) continue;
      server_->on_join(w, seconds);
      if (z_) z_->forget(w);  // [compress]: it starts afresh at the initial parameters
    }
    if (server_->known_workers() > l_.workers) grads_.resize(grads_.size());
  }
  // Waits for every parameter send in flight.
  void settle() {
    params_.settle();
    if (z_) z_->settle();
  }

 private:
  static std::vector<int> worker_ranks(const Layout& l) {
    std::vector<int> r;
    for (int w = 0; w < l.workers; ++w) r.push_back(l.worker_rank(w));
    return r;
  }
  // Before an event that may write the parameters: sends in flight keep
  // reading their version (the server moves to the other buffer).
  void writable(int pusher = -1) {
    if (params_.prepare_write(pusher)) server_->set_params(params_.live());
  }
  void take_gradient(int w) {
    if (z_ && z_->push_on()) {  // [compress]: decodes into grads_[w]
      z_->take_push(w, &grad_recv_[static_cast<size_t>(w)], grads_[static_cast<size_t>(w)]);
      return;
    }
    wait_one(&grad_recv_[static_cast<size_t>(w)], l_.timeout, [&] {
      return fmt::format("waiting for the gradient of {} on server shard {}",
                         worker_name(w, l_.servers), shard_);
    });
  }

  const Layout& l_;
  int shard_;
  Shard range_;
  ParamBuffers params_;
  std::optional<Server> server_;
  std::vector<std::vector<float>> grads_;
  std::vector<MPI_Request> grad_recv_;
  std::unique_ptr<SparseShard> sparse_;  // model.sparse: attached to server_
  std::unique_ptr<ShardCompression> z_;  // [compress]; null when off
};

// A server rank other than 0: replays rank 0's events on its shard.
void run_replica(const Job& job, const Layout& l, const std::vector<float>& initial,
                 bool resuming) {
  ShardServer shard(job, l, l.rank, initial);
  if (resuming) {
    const std::string msg = recv_bytes(l.comm, 0, l.timeout, [&] {
      return fmt::format("on server shard {} waiting for its checkpoint state from rank 0", l.rank);
    });
    StateReader r(msg, "checkpoint state of shard " + std::to_string(l.rank));
    const double t = r.get<double>();
    shard.load(r.get_str(), "checkpoint server-" + std::to_string(l.rank), t);
  }
  Event ev;
  MPI_Request recv = MPI_REQUEST_NULL;
  check(MPI_Recv_init(&ev, sizeof(Event), MPI_BYTE, 0, kTagEvent, l.comm, &recv), "MPI_Recv_init");
  struct Free {
    MPI_Request* r;
    ~Free() { cancel_and_free(r); }
  } free_recv{&recv};
  for (;;) {
    check(MPI_Start(&recv), "MPI_Start");
    wait_one(&recv, l.timeout, [&] {
      return fmt::format("on server shard {} waiting for the next event from rank 0", l.rank);
    });
    const Event e = ev;
    const auto diverged = [&](uint64_t version) {
      throw MpiError(fmt::format(
          "server shard {} diverged from shard 0: event {} of worker {} left version {}, shard 0 "
          "reported {}",
          l.rank, e.type, e.worker, version, e.version));
    };
    switch (e.type) {
      case Event::kPull: {
        const Decision d = shard.server().on_pull(e.worker);
        if (d.version != e.version || d.caller_waits != (e.waits != 0)) diverged(d.version);
        if (!d.caller_waits) shard.send_params(e.worker);
        break;
      }
      case Event::kPush: {
        const Decision d = shard.push(e.worker, e.push_version, e.batch, e.loss, e.seconds);
        if (d.version != e.version) diverged(d.version);
        break;
      }
      case Event::kDiscard:
        shard.discard(e.worker);
        break;
      case Event::kEval:
        shard.send_gather();
        break;
      case Event::kCheckpoint:
        send_bytes(l.comm, 0, shard.save(), l.timeout, [&] {
          return fmt::format("on server shard {} sending its checkpoint state to rank 0", l.rank);
        });
        break;
      case Event::kLeave: {
        const Decision d = shard.leave(e.worker, e.seconds);
        if (d.version != e.version) diverged(d.version);
        break;
      }
      case Event::kStop:
        shard.settle();
        return;
      case kEventRows:  // model.sparse: the worker's row message, in rank 0's order
        shard.sparse()->take(e.worker);
        break;
      case kEventModel:  // model.sparse: the final rows to rank 0, for model.bin
        shard.sparse()->send_chunks();
        break;
      default:
        throw MpiError(
            fmt::format("server shard {} received an unknown event type {}", l.rank, e.type));
    }
  }
}

// Set by SIGTERM / SIGINT on a worker rank: leave at the next request.
volatile std::sig_atomic_t g_leave_requested = 0;
extern "C" void on_leave_signal(int) { g_leave_requested = 1; }
void catch_leave_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_leave_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// A worker rank: the threads runtime's worker loop over messages. Returns
// true when it left the run on SIGTERM / SIGINT (issue 10).
bool run_worker(const Job& job, const Layout& l, bool resuming, const std::vector<float>& initial) {
  const Config& c = *job.config;
  const int id = l.rank - l.servers;
  ShardSampler sampler = make_sampler(job, id);
  std::unique_ptr<Model> model = job.make_model();
  // Zero pages until touched: a row-sparse worker faults in only its rows.
  const ZeroedFloats params_buf(l.num_params), grads_buf(l.num_params);
  const std::span<float> params = params_buf.span(), grads = grads_buf.span();
  model->bind(params, grads);
  const int local_h = make_policy(c.policy, l.workers, c.optim.lr)->local_steps();
  std::optional<LocalWorker> local;
  if (local_h > 0) local.emplace(make_local_worker(c, l.num_params));
  DelayModel delays(c.stragglers, l.workers, c.train.seed);
  std::optional<SparseWorkerLink> sparse;  // model.sparse: rows to and from their ranks
  if (l.rows.rows > 0) sparse.emplace(*model, l.rows, l.row_link(c.train.batch), id, params);
  // [compress] (issue 14): null when off. With pull compression the worker
  // starts from the initial parameters, as the shards' held copies do.
  std::unique_ptr<WorkerCompression> z;
  if (c.compress.on()) {
    z = std::make_unique<WorkerCompression>(c.compress, model->param_shapes(), l.shards, id,
                                            c.train.seed, l.comm, l.timeout);
    if (z->pull_on()) std::copy(initial.begin(), initial.end(), params.begin());
  }
  // A worker's checkpoint state: sampler, delay streams, local momentum.
  const auto save_state = [&] {
    StateWriter w;
    if (sparse) {  // the sampler before the batch it drew for its next pull
      ShardSampler at_draw = sampler;
      at_draw.restore(sparse->before_draw());
      save_sampler(at_draw, w);
    } else {
      save_sampler(sampler, w);
    }
    delays.save(w);
    w.put<uint8_t>(local.has_value());
    if (local) local->save(w);
    if (z) z->save(w, params);
    return w.take();
  };
  if (resuming) {
    // Empty when the checkpoint had another worker count: shards are split
    // again and each worker starts a fresh order of its new shard.
    const std::string bytes = recv_bytes(l.comm, 0, l.timeout, [&] {
      return fmt::format("on {} waiting for its checkpoint state from rank 0",
                         worker_name(id, l.servers));
    });
    if (!bytes.empty()) {
      StateReader r(bytes, "checkpoint worker-" + std::to_string(id));
      load_sampler(sampler, r);
      delays.load(r);
      if (r.get<uint8_t>() != 0) {
        if (!local) r.fail("corrupt (local-SGD state for a policy without it)");
        local->load(r);
      }
      if (z) z->load(r, params);
      r.expect_end();
    }
  }

  // Persistent requests: [0] the request to rank 0, [1] its reply, then
  // per shard the gradient send and the parameter receive.
  Request request;
  Reply reply;
  const auto S = static_cast<size_t>(l.servers);
  std::vector<MPI_Request> control(2, MPI_REQUEST_NULL), grad_send(S, MPI_REQUEST_NULL),
      param_recv(S, MPI_REQUEST_NULL);
  struct Free {
    std::vector<MPI_Request>&control, &grad_send, &param_recv;
    ~Free() {
      free_request(&control[0]);
      cancel_and_free(&control[1]);
      for (MPI_Request& r : grad_send) free_request(&r);
      for (MPI_Request& r : param_recv) cancel_and_free(&r);
    }
  } free_all{control, grad_send, param_recv};
  check(MPI_Send_init(&request, sizeof(Request), MPI_BYTE, 0, kTagRequest, l.comm, &control[0]),
        "MPI_Send_init");
  check(MPI_Recv_init(&reply, sizeof(Reply), MPI_BYTE, 0, kTagReply, l.comm, &control[1]),
        "MPI_Recv_init");
  for (size_t s = 0; s < S; ++s) {
    const Shard& sh = l.shards[s];
    if (!z || !z->push_on()) {  // [compress]: MPI_Isend of each message instead
      check(MPI_Send_init(grads.data() + sh.begin, as_count(sh.size), MPI_FLOAT,
                          static_cast<int>(s), kTagGradient, l.comm, &grad_send[s]),
            "MPI_Send_init");
    }
    if (z && z->pull_on()) {
      z->init_pull_recv(s, &param_recv[s]);
    } else {
      check(MPI_Recv_init(params.data() + sh.begin, as_count(sh.size), MPI_FLOAT,
                          static_cast<int>(s), kTagParams, l.comm, &param_recv[s]),
            "MPI_Recv_init");
    }
  }
  const std::string me = worker_name(id, l.servers);

  // Sends the request (after the gradient slices, for a push) with the
  // parameter receives already posted, and waits for the reply. Returns the
  // version of the parameters now in `params`, or nothing at stop.
  const auto exchange = [&](bool push) -> std::optional<uint64_t> {
    check(MPI_Startall(as_count(S), param_recv.data()), "MPI_Startall");
    const bool rows = sparse && request.type != Request::kLeave;
    if (rows) sparse->start(push);  // row messages go before the request
    check(MPI_Start(&control[1]), "MPI_Start");
    if (push && z && z->push_on()) {
      z->send_push(grad_send);
    } else if (push) {
      check(MPI_Startall(as_count(S), grad_send.data()), "MPI_Startall");
    }
    if (z) {  // [compress]: the bytes of this push and of the previous pull
      if (push && !z->push_on()) z->count_plain_push();
      z->report(&request);
    }
    check(MPI_Start(&control[0]), "MPI_Start");
    const auto await_reply = [&] {
      wait_one(&control[1], l.timeout, [&] {
        return fmt::format("on {} waiting for rank 0 to answer its {}", me, push ? "push" : "pull");
      });
    };
    await_reply();
    while (reply.type == Reply::kSave) {  // a checkpoint while this worker is at the gate
      send_bytes(l.comm, 0, save_state(), l.timeout,
                 [&] { return fmt::format("on {} sending its checkpoint state", me); });
      check(MPI_Start(&control[1]), "MPI_Start");
      await_reply();
    }
    std::optional<uint64_t> version;
    if (reply.type == Reply::kGo) {
      version = reply.version;
      if (z && z->pull_on()) {  // [compress]: decoded into params
        z->take_pull(param_recv, params, me);
      } else {
        wait_all(param_recv, l.timeout,
                 [&] { return fmt::format("on {} waiting for its parameters", me); });
        if (z) z->count_plain_pull();
      }
    } else {
      for (MPI_Request& r : param_recv) {
        check(MPI_Cancel(&r), "MPI_Cancel");
        check(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
      }
    }
    if (rows) sparse->finish(version.has_value());
    wait_all(control, l.timeout, [&] { return fmt::format("on {} sending its request", me); });
    wait_all(grad_send, l.timeout,
             [&] { return fmt::format("on {} sending its gradient to the server shards", me); });
    if (rows) sparse->settle();
    return version;
  };

  request.type = Request::kPull;
  if (sparse) sparse->prepare(sampler, c.train.batch);  // the first pull's rows
  std::optional<uint64_t> version = exchange(false);
  Batch batch;
  while (version) {
    int64_t pushed = 0;
    const auto t0 = SteadyClock::now();
    const double loss = sparse ? sparse->compute(&pushed)
                               : compute_push(*model, params, grads, sampler, c.train.batch,
                                              local ? &*local : nullptr, local_h, &batch, &pushed);
    if (sparse) sparse->prepare(sampler, c.train.batch);  // the next pull's rows
    const double delay = delays.extra_seconds(id, since(t0));
    if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    if (g_leave_requested) {  // a graceful leave: the gradient in hand is dropped
      request.type = Request::kLeave;
      exchange(false);        // answered with stop
      return true;
    }
    request.type = Request::kPush;
    request.version = *version;
    request.batch = pushed;
    request.loss = loss;
    if (z && z->push_on()) z->encode_push(grads, *version);
    version = exchange(true);
  }
  return false;
}

constexpr uint32_t kMpiTag = 0x4D504931;  // "MPI1"

// Rank 0: server shard 0, the order of events, evaluation and the metrics.
class Primary {
 public:
  Primary(const Job& job, const Layout& l, const std::vector<float>& initial, Recorder* recorder,
          Observer* observer)
      : job_(job),
        c_(*job.config),
        l_(l),
        shard_(job, l, 0, initial),
        recorder_(recorder),
        observer_(observer),
        test_(head(*job.test, c_.train.eval_samples)),
        eval_buf_(l.num_params),
        eval_grad_buf_(l.num_params),
        eval_params_(eval_buf_.span()),
        eval_grads_(eval_grad_buf_.span()) {
    const auto nw = static_cast<size_t>(l.workers);
    requests_.resize(nw);
    replies_.resize(nw);
    req_recv_.assign(nw, MPI_REQUEST_NULL);
    reply_send_.assign(nw, MPI_REQUEST_NULL);
    state_.assign(nw, kComputing);
    idle_.resize(nw);
    at_gate_.assign(nw, 0);
    skip_request_.assign(nw, 0);
    for (int w = 0; w < l.workers; ++w) {
      const auto i = static_cast<size_t>(w);
      check(MPI_Recv_init(&requests_[i], sizeof(Request), MPI_BYTE, l.worker_rank(w), kTagRequest,
                          l_.comm, &req_recv_[i]),
            "MPI_Recv_init");
      check(MPI_Send_init(&replies_[i], sizeof(Reply), MPI_BYTE, l.worker_rank(w), kTagReply,
                          l_.comm, &reply_send_[i]),
            "MPI_Send_init");
    }
    gather_recv_.assign(static_cast<size_t>(l.servers), MPI_REQUEST_NULL);
    for (int s = 1; s < l.servers; ++s) {
      const Shard& sh = l.shards[static_cast<size_t>(s)];
      check(MPI_Recv_init(eval_params_.data() + sh.begin, as_count(sh.size), MPI_FLOAT, s,
                          kTagGather, l_.comm, &gather_recv_[static_cast<size_t>(s)]),
            "MPI_Recv_init");
    }
    model_ = job.make_model();
    model_->bind(eval_params_, eval_grads_);
    if (c_.train.epochs > 0) {
      epoch_target_ =
          static_cast<int64_t>(std::ceil(c_.train.epochs * static_cast<double>(job.train->size())));
    }
  }
  ~Primary() {
    for (MPI_Request& r : req_recv_) cancel_and_free(&r);
    for (MPI_Request& r : gather_recv_) cancel_and_free(&r);
    for (MPI_Request& r : reply_send_) free_request(&r);
    for (Outgoing& o : outgoing_) {
      for (MPI_Request& r : o.reqs) free_request(&r);
    }
  }

  RunResult run() {
    const auto wall0 = SteadyClock::now();
    double start_s = 0;
    double last_acc = 0;
    if (job_.resume) {
      start_s = restore(*job_.resume);
      if (!recorder_->rows().empty()) last_acc = recorder_->rows().back().test_acc;
    } else {
      clock_.start(0, /*paused=*/true);
      MetricsRow first = evaluate();
      emit_row(first);
      last_acc = first.test_acc;
    }
    clock_.start(start_s);  // training time starts after the first evaluation
    check(MPI_Startall(as_count(req_recv_.size()), req_recv_.data()), "MPI_Startall");

    const double budget = c_.train.budget > 0 ? c_.train.budget : 1e300;
    const auto next_after = [](double t, double every) {
      return (std::floor(t / every) + 1) * every;
    };
    double next_eval = next_after(start_s, c_.train.eval_every), next_tick = start_s + 0.5;
    const double ckpt_every = job_.checkpoints ? c_.train.checkpoint_every : 0;
    double next_ckpt = ckpt_every > 0 ? next_after(start_s, ckpt_every) : 1e300;
    double tick_time = start_s;
    int64_t tick_samples = server().samples();
    if (epoch_target_ > 0 && server().samples() >= epoch_target_) request_end();
    std::vector<int> done_idx(req_recv_.size());
    auto last_progress = SteadyClock::now();
    Backoff backoff;
    while (!all_done()) {
      pump_events();
      const double now = clock_.seconds();
      if (!stopping_ && !ending_ && now >= budget) request_end();
      // Evaluation and checkpoints pause the workers as the threads
      // runtime's gate does: a worker's next request is held until every
      // worker is at the gate (holding a request or waiting on its policy);
      // the clock runs until then, stands still while evaluating and writing,
      // and the held requests are served in the order they came.
      if (!stopping_ && (now >= next_eval || now >= next_ckpt)) pausing_ = true;
      if (pausing_ && (stopping_ || all_at_gate())) {
        if (!stopping_) {
          clock_.pause();
          const double t = clock_.seconds();
          if (!ending_ && t >= next_eval) {
            MetricsRow r = evaluate();
            emit_row(r);
            last_acc = r.test_acc;
            while (next_eval <= r.time_s) next_eval += c_.train.eval_every;
          }
          if (ending_ || t >= next_ckpt) {
            write_checkpoint(t);
            while (next_ckpt <= t) next_ckpt += ckpt_every;
          }
          if (ending_) begin_stop();  // the cut is the end of training
          clock_.resume();
        }
        pausing_ = false;
        std::vector<int> held;
        held.swap(held_);
        for (int w : held) {
          at_gate_[static_cast<size_t>(w)] = 0;
          handle(w);
        }
        last_progress = SteadyClock::now();
        continue;
      }
      if (!stopping_ && now >= next_tick) {
        Status st;
        st.time_s = now;
        st.updates = static_cast<int64_t>(server().version());
        st.samples = server().samples();
        st.k = server().threshold(now);
        st.epochs = static_cast<double>(st.samples) / static_cast<double>(job_.train->size());
        st.test_acc = last_acc;
        st.samples_per_s = now > tick_time
                               ? static_cast<double>(st.samples - tick_samples) / (now - tick_time)
                               : 0;
        tick_time = now;
        tick_samples = st.samples;
        observer_->on_status(st);
        next_tick = now + 0.5;
      }
      int count = 0;
      check(MPI_Testsome(as_count(req_recv_.size()), req_recv_.data(), &count, done_idx.data(),
                         MPI_STATUSES_IGNORE),
            "MPI_Testsome");
      if (count != MPI_UNDEFINED && count > 0) {
        // Requests that came together: each worker is served first in turn.
        first_ = serve_order(std::span<int>(done_idx.data(), static_cast<size_t>(count)),
                             l_.workers, first_);
        for (int i = 0; i < count; ++i) {
          const int w = done_idx[static_cast<size_t>(i)];
          if (c_.compress.on()) tally_.add(requests_[static_cast<size_t>(w)]);  // [compress]
          if (pausing_) {
            held_.push_back(w);
            at_gate_[static_cast<size_t>(w)] = 1;
          } else {
            handle(w);
          }
        }
        last_progress = SteadyClock::now();
        backoff.reset();
        continue;
      }
      if (since(last_progress) > l_.timeout) {
        std::string who;
        for (int w = 0; w < l_.workers; ++w) {
          if (state_[static_cast<size_t>(w)] == kComputing) {
            who += (who.empty() ? "" : ", ") + worker_name(w, l_.servers);
          }
        }
        if (who.empty()) {
          throw MpiError(
              fmt::format("server shard 0: every worker has waited {:g} s for a release (policy {} "
                          "deadlocked)",
                          l_.timeout, server().policy().name()));
        }
        throw MpiError(fmt::format(
            "timed out after {:g} s on server shard 0 waiting for a request from {} (raise "
            "mpi.timeout if this is slow, not stuck)",
            l_.timeout, who));
      }
      backoff.idle();
    }
    const double train_s = stop_time_;
    clock_.pause();
    MetricsRow last = evaluate();
    last.time_s = train_s;
    std::string rows_file;
    if (shard_.sparse()) {  // the final rows, chunk by chunk, for model.bin
      emit(Event{.type = kEventModel});
      rows_file = c_.train.out + "/model-rows.partial";
      shard_.sparse()->write_chunks(rows_file);
    }
    emit_row(last);
    emit(Event{.type = Event::kStop});
    drain_events();
    shard_.settle();
    for (MPI_Request& r : reply_send_) {
      wait_one(&r, l_.timeout, [&] { return std::string("sending the stop replies"); });
    }

    RunResult result;
    if (shard_.sparse()) {  // the dense part; the rows are in rows_file
      result.params.assign(eval_params_.begin(), eval_params_.begin() + l_.rows.dense);
      result.rows_file = rows_file;
    } else {
      result.params.assign(eval_params_.begin(), eval_params_.end());
    }
    result.last = last;
    result.train_s = train_s;
    result.real_train_s = train_s;
    result.wall_s = since(wall0);
    result.gradients = server().pushes();
    result.staleness_histogram = server().staleness_histogram();
    for (int w = 0; w < l_.workers; ++w) result.worker_pushes.push_back(server().clock(w));
    result.membership = membership_;
    result.stopped = stopped_;
    if (shard_.sparse()) result.sparse = shard_.sparse()->gathered();
    result.compress_on = c_.compress.on();
    result.compress = tally_.counters;
    result.compress.compress_s += server_compress_s_;
    result.server_compress_s = server_compress_s_;
    return result;
  }

 private:
  enum State { kComputing, kWaiting, kDone };
  struct Outgoing {
    Event ev;
    std::vector<MPI_Request> reqs;
  };

  Server& server() { return shard_.server(); }
  // Every worker holds a request at rank 0 or waits on its policy.
  bool all_at_gate() const {
    for (size_t w = 0; w < state_.size(); ++w) {
      if (state_[w] == kComputing && !at_gate_[w]) return false;
    }
    return true;
  }
  bool all_done() const {
    return std::all_of(state_.begin(), state_.end(), [](State s) { return s == kDone; });
  }

  // Sends an event to every other server rank (from a buffer kept until the
  // sends complete).
  void emit(const Event& e) {
    if (l_.servers == 1) return;
    Outgoing& o = outgoing_.emplace_back();
    o.ev = e;
    o.reqs.assign(static_cast<size_t>(l_.servers - 1), MPI_REQUEST_NULL);
    for (int s = 1; s < l_.servers; ++s) {
      check(MPI_Isend(&o.ev, sizeof(Event), MPI_BYTE, s, kTagEvent, l_.comm,
                      &o.reqs[static_cast<size_t>(s - 1)]),
            "MPI_Isend");
    }
  }
  // Forgets the events whose sends completed.
  void pump_events() {
    while (!outgoing_.empty()) {
      int done = 0;
      std::vector<MPI_Request>& r = outgoing_.front().reqs;
      check(MPI_Testall(as_count(r.size()), r.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (!done) return;
      outgoing_.pop_front();
    }
  }
  void drain_events() {
    while (!outgoing_.empty()) {
      wait_all(outgoing_.front().reqs, l_.timeout,
               [] { return std::string("on server shard 0 sending events to the other shards"); });
      outgoing_.pop_front();
    }
  }

  void reply(int w, Reply::Type type, uint64_t version) {
    const auto i = static_cast<size_t>(w);
    wait_one(&reply_send_[i], l_.timeout, [&] {
      return fmt::format("on server shard 0 answering {}", worker_name(w, l_.servers));
    });
    replies_[i].type = type;
    replies_[i].version = version;
    check(MPI_Start(&reply_send_[i]), "MPI_Start");
  }

  void handle(int w) {
    const auto i = static_cast<size_t>(w);
    const Request r = requests_[i];
    if (shard_.sparse() && (r.type == Request::kPush || r.type == Request::kPull)) {
      // model.sparse: every rank takes the row message that came with it.
      shard_.sparse()->take(w);
      emit(Event{.type = kEventRows, .worker = w});
    }
    if (skip_request_[i]) {
      skip_request_[i] = 0;
      if (state_[i] != kDone) check(MPI_Start(&req_recv_[i]), "MPI_Start");
      return;
    }
    if (r.type == Request::kPush) {
      if (stopping_) {
        shard_.discard(w);
        emit(Event{.type = Event::kDiscard, .worker = w});
        stop_worker(w);
        return;
      }
      const double now = clock_.seconds();
      Decision d = shard_.push(w, r.version, r.batch, r.loss, now);
      emit(Event{.type = Event::kPush,
                 .worker = w,
                 .push_version = r.version,
                 .batch = r.batch,
                 .loss = r.loss,
                 .seconds = now,
                 .version = d.version});
      if (d.caller_waits) {
        state_[i] = kWaiting;
        idle_.begin(i, now);
      } else {
        pull(w);
      }
      release(d.released);
      if (epoch_target_ > 0 && server().samples() >= epoch_target_ && !stopping_) request_end();
    } else if (r.type == Request::kPull) {
      if (stopping_) {
        stop_worker(w);
        return;
      }
      pull(w);
    } else if (r.type == Request::kLeave) {
      leave(w);
      return;
    } else {
      throw MpiError(fmt::format("server shard 0 received an unknown request type {} from {}",
                                 r.type, worker_name(w, l_.servers)));
    }
    if (state_[i] != kDone) check(MPI_Start(&req_recv_[i]), "MPI_Start");
  }

  void pull(int w) {
    const auto i = static_cast<size_t>(w);
    const Decision d = server().on_pull(w);
    emit(Event{
        .type = Event::kPull, .worker = w, .version = d.version, .waits = d.caller_waits ? 1 : 0});
    if (d.caller_waits) {
      state_[i] = kWaiting;
      idle_.begin(i, clock_.seconds());
    } else {
      state_[i] = kComputing;
      reply(w, Reply::kGo, d.version);
      shard_.send_params(w);
    }
    release(d.released);
  }

  void release(const std::vector<int>& released) {
    for (int r : released) {
      const auto i = static_cast<size_t>(r);
      if (state_[i] != kWaiting) continue;
      idle_.end(i, clock_.seconds());
      if (stopping_) {
        stop_worker(r);
      } else {
        pull(r);
      }
    }
  }

  void stop_worker(int w) {
    reply(w, Reply::kStop, 0);
    state_[static_cast<size_t>(w)] = kDone;
  }

  // Worker w leaves (SIGTERM / SIGINT on its rank): every shard runs
  // on_leave in rank 0's order, the workers it releases go on, and w is
  // answered stop. Below train.min_workers the run ends (exit 3).
  void leave(int w) {
    const double now = clock_.seconds();
    const Decision d = shard_.leave(w, now);
    emit(Event{.type = Event::kLeave, .worker = w, .seconds = now, .version = d.version});
    left_[static_cast<size_t>(w)] = 1;
    membership_.push_back(MembershipEvent{now, w, false, MembershipCause::kSignal, ""});
    stop_worker(w);
    release(d.released);
    if (server().live_workers() < c_.train.min_workers && stopped_.empty()) {
      stopped_ = fmt::format(
          "{} of {} workers live, fewer than train.min_workers = {}: worker {} left at {:.3f} s "
          "(signal)",
          server().live_workers(), l_.workers, c_.train.min_workers, w, now);
      if (!stopping_) request_end();
    }
  }

  // The end of training: at once, or, with checkpoints on, at a gate cut
  // that writes the final checkpoint first.
  void request_end() {
    if (job_.checkpoints) {
      ending_ = true;
      pausing_ = true;
    } else {
      begin_stop();
    }
  }

  // A checkpoint at the gate (clock paused, every worker blocked on rank 0):
  // every shard's server state, every worker's state, and rank 0's own.
  // Rank 0 gathers them all and writes the checkpoint, so no shared
  // filesystem is needed.
  void write_checkpoint(double t) {
    if (!job_.checkpoints) return;
    std::map<std::string, std::string> blobs;
    emit(Event{.type = Event::kCheckpoint});
    blobs["server-0"] = shard_.save();
    for (int s = 1; s < l_.servers; ++s) {
      blobs["server-" + std::to_string(s)] = recv_bytes(l_.comm, s, l_.timeout, [&] {
        return fmt::format("on rank 0 waiting for shard {}'s checkpoint state", s);
      });
    }
    for (int w = 0; w < l_.workers; ++w) {
      if (left_[static_cast<size_t>(w)]) {  // gone: a resume starts it afresh
        blobs["worker-" + std::to_string(w)] = "";
        continue;
      }
      reply(w, Reply::kSave, 0);
      blobs["worker-" + std::to_string(w)] =
          recv_bytes(l_.comm, l_.worker_rank(w), l_.timeout, [&] {
            return fmt::format("on rank 0 waiting for the checkpoint state of {}",
                               worker_name(w, l_.servers));
          });
    }
    StateWriter m;
    m.tag(kMpiTag);
    m.put<int32_t>(l_.servers);
    m.put<int32_t>(l_.workers);
    m.put(t);
    m.put(last_time_);
    m.put(last_idle_);
    idle_.save(m);
    if (c_.compress.on()) m.put(tally_.counters);
    blobs["mpi"] = m.take();
    CheckpointInfo info;
    info.id = job_.identity;
    info.runtime = "mpi";
    info.workers = l_.workers;
    info.servers = l_.servers;
    info.train_s = t;
    info.updates = static_cast<int64_t>(server().version());
    info.rows = static_cast<int64_t>(recorder_->rows().size());
    job_.checkpoints->write(info, blobs);
  }

  // Restores rank 0's state, sends every other rank its part, and marks the
  // workers that were waiting at the cut. Returns the cut's training time.
  double restore(const Checkpoint& ck) {
    StateReader m(ck.blob("mpi"), ck.path + "/mpi.bin");
    m.expect_tag(kMpiTag, "mpi runtime");
    const int servers = m.get<int32_t>();
    const int workers = m.get<int32_t>();
    if (servers != l_.servers) {
      throw MpiError(fmt::format("{}: written by {} server ranks, this launch has {}", ck.path,
                                 servers, l_.servers));
    }
    const double t = m.get<double>();
    last_time_ = m.get<double>();
    last_idle_ = m.get<double>();
    idle_.load(m);
    if (c_.compress.on()) tally_.counters = m.get<CompressCounters>();
    m.expect_end();
    shard_.load(ck.blob("server-0"), ck.path + "/server-0.bin", t);
    for (int s = 1; s < l_.servers; ++s) {
      StateWriter msg;
      msg.put(t);
      msg.put_str(ck.blob("server-" + std::to_string(s)));
      send_bytes(l_.comm, s, msg.take(), l_.timeout,
                 [&] { return fmt::format("on rank 0 sending shard {} its checkpoint state", s); });
    }
    const std::string none;
    for (int w = 0; w < l_.workers; ++w) {
      const std::string& bytes =
          workers == l_.workers ? ck.blob("worker-" + std::to_string(w)) : none;
      send_bytes(l_.comm, l_.worker_rank(w), bytes, l_.timeout, [&] {
        return fmt::format("on rank 0 sending {} its checkpoint state", worker_name(w, l_.servers));
      });
    }
    for (int w = 0; w < l_.workers; ++w) {
      const auto i = static_cast<size_t>(w);
      if (server().is_waiting(w)) {
        // Its push (or SSP pull) waits: its first request, a pull, is
        // dropped; the release answers it.
        state_[i] = kWaiting;
        skip_request_[i] = 1;
        idle_.begin(i, t);
      } else {
        idle_.end(i, t);
      }
    }
    return t;
  }

  void begin_stop() {
    stopping_ = true;
    stop_time_ = clock_.seconds();
    for (int w = 0; w < l_.workers; ++w) {
      if (state_[static_cast<size_t>(w)] == kWaiting) {
        idle_.end(static_cast<size_t>(w), stop_time_);
        stop_worker(w);
      }
    }
  }

  // Gathers the shards at this point of the event order and evaluates them;
  // the caller pauses the clock (evaluation is not training time).
  // model.sparse: rank 0 gathers only the rows the evaluation reads, into
  // calloc'd memory.
  MetricsRow evaluate() {
    const double time_s = std::max(0.0, clock_.seconds());
    emit(Event{.type = Event::kEval});
    if (l_.servers > 1) {
      check(MPI_Startall(as_count(l_.servers - 1), gather_recv_.data() + 1), "MPI_Startall");
    }
    std::span<const float> own = shard_.params();
    std::copy(own.begin(), own.end(), eval_params_.begin());
    wait_all(gather_recv_, l_.timeout, [] {
      return std::string("on server shard 0 gathering the other shards' parameters for evaluation");
    });
    if (shard_.sparse()) shard_.sparse()->gather(eval_params_);  // and the rows it reads
    const ServerStats st = server().take_stats();
    const EvalResult e = model_->evaluate(test_);
    const double idle_total = idle_.total(time_s);
    const double idle = idle_fraction(idle_total - last_idle_, time_s - last_time_, l_.workers);
    last_time_ = time_s;
    last_idle_ = idle_total;
    MetricsRow row = build_row(server(), st, e, time_s, idle, job_);
    if (c_.compress.on()) {
      tally_.fill(&row);
      server_compress_s_ = shard_.gather_compress_seconds();
      row.compress_s += server_compress_s_;
    }
    return row;
  }

  void emit_row(const MetricsRow& r) {
    recorder_->write(r);
    observer_->on_row(r);
  }

  const Job& job_;
  const Config& c_;
  const Layout& l_;
  ShardServer shard_;
  Recorder* recorder_;
  Observer* observer_;
  Dataset test_;
  // calloc'd (a row-sparse model's rows: only the pages of gathered rows).
  ZeroedFloats eval_buf_, eval_grad_buf_;
  std::span<float> eval_params_, eval_grads_;
  int first_ = 0;  // the worker served first among requests that come together
  std::unique_ptr<Model> model_;
  std::vector<Request> requests_;
  std::vector<Reply> replies_;
  std::vector<MPI_Request> req_recv_, reply_send_, gather_recv_;
  std::vector<State> state_;
  IdleMeter idle_;             // on clock_'s seconds
  std::vector<char> at_gate_;  // its request is held by a pause
  std::vector<int> held_;      // held requests, in arrival order
  bool pausing_ = false;
  bool ending_ = false;             // the next gate cut ends training (final checkpoint)
  std::vector<char> skip_request_;  // resumed waiting: its first request is dropped
  std::deque<Outgoing> outgoing_;
  TrainClock clock_;
  bool stopping_ = false;
  double stop_time_ = 0;
  int64_t epoch_target_ = 0;
  double last_idle_ = 0, last_time_ = 0;
  // Membership (issue 10): workers that left on a signal, and the log.
  std::vector<char> left_ = std::vector<char>(static_cast<size_t>(l_.workers), 0);
  std::vector<MembershipEvent> membership_;
  std::string stopped_;  // below train.min_workers
  CompressTally tally_;  // [compress]: the workers' reported bytes and seconds
  double server_compress_s_ = 0;  // [compress]: the server ranks' seconds, at the last evaluation
};

// Every rank must run the same job: the same parameter count and data.
void check_same_job(const Layout& l, const Job& job) {
  const int64_t mine[3] = {static_cast<int64_t>(l.num_params), job.train->size(), job.test->size()};
  int64_t lo[3], hi[3];
  check(MPI_Allreduce(mine, lo, 3, MPI_INT64_T, MPI_MIN, l.comm), "MPI_Allreduce");
  check(MPI_Allreduce(mine, hi, 3, MPI_INT64_T, MPI_MAX, l.comm), "MPI_Allreduce");
  const char* what[3] = {"model parameters", "training samples", "test samples"};
  for (int i = 0; i < 3; ++i) {
    if (lo[i] != hi[i]) {
      throw InputError(fmt::format(
          "the ranks disagree on the job: between {} and {} {} (is the same data and config on "
          "every machine?)",
          lo[i], hi[i], what[i]));
    }
  }
}

}  // namespace

void MpiRuntime::check_launch(int ranks, int servers, int64_t num_params) {
  if (ranks < servers + 1) {
    throw InputError(fmt::format(
        "train.servers = {}: needs at least {} MPI ranks ({} servers + 1 worker), but mpirun "
        "started {} (-np {})",
        servers, servers + 1, servers, ranks, ranks));
  }
  if (num_params < servers) {
    throw InputError(fmt::format(
        "train.servers = {}: more server shards than the model's {} parameters; expected at "
        "most {}",
        servers, num_params, num_params));
  }
}

RunResult MpiRuntime::run(const Job& job, Recorder* recorder, Observer* observer) {
  const Config& c = *job.config;
  HSGD_ASSERT(job.train && job.test && job.make_model, "incomplete job");
  Layout l;
  // A communicator of its own: no message of an earlier (perhaps failed)
  // run on the same ranks can match this run's receives.
  check(MPI_Comm_dup(comm_, &l.comm), "MPI_Comm_dup");
  check(MPI_Comm_rank(l.comm, &l.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(l.comm, &l.ranks), "MPI_Comm_size");
  l.servers = c.train.servers;
  l.workers = l.ranks - l.servers;
  if (l.rank >= l.servers) catch_leave_signals();  // a graceful leave (issue 10)
  l.timeout = c.mpi.timeout;
  l.num_params = static_cast<size_t>(job_params(job));
  l.rows = sparse_layout(job);  // model.sparse: dense slices + rows by id (mpi/sparse.h)
  const size_t sliced = l.rows.rows > 0 ? static_cast<size_t>(l.rows.dense) : l.num_params;
  check_launch(l.ranks, l.servers, static_cast<int64_t>(sliced));
  if (c.train.workers != l.workers) {
    throw InputError(fmt::format(
        "train.workers = {}: under the mpi runtime the workers are the {} ranks after the {} "
        "server ranks",
        c.train.workers, l.workers, l.servers));
  }
  if (job.train->size() < l.workers) {
    throw InputError(fmt::format("train.workers = {}: the training set has only {} samples",
                                 l.workers, job.train->size()));
  }
  l.shards = split(sliced, l.servers);
  check_same_job(l, job);

  // Rank 0's initial parameters for every server (the same seed may not give
  // the same floats on another machine's build). model.sparse: the dense
  // part only; each server rank initialises its own rows (mpi/sparse.h),
  // and job.initial_params may hold only the dense part.
  HSGD_ASSERT(job.initial_params.size() >= sliced,
              "job.initial_params shorter than the dense part");
  std::vector<float> initial(job.initial_params.begin(),
                             job.initial_params.begin() + static_cast<ptrdiff_t>(sliced));
  check(MPI_Bcast(initial.data(), as_count(initial.size()), MPI_FLOAT, 0, l.comm), "MPI_Bcast");

  // Whether this launch resumes a checkpoint: rank 0 read it.
  int resuming = job.resume != nullptr ? 1 : 0;
  check(MPI_Bcast(&resuming, 1, MPI_INT, 0, l.comm), "MPI_Bcast");

  RunResult result;
  bool left = false;
  if (l.rank == 0) {
    Observer quiet;
    HSGD_ASSERT(recorder != nullptr, "rank 0 needs a recorder");
    Primary primary(job, l, initial, recorder, observer ? observer : &quiet);
    result = primary.run();
  } else if (l.rank < l.servers) {
    run_replica(job, l, initial, resuming != 0);
    result.primary = false;
  } else {
    left = run_worker(job, l, resuming != 0, initial);
    result.primary = false;
  }
  // Every rank is through its last message: end together. A worker that
  // left waits here for the others without a deadline (the run goes on).
  MPI_Request barrier = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(l.comm, &barrier), "MPI_Ibarrier");
  wait_one(&barrier, left ? 1e9 : l.timeout,
           [&] { return fmt::format("on rank {} at the final barrier", l.rank); });
  MPI_Comm_free(&l.comm);
  return result;
}

}  // namespace hsgd
