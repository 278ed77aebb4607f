// Row-sparse push and pull over MPI (model.sparse = true on the mpi
// runtime; issue 16). The threads/sim design (server/sparse.h,
// runtime/sparse_rows.h) spread over the server ranks:
//
//  - The dense part of the parameters is split over the S server ranks as
//    dense models are (contiguous slices, mpi_runtime.h); the embedding rows
//    are partitioned by id: global row r (table j's row i is global row
//    table_offset[j] + i) lives on server rank r mod S, as its local row
//    r div S. Each server rank holds only its rows (and their lazy
//    optimizer state and versions) in a RowTable attached to its replica of
//    the server state machine, so every rank applies its rows in the same
//    updates as its dense slice, and a checkpoint's server-s blob holds
//    rank s's rows and their state.
//  - A worker sends every server rank s, before each request to rank 0, one
//    row message (kTagRows): the rows of its push that s owns (local ids,
//    sorted, and their gradients; none for a pull) and the local ids of the
//    rows its next batch reads. Rank 0 answers the request in its order and
//    first tells every rank to take that message (event kEventRows), so the
//    ranks consume the messages of a worker in the same order. When a rank
//    serves the worker's pull (rank 0 at once, the others at the replay) it
//    sends its dense slice and the requested rows (kTagRowValues), both of
//    the same version.
//  - Initialisation: each server rank initialises only its own rows
//    (Model::init_row: every row has its own seeded stream, so these are
//    the rows threads and sim start from); the CLI builds, and rank 0
//    broadcasts, only the dense part.
//  - Evaluation: rank 0 gathers, with the dense slices, only the rows the
//    evaluated test samples read (kTagRowGather; every rank knows which
//    from its copy of the test set), into a calloc'd flat buffer, and with
//    them each rank's RowStats and the size of its row state
//    (summary.json "sparse").
//  - model.bin: the final rows travel to rank 0 in chunks (kEventModel,
//    kTagRowChunk) that it appends to a file; the CLI writes model.bin
//    from the dense part and that file, chunk by chunk.
//
// So no rank holds the whole tables: a server rank holds its rows and
// their state, rank 0 additionally the evaluated rows and one chunk, a
// worker the rows its batches read (its parameter buffer spans the flat
// layout but is calloc'd: only the pages of those rows are touched).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/data/dataset.h"
#include "hsgd/model/model.h"
#include "hsgd/runtime/runtime.h"
#include "hsgd/server/server.h"
#include "hsgd/server/sparse.h"

namespace hsgd::mpi {

// Tags and the event type of the row messages (beyond transport.h's).
constexpr int kTagRows = 31;         // worker -> rank s: push rows + pull ids
constexpr int kTagRowValues = 32;    // rank s -> worker: the pulled rows
constexpr int kTagRowGather = 33;    // rank s -> rank 0: its rows and counts
constexpr int kTagRowChunk = 34;     // rank s -> rank 0: a chunk of its final rows
constexpr int32_t kEventRows = 31;   // Event type: take the worker's row message
constexpr int32_t kEventModel = 32;  // Event type: send the final rows in chunks

// Row r of `rows` lives on rank r mod servers as local row r div servers.
struct RowPartition {
  int servers = 1;
  int64_t rows = 0;
  int owner(int64_t r) const { return static_cast<int>(r % servers); }
  int64_t local(int64_t r) const { return r / servers; }
  int64_t global(int s, int64_t k) const { return k * servers + s; }
  int64_t rows_of(int s) const { return (rows - s + servers - 1) / servers; }
};

// What the sparse parts need of the launch.
struct RowLink {
  MPI_Comm comm = MPI_COMM_WORLD;
  int servers = 1;
  int workers = 1;
  double timeout = 120;
  int64_t batch = 1;  // train.batch: bounds a row message
  int worker_rank(int w) const { return servers + w; }
};

// Decodes a row message (SparseWorkerLink::start's layout: int64 n_push,
// int64 n_pull, n_push int64 local ids, n_push x dim floats, n_pull int64
// local ids) of exactly msg.size() bytes into `push` and `pull`, checking
// it against the bytes received: the counts match the size, every id is
// in [0, rows) (this rank's local rows) and the push ids are sorted and
// unique. Throws MpiError("<from>: a malformed row message: <why>")
// otherwise; `from` names the sender and the receiver.
void parse_row_message(std::span<const char> msg, int64_t dim, int64_t rows, RowPush* push,
                       std::vector<int64_t>* pull, const std::string& from);

// A server rank's rows: the table (attached to `server` as its hook), the
// workers' row messages, the pulled rows it sends.
class SparseShard {
 public:
  // Initialises this rank's rows (Model::init_row with train.seed);
  // `server` is this rank's replica over its dense slice (outlives this).
  SparseShard(const Job& job, const RowLayout& layout, const RowLink& link, int shard,
              Server& server);
  ~SparseShard();
  SparseShard(const SparseShard&) = delete;
  SparseShard& operator=(const SparseShard&) = delete;

