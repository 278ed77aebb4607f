// Double-buffered parameter sends of one server shard (issue 12).
//
// A server rank sends its parameter slice to a worker straight from the
// buffer its server updates (no staging copy). Under shared memory Open MPI
// reads large messages from the sender's memory while the receiver copies
// them, so the buffer must not change until every send from it completes.
// With one buffer, a push had to wait for every parameter send in flight
// (another worker still receiving the previous version) before its update:
// head-of-line blocking. With two, a push whose buffer is still being sent
// copies it into the other buffer (once that one's sends are done, which by
// then they normally are) and updates there; the sends in flight keep
// reading the old version. When nothing is in flight (the common case with
// one worker) the update writes in place and nothing is copied.
#pragma once
#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "hsgd/mpi/transport.h"

namespace hsgd::mpi {

class ParamBuffers {
 public:
  // `initial`: the shard's parameters. Worker w's parameters go to rank
  // worker_ranks[w]; gather_rank >= 0: the rank evaluation gathers to.
  // `what` names the shard in timeout messages. A worker's parameters go
  // in messages of at most `chunk` floats (transport.h, chunks_of); the
  // gather's in one.
  ParamBuffers(std::vector<float> initial, MPI_Comm comm, const std::vector<int>& worker_ranks,
               int gather_rank, double timeout_s, std::string what, size_t chunk);
  ~ParamBuffers();
  ParamBuffers(const ParamBuffers&) = delete;
  ParamBuffers& operator=(const ParamBuffers&) = delete;

  // The buffer the server reads and updates.
  std::span<float> live() { return bufs_[live_]; }
  std::span<const float> live() const { return bufs_[live_]; }

  // Before anything writes live(): returns true when live() moved to the
  // other buffer (same values; the caller points its server at it), false
  // when it may be written in place (no send from it in flight). `pusher`
  // (or -1): a worker known to have received its last parameters (it
  // computed a gradient from them): its send is waited for, not tested, as
  // only the notice of its completion can still be on the way.
  bool prepare_write(int pusher = -1);

  // Starts sending live() to worker w (after w's previous send completes:
  // it has, w received it before computing the push that led here).
  void send(int w);
  // The same in two steps, for parameters that become final chunk by chunk
  // (a pending update: mpi/shard_server.h): begin_send waits for w's
  // previous send, then send_chunk starts chunk c of live() (chunks(), each
  // once, any order).
  void begin_send(int w);
  void send_chunk(int w, size_t c);
  const std::vector<Chunk>& chunks() const { return chunks_; }
  // Starts sending live() to the gather rank.
  void send_gather();
  // Waits for every send in flight, from both buffers.
  void settle();

  // Updates that had to move to the other buffer (each a copy of the slice),
  // and updates written in place.
  int64_t moves() const { return moves_; }
  int64_t in_place() const { return in_place_; }

 private:
  // True when no send from buffer b is in flight (tests, never waits).
  bool idle(int b);
  void wait_buffer(int b);
  // Worker w's chunk sends from buffer b.
  std::span<MPI_Request> sends_to(int b, int w) {
    return std::span<MPI_Request>(sends_[b]).subspan(static_cast<size_t>(w) * chunks_.size(),
                                                     chunks_.size());
  }

  MPI_Comm comm_;
  double timeout_;
  std::string what_;
  std::vector<int> worker_ranks_;
  std::array<std::vector<float>, 2> bufs_;
  // Persistent sends per buffer: [b][w * chunks_ + c] chunk c to worker w,
  // and [b] to gather.
  std::array<std::vector<MPI_Request>, 2> sends_;
  std::vector<Chunk> chunks_;
  std::array<MPI_Request, 2> gather_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int live_ = 0;
  int64_t moves_ = 0, in_place_ = 0;
};

}  // namespace hsgd::mpi
