#include "hsgd/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hsgd/core/error.h"
#include "hsgd/core/state.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kTmpPrefix = ".tmp-ckpt-";

void write_synced(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(path + ": cannot write (" + std::strerror(errno) + ")");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw InputError(path + ": write failed (" + why + ")");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    throw InputError(path + ": write failed (" + std::strerror(errno) + ")");
  }
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

}  // namespace

const std::string& Checkpoint::blob(const std::string& name) const {
  auto it = blobs.find(name);
  if (it == blobs.end()) throw InputError(path + ": corrupt (no blob '" + name + "')");
  return it->second;
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

double CheckpointStore::write(const CheckpointInfo& info,
                              const std::map<std::string, std::string>& blobs) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw InputError(dir_ + ": cannot create (" + ec.message() + ")");
  // Leftovers of a write that was killed.
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().filename().string().rfind(kTmpPrefix, 0) == 0) fs::remove_all(e.path(), ec);
  }
  const std::string name = fmt::format("{}{:08d}", kPrefix, seq_);
  const std::string tmp = dir_ + "/" + kTmpPrefix + name.substr(std::strlen(kPrefix));
  fs::create_directory(tmp, ec);
  if (ec) throw InputError(tmp + ": cannot create (" + ec.message() + ")");
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [blob, bytes] : blobs) {
    write_synced(tmp + "/" + blob + ".bin", bytes);
    entries.push_back({{"name", blob}, {"bytes", bytes.size()}, {"crc32c", hex32(crc32c(bytes))}});
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
  write_synced(tmp + "/manifest.json", m.dump(2) + "\n");
  sync_dir(tmp);
  fs::rename(tmp, dir_ + "/" + name, ec);
  if (ec) throw InputError(dir_ + "/" + name + ": cannot write (" + ec.message() + ")");
  sync_dir(dir_);
  ++seq_;
  // Keep the newest keep_.
  const std::vector<std::string> all = list(fs::path(dir_).parent_path().string());
  for (size_t i = static_cast<size_t>(keep_); i < all.size(); ++i) fs::remove_all(all[i], ec);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  seconds_ += s;
  ++written_;
  return s;
}

Checkpoint CheckpointStore::load(const std::string& ckpt_dir, const CheckpointIdentity& id) {
  Checkpoint c;
  c.path = ckpt_dir;
  const std::string mpath = ckpt_dir + "/manifest.json";
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_all(mpath));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(mpath + ": not a checkpoint manifest (" + e.what() + ")");
  }
  try {
    const int format = m.at("format").get<int>();
    if (format != kCheckpointFormat) {
      throw InputError(fmt::format("{}: checkpoint format {}, this hsgd reads format {}", mpath,
                                   format, kCheckpointFormat));
    }
    CheckpointInfo& i = c.info;
    i.id.config_hash = m.at("config_hash").get<std::string>();
    i.id.model = m.at("model").get<std::string>();
    i.id.num_params = m.at("num_params").get<int64_t>();
    i.runtime = m.at("runtime").get<std::string>();
    i.workers = m.at("workers").get<int>();
    i.servers = m.at("servers").get<int>();
    i.train_s = m.at("train_s").get<double>();
    i.updates = m.at("updates").get<int64_t>();
    i.rows = m.at("rows").get<int64_t>();
    if (i.id.model != id.model || i.id.num_params != id.num_params) {
      throw InputError(
          fmt::format("{}: a checkpoint of model {} with {} parameters; this run is "
                      "model {} with {} parameters",
                      mpath, i.id.model, i.id.num_params, id.model, id.num_params));
    }
    if (i.id.config_hash != id.config_hash) {
      throw InputError(mpath +
                       ": written for another configuration (config_hash differs: was "
                       "config.toml edited?)");
    }
    for (const nlohmann::json& b : m.at("blobs")) {
      const std::string name = b.at("name").get<std::string>();
      const std::string path = ckpt_dir + "/" + name + ".bin";
      std::string bytes = read_all(path);
      const uint64_t want = b.at("bytes").get<uint64_t>();
      if (bytes.size() != want) {
        throw InputError(fmt::format("{}: truncated ({} bytes, the manifest says {})", path,
                                     bytes.size(), want));
      }
      if (hex32(crc32c(bytes)) != b.at("crc32c").get<std::string>()) {
        throw InputError(path + ": checksum mismatch (the blob is corrupt)");
      }
      c.blobs[name] = std::move(bytes);
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(mpath + ": not a checkpoint manifest (" + e.what() + ")");
  }
  return c;
}

Checkpoint CheckpointStore::load_latest(const std::string& run_dir, const CheckpointIdentity& id) {
  const std::vector<std::string> all = list(run_dir);
  if (all.empty()) throw InputError(run_dir + ": no checkpoint to resume from");
  return load(all.front(), id);
}

}  // namespace hsgd
