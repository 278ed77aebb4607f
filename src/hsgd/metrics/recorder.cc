#include "hsgd/metrics/recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

std::FILE* open_or_throw(const std::string& path, const char* mode = "w") {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (!f) throw InputError(path + ": cannot write (" + std::strerror(errno) + ")");
  return f;
}

void rename_or_throw(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec) throw InputError(to + ": cannot write (" + ec.message() + ")");
}

// JSON has no NaN: a missing value is null.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

// One optional column: its name, its text in metrics.csv, its value in
// metrics.jsonl, and how a reader stores it.
struct OptionalColumn {
  const char* name;
  std::string (*csv)(const MetricsRow&);
  nlohmann::json (*json)(const MetricsRow&);
  void (*set)(MetricsRow&, double);
};
// A group of optional columns (Columns), written together.
struct Group {
  bool Columns::*on;
  bool MetricsRow::*has;
  std::vector<OptionalColumn> cols;
};

// Every group, in the order of the columns.
const std::vector<Group>& groups() {
  using R = MetricsRow;
  using J = nlohmann::json;
  static const std::vector<Group> g = {
      {&Columns::compress,
       &R::has_compress,
       {{"bytes_pushed", [](const R& r) { return fmt::format("{}", r.bytes_pushed); },
         [](const R& r) { return J(r.bytes_pushed); },
         [](R& r, double v) { r.bytes_pushed = static_cast<int64_t>(v); }},
        {"bytes_pulled", [](const R& r) { return fmt::format("{}", r.bytes_pulled); },
         [](const R& r) { return J(r.bytes_pulled); },
         [](R& r, double v) { r.bytes_pulled = static_cast<int64_t>(v); }},
        {"compress_s", [](const R& r) { return fmt::format("{:.6f}", r.compress_s); },
         [](const R& r) { return J(r.compress_s); }, [](R& r, double v) { r.compress_s = v; }}}},
      {&Columns::net,
       &R::has_net,
       {{"net_util", [](const R& r) { return fmt::format("{:.4f}", r.net_util); },
         [](const R& r) { return J(r.net_util); }, [](R& r, double v) { r.net_util = v; }}}},
      {&Columns::consensus,
       &R::has_consensus,
       {{"consensus", [](const R& r) { return fmt::format("{:.6g}", r.consensus); },
         [](const R& r) { return J(r.consensus); }, [](R& r, double v) { r.consensus = v; }},
        {"consensus_rel", [](const R& r) { return fmt::format("{:.6g}", r.consensus_rel); },
         [](const R& r) { return J(r.consensus_rel); },
         [](R& r, double v) { r.consensus_rel = v; }}}},
      {&Columns::worker_eval,
       &R::has_worker_eval,
       {{"worker_acc_min", [](const R& r) { return fmt::format("{:.6f}", r.worker_acc_min); },
         [](const R& r) { return num(r.worker_acc_min); },
         [](R& r, double v) { r.worker_acc_min = v; }},
        {"worker_acc_mean", [](const R& r) { return fmt::format("{:.6f}", r.worker_acc_mean); },
         [](const R& r) { return num(r.worker_acc_mean); },
         [](R& r, double v) { r.worker_acc_mean = v; }},
        {"worker_acc_max", [](const R& r) { return fmt::format("{:.6f}", r.worker_acc_max); },
         [](const R& r) { return num(r.worker_acc_max); },
         [](R& r, double v) { r.worker_acc_max = v; }}}},
      {&Columns::mixture,
       &R::has_mixture,
       {{"effective_k", [](const R& r) { return fmt::format("{:.0f}", r.effective_k); },
         [](const R& r) { return num(r.effective_k); }, [](R& r, double v) { r.effective_k = v; }},
        {"ari", [](const R& r) { return fmt::format("{:.6f}", r.ari); },
         [](const R& r) { return num(r.ari); }, [](R& r, double v) { r.ari = v; }}}},
      {&Columns::noise,
       &R::has_noise,
       {{"noise_scale", [](const R& r) { return fmt::format("{:.6g}", r.noise_scale); },
         [](const R& r) { return num(r.noise_scale); }, [](R& r, double v) { r.noise_scale = v; }},
        {"grad_norm_sq", [](const R& r) { return fmt::format("{:.6g}", r.grad_norm_sq); },
         [](const R& r) { return num(r.grad_norm_sq); },
         [](R& r, double v) { r.grad_norm_sq = v; }},
        {"grad_trace_cov", [](const R& r) { return fmt::format("{:.6g}", r.grad_trace_cov); },
         [](const R& r) { return num(r.grad_trace_cov); },
         [](R& r, double v) { r.grad_trace_cov = v; }},
        {"noise_lag", [](const R& r) { return fmt::format("{:.4f}", r.noise_lag); },
         [](const R& r) { return num(r.noise_lag); }, [](R& r, double v) { r.noise_lag = v; }}}},
  };
  return g;
}

}  // namespace

