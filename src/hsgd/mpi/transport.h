// The MPI runtime's wire protocol and the waiting it does.
//
// Ranks 0 .. S-1 are servers (rank s holds shard s), ranks S .. N-1 are
// workers (worker w is rank S + w). Messages, all on MPI_COMM_WORLD:
//   worker -> rank 0   kTagRequest  Request: pull, or push-then-pull
//   worker -> rank s   kTagGradient the gradient's shard-s slice (floats,
//                                   sent from the worker's gradient buffer
//                                   in chunks of mpi.chunk floats, one
//                                   message each, in order; with
//                                   compress.push its compressed encoding,
//                                   one message of bytes: mpi/compressed.h)
//   rank 0 -> worker   kTagReply    Reply: go (with the version) or stop
//   rank s -> worker   kTagParams   the parameters' shard-s slice (floats,
//                                   sent from the server's own buffer in
//                                   chunks like the gradient's, received
//                                   into the worker's parameter buffer; with
//                                   compress.pull the compressed difference
//                                   to the worker's copy, bytes)
//   rank 0 -> rank s   kTagEvent    Event: the next server event to replay
//   rank s -> rank 0   kTagGather   shard s's slice, for evaluation
// The gossip policies have no server ranks; their messages: kTagGossip*.
// Every message of the training loop uses persistent requests; the float
// slices are never copied into staging buffers.
#pragma once
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hsgd/core/shards.h"

namespace hsgd::mpi {

// A failed or timed-out MPI operation; what() names the operation.
class MpiError : public std::runtime_error {
 public:
  explicit MpiError(const std::string& what) : std::runtime_error(what) {}
};

enum Tag : int {
  kTagRequest = 11,
  kTagGradient = 12,
  kTagReply = 13,
  kTagParams = 14,
  kTagEvent = 15,
  kTagGather = 16,
  kTagState = 17,  // checkpoint bytes: to rank 0 when saving, from it when resuming
  // [compress]: server rank s -> rank 0 at each evaluation, the seconds its
  // shard has spent decoding pushes and encoding pulls (one double).
  kTagCompressTime = 18,
  // train.noise_scale: server rank s -> rank 0 at each evaluation, its
  // shard's noise-scale sums since the last one (three doubles: its part
  // of the sums over the parameters; server/noise.h).
  kTagNoise = 26,
  // Gossip (mpi/gossip.h), worker rank -> worker rank: round t's model (or
  // push-sum share) at gossip_tag(kTagGossipModel, t), sgp's share of the
  // weight (one double) at gossip_tag(kTagGossipWeight, t).
  // adpsgd (mpi/gossip_adpsgd.h), worker rank -> worker rank: an active
  // rank's request (a header, then its model in chunks), the passive rank's
  // reply (a header: averaged or not, then its model in chunks when it
  // averaged); every rank -> rank 0, its cumulative step counts; rank 0 ->
  // every rank, the stop.
  kTagAdpsgdRequest = 19,
  kTagAdpsgdModel = 20,
  kTagAdpsgdReply = 21,
  kTagAdpsgdReplyModel = 22,
  kTagAdpsgdProgress = 23,
  kTagAdpsgdStop = 24,
  // A lockstep gossip rank that leaves (mpi/gossip.h) -> its live
  // successor: sgp's (x, w), the model in chunks, then the weight.
  kTagGossipLeave = 25,
  kTagGossipModel = 1000,
  kTagGossipWeight = 10000,
};

// The tag of gossip round t: the base plus t modulo kGossipRounds (MPI
// guarantees tags up to 32767; the ranks are never that many rounds apart).
inline constexpr int kGossipRounds = 8192;
inline int gossip_tag(int base, int64_t round) {
  return base + static_cast<int>(round % kGossipRounds);
}

// worker -> rank 0.
struct Request {
  // leave: the worker leaves the run (SIGTERM/SIGINT); the reply is stop.
  enum Type : int32_t { kPull = 1, kPush = 2, kLeave = 3 };
  int32_t type = kPull;
  // push: 1 when every value of the gradient the worker sent is finite
  // (Server::screen_part on each chunk as it was sent; the whole push, over
  // every shard). The shards apply a plain push only if it is, so that no
  // shard applies a push another shard's slice makes non-finite.
  int32_t finite = 1;
  uint64_t version = 0;  // push: the version the gradient was computed from
  int64_t batch = 0;     // push: samples behind it
  double loss = 0;       // push: mean training loss
  // [compress] on (issue 14, mpi/compressed.h): the bytes this push sent to
  // the server shards, the bytes of the worker's previous pull, and the
  // seconds the worker spent encoding and decoding them. Zero otherwise.
  int64_t push_bytes = 0;
  int64_t pull_bytes = 0;
  double compress_s = 0;
};

// rank 0 -> worker.
struct Reply {
  // save: send your state (kTagState) to rank 0, then wait for the next
  // reply; with version = kSaveBeforePush the state from before computing
  // the push this request carries (the cut does not take that push).
  enum Type : int32_t { kGo = 1, kStop = 2, kSave = 3 };
  static constexpr uint64_t kSaveBeforePush = 1;
  int32_t type = kGo;
  int32_t pad = 0;
  uint64_t version = 0;  // go: the version of the parameters that follow
};

// rank 0 -> rank s: one event of the server state machine, in rank 0's order.
struct Event {
  // checkpoint: send this shard's server state to rank 0 (kTagState).
  // leave: the worker left (Server::on_leave at `seconds`).
  enum Type : int32_t { kPull = 1, kPush, kDiscard, kEval, kStop, kCheckpoint, kLeave };
  int32_t type = kPull;
  int32_t worker = -1;
  uint64_t push_version = 0;  // push: the version the gradient was computed from
  int64_t batch = 0;          // push
  double loss = 0;            // push
  double seconds = 0;         // push: training time of the event at rank 0
  uint64_t version = 0;       // the server's version after the event (a check)
  int32_t waits = 0;          // pull: the pull waits (SSP) (a check)
  int32_t finite = 1;         // push: Request::finite
};

// Shard s of n parameters over `servers` shards: contiguous, sizes differing
// by at most one (core/shards.h: the simulator splits the same way).
using Shard = ParamShard;
inline std::vector<Shard> split(size_t num_params, int servers) {
  return split_shards(num_params, servers);
}

// The chunks of a slice of n floats: [begin, begin + size) of at most
// `chunk` floats each, the last shorter; one (empty) for n = 0. Both ends
// of a push or a pull split alike, and MPI keeps messages of one sender
// and tag in order, so chunk i meets receive i.
struct Chunk {
  size_t begin = 0, size = 0;
};
std::vector<Chunk> chunks_of(size_t n, size_t chunk);

// Throws MpiError("<op> failed: <MPI's message>") when rc is not MPI_SUCCESS.
void check(int rc, const char* op);

// How a rank waits when nothing happened: it polls without pause for the
// first kSpinUs of a wait, then yields the core between polls until kYieldUs
// (the messages of a round trip arrive within that), then sleeps kSleepUs,
// then 2 x kSleepUs, between polls, so that a rank with nothing to do leaves
// the cores to the ranks computing gradients. (A sleep on these machines
// overshoots by ~100 us; longer sleeps chained on both sides of a round trip
// cost milliseconds: BENCHMARKS.md, MPI runtime.)
class Backoff {
 public:
  static constexpr int kSpinUs = 50;
  static constexpr int kYieldUs = 2000;
  static constexpr int kSleepUs = 50;
  void idle();
  void reset() { n_ = 0; }

