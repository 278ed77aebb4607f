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

// Checks one batch's size and labels (`bytes` already decoded).
void check_batch(const std::string& path, std::string_view bytes) {
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
}

// A data set of `records` samples (allocated once), filled batch by batch.
Dataset empty_cifar(const std::string& name, size_t records) {
  Dataset d;
  d.name = name;
  d.sample_shape = {3, 32, 32};
  d.num_classes = kClasses;
  data_internal::resize_for_bulk_write(&d.features, records * kPixels);
  d.labels.reserve(records);
  return d;
}

// Appends the records of a checked batch; `*dst` points into d->features.
void append_records(std::string_view bytes, Dataset* d, float** dst) {
  std::array<float, 256> scale{};
  for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
  const auto* src = reinterpret_cast<const unsigned char*>(bytes.data());
  for (const auto* end = src + bytes.size(); src != end; src += kRecord, *dst += kPixels) {
    d->labels.push_back(src[0]);
    for (size_t i = 0; i < kPixels; ++i) (*dst)[i] = scale[src[1 + i]];
  }
}

}  // namespace

Dataset parse_cifar10_batch(const std::string& name, std::string_view raw) {
  std::string storage;
  const std::string_view bytes = data_internal::decode(name, raw, &storage);
  check_batch(name, bytes);
  Dataset d = empty_cifar(name, bytes.size() / kRecord);
  float* dst = d.features.data();
  append_records(bytes, &d, &dst);
  return d;
}

Dataset read_cifar10_dir(const std::string& dir, bool train) {
  std::vector<std::string> batches;
  size_t records = 0;
  for (const std::string& path : batch_files(dir, train)) {
    batches.push_back(data_internal::read_file(path));
    check_batch(path, batches.back());
    records += batches.back().size() / kRecord;
  }
  Dataset d = empty_cifar(dir, records);
  float* dst = d.features.data();
  for (const std::string& bytes : batches) append_records(bytes, &d, &dst);
  return d;
}

bool has_cifar10_split(const std::string& dir, bool train) {
  return data_internal::file_exists(batch_files(dir, train).front());
}

}  // namespace hsgd