Columns Columns::of(const MetricsRow& r) {
  Columns c;
  for (const Group& g : groups()) c.*g.on = r.*g.has;
  return c;
}

const std::string& csv_header() {
  static const std::string h =
      "time_s,updates,samples,epoch,k,train_loss,test_loss,test_acc,test_auc,test_logloss,"
      "staleness_mean,"
      "staleness_max,dropped,nonfinite,idle_frac,live_workers,policy,seed";
  return h;
}

const std::string& csv_header_compress() {
  static const std::string h = csv_header() + ",bytes_pushed,bytes_pulled,compress_s";
  return h;
}

// Nothing is written before open() (the runtime's Job::open_outputs, or the
// first row): a run refused while it sets up leaves the directory as it was.
Recorder::Recorder(const std::string& dir, bool compress) : dir_(dir) {
  cols_.compress = compress;
  pending_ = true;
}

namespace {

// The lines of `dir/name` (or its .partial, whichever was written last).
std::string newest_of(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  const std::string fin = dir + "/" + name, part = fin + ".partial";
  std::error_code e1, e2;
  const bool has_fin = fs::exists(fin, e1), has_part = fs::exists(part, e2);
  if (has_fin && has_part) {
    return fs::last_write_time(part, e1) >= fs::last_write_time(fin, e2) ? part : fin;
  }
  if (has_part) return part;
  if (has_fin) return fin;
  throw InputError(fin + ": missing (the run's metrics are needed to resume it)");
}

std::vector<std::string> first_lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot read (" + std::strerror(errno) + ")");
  std::vector<std::string> lines;
  std::string line;
  while (lines.size() < n && std::getline(in, line)) {
    if (in.eof()) break;  // a last line without its newline was cut by a kill
    lines.push_back(line);
  }
  if (lines.size() < n) {
    throw InputError(
        fmt::format("{}: has {} complete lines, the checkpoint needs {}", path, lines.size(), n));
  }
  return lines;
}

}  // namespace

Recorder::Recorder(const std::string& dir, int64_t keep_rows, bool compress) : dir_(dir) {
  const auto keep = static_cast<size_t>(std::max<int64_t>(0, keep_rows));
  const std::string csv_path = newest_of(dir, "metrics.csv");
  const std::vector<std::string> csv = first_lines(csv_path, keep + 1);
  const std::optional<Columns> cols = columns_of_header(csv[0]);
  if (!cols || cols->compress != compress) {
    throw InputError(csv_path + ":1: expected the hsgd metrics header '" +
                     (compress ? csv_header_compress() : csv_header()) + "'");
  }
  cols_ = *cols;
  header_ = true;
  const std::vector<std::string> jsonl = first_lines(newest_of(dir, "metrics.jsonl"), keep);
  for (const std::string& l : csv) kept_csv_ += l + "\n";
  for (const std::string& l : jsonl) kept_jsonl_ += l + "\n";
  // rows() reads the kept rows through the one CSV reader; nothing is
  // written before open().
  std::istringstream in(kept_csv_);
  rows_ = parse_metrics_csv(in, csv_path);
  pending_ = true;
}

