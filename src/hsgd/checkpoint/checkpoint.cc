#include "hsgd/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <utility>

#include "hsgd/core/error.h"
#include "hsgd/core/state.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kTmpPrefix = ".tmp-ckpt-";

// Bytes of a part are written and read in pieces of this size, each
// checksummed while it is in the cache.
constexpr size_t kPieceBytes = size_t{1} << 20;

// A part's file being written: every byte goes to the file as it comes,
// its CRC-32C computed on the way.
class FileSink final : public StateSink {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw InputError(path_ + ": cannot write (" + std::strerror(errno) + ")");
  }
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  ~FileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const char* p, size_t n) override {
    while (n > 0) {
      const size_t piece = std::min(n, kPieceBytes);
      crc_ = crc32c(std::span<const char>(p, piece), crc_);
      size_t done = 0;
      while (done < piece) {
        const ssize_t w = ::write(fd_, p + done, piece - done);
        if (w < 0) {
          if (errno == EINTR) continue;
          throw InputError(path_ + ": write failed (" + std::strerror(errno) + ")");
        }
        done += static_cast<size_t>(w);
      }
      bytes_ += piece;
      p += piece;
      n -= piece;
    }
  }
  // fsync and close.
  void finish() {
    const int fd = fd_;
    fd_ = -1;
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
      throw InputError(path_ + ": write failed (" + std::strerror(errno) + ")");
    }
  }
  uint64_t bytes() const { return bytes_; }
  uint32_t crc() const { return crc_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// A part's file being read: every byte read goes into its destination, its
// CRC-32C computed on the way.
class FileSource final : public StateSource {
 public:
  explicit FileSource(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw InputError(path_ + ": cannot read (" + std::strerror(errno) + ")");
  }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  ~FileSource() override { ::close(fd_); }
  void read(char* p, size_t n) override {
    while (n > 0) {
      const size_t piece = std::min(n, kPieceBytes);
      size_t done = 0;
      while (done < piece) {
        const ssize_t r = ::read(fd_, p + done, piece - done);
        if (r < 0) {
          if (errno == EINTR) continue;
          throw InputError(path_ + ": cannot read (" + std::strerror(errno) + ")");
        }
        if (r == 0) {
          throw InputError(
              fmt::format("{}: truncated (the file ended after {} bytes)", path_, bytes_ + done));
        }
        done += static_cast<size_t>(r);
      }
      crc_ = crc32c(std::span<const char>(p, piece), crc_);
      bytes_ += piece;
      p += piece;
      n -= piece;
    }
  }
  // Reads the n bytes left, for their checksum alone.
  void drain(uint64_t n) {
    std::vector<char> scratch(std::min<uint64_t>(n, kPieceBytes));
    while (n > 0) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(n, scratch.size()));
      read(scratch.data(), piece);
      n -= piece;
    }
  }
  uint32_t crc() const { return crc_; }
  uint64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

void write_synced(const std::string& path, std::string_view bytes) {
  FileSink sink(path);
  sink.write(bytes.data(), bytes.size());
  sink.finish();
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw InputError(path + ": cannot read (" + std::strerror(errno) + ")");
  const std::streamoff size = in.tellg();
  std::string bytes(static_cast<size_t>(std::max<std::streamoff>(0, size)), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw InputError(path + ": cannot read (" + std::strerror(errno) + ")");
  }
  return bytes;
}

std::string hex32(uint32_t v) { return fmt::format("{:08x}", v); }

int seq_of(const std::string& name) {
  try {
    return std::stoi(name.substr(std::strlen(kPrefix)));
  } catch (const std::exception&) {
    return -1;
  }
}

// The part of a blob: its name without a "-N" suffix.
std::string_view part_of(std::string_view blob_name) {
  const size_t dash = blob_name.rfind('-');
  if (dash == std::string_view::npos || dash + 1 == blob_name.size()) return blob_name;
  for (size_t i = dash + 1; i < blob_name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(blob_name[i]))) return blob_name;
  }
  return blob_name.substr(0, dash);
}

}  // namespace

int checkpoint_part_version(std::string_view blob_name) {
  // One line per part: {"server", 2} means server.bin is now version 2.
  // threads 2: each worker's pending push (tag THR2); sim 2: each worker's
  // in-flight push bytes (tag SIM2); sim 3: the simulated cluster (network,
  // shards, cores; tag SIM3). Every earlier version still reads, but for
  // gossip 2 (the gossip simulator's membership: live graph, round
  // generation; tag GSS2), whose version 1 only unreleased builds wrote.
  static constexpr std::pair<std::string_view, int> kVersions[] = {
      {"server", 1}, {"threads", 2}, {"sim", 3},       {"membership", 1}, {"run", 1},
      {"mpi", 1},    {"worker", 1},  {"model_rng", 1}, {"gossip", 2}};
  const std::string_view part = part_of(blob_name);
  for (const auto& [name, version] : kVersions) {
    if (name == part) return version;
  }
  return 1;
}

