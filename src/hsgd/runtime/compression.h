// The compression stage ([compress], issue 14) as the in-process runtimes
// (sim, threads) drive it: one PushStage per worker (error feedback), the
// server's decoder and PullStage (one held copy per worker), and the byte
// and time counters. With compression off a runtime builds none of this
// (make_compression returns null) and its code path is unchanged.
//
// Thread-safety: push(w, ...) touches only worker w's state and may run
// concurrently for different workers; pull() and the counters' add_* must be
// serialised by the caller (the threads runtime calls them under its lock).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/compress/stage.h"
#include "hsgd/config/config.h"
#include "hsgd/core/state.h"

namespace hsgd {

class Compression {
 public:
  Compression(const CompressOptions& o, const std::vector<std::vector<int64_t>>& shapes,
              std::span<const float> initial, int workers, uint64_t seed);

  bool push_on() const { return push_on_; }
  bool pull_on() const { return pull_on_; }

  // Worker side of a push: compresses `grad` (with error feedback) into
  // *bytes as it travels. Returns whether the message was compressed (not
  // raw, i.e. past the warm-up). `sent` receives what the server aggregates.
  bool encode_push(int worker, std::span<const float> grad, uint64_t version, std::string* bytes,
                   std::span<float> sent);
  // Server side: decodes a push message (throws InputError if corrupt).
  void decode_push(std::span<const char> bytes, std::span<float> grad) const;
  // Server side of a pull: the message for `worker` (compressed difference
  // to its held copy, or raw under warm-up) into *bytes; returns whether it
  // was compressed.
  bool encode_pull(int worker, std::span<const float> params, uint64_t version, std::string* bytes);
  // What `worker` holds after its last pull (the server's record).
  std::span<const float> held(int worker) const;
  // Worker side of a pull: applies the message to the worker's parameters.
  void decode_pull(std::span<const char> bytes, std::span<float> params,
                   std::vector<float>* scratch) const;

  // Bytes of an uncompressed message (4 bytes per parameter).
  int64_t plain_bytes() const { return 4 * static_cast<int64_t>(numel_); }

  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  bool push_on_, pull_on_;
  size_t numel_;
  std::vector<PushStage> push_;
  std::unique_ptr<PushDecoder> push_decoder_;
  std::unique_ptr<PullStage> pull_;
  std::unique_ptr<Codec> pull_decoder_;
};

// Null when the config compresses nothing.
std::unique_ptr<Compression> make_compression(const Config& c,
                                              const std::vector<std::vector<int64_t>>& shapes,
                                              std::span<const float> initial);

// Measures the cost of compressing and decompressing one message of the
// config's push (and pull) compressor, in nanoseconds per parameter: the
// simulator's compress.sim_ns_per_param when it is -1.
double calibrate_compress_ns(const Config& c, const std::vector<std::vector<int64_t>>& shapes,
                             size_t num_params);

}  // namespace hsgd