Recorder::Recorder(InMemory) : memory_(true) {}

void Recorder::open() {
  if (!pending_) return;
  pending_ = false;
  // The kept rows (none for a fresh run) replace the partial files
  // atomically.
  write_file_atomic(dir_ + "/metrics.csv.partial", kept_csv_);
  write_file_atomic(dir_ + "/metrics.jsonl.partial", kept_jsonl_);
  kept_csv_.clear();
  kept_jsonl_.clear();
  csv_ = open_or_throw(dir_ + "/metrics.csv.partial", "a");
  jsonl_ = open_or_throw(dir_ + "/metrics.jsonl.partial", "a");
  for (const char* f : {"/metrics.csv", "/metrics.jsonl"}) {
    std::error_code ec;
    std::filesystem::remove(dir_ + f, ec);  // the .partial files are the run's now
  }
}

Recorder::~Recorder() {
  if (csv_) std::fclose(csv_);
  if (jsonl_) std::fclose(jsonl_);
}

std::string csv_header_of(Columns c) {
  std::string h = csv_header();
  for (const Group& g : groups()) {
    if (!(c.*g.on)) continue;
    for (const OptionalColumn& col : g.cols) h += std::string(",") + col.name;
  }
  return h;
}

std::optional<Columns> columns_of_header(const std::string& header) {
  const std::string& base = csv_header();
  if (header.rfind(base, 0) != 0) return std::nullopt;
  std::string rest = header.substr(base.size());
  Columns c;
  for (const Group& g : groups()) {
    std::string names;
    for (const OptionalColumn& col : g.cols) names += std::string(",") + col.name;
    if (rest.rfind(names, 0) == 0) {
      c.*g.on = true;
      rest = rest.substr(names.size());
    }
  }
  if (!rest.empty()) return std::nullopt;
  return c;
}

std::string csv_line(const MetricsRow& r, Columns c) {
  std::string line = fmt::format(
      "{:.3f},{},{},{:.4f},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.4f},{},{},{},{:.4f},{},{},{}",
      r.time_s, r.updates, r.samples, r.epoch, r.k, r.train_loss, r.test_loss, r.test_acc,
      r.test_auc, r.test_logloss, r.staleness_mean, r.staleness_max, r.dropped, r.nonfinite,
      r.idle_frac, r.live_workers, r.policy, r.seed);
  for (const Group& g : groups()) {
    if (!(c.*g.on)) continue;
    for (const OptionalColumn& col : g.cols) {
      line += ',';
      line += col.csv(r);
    }
  }
  return line;
}

void Recorder::write(const MetricsRow& r) {
  if (memory_) {
    rows_.push_back(r);
    return;
  }
  open();
  if (!header_) {
    header_ = true;
    const bool compress = cols_.compress;  // the constructor's, not the row's
    cols_ = Columns::of(r);
    cols_.compress = compress;
    std::fprintf(csv_, "%s\n", csv_header_of(cols_).c_str());
  }
  rows_.push_back(r);
  std::fputs((csv_line(r, cols_) + "\n").c_str(), csv_);
  nlohmann::json j = {{"time_s", r.time_s},
                      {"updates", r.updates},
                      {"samples", r.samples},
                      {"epoch", r.epoch},
                      {"k", r.k},
                      {"train_loss", num(r.train_loss)},
                      {"test_loss", num(r.test_loss)},
                      {"test_acc", num(r.test_acc)},
                      {"test_auc", num(r.test_auc)},
                      {"test_logloss", num(r.test_logloss)},
                      {"staleness_mean", r.staleness_mean},
                      {"staleness_max", r.staleness_max},
                      {"dropped", r.dropped},
                      {"nonfinite", r.nonfinite},
                      {"idle_frac", r.idle_frac},
                      {"live_workers", r.live_workers},
                      {"policy", r.policy},
                      {"seed", r.seed}};
  for (const Group& g : groups()) {
    if (!(cols_.*g.on)) continue;
    for (const OptionalColumn& col : g.cols) j[col.name] = col.json(r);
  }
  std::fputs((j.dump() + "\n").c_str(), jsonl_);
  std::fflush(csv_);
  std::fflush(jsonl_);
}