int Checkpoint::version(const std::string& name) const {
  auto it = versions.find(name);
  return it == versions.end() ? 1 : it->second;
}

const std::string& Checkpoint::blob(const std::string& name) const {
  if (auto c = cache.find(name); c != cache.end()) return c->second;
  auto it = entries.find(name);
  if (it == entries.end()) throw InputError(path + ": corrupt (no blob '" + name + "')");
  const std::string file = path + "/" + name + ".bin";
  std::string bytes(static_cast<size_t>(it->second.bytes), '\0');
  FileSource source(file);
  source.read(bytes.data(), bytes.size());
  if (hex32(source.crc()) != it->second.crc32c) {
    throw InputError(file + ": checksum mismatch (the blob is corrupt)");
  }
  return cache[name] = std::move(bytes);
}

void Checkpoint::read(const std::string& name,
                      const std::function<void(StateReader&)>& decode) const {
  const std::string file = path + "/" + name + ".bin";
  auto it = entries.find(name);
  if (it == entries.end() || cache.count(name) > 0) {
    StateReader r(blob(name), file);
    decode(r);
    r.expect_end();
    return;
  }
  const CheckpointManifest::Blob& b = it->second;
  FileSource source(file);
  StateReader r(&source, b.bytes, file);
  const auto mismatch = [&] {
    return InputError(file + ": checksum mismatch (the blob is corrupt)");
  };
  try {
    decode(r);
    r.expect_end();
  } catch (const InputError&) {
    // Bytes that fail to decode are most likely corrupt ones: say so if
    // the checksum agrees.
    source.drain(b.bytes - source.bytes());
    if (hex32(source.crc()) != b.crc32c) throw mismatch();
    throw;
  }
  if (hex32(source.crc()) != b.crc32c) throw mismatch();
}

CheckpointStore::CheckpointStore(std::string run_dir, int keep)
    : dir_(std::move(run_dir) + "/checkpoints"), keep_(std::max(1, keep)) {
  for (const std::string& p : list(fs::path(dir_).parent_path().string())) {
    seq_ = std::max(seq_, seq_of(fs::path(p).filename().string()) + 1);
  }
}

