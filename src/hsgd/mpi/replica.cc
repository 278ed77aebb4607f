#include <fmt/format.h>

#include "hsgd/mpi/roles.h"
#include "hsgd/mpi/shard_server.h"

namespace hsgd::mpi {

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
    shard.wait_advancing(&recv, [&] {
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
        const Decision d =
            shard.push(e.worker, e.push_version, e.batch, e.loss, e.seconds, e.finite != 0);
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

}  // namespace hsgd::mpi
