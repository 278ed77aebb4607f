// Compressors for the push and pull paths (issue 14): each turns a flat
// float vector into real bytes (the wire format below) and back. Torch-free;
// above core, below the runtimes.
//
// A message is a header (magic "HSC1", the compressor, a raw flag, the
// element count and a 64-bit stream key) followed by one payload per tensor
// of the layout, in order. Which tensors are compressed is decided by the
// layout, the compressor and min_bytes, which both ends share, so the
// payloads carry no flags. A raw message (warm-up) carries plain float32.
//
// Payloads (n = the tensor's element count; buckets of kBucket elements):
//   none              n x f32
//   fp16 / bf16       n x 16-bit
//   topk:R            u32 k, k x u32 index (strictly increasing), k x f32
//   randomk:R         k x f32; the k indices are drawn from the stream key
//   qsgd:S            per bucket: f32 norm; n x i8 level in [-S, S] (i16 if S > 127)
//   sign              per bucket: f32 scale (mean |x|); ceil(n / 8) bytes of sign bits
//   powersgd:R        P (rows x R f32), Q (cols x R f32): the tensor is P Q^T
// with k = clamp(ceil(R * n), 1, n). Tensors under min_bytes (4 n < min_bytes),
// and for powersgd every tensor that is not a matrix worth factorising, go
// as n x f32.
//
// Thread-safety: none; a Codec is used by one thread at a time. encode()
// changes state only for powersgd (its warm start); decode() is const.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hsgd/core/state.h"

namespace hsgd {

struct CompressorSpec {
  enum class Kind : uint8_t { kNone, kFp16, kBf16, kTopk, kRandomk, kQsgd, kSign, kPowersgd };
  Kind kind = Kind::kNone;
  double ratio = 1;  // topk, randomk: fraction of coordinates kept, in (0, 1]
  int levels = 0;    // qsgd: S >= 2
  int rank = 0;      // powersgd: R >= 1
  bool none() const { return kind == Kind::kNone; }
  // Whether error feedback is on by default: the biased compressors (topk,
  // randomk without rescaling, sign, powersgd).
  bool biased() const;
  std::string name() const;  // as written: "topk:0.01"
};

// Parses "none", "fp16", "bf16", "topk:R", "randomk:R", "qsgd:S", "sign",
// "powersgd:R". Throws InputError "<key> = '<text>': expected ..." (one line).
CompressorSpec parse_compressor(std::string_view text, std::string_view key);

constexpr size_t kBucket = 128;

// One tensor of the flat vector: elements [offset, offset + size), viewed as
// rows x cols (rows = 1 for vectors).
struct TensorSlot {
  size_t offset = 0;
  size_t size = 0;
  int64_t rows = 1;
  int64_t cols = 0;
};

// The tensors of elements [lo, hi) of a model whose parameters have these
// shapes, in order. A tensor cut by the range becomes a vector of its part.
// Without shapes (or shapes that do not add up to at least hi) the range is
// one vector.
std::vector<TensorSlot> make_layout(const std::vector<std::vector<int64_t>>& shapes, size_t lo,
                                    size_t hi);

// float <-> IEEE half and bfloat16, round to nearest even.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);

class Codec {
 public:
  // `seed` seeds powersgd's initial Q (warm start from then on).
  Codec(CompressorSpec spec, std::vector<TensorSlot> layout, size_t min_bytes, uint64_t seed);

  const CompressorSpec& spec() const { return spec_; }
  size_t numel() const { return numel_; }
  // Replaces *out with the message for x (numel() floats). `key` seeds
  // randomk's index subset and qsgd's stochastic rounding; it travels in the
  // header. raw: plain float32 whatever the compressor.
  void encode(std::span<const float> x, uint64_t key, bool raw, std::string* out);
  // Decodes a message into out (numel() floats). Throws InputError
  // "<what>: ..." for bytes that are not a message of this codec.
  void decode(std::span<const char> bytes, std::span<float> out, const std::string& what) const;
  // The size of a compressed (not raw) message, in bytes.
  size_t encoded_size() const;
  size_t raw_size() const;

  // powersgd's warm start (nothing for the others).
  void save(StateWriter& w) const;
  void load(StateReader& r);

 private:
  bool compressed(const TensorSlot& t) const;
  CompressorSpec spec_;
  std::vector<TensorSlot> layout_;
  size_t numel_ = 0;
  size_t min_bytes_ = 0;
  std::vector<std::vector<float>> q_;  // powersgd: per tensor, cols x rank (empty if raw)
  std::vector<float> p_, q_next_;      // powersgd scratch
};

// k of topk/randomk for n elements.
size_t kept(double ratio, size_t n);
// The randomk indices of a tensor of n elements under `key`, increasing.
void random_indices(uint64_t key, size_t tensor, size_t n, size_t k, std::vector<uint32_t>* out);

}  // namespace hsgd