std::vector<std::string> CheckpointStore::list(const std::string& run_dir) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(dir, ec)) return {};
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !e.is_directory()) continue;
    const int s = seq_of(name);
    if (s >= 0) found.push_back({s, e.path().string()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

PendingCheckpoint CheckpointStore::begin() {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw InputError(dir_ + ": cannot create (" + ec.message() + ")");
  // Leftovers of a write that was killed (or of a checkpoint not committed).
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().filename().string().rfind(kTmpPrefix, 0) == 0) fs::remove_all(e.path(), ec);
  }
  const std::string tmp = dir_ + "/" + fmt::format("{}{:08d}", kTmpPrefix, seq_);
  fs::create_directory(tmp, ec);
  if (ec) throw InputError(tmp + ": cannot create (" + ec.message() + ")");
  PendingCheckpoint p(this, tmp);
  p.seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

double CheckpointStore::write(const CheckpointInfo& info,
                              const std::map<std::string, std::string>& blobs) {
  PendingCheckpoint p = begin();
  for (const auto& [name, bytes] : blobs) p.add(name, bytes);
  return p.commit(info);
}

PendingCheckpoint::PendingCheckpoint(CheckpointStore* store, std::string tmp)
    : store_(store), tmp_(std::move(tmp)) {}

PendingCheckpoint::PendingCheckpoint(PendingCheckpoint&& o) noexcept
    : store_(o.store_),
      tmp_(std::move(o.tmp_)),
      entries_(std::move(o.entries_)),
      seconds_(o.seconds_) {
  o.tmp_.clear();
}

PendingCheckpoint& PendingCheckpoint::operator=(PendingCheckpoint&& o) noexcept {
  if (this != &o) {
    this->~PendingCheckpoint();
    store_ = o.store_;
    tmp_ = std::move(o.tmp_);
    entries_ = std::move(o.entries_);
    seconds_ = o.seconds_;
    o.tmp_.clear();
  }
  return *this;
}

PendingCheckpoint::~PendingCheckpoint() {
  if (tmp_.empty()) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
  tmp_.clear();
}

void PendingCheckpoint::add(const std::string& name, std::string_view bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  FileSink sink(tmp_ + "/" + name + ".bin");
  sink.write(bytes.data(), bytes.size());
  sink.finish();
  finish_part(name, sink.bytes(), sink.crc());
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void PendingCheckpoint::add(const std::string& name,
                            const std::function<void(StateWriter&)>& save) {
  const auto t0 = std::chrono::steady_clock::now();
  FileSink sink(tmp_ + "/" + name + ".bin");
  StateWriter w(&sink);
  save(w);
  w.flush();
  sink.finish();
  finish_part(name, sink.bytes(), sink.crc());
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void PendingCheckpoint::finish_part(const std::string& name, uint64_t bytes, uint32_t crc) {
  HSGD_ASSERT(!tmp_.empty(), "a part added to a committed checkpoint");
  CheckpointManifest::Blob b;
  b.name = name;
  b.bytes = bytes;
  b.crc32c = hex32(crc);
  b.version = checkpoint_part_version(name);
  entries_.push_back(std::move(b));
}

double PendingCheckpoint::commit(const CheckpointInfo& info) {
  HSGD_ASSERT(!tmp_.empty(), "a checkpoint committed twice");
  const auto t0 = std::chrono::steady_clock::now();
  std::sort(entries_.begin(), entries_.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  nlohmann::json entries = nlohmann::json::array();
  for (const CheckpointManifest::Blob& b : entries_) {
    entries.push_back(
        {{"name", b.name}, {"bytes", b.bytes}, {"crc32c", b.crc32c}, {"version", b.version}});
  }
  const nlohmann::json m = {{"format", kCheckpointFormat},
                            {"hsgd", "0.1"},
                            {"config_hash", info.id.config_hash},
                            {"model", info.id.model},
                            {"num_params", info.id.num_params},
                            {"runtime", info.runtime},
                            {"workers", info.workers},
                            {"servers", info.servers},
                            {"train_s", info.train_s},
                            {"updates", info.updates},
                            {"rows", info.rows},
                            {"blobs", entries}};
  write_synced(tmp_ + "/manifest.json", m.dump(2) + "\n");
  sync_dir(tmp_);
  const std::string& dir = store_->dir_;
  const std::string name = fmt::format("{}{:08d}", kPrefix, store_->seq_);
  std::error_code ec;
  fs::rename(tmp_, dir + "/" + name, ec);
  if (ec) throw InputError(dir + "/" + name + ": cannot write (" + ec.message() + ")");
  tmp_.clear();
  sync_dir(dir);
  ++store_->seq_;
  // Keep the newest keep_.
  const std::vector<std::string> all = CheckpointStore::list(fs::path(dir).parent_path().string());
  for (size_t i = static_cast<size_t>(store_->keep_); i < all.size(); ++i) {
    fs::remove_all(all[i], ec);
  }
  const double s =
      seconds_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  store_->seconds_ += s;
  ++store_->written_;
  return s;
}

namespace {

// An integer field in [lo, hi]; anything else (a float, 1e300, a string)
// is an InputError naming the field, never a cast out of range.
int64_t int_field(const nlohmann::json& m, const char* key, int64_t lo, int64_t hi,
                  const std::string& path) {
  const nlohmann::json& v = m.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) ||
      v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    throw InputError(
        fmt::format("{}: '{}' = {}: expected an integer in [{}, {}]", path, key, v.dump(), lo, hi));
  }
  return v.get<int64_t>();
}

std::string string_field(const nlohmann::json& m, const char* key, const std::string& path) {
  const nlohmann::json& v = m.at(key);
  if (!v.is_string()) throw InputError(fmt::format("{}: '{}': expected a string", path, key));
  return v.get<std::string>();
}

// `s` as a JSON string (ASCII, escaped), fit for a one-line message: a string
// read from a manifest may hold a newline or any byte.
std::string json_quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

// Blob names are plain words: never a path out of the checkpoint directory.
bool plain_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') return false;
  }
  return true;
}

}  // namespace

