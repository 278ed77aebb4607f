// The compression stage of the push and pull paths (issue 14), independent
// of the policy: a worker compresses its push with error feedback, the
// server decodes it and aggregates as without compression; the server
// compresses each worker's pull as the difference between its parameters and
// what that worker holds, so the worker's copy converges to the server's.
//
// Thread-safety: none. A PushStage belongs to one worker; a PullStage's
// calls for different workers touch different state but the same object, so
// the caller serialises them (or uses one PullStage per shard under its lock).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hsgd/compress/codec.h"
#include "hsgd/core/state.h"

namespace hsgd {

// [compress]
struct CompressOptions {
  CompressorSpec push;
  CompressorSpec pull;
  // Error feedback on the push path: -1 = auto (on for the biased
  // compressors: topk, randomk, sign, powersgd), 0 = off, 1 = on.
  int error_feedback = -1;
  // Tensors of fewer bytes go uncompressed (BytePS's threshold).
  int64_t min_bytes = 0;
  // Pushes and pulls at server versions below this go uncompressed
  // (PowerSGD's start_iter).
  int64_t warmup = 0;
  // The simulator's cost of compressing plus decompressing, per parameter,
  // in nanoseconds; -1 = calibrate (on sim, when compression is on).
  double sim_ns_per_param = -1;

  bool on() const { return !push.none() || !pull.none(); }
  bool push_feedback() const { return error_feedback < 0 ? push.biased() : error_feedback != 0; }
};

// Byte and time counters of a stage, since the start.
struct CompressCounters {
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  double compress_s = 0;  // encoding and decoding (measured where real time is kept)
};

// The factor a by which the stage scales what it compresses where a
// compressor feeds a memory (the push under error feedback, the pull's held
// copies): C(a x) instead of C(x). Error feedback and the held copies
// converge when the compressor contracts: E||x - D(C(x))||^2 <= (1 - d) ||x||^2
// for some d > 0. qsgd:S is unbiased with variance bound
// w = min(128 / S^2, sqrt(128) / S) (buckets of 128; Alistarh et al.), so it
// contracts by itself only while w < 1 (S >= 12); below, a = 1 / (1 + w)
// makes it contract with d = 1 / (1 + w) (Stich et al. 2018; Karimireddy et
// al. 2019), and qsgd's norm-relative levels make C(a x) = a C(x), so the
// wire format is unchanged. 1 for every other case.
double memory_scale(const CompressorSpec& spec);

// One worker's push compressor with its error-feedback residual.
class PushStage {
 public:
  PushStage(const CompressOptions& o, std::vector<TensorSlot> layout, uint64_t seed, int worker);
  // With error feedback p = grad + e, else p = grad; *bytes = C(p) (raw
  // under warm-up: `version` < warmup); sent = D(*bytes), what the server
  // will aggregate; e = p - sent. `sent` has numel() floats.
  // A push the server drops as non-finite leaves e as it was: a p with a NaN
  // or Inf goes raw (sent = p, so the server sees it) and changes no state,
  // and a finite p whose message decodes non-finite (fp16 past 65504) is not
  // fed back.
  void compress(std::span<const float> grad, uint64_t version, std::string* bytes,
                std::span<float> sent);
  const Codec& codec() const { return codec_; }
  std::span<const float> residual() const { return residual_; }
  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  Codec codec_;
  bool feedback_;
  float scale_;  // memory_scale under error feedback, else 1
  int64_t warmup_;
  uint64_t seed_;
  int worker_;
  uint64_t round_ = 0;
  std::vector<float> residual_;  // empty without error feedback
  std::vector<float> p_, scaled_;
};

// The server's push decoder (stateless apart from the layout).
class PushDecoder {
 public:
  PushDecoder(const CompressOptions& o, std::vector<TensorSlot> layout);
  // Throws InputError naming `what` for bytes that are not a push message.
  void decode(std::span<const char> bytes, std::span<float> grad, const std::string& what) const {
    codec_.decode(bytes, grad, what);
  }

 private:
  Codec codec_;
};

// The server's pull compressor: one held copy (what the worker has) and one
// encoder per worker.
class PullStage {
 public:
  PullStage(const CompressOptions& o, std::vector<TensorSlot> layout, uint64_t seed, int workers,
            std::span<const float> initial);
  // The pull of `worker` at server `version`: *bytes = C(params - held) (raw
  // full parameters under warm-up), and held becomes what the worker holds
  // after applying *bytes with apply_pull. Returns held.
  std::span<const float> pull(int worker, std::span<const float> params, uint64_t version,
                              std::string* bytes);
  std::span<const float> held(int worker) const { return held_[static_cast<size_t>(worker)]; }
  // Sets what `worker` holds (a worker that starts afresh).
  void reset(int worker, std::span<const float> values) {
    held_[static_cast<size_t>(worker)].assign(values.begin(), values.end());
  }
  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  CompressOptions o_;
  std::vector<Codec> codecs_;
  std::vector<std::vector<float>> held_;
  std::vector<uint64_t> rounds_;
  uint64_t seed_;
  std::vector<float> delta_;
};

// The worker's side of a pull: applies the message to its parameters (adds
// the decoded difference; a raw message replaces them). `decoder` is a codec
// of the pull compressor and the layout (its state is not used).
void apply_pull(const Codec& decoder, std::span<const char> bytes, std::span<float> params,
                std::vector<float>* scratch, const std::string& what);
// Whether a pull message is raw (full parameters).
bool is_raw_message(std::span<const char> bytes);

}  // namespace hsgd
