// One server shard of the mpi runtime (roles.h): its slice of the
// parameters (double-buffered for the sends: mpi/param_buffers.h), its
// replica of the server state machine, its gradient buffers (one per
// worker) and its parameter sends. Used by rank 0 (primary.cc) and by every
// other server rank (replica.cc), which call the same methods in the same
// event order. Thread-safety: none; owned by its rank's MPI thread.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hsgd/mpi/compressed.h"
#include "hsgd/mpi/param_buffers.h"
#include "hsgd/mpi/roles.h"
#include "hsgd/mpi/sparse.h"
#include "hsgd/server/server.h"

namespace hsgd::mpi {

class ShardServer {
 public:
  // Shard `shard` of `l`, starting from its slice of `initial`; posts the
  // receive of every worker's first gradient slice.
  ShardServer(const Job& job, const Layout& l, int shard, const std::vector<float>& initial);
  ~ShardServer();
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  Server& server() { return *server_; }
  const Server& server() const { return *server_; }
  std::span<const float> params() const { return params_.live(); }
  SparseShard* sparse() { return sparse_.get(); }  // model.sparse, else null

  // Worker w's push, once its gradient slice is in; restarts the receive for
  // its next one. `finite`: the worker's screen of the whole push
  // (Request::finite), the server's rule for a plain push; a compressed
  // one the server screens whole after decoding it.
  Decision push(int w, uint64_t version, int64_t batch, double loss, double seconds, bool finite);
  // Worker w's push after the budget: received and dropped. Worker w sends
  // no more.
  void discard(int w);
  // Worker w leaves (may apply an update).
  Decision leave(int w, double seconds);

  // Sends this shard's parameters to worker w (its previous send is long
  // done: w received it before computing the push that led here).
  void send_params(int w);
  // Sends this shard's parameters to rank 0 for evaluation (model.sparse:
  // and the rows evaluation reads).
  void send_gather();
  // [compress]: rank 0, after send_gather's event: every shard's seconds
  // decoding pushes and encoding pulls, its own included (0 when off).
  double gather_compress_seconds();
  // train.noise_scale: rank 0, after send_gather's event: the noise-scale
  // sums since the last evaluation over every shard (each holds its slice's
  // part; the pairs are the same on all), its own included (zero when off).
  NoiseSums gather_noise();

  // This shard's server state (its parameters slice and all), for a
  // checkpoint; waits for the sends in flight first.
  std::string save();
  // Restores a state save() wrote, then fits the membership to this launch's
  // workers (as the threads runtime does): ids beyond them leave, missing
  // ones join. Every shard does the same, so they stay in step.
  void load(const std::string& bytes, const std::string& what, double seconds);
  // Waits for every parameter send in flight.
  void settle();

  // The update overlapped with the parameter sends (issue 30). A push that
  // applies an update leaves its step pending (Server::set_deferred_updates,
  // on unless compression or a row-sparse table needs the whole step), and
  // send_params queues the workers to send to. advance() runs the step over
  // its next chunk (chunks_of(slice, mpi.chunk), the messages' own) and
  // starts the queued sends of every chunk the step has finished, so a
  // worker receives chunk c while the server computes chunk c + 1. Returns
  // false when no step was pending. Every other method finishes the step
  // first, so the results are those of a step run whole; callers advance
  // while they would otherwise wait (primary.cc's loop, wait_advancing).
  bool advance();
  void flush() {
    while (advance()) {
    }
  }
  // Waits for `r` (a receive of the next event) while advancing the
  // pending step; the timeout counts from the call.
  void wait_advancing(MPI_Request* r, const std::function<std::string()>& what);

 private:
  // Before an event that may write the parameters: sends in flight keep
  // reading their version (the server moves to the other buffer).
  void writable(int pusher = -1);
  void take_gradient(int w);
  void start_receive(int w);
  // A step is pending (not yet written over the whole slice).
  bool stepping() const { return server_->update_done() < range_.size; }
  // Starts every queued send of a chunk the pending step has finished.
  void send_finished_chunks();
  // Once no step is pending (finished here or by the server itself): the
  // queued sends' remaining chunks and the gradient receives the step held.
  void release_waiting();

  const Layout& l_;
  int shard_;
  Shard range_;
  ParamBuffers params_;
  std::optional<Server> server_;
  std::vector<std::vector<float>> grads_;
  // Worker w's gradient receives: one per chunk of the slice (transport.h),
  // or one for a compressed push.
  std::vector<std::vector<MPI_Request>> grad_recv_;
  std::vector<Chunk> chunks_;
  // Sends waiting for the pending step: worker and the next chunk to send.
  struct Queued {
    int worker;
    size_t next;
  };
  std::vector<Queued> queued_;
  std::vector<int> receives_due_;        // gradient receives to restart once the step is done
  std::unique_ptr<SparseShard> sparse_;  // model.sparse: attached to server_
  std::unique_ptr<ShardCompression> z_;  // [compress]; null when off
  bool noise_ = false;                   // train.noise_scale
};

}  // namespace hsgd::mpi