CheckpointManifest CheckpointStore::parse_manifest(std::string_view text, const std::string& path) {
  CheckpointManifest out;
  try {
    const nlohmann::json m = nlohmann::json::parse(text);
    if (!m.is_object()) throw InputError(path + ": not a checkpoint manifest (not an object)");
    const int64_t format = int_field(m, "format", 0, INT32_MAX, path);
    if (format != kCheckpointFormat) {
      throw InputError(fmt::format("{}: checkpoint format {}, this hsgd reads format {}", path,
                                   format, kCheckpointFormat));
    }
    CheckpointInfo& i = out.info;
    i.id.config_hash = string_field(m, "config_hash", path);
    i.id.model = string_field(m, "model", path);
    i.id.num_params = int_field(m, "num_params", 0, INT64_MAX, path);
    i.runtime = string_field(m, "runtime", path);
    i.workers = static_cast<int>(int_field(m, "workers", 0, 1 << 20, path));
    i.servers = static_cast<int>(int_field(m, "servers", 0, 1 << 20, path));
    const nlohmann::json& t = m.at("train_s");
    if (!t.is_number() || !std::isfinite(t.get<double>()) || t.get<double>() < 0) {
      throw InputError(path + ": 'train_s': expected seconds >= 0");
    }
    i.train_s = t.get<double>();
    i.updates = int_field(m, "updates", 0, INT64_MAX, path);
    i.rows = int_field(m, "rows", 0, INT64_MAX, path);
    const nlohmann::json& blobs = m.at("blobs");
    if (!blobs.is_array()) throw InputError(path + ": 'blobs': expected an array");
    for (const nlohmann::json& b : blobs) {
      if (!b.is_object()) throw InputError(path + ": 'blobs': expected objects");
      CheckpointManifest::Blob blob;
      blob.name = string_field(b, "name", path);
      if (!plain_name(blob.name)) {
        throw InputError(path + ": blob name " + json_quoted(blob.name) +
                         ": expected letters, digits, '-' and '_'");
      }
      blob.bytes = static_cast<uint64_t>(int_field(b, "bytes", 0, INT64_MAX, path));
      blob.crc32c = string_field(b, "crc32c", path);
      // Per part: checked here, before any blob is read or decoded.
      const int reads = checkpoint_part_version(blob.name);
      if (b.contains("version")) {
        blob.version = static_cast<int>(int_field(b, "version", 1, INT32_MAX, path));
      }
      if (blob.version > reads) {
        throw InputError(fmt::format(
            "{}: part '{}' ({}.bin) is format version {}; this hsgd reads version {} of it "
            "(a checkpoint of a newer hsgd?)",
            path, std::string(part_of(blob.name)), blob.name, blob.version, reads));
      }
      out.blobs.push_back(std::move(blob));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path + ": not a checkpoint manifest (" + e.what() + ")");
  }
  return out;
}

Checkpoint CheckpointStore::load(const std::string& ckpt_dir, const CheckpointIdentity& id) {
  Checkpoint c;
  c.path = ckpt_dir;
  const std::string mpath = ckpt_dir + "/manifest.json";
  const CheckpointManifest m = parse_manifest(read_all(mpath), mpath);
  c.info = m.info;
  const CheckpointInfo& i = c.info;
  if (i.id.model != id.model || i.id.num_params != id.num_params) {
    throw InputError(fmt::format(
        "{}: a checkpoint of model {} with {} parameters; this run is model {} with {} parameters",
        mpath, json_quoted(i.id.model), i.id.num_params, json_quoted(id.model), id.num_params));
  }
  if (i.id.config_hash != id.config_hash) {
    // A simulator checkpoint from before issue 27 ran the independent network.
    bool before_network = false;
    for (const CheckpointManifest::Blob& b : m.blobs) {
      before_network = before_network || (b.name == "sim" && b.version < 3);
    }
    throw InputError(mpath +
                     ": written for another configuration (config_hash differs: was config.toml "
                     "edited?)" +
                     (before_network ? "; a simulator checkpoint from before the network model "
                                       "resumes with network = \"independent\" in its "
                                       "config.toml's [sim] (the model it ran)"
                                     : ""));
  }
  for (const CheckpointManifest::Blob& b : m.blobs) {
    const std::string path = ckpt_dir + "/" + b.name + ".bin";
    std::error_code ec;
    const auto on_disk = std::filesystem::file_size(path, ec);
    if (ec) throw InputError(path + ": missing (" + ec.message() + ")");
    if (on_disk != b.bytes) {
      throw InputError(
          fmt::format("{}: truncated ({} bytes, the manifest says {})", path, on_disk, b.bytes));
    }
    c.entries[b.name] = b;
    c.versions[b.name] = b.version;
    if (b.bytes <= kVerifyWholeBytes) (void)c.blob(b.name);  // read and verified now
  }
  return c;
}

Checkpoint CheckpointStore::load_latest(const std::string& run_dir, const CheckpointIdentity& id) {
  const std::vector<std::string> all = list(run_dir);
  if (all.empty()) throw InputError(run_dir + ": no checkpoint to resume from");
  return load(all.front(), id);
}

}  // namespace hsgd
