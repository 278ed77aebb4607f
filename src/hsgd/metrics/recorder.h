// Metrics rows, written as CSV and JSONL. Files are written under
// `<name>.partial` and renamed by finish(), so an interrupted run never leaves
// a file that looks complete.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <istream>
#include <optional>
#include <string>
#include <vector>

namespace hsgd {

// One evaluation. Column meanings: README, "Output".
struct MetricsRow {
  double time_s = 0;      // training time (wall or virtual), evaluation excluded
  int64_t updates = 0;    // server version
  int64_t samples = 0;    // samples in pushed gradients
  double epoch = 0;       // samples / training-set size
  int k = 0;              // threshold in force
  double train_loss = 0;  // mean loss of the pushes since the previous row (NaN if none)
  double test_loss = 0;
  double test_acc = 0;  // fraction in [0, 1]
  // Binary models (dlrm): test AUC and log loss; NaN otherwise.
  double test_auc = std::nan("");
  double test_logloss = std::nan("");
  double staleness_mean = 0;  // over pushes applied since the previous row
  int64_t staleness_max = 0;
  int64_t dropped = 0;
  int64_t nonfinite = 0;  // pushes dropped for a NaN or Inf since the previous row
  double idle_frac = 0;   // fraction of worker time spent waiting since the previous row
  int live_workers = 0;
  std::string policy;
  uint64_t seed = 0;
  // With compression on ([compress], issue 14) three more columns, totals
  // since the start: bytes of all pushes and pulls as they travel, and the
  // seconds spent compressing and decompressing (virtual on sim).
  bool has_compress = false;
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  double compress_s = 0;
  // The simulator's shared network (sim.network = "shared", issue 27): one
  // more column, the busiest interface's utilisation over the interval
  // since the previous row (its carried bytes / its capacity x seconds).
  bool has_net = false;
  double net_util = 0;
  // The serverless gossip policies (issue 28): two more columns, the
  // consensus distance Xi = sqrt(mean_i ||x_i - x_bar||^2) over the workers'
  // models and Xi / ||x_bar||.
  bool has_consensus = false;
  double consensus = 0;
  double consensus_rel = 0;
  // Gossip with gossip.eval_workers (issue 28): three more columns, the
  // test accuracy of every worker's own (de-biased) model: the lowest, the
  // mean and the highest over the workers.
  bool has_worker_eval = false;
  double worker_acc_min = std::nan("");
  double worker_acc_mean = std::nan("");
  double worker_acc_max = std::nan("");
  // Mixture models (model dpgmm, issue 31): two more columns after all
  // the others, effective_k (components with E[pi_k] > 1 %) and ari (the
  // adjusted Rand index against the test labels; NaN without labels).
  bool has_mixture = false;
  double effective_k = std::nan("");
  double ari = std::nan("");
  // train.noise_scale: four more columns after all the others, the
  // gradient noise scale B_simple = tr(S) / |G|^2 in samples, its two
  // parts and the mean lag of the pairs in versions (server/noise.h), over
  // the pushes since the previous row; NaN without a pair of pushes
  // (B_simple also with a |G|^2 estimate <= 0).
  bool has_noise = false;
  double noise_scale = std::nan("");
  double grad_norm_sq = std::nan("");
  double grad_trace_cov = std::nan("");
  double noise_lag = std::nan("");
};

// The optional column groups of metrics.csv. They follow the base columns
// (csv_header()) in this order, each when on: compress (bytes_pushed,
// bytes_pulled, compress_s), net (net_util), consensus (consensus,
// consensus_rel), worker_eval (worker_acc_min, worker_acc_mean,
// worker_acc_max), mixture (effective_k, ari), noise (noise_scale,
// grad_norm_sq, grad_trace_cov, noise_lag).
struct Columns {
  bool compress = false;
  bool net = false;
  bool consensus = false;
  bool worker_eval = false;
  bool mixture = false;
  bool noise = false;
  // The groups row `r` has (its has_* flags).
  static Columns of(const MetricsRow& r);
  bool operator==(const Columns&) const = default;
};

// The CSV header line (no newline).
const std::string& csv_header();
// The same with the compression columns appended.
const std::string& csv_header_compress();

// The header (no newline) with the optional groups `c`, and a row as
// metrics.csv holds it: the values of that header's columns.
std::string csv_header_of(Columns c);
std::string csv_line(const MetricsRow& r, Columns c);
// The groups of a header line csv_header_of wrote; nullopt for any other line.
std::optional<Columns> columns_of_header(const std::string& header);

// Thread-safety: none (one writer). The header is written with the first
// row: its columns are the compression ones when `compress`, and net_util
// when that row has_net (every row of a run has the same columns).
class Recorder {
 public:
  // A fresh run's recorder: open() creates `dir/metrics.csv.partial` and
  // `dir/metrics.jsonl.partial` (and removes the final files a previous run
  // left there); nothing is written before, so a run refused while it sets
  // up touches nothing. `compress`: write the compression columns
  // (csv_header_compress()).
  explicit Recorder(const std::string& dir, bool compress = false);
  // Resumes a run: keeps the header and the first `keep_rows` rows of the
  // run's metrics.csv and metrics.jsonl (final or .partial, whichever is
  // newer) and appends after them. Throws InputError naming the file if it
  // has fewer rows or cannot be read. Reads only: the files are rewritten
  // (as .partial) by open(), so a resume refused later touches nothing.
  Recorder(const std::string& dir, int64_t keep_rows, bool compress = false);
  // A recorder that keeps its rows in memory only (rows()) and writes no
  // file: for runs whose rows are read, not kept (auto's pilot,
  // runtime/pilot.h).
  struct InMemory {};
  explicit Recorder(InMemory);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // The recorder's first write to the directory (write() and finish() call
  // it; a no-op once open).
  void open();
  void write(const MetricsRow& r);
  // Flushes, closes and renames the files to their final names.
  void finish();
  const std::vector<MetricsRow>& rows() const { return rows_; }

 private:
  std::string dir_;
  std::FILE* csv_ = nullptr;
  std::FILE* jsonl_ = nullptr;
  std::vector<MetricsRow> rows_;
  bool memory_ = false;   // Recorder(InMemory): rows only, no file
  bool pending_ = false;  // not yet open(): a resume's kept text below, or a fresh run
  bool header_ = false;   // the header line is written (or kept)
  Columns cols_;          // compress from the constructor, the rest from the first row
  std::string kept_csv_, kept_jsonl_;
};

// Reads a metrics.csv written by Recorder: it starts with the base columns
// (csv_header()); every column is found by its header name, the optional
// groups' (Columns) when present.
// Throws InputError naming the file and line on anything else.
std::vector<MetricsRow> read_metrics_csv(const std::string& path);
// The same from a stream; `path` names it in messages.
std::vector<MetricsRow> parse_metrics_csv(std::istream& in, const std::string& path);

// Writes `text` to `path` atomically (path.partial, then rename).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace hsgd
