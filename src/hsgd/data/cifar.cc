// CIFAR-10 binary batches: records of 1 label byte + 3x32x32 pixel bytes.
#include <fmt/format.h>

#include <array>
#include <string_view>

#include "hsgd/data/file_bytes.h"
#include "hsgd/data/readers.h"

namespace hsgd {
namespace {

constexpr size_t kPixels = 3 * 32 * 32;
constexpr size_t kRecord = 1 + kPixels;
constexpr int kClasses = 10;

std::vector<std::string> batch_files(const std::string& dir, bool train) {
  if (!train) return {dir + "/test_batch.bin"};
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) files.push_back(fmt::format("{}/data_batch_{}.bin", dir, i));
  return files;
}

// Reads one batch file and checks its size and labels; returns its bytes.
std::string read_batch(const std::string& path) {
  std::string bytes = data_internal::read_file(path);
  if (bytes.empty() || bytes.size() % kRecord != 0) {
    data_internal::fail_at(
        path, bytes.size(),
        fmt::format("expected a whole number of {}-byte records (1 label + {} pixels), got {} "
                    "bytes",
                    kRecord, kPixels, bytes.size()));
  }
  for (size_t at = 0; at < bytes.size(); at += kRecord) {
    const auto label = static_cast<unsigned char>(bytes[at]);
    if (label >= kClasses) {
      data_internal::fail_at(path, at,
                             fmt::format("expected a label in 0..{} (record {}), got {}",
                                         kClasses - 1, at / kRecord, label));
    }
  }
  return bytes;
}

}  // namespace

Dataset read_cifar10_dir(const std::string& dir, bool train) {
  Dataset d;
  d.name = dir;
  d.sample_shape = {3, 32, 32};
  d.num_classes = kClasses;
  std::vector<std::string> batches;
  size_t records = 0;
  for (const std::string& path : batch_files(dir, train)) {
    batches.push_back(read_batch(path));
    records += batches.back().size() / kRecord;
  }
  std::array<float, 256> scale{};
  for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
  data_internal::resize_for_bulk_write(&d.features, records * kPixels);
  d.labels.reserve(records);
  float* dst = d.features.data();
  for (const std::string& bytes : batches) {
    const auto* src = reinterpret_cast<const unsigned char*>(bytes.data());
    for (const auto* end = src + bytes.size(); src != end; src += kRecord, dst += kPixels) {
      d.labels.push_back(src[0]);
      for (size_t i = 0; i < kPixels; ++i) dst[i] = scale[src[1 + i]];
    }
  }
  return d;
}

bool has_cifar10_split(const std::string& dir, bool train) {
  return data_internal::file_exists(batch_files(dir, train).front());
}

}  // namespace hsgd
