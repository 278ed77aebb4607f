// Checkpoints on disk: a directory per checkpoint under <run>/checkpoints/,
// holding a JSON manifest and binary blobs (each part's StateWriter bytes).
//
// Layout: <run>/checkpoints/ckpt-<updates, 12 digits>-<seq, 6 digits>/
//   manifest.json  {format, hsgd, config_hash, model, num_params, runtime,
//                   workers, train_s, updates, rows, blobs: [{name, bytes,
//                   crc32c}]}
//   <name>.bin     one per blob
// Writing: blobs then the manifest go into a directory named `.tmp-...`,
// each file fsynced, then the directory is renamed to its final name and
// the parent fsynced. A process killed mid-write leaves only a `.tmp-`
// directory, which is never read and is removed by the next write. The
// newest `keep` complete checkpoints are kept.
//
// Reading: the newest complete checkpoint whose manifest parses and whose
// blobs all match their sizes and checksums. Refusals (InputError, one line
// naming the file): no checkpoint, another format version, another model or
// parameter count, another config, a checksum mismatch, a truncated blob.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsgd {

inline constexpr int kCheckpointFormat = 1;

// What a checkpoint must agree with to be resumed.
struct CheckpointIdentity {
  std::string config_hash;  // see config_hash() in config/config.h
  std::string model;        // model spec name
  int64_t num_params = 0;
};

struct CheckpointInfo {
  CheckpointIdentity id;
  std::string runtime;
  int workers = 0;
  int servers = 0;      // mpi: server ranks (one blob server-S each); 0 elsewhere
  double train_s = 0;   // training seconds at the cut
  int64_t updates = 0;  // server version at the cut
  int64_t rows = 0;     // metrics rows written before the cut
};

// A manifest as read, before any blob is.
struct CheckpointManifest {
  struct Blob {
    std::string name;  // letters, digits, '-', '_'
    uint64_t bytes = 0;
    std::string crc32c;  // 8 hex digits
  };
  CheckpointInfo info;
  std::vector<Blob> blobs;
};

struct Checkpoint {
  CheckpointInfo info;
  std::string path;                          // the checkpoint's directory
  std::map<std::string, std::string> blobs;  // name -> bytes, verified
  // The bytes of blob `name`; throws InputError naming the checkpoint if
  // the checkpoint has none.
  const std::string& blob(const std::string& name) const;
};

class CheckpointStore {
 public:
  // `run_dir` is the run's output directory; checkpoints go to
  // run_dir/checkpoints. keep >= 1.
  CheckpointStore(std::string run_dir, int keep);

  // Writes one checkpoint and prunes older ones. Returns the seconds it took.
  // Throws InputError if the directory cannot be written.
  double write(const CheckpointInfo& info, const std::map<std::string, std::string>& blobs);

  // Seconds spent writing, and checkpoints written, by this store.
  double seconds_spent() const { return seconds_; }
  int written() const { return written_; }

  // The newest complete, valid checkpoint of `run_dir` matching `id`.
  // Throws InputError when there is none (naming why the newest failed).
  static Checkpoint load_latest(const std::string& run_dir, const CheckpointIdentity& id);
  // Parses a manifest's text; throws InputError naming `path` for anything
  // but a manifest of this format (wrong types, integers out of range, blob
  // names that are not plain words). Reads nothing else.
  static CheckpointManifest parse_manifest(std::string_view text, const std::string& path);
  // Verifies one checkpoint directory (checksums, sizes, format, identity).
  static Checkpoint load(const std::string& ckpt_dir, const CheckpointIdentity& id);
  // Checkpoint directories of run_dir, newest first (complete ones only).
  static std::vector<std::string> list(const std::string& run_dir);

 private:
  std::string dir_;
  int keep_;
  int seq_ = 0;
  double seconds_ = 0;
  int written_ = 0;
};

}  // namespace hsgd