void Recorder::finish() {
  if (memory_) return;
  open();
  if (!csv_) return;
  if (!header_) {  // no row: the header alone
    header_ = true;
    std::fprintf(csv_, "%s\n", csv_header_of(Columns{.compress = cols_.compress}).c_str());
  }
  std::fclose(csv_);
  std::fclose(jsonl_);
  csv_ = jsonl_ = nullptr;
  rename_or_throw(dir_ + "/metrics.csv.partial", dir_ + "/metrics.csv");
  rename_or_throw(dir_ + "/metrics.jsonl.partial", dir_ + "/metrics.jsonl");
}

std::vector<MetricsRow> read_metrics_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
  return parse_metrics_csv(in, path);
}

std::vector<MetricsRow> parse_metrics_csv(std::istream& in, const std::string& path) {
  std::string line;
  const auto split = [](const std::string& l) {
    std::vector<std::string> f;
    std::stringstream ss(l);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    return f;
  };
  // The base columns first (as written), then the optional groups
  // (Columns); each column is read by its name.
  if (!std::getline(in, line) || line.rfind(csv_header(), 0) != 0) {
    throw InputError(path + ":1: expected the hsgd metrics header '" + csv_header() + "'");
  }
  const std::vector<std::string> names = split(line);
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < names.size(); ++i) at[names[i]] = i;
  std::vector<const Group*> present;  // the optional groups whose every column is there
  for (const Group& g : groups()) {
    bool all = true;
    for (const OptionalColumn& col : g.cols) all = all && at.count(col.name) > 0;
    if (all) present.push_back(&g);
  }
  const size_t fields = names.size();
  std::vector<MetricsRow> rows;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const std::vector<std::string> f = split(line);
    if (f.size() != fields) {
      throw InputError(
          fmt::format("{}:{}: expected {} fields, got {}", path, lineno, fields, f.size()));
    }
    auto d = [&](const char* name) {
      const size_t i = at.at(name);
      try {
        size_t used = 0;
        double v = std::stod(f[i], &used);
        if (used != f[i].size()) throw std::invalid_argument(f[i]);
        return v;
      } catch (const std::exception&) {
        if (f[i] == "nan" || f[i] == "-nan") return std::nan("");
        throw InputError(
            fmt::format("{}:{}: field {}: expected a number, got '{}'", path, lineno, i + 1, f[i]));
      }
    };
    MetricsRow r;
    r.time_s = d("time_s");
    r.updates = static_cast<int64_t>(d("updates"));
    r.samples = static_cast<int64_t>(d("samples"));
    r.epoch = d("epoch");
    r.k = static_cast<int>(d("k"));
    r.train_loss = d("train_loss");
    r.test_loss = d("test_loss");
    r.test_acc = d("test_acc");
    r.test_auc = d("test_auc");
    r.test_logloss = d("test_logloss");
    r.staleness_mean = d("staleness_mean");
    r.staleness_max = static_cast<int64_t>(d("staleness_max"));
    r.dropped = static_cast<int64_t>(d("dropped"));
    r.nonfinite = static_cast<int64_t>(d("nonfinite"));
    r.idle_frac = d("idle_frac");
    r.live_workers = static_cast<int>(d("live_workers"));
    r.policy = f[at.at("policy")];
    r.seed = static_cast<uint64_t>(d("seed"));
    for (const Group* g : present) {
      r.*g->has = true;
      for (const OptionalColumn& col : g->cols) col.set(r, d(col.name));
    }
    rows.push_back(r);
  }
  return rows;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".partial";
  std::FILE* f = open_or_throw(tmp);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw InputError(path + ": write failed");
  rename_or_throw(tmp, path);
}

}  // namespace hsgd
