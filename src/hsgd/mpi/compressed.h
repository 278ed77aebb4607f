// Compression over MPI ([compress], issue 14): the compressed payload is
// what travels, sharded as the parameters are.
//
// Push: the worker compresses each shard's slice of its gradient on its own
// (a PushStage per shard, each with its error-feedback residual for that
// slice) and sends shard s the encoding of slice s, so every server rank
// decodes its message alone. Pull: server rank s keeps one PullStage for
// its slice (one held copy per worker: what that worker holds of slice s)
// and sends the worker the compressed difference; the worker applies each
// shard's message to its slice. Messages vary in size (warm-up messages are
// raw): they are received into buffers of the largest size a message can
// have and measured with MPI_Get_count.
//
// Bytes: the worker reports in its next request (Request::push_bytes,
// pull_bytes, compress_s) what its push sent and what its previous pull
// received, as counted on the wire; rank 0 sums them (CompressTally) into
// the bytes_pushed / bytes_pulled / compress_s columns, a push's bytes when
// the server takes the push (not for a push dropped after the end). An uncompressed
// direction counts 4 bytes per parameter, as on threads and sim. Each
// server rank times its own decoding of pushes and encoding of pulls
// (ShardCompression::seconds, kept in its checkpoint state) and sends the
// total to rank 0 at each evaluation, which adds them to the workers' time:
// compress_s is both sides' time, as on threads.
//
// With one server rank the layout, seeds and messages are those of the
// threads runtime's Compression; shard s > 0 seeds its codecs with
// seed ^ (s x a constant).
//
// Thread-safety: none; each object belongs to the thread of its rank that
// calls MPI.
#pragma once
#include <mpi.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/compress/stage.h"
#include "hsgd/core/state.h"
#include "hsgd/metrics/recorder.h"
#include "hsgd/mpi/transport.h"

namespace hsgd::mpi {

// The codecs' seed of shard s (s = 0: `seed` itself).
uint64_t shard_seed(uint64_t seed, int shard);

// Server rank side: decodes the pushes of its slice, encodes and sends the
// pulls of its slice.
class ShardCompression {
 public:
  // `initial`: this shard's slice of the initial parameters (every worker's
  // held copy starts there).
  ShardCompression(const CompressOptions& o, const std::vector<std::vector<int64_t>>& shapes,
                   Shard range, int shard, int servers, int workers, uint64_t seed,
                   std::span<const float> initial, MPI_Comm comm, double timeout);
  ~ShardCompression();
  ShardCompression(const ShardCompression&) = delete;
  ShardCompression& operator=(const ShardCompression&) = delete;

  bool push_on() const { return push_ != nullptr; }
  bool pull_on() const { return pull_ != nullptr; }

  // A persistent receive of worker w's compressed push into its buffer.
  void init_push_recv(int w, MPI_Request* r);
  // Waits for that receive to complete and decodes the message into `grad`
  // (this slice). Throws MpiError on a timeout, InputError on a corrupt
  // message.
  void take_push(int w, MPI_Request* r, std::span<float> grad);
  // Sends worker w its pull of `params` (this slice) at server `version`:
  // the compressed difference to its held copy (raw under warm-up). Waits
  // for its previous pull send first.
  void send_pull(int w, std::span<const float> params, uint64_t version);
  // Waits for every pull send in flight.
  void settle();
  // Worker w starts afresh (it had left; its checkpoint blob is empty): its
  // held copy goes back to the initial parameters, where the worker starts.
  void forget(int w);
  // Seconds this shard has spent decoding pushes and encoding pulls since
  // the run started (a resumed run goes on from its checkpoint's).
  double seconds() const { return seconds_; }

  // The time above, the held copies, their codecs' warm starts. A state written for another
  // worker count is skipped: the held copies start afresh at the initial
  // parameters (as the threads runtime does), and so do the workers'.
  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  std::string who(int w) const;
  int shard_, servers_, workers_;
  MPI_Comm comm_;
  double timeout_;
  std::unique_ptr<PushDecoder> push_;
  size_t push_max_ = 0;  // bytes of the largest push message
  std::vector<std::vector<char>> push_buf_;
  std::unique_ptr<PullStage> pull_;
  std::vector<float> initial_;  // this slice's initial parameters (pull on)
  std::vector<std::string> pull_buf_;
  std::vector<MPI_Request> pull_send_;
  double seconds_ = 0;
};

// Worker side: encodes its push per shard, receives and applies its pulls.
class WorkerCompression {
 public:
  WorkerCompression(const CompressOptions& o, const std::vector<std::vector<int64_t>>& shapes,
                    std::vector<Shard> shards, int worker, uint64_t seed, MPI_Comm comm,
                    double timeout);
  bool push_on() const { return !push_.empty(); }
  bool pull_on() const { return !pull_.empty(); }

  // Compresses `grads` (all parameters) shard by shard with error feedback;
  // `version`: the version they were computed from (warm-up).
  void encode_push(std::span<const float> grads, uint64_t version);
  // Starts the sends of the encoded slices (reqs[s] to server rank s).
  void send_push(std::span<MPI_Request> reqs);
  // Counts an uncompressed push (push = none): 4 bytes per parameter.
  void count_plain_push();
  // A persistent receive of shard s's pull into its buffer.
  void init_pull_recv(size_t s, MPI_Request* r);
  // With pull compression: the worker's held copy (what the shards record
  // it holds) starts at the initial parameters.
  void start_held(std::span<const float> initial);
  // Waits for every shard's pull (reqs[s]), applies them to the held copy
  // and sets `params` (all parameters) to it: local steps (local:H) move
  // only the worker's parameters, never the held copy (issue 25, defect 2).
  // Counts their bytes.
  void take_pull(std::span<MPI_Request> reqs, std::span<float> params, const std::string& me);
  // Counts an uncompressed pull (pull = none): 4 bytes per parameter.
  void count_plain_pull();
  // Fills the request's byte and time fields with what happened since the
  // last report.
  void report(Request* r);

  // The residuals, warm starts and, with pull compression, the held copy
  // (which the server shards' held copies mirror); load() also sets
  // `params` to it.
  void save(StateWriter& w) const;
  void load(StateReader& r, std::span<float> params);

 private:
  std::vector<Shard> shards_;
  MPI_Comm comm_;
  double timeout_;
  size_t num_params_ = 0;
  std::vector<PushStage> push_;          // per shard; empty when push = none
  std::vector<std::string> push_bytes_;  // per shard: the last encoded push
  std::vector<float> sent_;
  std::vector<Codec> pull_;  // per shard: the decoders; empty when pull = none
  std::vector<size_t> pull_max_;
  std::vector<float> held_;  // with pull compression: see start_held
  std::vector<std::vector<char>> pull_buf_;
  std::vector<float> scratch_;
  int64_t push_bytes_total_ = 0, pull_bytes_total_ = 0;
  double compress_s_ = 0;
};

// Rank 0's totals of what the workers report.
struct CompressTally {
  CompressCounters counters;
  // A request rank 0 serves: the bytes of the worker's previous pull and
  // its seconds, and the bytes of its push when `push_taken` (the server
  // takes it: Server::on_push).
  void add(const Request& r, bool push_taken) {
    if (push_taken) counters.bytes_pushed += r.push_bytes;
    counters.bytes_pulled += r.pull_bytes;
    counters.compress_s += r.compress_s;
  }
  void fill(MetricsRow* row) const {
    row->has_compress = true;
    row->bytes_pushed = counters.bytes_pushed;
    row->bytes_pulled = counters.bytes_pulled;
    row->compress_s = counters.compress_s;
  }
};

}  // namespace hsgd::mpi