 private:
  int n_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// Waits until every request in `reqs` (null or inactive ones included)
// completes. After `timeout_s` seconds throws MpiError("timed out after T s
// " + what()). `statuses`: one per request, or MPI_STATUSES_IGNORE.
void wait_all(std::span<MPI_Request> reqs, double timeout_s,
              const std::function<std::string()>& what, MPI_Status* statuses = MPI_STATUSES_IGNORE);
inline void wait_one(MPI_Request* r, double timeout_s, const std::function<std::string()>& what) {
  wait_all(std::span<MPI_Request>(r, 1), timeout_s, what);
}
// wait_one for a receive of bytes; returns how many arrived.
size_t wait_count(MPI_Request* r, double timeout_s, const std::function<std::string()>& what);

// Cancels `r` if it is an active receive that has not matched, completes it
// and frees it. For persistent receives nobody will ever send to.
void cancel_and_free(MPI_Request* r);
// Frees a send request; an active one completes in the background (sends
// cannot be cancelled reliably). For the error path.
void free_request(MPI_Request* r);

// Checkpoint state as one message of bytes. send_bytes blocks until sent;
// recv_bytes waits for the message (at most timeout_s) and takes its size
// from the message itself.
void send_bytes(MPI_Comm comm, int dest, const std::string& bytes, double timeout_s,
                const std::function<std::string()>& what);
std::string recv_bytes(MPI_Comm comm, int src, double timeout_s,
                       const std::function<std::string()>& what);

// "worker 2 (rank 3)" for worker w with S servers.
std::string worker_name(int w, int servers);

}  // namespace hsgd::mpi
