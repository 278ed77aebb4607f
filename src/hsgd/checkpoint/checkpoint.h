// Checkpoints on disk: a directory per checkpoint under <run>/checkpoints/,
// holding a JSON manifest and binary blobs (each part's StateWriter bytes).
//
// Layout: <run>/checkpoints/ckpt-<seq, 8 digits>/ (seq counts the run's
// checkpoints from 0, going on across resumes)
//   manifest.json  {format, hsgd, config_hash, model, num_params, runtime,
//                   workers, servers, train_s, updates, rows,
//                   blobs: [{name, bytes, crc32c, version}]}
//   <name>.bin     one per blob
// A blob is one part of the state (server, threads, sim, membership, run,
// mpi, server-S, worker-W, ...) and `version` is that part's format version
// (checkpoint_part_version); a manifest without it (written before parts had
// versions) means version 1.
// Writing: blobs then the manifest go into a directory named `.tmp-ckpt-...`,
// each file fsynced, then the directory is renamed to its final name and
// the parent fsynced. A process killed mid-write leaves only a `.tmp-`
// directory, which is never read and is removed by the next write. The
// newest `keep` complete checkpoints are kept. A part is streamed straight
// from the runtime's memory to its file (CRC-32C computed as it goes), so a
// checkpoint needs no copy of its state: memory grows by a buffer of
// StateWriter::kFlushBytes, not by a part.
//
// Reading (load_latest): the newest complete checkpoint (a `.tmp-` directory
// never counts), verified: its manifest parses, every part's version is one
// this hsgd reads, every blob has the size the manifest says, and every
// blob of at most kVerifyWholeBytes matches its checksum. A larger blob is
// streamed into the runtime's buffers when the runtime restores it
// (Checkpoint::read), its checksum computed as it goes and checked at its
// end: a mismatch is refused then, as a mismatch, even where the corrupt
// bytes made the decoding fail first. Runtimes restore before they open the
// outputs (Job::open_outputs), so every refusal still comes before a resume
// touches the output directory. There is no fallback to an older
// checkpoint: if the newest fails, the resume is refused with why (remove it
// to resume from the one before). Refusals (InputError, one line naming the
// file): no checkpoint, another format version, a part of a version this
// hsgd does not read (naming the part), another model or parameter count,
// another config, a checksum mismatch, a truncated blob.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsgd {

inline constexpr int kCheckpointFormat = 1;

// The format version of the part a blob holds (its name without a "-N"
// suffix: server-3 is part server), which this hsgd writes and the newest it
// reads; a part's reader reads every version from 1 up to it. 1 for every
// part so far (and for a name this hsgd does not know). Bump a part's
// version here when its bytes change meaning, and teach its reader the old
// one (Checkpoint::version tells it which it has).
int checkpoint_part_version(std::string_view blob_name);

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
    int version = 1;     // the part's format version (1 when the manifest has none)
  };
  CheckpointInfo info;
  std::vector<Blob> blobs;
};

class StateReader;
class StateWriter;

// Blobs up to this size are read whole and verified by load(); larger ones
// are streamed and verified as they are read (Checkpoint::read).
inline constexpr uint64_t kVerifyWholeBytes = uint64_t{1} << 16;

// A loaded checkpoint. Thread-safety: none (blob() and read() fill a cache).
struct Checkpoint {
  CheckpointInfo info;
  std::string path;                                         // the checkpoint's directory
  std::map<std::string, int> versions;                      // name -> the part's format version
  std::map<std::string, CheckpointManifest::Blob> entries;  // name -> its manifest entry
  // Whether the checkpoint has blob `name`.
  bool has(const std::string& name) const { return entries.count(name) > 0; }
  // The bytes of blob `name`, verified (read whole on first use); throws
  // InputError naming the checkpoint if it has none, or the file if it is
  // corrupt.
  const std::string& blob(const std::string& name) const;
  // Decodes blob `name` with `decode` from a StateReader over it, then
  // checks every byte was read. A large blob is streamed from its file
  // (the reader's arrays go straight into their destinations) and its
  // checksum checked at the end; a corrupt one is refused as a checksum
  // mismatch, also where `decode` failed on its bytes first. Throws
  // InputError (what `decode` throws, or naming the file).
  void read(const std::string& name, const std::function<void(StateReader&)>& decode) const;
  // The format version of blob `name` (1 if it has none, or no such blob).
  int version(const std::string& name) const;

