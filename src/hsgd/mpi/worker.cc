#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <thread>

#include "hsgd/mpi/compressed.h"
#include "hsgd/mpi/roles.h"
#include "hsgd/mpi/sparse.h"
#include "hsgd/runtime/clock.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/local_steps.h"
#include "hsgd/runtime/sparse_rows.h"
#include "hsgd/server/server.h"

namespace hsgd::mpi {
namespace {

// Set by SIGTERM / SIGINT on a worker rank: leave at the next request.
volatile std::sig_atomic_t g_leave_requested = 0;
extern "C" void on_leave_signal(int) { g_leave_requested = 1; }

// A worker's checkpoint state as its save_state wrote it: sampler, delay
// streams, local momentum, compression.
void decode(StateReader& r, ShardSampler& sampler, DelayModel& delays,
            std::optional<LocalWorker>& local, WorkerCompression* z, std::span<float> params) {
  load_sampler(sampler, r);
  delays.load(r);
  if (r.get<uint8_t>() != 0) {
    if (!local) r.fail("corrupt (local-SGD state for a policy without it)");
    local->load(r);
  }
  if (z) z->load(r, params);
  r.expect_end();
}

}  // namespace

void check_worker_state(const Job& job, const Layout& l, int w, const std::string& bytes,
                        const std::string& what) {
  if (bytes.empty()) return;
  const Config& c = *job.config;
  ShardSampler sampler = make_sampler(job, w);
  DelayModel delays(c.stragglers, l.workers, c.train.seed);
  std::optional<LocalWorker> local;
  if (make_policy(c.policy, l.workers, c.optim.lr)->local_steps() > 0) {
    local.emplace(make_local_worker(c, l.num_params));
  }
  std::unique_ptr<WorkerCompression> z;  // its constructor sends nothing
  if (c.compress.on()) {
    z = std::make_unique<WorkerCompression>(c.compress, job.make_model()->param_shapes(), l.shards,
                                            w, c.train.seed, l.comm, l.timeout);
  }
  const ZeroedFloats copy(z && z->pull_on() ? l.num_params : 0);
  StateReader r(bytes, what);
  decode(r, sampler, delays, local, z.get(), copy.span());
}

bool leave_requested() { return g_leave_requested != 0; }

void catch_leave_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_leave_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

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
    if (z->pull_on()) {
      std::copy(initial.begin(), initial.end(), params.begin());
      z->start_held(initial);
    }
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
    if (z) z->save(w);
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
      decode(r, sampler, delays, local, z.get(), params);
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
  // Plain floats go in chunks of l.chunk (transport.h): the gradient's
  // sends and the parameters' receives are then one request per chunk.
  const bool plain_push = !z || !z->push_on(), plain_pull = !z || !z->pull_on();
  std::vector<std::span<const float>> grad_chunks;  // plain: what grad_send[i] sends
  if (plain_push) grad_send.clear();
  if (plain_pull) param_recv.clear();
  for (size_t s = 0; s < S; ++s) {
    const Shard& sh = l.shards[s];
    for (const Chunk& ch : chunks_of(sh.size, l.chunk)) {
      if (plain_push) {  // [compress]: MPI_Isend of each message instead
        grad_chunks.push_back(std::span<const float>(grads).subspan(sh.begin + ch.begin, ch.size));
        MPI_Request& r = grad_send.emplace_back(MPI_REQUEST_NULL);
        check(MPI_Send_init(grads.data() + sh.begin + ch.begin, as_count(ch.size), MPI_FLOAT,
                            static_cast<int>(s), kTagGradient, l.comm, &r),
              "MPI_Send_init");
      }
      if (plain_pull) {
        MPI_Request& r = param_recv.emplace_back(MPI_REQUEST_NULL);
        check(MPI_Recv_init(params.data() + sh.begin + ch.begin, as_count(ch.size), MPI_FLOAT,
                            static_cast<int>(s), kTagParams, l.comm, &r),
              "MPI_Recv_init");
      }
    }
    if (!plain_pull) z->init_pull_recv(s, &param_recv[s]);
  }
  const std::string me = worker_name(id, l.servers);
  // Checkpoints on (train.checkpoint_every > 0): the state before the push
  // in flight (issue 25, defect 8).
  const bool keep_before = c.train.checkpoint_every > 0;
  std::string before_push;

  // Sends the request (after the gradient slices, for a push) with the
  // parameter receives already posted, and waits for the reply. Returns the
  // version of the parameters now in `params`, or nothing at stop.
  const auto exchange = [&](bool push) -> std::optional<uint64_t> {
    check(MPI_Startall(as_count(param_recv.size()), param_recv.data()), "MPI_Startall");
    const bool rows = sparse && request.type != Request::kLeave;
    if (rows) sparse->start(push);  // row messages go before the request
    check(MPI_Start(&control[1]), "MPI_Start");
    if (push && z && z->push_on()) {
      z->send_push(grad_send);
    } else if (push) {
      // Each chunk screened for the non-finite rule (the server's
      // predicate), then sent while the next is screened; the verdict on
      // the whole push goes in the request, which follows the chunks.
      request.finite = 1;
      for (size_t i = 0; i < grad_send.size(); ++i) {
        if (request.finite && !Server::screen_part(grad_chunks[i])) request.finite = 0;
        check(MPI_Start(&grad_send[i]), "MPI_Start");
      }
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
      // Its push not in the cut: the state from before computing it.
      const bool before = reply.version == Reply::kSaveBeforePush;
      HSGD_ASSERT(!before || (push && keep_before), "a cut without this worker's push");
      send_bytes(l.comm, 0, before ? before_push : save_state(), l.timeout,
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
    // A cut that does not take the push about to be computed (it is held at
    // rank 0's gate and dropped, or taken after the cut) saves this state,
    // so that the checkpoint's samplers, local momentum and residuals are
    // those of the pushes in it: a resume recomputes that push.
    if (keep_before) before_push = save_state();
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
      exchange(false);  // answered with stop
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

}  // namespace hsgd::mpi
