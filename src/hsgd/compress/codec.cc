#include "hsgd/compress/codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"

namespace hsgd {
namespace {

constexpr uint32_t kMagic = 0x31435348;  // "HSC1"
constexpr size_t kHeader = 4 + 1 + 1 + 8 + 8;

using Kind = CompressorSpec::Kind;

// Appends trivially copyable values to a byte string.
template <class T>
void put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <class T>
void put_n(std::string* out, const T* v, size_t n) {
  out->append(reinterpret_cast<const char*>(v), n * sizeof(T));
}

// Reads a message, checking every length.
class Cursor {
 public:
  Cursor(std::span<const char> b, const std::string& what) : b_(b), what_(what) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  template <class T>
  void get_n(T* out, size_t n) {
    if (n > (b_.size() - at_) / sizeof(T)) need(n * sizeof(T));
    std::memcpy(out, b_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
  }
  [[noreturn]] void fail(const std::string& m) const {
    throw InputError(fmt::format("{}: corrupt compressed message ({}, at byte {})", what_, m, at_));
  }
  void end() const {
    if (at_ != b_.size()) fail(fmt::format("{} unexpected bytes at the end", b_.size() - at_));
  }

 private:
  void need(size_t n) const {
    if (n > b_.size() - at_) {
      throw InputError(
          fmt::format("{}: truncated compressed message (needed {} more bytes, {} left)", what_, n,
                      b_.size() - at_));
    }
  }
  std::span<const char> b_;
  const std::string& what_;
  size_t at_ = 0;
};

bool parse_double(std::string_view s, double* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
bool parse_int(std::string_view s, int64_t* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// Modified Gram-Schmidt on the columns of a rows x r row-major matrix.
void orthonormalize(std::vector<float>& p, size_t rows, size_t r) {
  for (size_t j = 0; j < r; ++j) {
    for (size_t i = 0; i < j; ++i) {
      double dot = 0;
      for (size_t a = 0; a < rows; ++a) dot += double(p[a * r + i]) * p[a * r + j];
      for (size_t a = 0; a < rows; ++a) p[a * r + j] -= static_cast<float>(dot) * p[a * r + i];
    }
    double norm = 0;
    for (size_t a = 0; a < rows; ++a) norm += double(p[a * r + j]) * p[a * r + j];
    norm = std::sqrt(norm);
    const float inv = norm > 1e-30 ? static_cast<float>(1.0 / norm) : 0.0f;
    for (size_t a = 0; a < rows; ++a) p[a * r + j] *= inv;
  }
}

// One power iteration of PowerSGD on M (rows x cols, row-major): P = M Q
// (rows x r), orthonormalised, then Q' = M^T P (cols x r). `p` and `q_next`
// arrive zeroed. Every value is summed in the same order as the plain loops
// (P over c, Q' over a), so the messages are the same bits; R > 0 makes the
// rank a constant (P's sums stay in registers, no reload through `p` or
// `q_next`, which the compiler must otherwise assume alias M and Q), R = 0
// takes it from `r_dyn`.
template <size_t R>
void power_step(const float* __restrict m, size_t rows, size_t cols, const float* __restrict q,
                std::vector<float>& p, float* __restrict q_next, size_t r_dyn = R) {
  const size_t r = R > 0 ? R : r_dyn;
  float* __restrict pp = p.data();
  for (size_t a = 0; a < rows; ++a) {
    const float* row = m + a * cols;
    if constexpr (R > 0) {
      float acc[R] = {};
      for (size_t c = 0; c < cols; ++c) {
        const float mv = row[c];
        for (size_t j = 0; j < R; ++j) acc[j] += mv * q[c * R + j];
      }
      for (size_t j = 0; j < R; ++j) pp[a * R + j] = acc[j];
    } else {
      for (size_t c = 0; c < cols; ++c) {
        const float mv = row[c];
        for (size_t j = 0; j < r; ++j) pp[a * r + j] += mv * q[c * r + j];
      }
    }
  }
  orthonormalize(p, rows, r);
  for (size_t a = 0; a < rows; ++a) {
    const float* row = m + a * cols;
    if constexpr (R > 0) {
      float pa[R];
      for (size_t j = 0; j < R; ++j) pa[j] = pp[a * R + j];
      for (size_t c = 0; c < cols; ++c) {
        const float mv = row[c];
        for (size_t j = 0; j < R; ++j) q_next[c * R + j] += mv * pa[j];
      }
    } else {
      for (size_t c = 0; c < cols; ++c) {
        const float mv = row[c];
        for (size_t j = 0; j < r; ++j) q_next[c * r + j] += mv * pp[a * r + j];
      }
    }
  }
}

}  // namespace

bool CompressorSpec::biased() const {
  return kind == Kind::kTopk || kind == Kind::kRandomk || kind == Kind::kSign ||
         kind == Kind::kPowersgd;
}

std::string CompressorSpec::name() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kFp16:
      return "fp16";
    case Kind::kBf16:
      return "bf16";
    case Kind::kTopk:
      return fmt::format("topk:{}", ratio);
    case Kind::kRandomk:
      return fmt::format("randomk:{}", ratio);
    case Kind::kQsgd:
      return fmt::format("qsgd:{}", levels);
    case Kind::kSign:
      return "sign";
    case Kind::kPowersgd:
      return fmt::format("powersgd:{}", rank);
  }
  return "none";
}

CompressorSpec parse_compressor(std::string_view text, std::string_view key) {
  const auto bad = [&](const std::string& expected) -> InputError {
    return InputError(fmt::format("{} = '{}': {}", key, text, expected));
  };
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  const bool has_arg = colon != std::string_view::npos;
  CompressorSpec s;
  auto no_arg = [&](Kind k) {
    if (has_arg) throw bad(fmt::format("{} takes no argument", name));
    s.kind = k;
  };
  if (name == "none") {
    no_arg(Kind::kNone);
  } else if (name == "fp16") {
    no_arg(Kind::kFp16);
  } else if (name == "bf16") {
    no_arg(Kind::kBf16);
  } else if (name == "sign") {
    no_arg(Kind::kSign);
  } else if (name == "topk" || name == "randomk") {
    s.kind = name == "topk" ? Kind::kTopk : Kind::kRandomk;
    if (!parse_double(arg, &s.ratio) || !(s.ratio > 0 && s.ratio <= 1)) {
      throw bad(fmt::format("expected {}:R with the kept fraction R in (0, 1]", name));
    }
  } else if (name == "qsgd") {
    s.kind = Kind::kQsgd;
    int64_t v = 0;
    if (!parse_int(arg, &v) || v < 2 || v > 32767) {
      throw bad("expected qsgd:S with S quantization levels, 2 <= S <= 32767");
    }
    s.levels = static_cast<int>(v);
  } else if (name == "powersgd") {
    s.kind = Kind::kPowersgd;
    int64_t v = 0;
    if (!parse_int(arg, &v) || v < 1 || v > 1024) {
      throw bad("expected powersgd:R with the rank R, 1 <= R <= 1024");
    }
    s.rank = static_cast<int>(v);
  } else {
    throw bad("expected none, fp16, bf16, topk:R, randomk:R, qsgd:S, sign or powersgd:R");
  }
  return s;
}

std::vector<TensorSlot> make_layout(const std::vector<std::vector<int64_t>>& shapes, size_t lo,
                                    size_t hi) {
  std::vector<TensorSlot> out;
  if (hi <= lo) return out;
  size_t total = 0;
  for (const auto& s : shapes) {
    size_t n = 1;
    for (int64_t d : s) n *= static_cast<size_t>(std::max<int64_t>(d, 0));
    total += n;
  }
  if (shapes.empty() || total < hi) {
    out.push_back(TensorSlot{0, hi - lo, 1, static_cast<int64_t>(hi - lo)});
    return out;
  }
  size_t at = 0;
  for (const auto& s : shapes) {
    size_t n = 1;
    for (int64_t d : s) n *= static_cast<size_t>(std::max<int64_t>(d, 0));
    const size_t a = std::max(at, lo), b = std::min(at + n, hi);
    if (a < b) {
      TensorSlot t{a - lo, b - a, 1, static_cast<int64_t>(b - a)};
      if (a == at && b == at + n && s.size() >= 2 && s[0] > 0) {
        t.rows = s[0];
        t.cols = static_cast<int64_t>(n) / s[0];
      }
      out.push_back(t);
    }
    at += n;
  }
  return out;
}

// Both conversions are branch-free (selects, not jumps): gradients mix
// normal and subnormal halves at random, and the branchy versions spent
// most of their time on mispredictions (fp16 cost 15 ns per value, bf16 2).
// Bit for bit the same as the branchy ones (test
// Compress.HalfConversionIsBitExactAgainstTheReference).
uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  // Normal half (|f| in [2^-14, 65520)): rebias the exponent and round the
  // 13 dropped mantissa bits to nearest even; a carry rounds into the
  // exponent (up to infinity, 0x7c00). The sum wraps harmlessly when a is
  // below the normal range (that result is not selected).
  const uint32_t normal =
      (a + (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Subnormal half (|f| < 2^-14): adding 0.5 leaves f rounded to a multiple
  // of 2^-24 (the spacing of float near 0.5, and of half's subnormals) in
  // the low mantissa bits, by the FPU's round to nearest even.
  const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  uint32_t h = a < (113u << 23) ? sub : normal;
  h = a >= (143u << 23) ? (a > 0x7f800000u ? 0x7e00u : 0x7c00u) : h;  // NaN (quiet), overflow, inf
  return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(mant) * 0x1p-24f);  // exact
  const uint32_t special = 0x7f800000u | (mant << 13);
  const uint32_t normal = ((exp + 127 - 15) << 23) | (mant << 13);
  const uint32_t bits = exp == 0 ? sub : (exp == 31 ? special : normal);
  return std::bit_cast<float>(sign | bits);
}

uint16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

size_t kept(double ratio, size_t n) {
  if (n == 0) return 0;
  const double k = std::ceil(ratio * static_cast<double>(n));
  return std::clamp<size_t>(static_cast<size_t>(k), 1, n);
}

void random_indices(uint64_t key, size_t tensor, size_t n, size_t k, std::vector<uint32_t>* out) {
  // Selection sampling (Knuth's algorithm S): k of n, in increasing order,
  // one uniform draw per element looked at, no memory beyond the output.
  out->clear();
  Rng rng(key, tensor);
  size_t need = k;
  for (size_t i = 0; i < n && need > 0; ++i) {
    if (rng.uniform() * static_cast<double>(n - i) < static_cast<double>(need)) {
      out->push_back(static_cast<uint32_t>(i));
      --need;
    }
  }
}

Codec::Codec(CompressorSpec spec, std::vector<TensorSlot> layout, size_t min_bytes, uint64_t seed)
    : spec_(spec), layout_(std::move(layout)), min_bytes_(min_bytes) {
  for (const TensorSlot& t : layout_) numel_ = std::max(numel_, t.offset + t.size);
  q_.resize(layout_.size());
  if (spec_.kind == Kind::kPowersgd) {
    for (size_t i = 0; i < layout_.size(); ++i) {
      if (!compressed(layout_[i])) continue;
      Rng rng(seed, 0x5057u + i);
      q_[i].resize(static_cast<size_t>(layout_[i].cols) * static_cast<size_t>(spec_.rank));
      for (float& v : q_[i]) v = static_cast<float>(rng.normal());
    }
  }
}

bool Codec::compressed(const TensorSlot& t) const {
  if (spec_.kind == Kind::kNone) return false;
  if (4 * t.size < min_bytes_ || t.size == 0) return false;
  if (spec_.kind == Kind::kPowersgd) {
    const auto r = static_cast<int64_t>(spec_.rank);
    return t.rows > 1 && t.cols > 1 && r < std::min(t.rows, t.cols) &&
           r * (t.rows + t.cols) < t.rows * t.cols;
  }
  return true;
}

size_t Codec::raw_size() const { return kHeader + 4 * numel_; }

size_t Codec::encoded_size() const {
  size_t s = kHeader;
  for (const TensorSlot& t : layout_) {
    const size_t n = t.size, nb = (n + kBucket - 1) / kBucket;
    if (!compressed(t)) {
      s += 4 * n;
      continue;
    }
    switch (spec_.kind) {
      case Kind::kNone:
        s += 4 * n;
        break;
      case Kind::kFp16:
      case Kind::kBf16:
        s += 2 * n;
        break;
      case Kind::kTopk:
        s += 4 + 8 * kept(spec_.ratio, n);
        break;
      case Kind::kRandomk:
        s += 4 * kept(spec_.ratio, n);
        break;
      case Kind::kQsgd:
        s += 4 * nb + n * (spec_.levels > 127 ? 2 : 1);
        break;
      case Kind::kSign:
        s += 4 * nb + (n + 7) / 8;
        break;
      case Kind::kPowersgd:
        s += 4 * static_cast<size_t>(spec_.rank) * static_cast<size_t>(t.rows + t.cols);
        break;
    }
  }
  return s;
}

void Codec::encode(std::span<const float> x, uint64_t key, bool raw, std::string* out) {
  HSGD_ASSERT(x.size() == numel_, "compress: encode of a vector of the wrong size");
  out->clear();
  out->reserve(raw ? raw_size() : encoded_size());
  put(out, kMagic);
  put(out, static_cast<uint8_t>(spec_.kind));
  put(out, static_cast<uint8_t>(raw ? 1 : 0));
  put(out, static_cast<uint64_t>(numel_));
  put(out, key);
  if (raw) {
    put_n(out, x.data(), x.size());
    return;
  }
  std::vector<uint32_t> idx;
  std::vector<float> vals;
  for (size_t ti = 0; ti < layout_.size(); ++ti) {
    const TensorSlot& t = layout_[ti];
    const float* v = x.data() + t.offset;
    const size_t n = t.size;
    if (!compressed(t)) {
      put_n(out, v, n);
      continue;
    }
    switch (spec_.kind) {
      case Kind::kNone:
        put_n(out, v, n);
        break;
      case Kind::kFp16:
        for (size_t i = 0; i < n; ++i) put(out, float_to_half(v[i]));
        break;
      case Kind::kBf16:
        for (size_t i = 0; i < n; ++i) put(out, float_to_bf16(v[i]));
        break;
      case Kind::kTopk: {
        const size_t k = kept(spec_.ratio, n);
        // The k largest magnitudes (ties by the lower index), in index
        // order: the k-th largest magnitude by nth_element on a contiguous
        // copy of the magnitudes, then one scan that keeps those above it
        // and, of those equal to it, the first ones.
        idx.clear();
        if (k == n) {
          idx.resize(n);
          std::iota(idx.begin(), idx.end(), 0u);
        } else {
          // A NaN counts as the largest magnitude (a total order).
          const auto mag = [](float x) {
            return std::isnan(x) ? std::numeric_limits<float>::infinity() : std::fabs(x);
          };
          vals.resize(n);
          for (size_t i = 0; i < n; ++i) vals[i] = mag(v[i]);
          std::nth_element(vals.begin(), vals.begin() + static_cast<ptrdiff_t>(k - 1), vals.end(),
                           std::greater<float>());
          const float thr = vals[k - 1];
          size_t above = 0;
          for (size_t i = 0; i < n; ++i) above += mag(v[i]) > thr;
          size_t ties = k - above;  // above < k: thr is the k-th largest
          idx.reserve(k);
          for (size_t i = 0; i < n && idx.size() < k; ++i) {
            const float a = mag(v[i]);
            if (a > thr) {
              idx.push_back(static_cast<uint32_t>(i));
            } else if (a == thr && ties > 0) {
              --ties;
              idx.push_back(static_cast<uint32_t>(i));
            }
          }
        }
        put(out, static_cast<uint32_t>(k));
        put_n(out, idx.data(), k);
        for (uint32_t i : idx) put(out, v[i]);
        break;
      }
      case Kind::kRandomk: {
        random_indices(key, ti, n, kept(spec_.ratio, n), &idx);
        for (uint32_t i : idx) put(out, v[i]);
        break;
      }
      case Kind::kQsgd: {
        Rng rng(key, 0x5153u + ti);
        const int s = spec_.levels;
        for (size_t b = 0; b < n; b += kBucket) {
          const size_t e = std::min(n, b + kBucket);
          double norm = 0;
          for (size_t i = b; i < e; ++i) norm += double(v[i]) * v[i];
          const float fnorm = static_cast<float>(std::sqrt(norm));
          put(out, fnorm);
          // The bucket's levels, then one append (int8, or int16 when
          // S > 127). a is in [0, S] (std::min takes S when the ratio is
          // NaN, as for an inf element; a NaN element makes fnorm NaN and
          // the bucket all zeros, no draw), so truncation is floor, without
          // a libm call per element; the sign is arithmetic (a branch on it
          // mispredicts half the time).
          int levels[kBucket];
          const size_t m = e - b;
          if (fnorm > 0) {
            for (size_t i = 0; i < m; ++i) {
              const float x = v[b + i];
              const double a = std::min<double>(s, std::fabs(x) / fnorm * s);
              const int fl = static_cast<int>(a);
              const int level = std::min(fl + (rng.uniform() < a - fl ? 1 : 0), s);
              const int neg = std::signbit(x) ? 1 : 0;
              levels[i] = (level ^ -neg) + neg;
            }
          } else {
            std::fill(levels, levels + m, 0);
          }
          if (s > 127) {
            int16_t w[kBucket];
            std::copy(levels, levels + m, w);
            put_n(out, w, m);
          } else {
            int8_t w[kBucket];
            std::copy(levels, levels + m, w);
            put_n(out, w, m);
          }
        }
        break;
      }
      case Kind::kSign: {
        for (size_t b = 0; b < n; b += kBucket) {
          const size_t e = std::min(n, b + kBucket);
          double sum = 0;
          for (size_t i = b; i < e; ++i) sum += std::fabs(v[i]);
          put(out, static_cast<float>(sum / static_cast<double>(e - b)));
        }
        // Bit i of byte b / 8 is v[b + i]'s sign bit (shifts, no branches:
        // the signs are random).
        const size_t at = out->size();
        out->resize(at + (n + 7) / 8);
        for (size_t b = 0; b < n; b += 8) {
          uint32_t bits = 0;
          for (size_t i = b; i < std::min(n, b + 8); ++i) {
            bits |= (std::bit_cast<uint32_t>(v[i]) >> 31) << (i - b);
          }
          (*out)[at + b / 8] = static_cast<char>(bits);
        }
        break;
      }
      case Kind::kPowersgd: {
        const auto rows = static_cast<size_t>(t.rows), cols = static_cast<size_t>(t.cols);
        const auto r = static_cast<size_t>(spec_.rank);
        std::vector<float>& q = q_[ti];
        // P = M Q, orthonormalised; Q = M^T P. M is rows x cols row-major.
        p_.assign(rows * r, 0.0f);
        q_next_.assign(q.size(), 0.0f);
        switch (r) {  // the usual ranks with the rank a constant
          case 1:
            power_step<1>(v, rows, cols, q.data(), p_, q_next_.data());
            break;
          case 2:
            power_step<2>(v, rows, cols, q.data(), p_, q_next_.data());
            break;
          case 4:
            power_step<4>(v, rows, cols, q.data(), p_, q_next_.data());
            break;
          default:
            power_step<0>(v, rows, cols, q.data(), p_, q_next_.data(), r);
            break;
        }
        put_n(out, p_.data(), p_.size());
        put_n(out, q_next_.data(), q_next_.size());
        // The warm start becomes the new Q, except in a column whose P
        // column vanished (M Q = 0 there: M = 0, e.g. a pull's first
        // difference, or M orthogonal to it). Its new Q column would be 0
        // and stay 0 in every later message (P = M Q = 0 again): the rank
        // would be lost for good. That column keeps its old Q.
        for (size_t j = 0; j < r; ++j) {
          bool dead = true;
          for (size_t a = 0; a < rows && dead; ++a) dead = p_[a * r + j] == 0.0f;
          if (dead) continue;
          for (size_t c = 0; c < cols; ++c) q[c * r + j] = q_next_[c * r + j];
        }
        break;
      }
    }
  }
}

void Codec::decode(std::span<const char> bytes, std::span<float> out,
                   const std::string& what) const {
  HSGD_ASSERT(out.size() == numel_, "compress: decode into a vector of the wrong size");
  Cursor c(bytes, what);
  if (c.get<uint32_t>() != kMagic) c.fail("not a compressed message");
  const auto kind = c.get<uint8_t>();
  if (kind != static_cast<uint8_t>(spec_.kind)) {
    c.fail(fmt::format("compressor {}, expected {}", int(kind), int(spec_.kind)));
  }
  const auto raw = c.get<uint8_t>();
  if (raw > 1) c.fail("bad raw flag");
  const auto n_all = c.get<uint64_t>();
  if (n_all != numel_) c.fail(fmt::format("{} elements, expected {}", n_all, numel_));
  const auto key = c.get<uint64_t>();
  if (raw) {
    c.get_n(out.data(), numel_);
    c.end();
    return;
  }
  std::vector<uint32_t> idx;
  std::vector<float> tmp;
  for (size_t ti = 0; ti < layout_.size(); ++ti) {
    const TensorSlot& t = layout_[ti];
    float* v = out.data() + t.offset;
    const size_t n = t.size;
    if (!compressed(t)) {
      c.get_n(v, n);
      continue;
    }
    switch (spec_.kind) {
      case Kind::kNone:
        c.get_n(v, n);
        break;
      case Kind::kFp16:
        for (size_t i = 0; i < n; ++i) v[i] = half_to_float(c.get<uint16_t>());
        break;
      case Kind::kBf16:
        for (size_t i = 0; i < n; ++i) v[i] = bf16_to_float(c.get<uint16_t>());
        break;
      case Kind::kTopk: {
        const auto k = c.get<uint32_t>();
        if (k != kept(spec_.ratio, n))
          c.fail(fmt::format("top-k of {}, expected {}", k, kept(spec_.ratio, n)));
        idx.resize(k);
        c.get_n(idx.data(), k);
        for (size_t i = 0; i < k; ++i) {
          if (idx[i] >= n || (i > 0 && idx[i] <= idx[i - 1])) c.fail("top-k index out of order");
        }
        std::fill(v, v + n, 0.0f);
        for (uint32_t i : idx) v[i] = c.get<float>();
        break;
      }
      case Kind::kRandomk: {
        random_indices(key, ti, n, kept(spec_.ratio, n), &idx);
        std::fill(v, v + n, 0.0f);
        for (uint32_t i : idx) v[i] = c.get<float>();
        break;
      }
      case Kind::kQsgd: {
        const int s = spec_.levels;
        for (size_t b = 0; b < n; b += kBucket) {
          const size_t e = std::min(n, b + kBucket);
          const auto norm = c.get<float>();
          for (size_t i = b; i < e; ++i) {
            const int level = s > 127 ? c.get<int16_t>() : c.get<int8_t>();
            if (level > s || level < -s) c.fail("qsgd level out of range");
            v[i] = static_cast<float>(static_cast<double>(norm) * level / s);
          }
        }
        break;
      }
      case Kind::kSign: {
        const size_t nb = (n + kBucket - 1) / kBucket;
        tmp.resize(nb);
        c.get_n(tmp.data(), nb);
        for (size_t b = 0; b < n; b += 8) {
          const uint32_t bits = c.get<uint8_t>();
          for (size_t i = b; i < std::min(n, b + 8); ++i) {
            // The scale with its sign bit flipped where the bit is set: -s
            // exactly, without a branch on a random bit.
            const uint32_t s = std::bit_cast<uint32_t>(tmp[i / kBucket]);
            v[i] = std::bit_cast<float>(s ^ (((bits >> (i - b)) & 1u) << 31));
          }
        }
        break;
      }
      case Kind::kPowersgd: {
        const auto rows = static_cast<size_t>(t.rows), cols = static_cast<size_t>(t.cols);
        const auto r = static_cast<size_t>(spec_.rank);
        tmp.resize((rows + cols) * r);
        c.get_n(tmp.data(), tmp.size());
        const float* p = tmp.data();
        const float* q = tmp.data() + rows * r;
        for (size_t a = 0; a < rows; ++a) {
          for (size_t col = 0; col < cols; ++col) {
            float s = 0;
            for (size_t j = 0; j < r; ++j) s += p[a * r + j] * q[col * r + j];
            v[a * cols + col] = s;
          }
        }
        break;
      }
    }
  }
  c.end();
}

void Codec::save(StateWriter& w) const {
  w.put<uint64_t>(q_.size());
  for (const auto& q : q_) w.put_vec(q);
}

void Codec::load(StateReader& r) {
  if (r.get<uint64_t>() != q_.size()) r.fail("corrupt (compressor tensor count)");
  for (auto& q : q_) r.get_into(std::span<float>(q), "a powersgd warm start");
}

}  // namespace hsgd
