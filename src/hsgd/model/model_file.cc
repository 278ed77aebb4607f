// Model file format (all integers little-endian):
//   "HSGDMODEL1\n"                     11 bytes of magic
//   u32 header_len
//   header_len bytes of JSON: {name, sample_shape, num_classes, hidden, num_params,
//                               input_mean, input_std, archive_bytes}
//   num_params float32 values
//   archive_bytes bytes: the TorchScript archive of a torchscript:FILE model
//                        (absent, and archive_bytes 0 or missing, for the zoo)
//   u32 CRC32 (zlib) of the float bytes followed by the archive bytes
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>

#include "hsgd/core/error.h"
#include "hsgd/model/model.h"

namespace hsgd {
namespace {

static_assert(std::endian::native == std::endian::little,
              "model files store little-endian floats; add byte swapping for this host");

constexpr char kMagic[] = "HSGDMODEL1\n";
constexpr size_t kMagicLen = sizeof(kMagic) - 1;

uint32_t crc_of(const void* data, size_t bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), static_cast<const Bytef*>(data), bytes));
}

uint32_t crc_after(uint32_t crc, const void* data, size_t bytes) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

void put_u32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Reads a whole file, with bounds-checked cursor access that names the file
// and offset on truncation.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open: " + std::string(std::strerror(errno)));
    data_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) fail("read error");
  }

  const char* take(size_t bytes) {
    if (data_.size() - pos_ < bytes) {
      fail("offset " + std::to_string(data_.size()) + ": expected " +
           std::to_string(bytes - (data_.size() - pos_)) + " more bytes");
    }
    const char* p = data_.data() + pos_;
    pos_ += bytes;
    return p;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }

  [[noreturn]] void fail(const std::string& what) const { throw InputError(path_ + ": " + what); }
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    fail("offset " + std::to_string(offset) + ": " + what);
  }

 private:
  std::string path_;
  std::string data_;
  size_t pos_ = 0;
};

}  // namespace

bool is_torchscript(const std::string& name) { return name.starts_with("torchscript:"); }

void read_model_archive(ModelSpec* spec) {
  if (!is_torchscript(spec->name) || !spec->archive.empty()) return;
  const std::string path = spec->name.substr(spec->name.find(':') + 1);
  if (path.empty())
    throw InputError("--model torchscript:FILE: expected a file after 'torchscript:'");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
  spec->archive.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(path + ": cannot read");
  if (spec->archive.empty()) throw InputError(path + ": empty file, not a TorchScript module");
}

void save_model(const std::string& path, const ModelSpec& spec, std::span<const float> params) {
  nlohmann::json header = {
      {"name", spec.name},
      {"sample_shape", spec.sample_shape},
      {"num_classes", spec.num_classes},
      {"hidden", spec.hidden},
      {"num_params", params.size()},
      {"input_mean", spec.input_mean},
      {"input_std", spec.input_std},
      {"archive_bytes", spec.archive.size()},
  };
  const std::string header_text = header.dump();
  std::string prefix(kMagic, kMagicLen);
  put_u32(&prefix, static_cast<uint32_t>(header_text.size()));
  prefix += header_text;
  const size_t float_bytes = params.size() * sizeof(float);
  std::string crc;
  put_u32(&crc,
          crc_after(crc_of(params.data(), float_bytes), spec.archive.data(), spec.archive.size()));

  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(partial + ": cannot create: " + std::strerror(errno));
    out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    out.write(reinterpret_cast<const char*>(params.data()),
              static_cast<std::streamsize>(float_bytes));
    out.write(spec.archive.data(), static_cast<std::streamsize>(spec.archive.size()));
    out.write(crc.data(), static_cast<std::streamsize>(crc.size()));
    out.flush();
    if (!out) {
      std::remove(partial.c_str());
      throw InputError(partial + ": write failed");
    }
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(partial.c_str());
    throw InputError(path + ": cannot rename " + partial + " into place: " + why);
  }
}

void load_model(const std::string& path, ModelSpec* spec, std::vector<float>* params) {
  Reader r(path);
  if (std::memcmp(r.take(kMagicLen), kMagic, kMagicLen) != 0) {
    r.fail_at(0, "not an hsgd model file (bad magic)");
  }
  const uint32_t header_len = get_u32(r.take(4));
  const size_t header_at = r.pos();
  const char* header_bytes = r.take(header_len);
  ModelSpec s;
  uint64_t num_params = 0;
  uint64_t archive_bytes = 0;
  try {
    const auto header = nlohmann::json::parse(header_bytes, header_bytes + header_len);
    s.name = header.at("name").get<std::string>();
    s.sample_shape = header.at("sample_shape").get<std::vector<int64_t>>();
    s.num_classes = header.at("num_classes").get<int>();
    s.hidden = header.at("hidden").get<std::vector<int64_t>>();
    num_params = header.at("num_params").get<uint64_t>();
    s.input_mean = header.value("input_mean", 0.0);
    s.input_std = header.value("input_std", 1.0);
    archive_bytes = header.value("archive_bytes", uint64_t{0});
    if (!(s.input_std > 0)) throw nlohmann::json::other_error::create(0, "input_std <= 0", nullptr);
  } catch (const nlohmann::json::exception& e) {
    r.fail_at(header_at, std::string("bad header: ") + e.what());
  }
  if (num_params > (uint64_t{1} << 40)) {
    r.fail_at(header_at,
              "bad header: num_params " + std::to_string(num_params) + " is implausible");
  }
  if (num_params > r.remaining() / sizeof(float)) {
    r.fail("offset " + std::to_string(r.pos() + r.remaining()) + ": expected " +
           std::to_string(num_params * sizeof(float) + 4 - r.remaining()) + " more bytes");
  }
  const size_t float_bytes = num_params * sizeof(float);
  const char* float_data = r.take(float_bytes);
  if (archive_bytes > r.remaining()) {
    r.fail("offset " + std::to_string(r.pos() + r.remaining()) + ": expected " +
           std::to_string(archive_bytes + 4 - r.remaining()) + " more bytes");
  }
  const char* archive = r.take(archive_bytes);
  const uint32_t stored_crc = get_u32(r.take(4));
  if (r.remaining() != 0) {
    r.fail_at(r.pos(), std::to_string(r.remaining()) + " unexpected bytes after the checksum");
  }
  if (crc_after(crc_of(float_data, float_bytes), archive, archive_bytes) != stored_crc) {
    r.fail("checksum mismatch: file is corrupt");
  }
  s.archive.assign(archive, archive_bytes);
  params->resize(num_params);
  std::memcpy(params->data(), float_data, float_bytes);
  *spec = std::move(s);
}

}  // namespace hsgd
