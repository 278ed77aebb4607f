// IDX reader (MNIST / Fashion-MNIST layout), raw or gzip-compressed.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string_view>

#include "hsgd/core/error.h"
#include "hsgd/data/file_bytes.h"
#include "hsgd/data/readers.h"

namespace hsgd {
namespace {

using data_internal::fail_at;

constexpr uint32_t kImagesMagic = 0x00000803;  // ubyte, 3 dims
constexpr uint32_t kLabelsMagic = 0x00000801;  // ubyte, 1 dim
constexpr int kClasses = 10;

uint32_t be32(std::string_view b, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data() + at);
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | static_cast<uint32_t>(p[3]);
}

std::string magic_name(uint32_t magic) {
  if (magic == kImagesMagic) return fmt::format("{:#010x} (an IDX image file)", magic);
  if (magic == kLabelsMagic) return fmt::format("{:#010x} (an IDX label file)", magic);
  return fmt::format("{:#010x}", magic);
}

// Checks the magic and the header length; returns the header's dims.
template <size_t Dims>
std::array<uint32_t, Dims> read_header(const std::string& path, std::string_view b, uint32_t magic,
                                       const char* kind) {
  const size_t header = 4 + 4 * Dims;
  if (b.size() < 4) {
    fail_at(path, b.size(),
            fmt::format("expected a {}-byte IDX {} header, got {} bytes", header, kind, b.size()));
  }
  if (be32(b, 0) != magic) {
    fail_at(
        path, 0,
        fmt::format("expected IDX {} magic {:#010x}, got {}", kind, magic, magic_name(be32(b, 0))));
  }
  if (b.size() < header) {
    fail_at(path, b.size(),
            fmt::format("expected a {}-byte IDX {} header, got {} bytes", header, kind, b.size()));
  }
  std::array<uint32_t, Dims> dims{};
  for (size_t i = 0; i < Dims; ++i) dims[i] = be32(b, 4 + 4 * i);
  return dims;
}

// Checks the payload after the header is exactly `need` bytes.
void check_payload(const std::string& path, std::string_view b, size_t header, uint64_t need,
                   const std::string& what) {
  uint64_t have = b.size() - header;
  if (have < need) {
    fail_at(path, b.size(),
            fmt::format("expected {} bytes of {} after the {}-byte header, got {}", need, what,
                        header, have));
  }
  if (have > need) {
    fail_at(path, header + need,
            fmt::format("expected end of file after {}, got {} more bytes", what, have - need));
  }
}

}  // namespace

Dataset parse_idx(const std::string& images_path, std::string_view images_raw,
                  const std::string& labels_path, std::string_view labels_raw) {
  Dataset d;
  d.name = images_path;
  d.num_classes = kClasses;
  {
    std::string storage;
    const std::string_view bytes = data_internal::decode(images_path, images_raw, &storage);
    auto [n, rows, cols] = read_header<3>(images_path, bytes, kImagesMagic, "image");
    if (n == 0) fail_at(images_path, 4, "expected at least one image, got 0");
    if (rows == 0 || cols == 0) {
      fail_at(images_path, rows == 0 ? 8 : 12,
              fmt::format("expected non-empty images, got {}x{}", rows, cols));
    }
    const uint64_t pixels = static_cast<uint64_t>(rows) * cols;  // < 2^64
    const std::string what = fmt::format("pixels ({} images of {}x{})", n, rows, cols);
    // The declared size is checked against the bytes really there (after
    // decompression) before anything is allocated for it.
    if (pixels > UINT64_MAX / n) {
      fail_at(images_path, bytes.size(),
              fmt::format("expected {}*{}*{} bytes of {} after the 16-byte header, got {}", n, rows,
                          cols, what, bytes.size() - 16));
    }
    check_payload(images_path, bytes, 16, n * pixels, what);
    d.sample_shape = {1, static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
    std::array<float, 256> scale{};
    for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
    data_internal::resize_for_bulk_write(&d.features, n * pixels);
    const auto* src = reinterpret_cast<const unsigned char*>(bytes.data() + 16);
    float* dst = d.features.data();
    for (size_t i = 0, e = d.features.size(); i < e; ++i) dst[i] = scale[src[i]];
  }
  const size_t images = d.features.size() / (d.sample_shape[1] * d.sample_shape[2]);
  std::string storage;
  const std::string_view bytes = data_internal::decode(labels_path, labels_raw, &storage);
  auto [n] = read_header<1>(labels_path, bytes, kLabelsMagic, "label");
  if (n != images) {
    fail_at(
        labels_path, 4,
        fmt::format("expected {} labels (one per image of {}), got {}", images, images_path, n));
  }
  check_payload(labels_path, bytes, 8, n, fmt::format("labels ({} labels)", n));
  d.labels.resize(n);
  const auto* src = reinterpret_cast<const unsigned char*>(bytes.data() + 8);
  for (size_t i = 0; i < n; ++i) {
    if (src[i] >= kClasses) {
      fail_at(labels_path, 8 + i,
              fmt::format("expected a label in 0..{}, got {}", kClasses - 1, src[i]));
    }
    d.labels[i] = src[i];
  }
  return d;
}

Dataset read_idx(const std::string& images_path, const std::string& labels_path) {
  const std::string images = data_internal::read_raw(images_path);
  const std::string labels = data_internal::read_raw(labels_path);
  return parse_idx(images_path, images, labels_path, labels);
}

namespace {

// `<dir>/<prefix>-<kind>` with ".gz" if that exists, else without; empty if
// neither exists.
std::string find_idx_file(const std::string& dir, bool train, const char* kind) {
  const std::string base = fmt::format("{}/{}-{}", dir, train ? "train" : "t10k", kind);
  if (data_internal::file_exists(base + ".gz")) return base + ".gz";
  if (data_internal::file_exists(base)) return base;
  return {};
}

std::string find_idx_file_or_throw(const std::string& dir, bool train, const char* kind) {
  std::string path = find_idx_file(dir, train, kind);
  if (path.empty()) {
    throw InputError(fmt::format("{}/{}-{}[.gz]: cannot open (No such file or directory)", dir,
                                 train ? "train" : "t10k", kind));
  }
  return path;
}

}  // namespace

Dataset read_idx_dir(const std::string& dir, bool train) {
  const std::string images = find_idx_file_or_throw(dir, train, "images-idx3-ubyte");
  const std::string labels = find_idx_file_or_throw(dir, train, "labels-idx1-ubyte");
  return read_idx(images, labels);
}

bool has_idx_split(const std::string& dir, bool train) {
  return !find_idx_file(dir, train, "images-idx3-ubyte").empty() &&
         !find_idx_file(dir, train, "labels-idx1-ubyte").empty();
}

}  // namespace hsgd