  mutable std::map<std::string, std::string> cache;  // name -> verified bytes
};

class CheckpointStore;

// A checkpoint whose parts are being written into its `.tmp-` directory:
// add() writes each part now (the state as it is at the cut), commit()
// writes the manifest and makes the checkpoint complete. Destroyed without
// commit() (a final checkpoint the stops then refuse), its directory is
// removed. One at a time per store. Thread-safety: none.
class PendingCheckpoint {
 public:
  PendingCheckpoint(PendingCheckpoint&& o) noexcept;
  PendingCheckpoint& operator=(PendingCheckpoint&& o) noexcept;
  PendingCheckpoint& operator=(const PendingCheckpoint&) = delete;
  PendingCheckpoint(const PendingCheckpoint&) = delete;
  ~PendingCheckpoint();
  // Writes part `name` from bytes in memory.
  void add(const std::string& name, std::string_view bytes);
  // Writes part `name` by streaming what `save` puts into its file, with no
  // copy of the part in memory.
  void add(const std::string& name, const std::function<void(StateWriter&)>& save);
  // Writes the manifest, renames the directory to its final name, prunes
  // old checkpoints. Returns the seconds the whole checkpoint took.
  double commit(const CheckpointInfo& info);

 private:
  friend class CheckpointStore;
  PendingCheckpoint(CheckpointStore* store, std::string tmp);
  void finish_part(const std::string& name, uint64_t bytes, uint32_t crc);
  CheckpointStore* store_;
  std::string tmp_;
  std::vector<CheckpointManifest::Blob> entries_;
  double seconds_ = 0;
};

class CheckpointStore {
 public:
  // `run_dir` is the run's output directory; checkpoints go to
  // run_dir/checkpoints. keep >= 1.
  CheckpointStore(std::string run_dir, int keep);

  // Starts a checkpoint: its parts are written by add() as they come.
  // Throws InputError if the directory cannot be written.
  PendingCheckpoint begin();
  // Writes one checkpoint of blobs in memory and prunes older ones (begin,
  // add, commit). Returns the seconds it took. Throws InputError if the
  // directory cannot be written.
  double write(const CheckpointInfo& info, const std::map<std::string, std::string>& blobs);

  // Seconds spent writing, and checkpoints written, by this store.
  double seconds_spent() const { return seconds_; }
  int written() const { return written_; }

  // The newest complete, valid checkpoint of `run_dir` matching `id`.
  // Throws InputError when there is none (naming why the newest failed).
  static Checkpoint load_latest(const std::string& run_dir, const CheckpointIdentity& id);
  // Parses a manifest's text; throws InputError naming `path` for anything
  // but a manifest of this format (wrong types, integers out of range, blob
  // names that are not plain words, a part version this hsgd does not read,
  // naming the part). Reads nothing else.
  static CheckpointManifest parse_manifest(std::string_view text, const std::string& path);
  // Verifies one checkpoint directory (checksums, sizes, format, identity).
  static Checkpoint load(const std::string& ckpt_dir, const CheckpointIdentity& id);
  // Checkpoint directories of run_dir, newest first (complete ones only).
  static std::vector<std::string> list(const std::string& run_dir);

 private:
  friend class PendingCheckpoint;
  std::string dir_;
  int keep_;
  int seq_ = 0;
  double seconds_ = 0;
  int written_ = 0;
};

}  // namespace hsgd