  // Event kEventRows: waits for worker w's row message and keeps its push
  // rows and pull ids until the push and the pull that use them.
  void take(int w);
  // Stages w's push rows into the table (before Server::on_push); returns
  // `loss`, or NaN when a row gradient is not finite.
  double stage(int w, double loss);
  // Sends worker w the rows of its pull (after the dense slice).
  void send_rows(int w);
  // Ranks other than 0, at an evaluation: the rows the evaluation reads
  // and the counts to rank 0 (returns when rank 0 has them).
  void send_gather();
  // Rank 0, at an evaluation: every rank's rows that the evaluation reads
  // (those of the first train.eval_samples test samples) into `params` (the
  // whole flat layout, calloc'd: no other row is written) and their counts
  // into gathered().
  void gather(std::span<float> params);
  const SparseResult& gathered() const { return gathered_; }
  // The final rows for model.bin, in bounded chunks (event kEventModel):
  // chunk c is every rank's local rows [c L, (c + 1) L), which are the
  // global rows [c L S, (c + 1) L S). Ranks other than 0 send theirs;
  // rank 0 interleaves them with its own and appends each chunk, as raw
  // float32 in global row order, to the file `path` (so rank 0 holds one
  // chunk, L S rows, at a time).
  void send_chunks();
  void write_chunks(const std::string& path);
  const RowTable& table() const { return *table_; }

 private:
  struct Head {  // the counts that precede a rank's rows in a gather
    int64_t rows = 0;
    int64_t sent = 0;       // rows sent for the evaluation
    int64_t peak_rss = -1;  // the rank's peak resident bytes (VmHWM) so far
    int64_t state_bytes = 0;
    RowStats stats;
  };

  // This rank's rows that evaluation reads, in eval_rows_ order.
  void pack(std::vector<float>* out) const;

  RowLayout layout_;
  RowLink link_;
  int shard_;
  RowPartition part_;
  std::vector<float> rows_;
  std::unique_ptr<RowTable> table_;
  size_t capacity_;  // bytes of a row message
  std::vector<std::vector<char>> recv_buf_;
  std::vector<MPI_Request> recv_;
  std::vector<RowPush> push_;                 // per worker: its taken push rows
  std::vector<std::vector<int64_t>> pull_;    // per worker: its taken pull ids
  std::vector<std::vector<float>> send_buf_;  // per worker: its pulled rows
  std::vector<MPI_Request> send_;
  SparseResult gathered_;
  std::vector<std::vector<int64_t>> eval_rows_;  // per rank: the global rows evaluation reads
};

// A worker rank's side: its batches, its row messages and the rows it
// receives. Sequence per request: prepare (the batch the reply's
// parameters are for), start (before the request), then finish.
class SparseWorkerLink {
 public:
  SparseWorkerLink(Model& model, const RowLayout& layout, const RowLink& link, int id,
                   std::span<float> params);
  ~SparseWorkerLink();
  SparseWorkerLink(const SparseWorkerLink&) = delete;
  SparseWorkerLink& operator=(const SparseWorkerLink&) = delete;

  // Draws the batch the next pull is for, unless one is drawn already.
  void prepare(ShardSampler& sampler, int64_t batch_size);
  // The sampler state before that draw (a checkpoint saves it, so a resumed
  // worker draws the same batch again).
  const SamplerState& before_draw() const { return before_; }
  // The row-sparse gradient of the pulled batch; *samples = its size.
  // Returns the loss, NaN when a row gradient is not finite.
  double compute(int64_t* samples);
  // Posts the receives of the pulled rows and sends every rank its row
  // message (with the computed batch's rows when `push`).
  void start(bool push);
  // After the reply: go (the rows arrive; they are written into the
  // parameters and the drawn batch becomes the pulled one) or stop.
  void finish(bool go);
  // Waits for the row messages to be sent.
  void settle();

 private:
  Model& model_;
  RowLayout layout_;
  RowLink link_;
  int id_;
  RowPartition part_;
  std::span<float> params_;  // the worker's (the model is bound to them)
  Batch cur_, next_;
  bool has_next_ = false;
  SamplerState before_;
  std::vector<int64_t> cur_rows_, next_rows_;  // global ids, sorted
  std::vector<float> cur_grads_;               // cur_rows_ x dim
  std::vector<std::vector<char>> msg_;         // per rank: the row message
  std::vector<std::vector<size_t>> where_;     // per rank: positions in next_rows_ it serves
  std::vector<std::vector<float>> values_;     // per rank: the rows it sends
  std::vector<MPI_Request> send_, recv_;
};

}  // namespace hsgd::mpi
