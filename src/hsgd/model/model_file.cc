// Model file format (all integers little-endian):
//   "HSGDMODEL1\n"                     11 bytes of magic
//   u32 header_len
//   header_len bytes of JSON: {name, sample_shape, num_classes, hidden, num_params,
//                               input_mean, input_std, archive_bytes}
//   num_params float32 values
//   archive_bytes bytes: the TorchScript archive of a torchscript:FILE model
//                        (absent, and archive_bytes 0 or missing, for the zoo)
//   u32 CRC32 (zlib) of the float bytes followed by the archive bytes
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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

// Bounds-checked cursor over a whole file's bytes that names the file and
// offset on truncation.
class Reader {
 public:
  Reader(const std::string& path, std::string_view data) : path_(path), data_(data) {}

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
  std::string_view data_;
  size_t pos_ = 0;
};

std::string read_whole_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(path + ": expected a model file, got a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open: " + std::strerror(errno));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(path + ": read error");
  return data;
}

std::string join(const std::vector<int64_t>& v) { return fmt::format("{{{}}}", fmt::join(v, ",")); }

// Checks what the header claims against itself and against num_params (which
// the caller has already checked against the file's length), so that
// make_model never builds a model larger than the file: every dimension is
// positive, and every weight matrix the model has (input x classes, or the
// mlp's chain input x hidden... x classes) fits in num_params. Throws
// "bad header: ..." through `r`.
void check_spec(const Reader& r, size_t header_at, const ModelSpec& s, uint64_t num_params) {
  auto bad = [&](const std::string& what) { r.fail_at(header_at, "bad header: " + what); };
  auto too_big = [&] {
    bad(fmt::format("a {} model with input {}{} and {} classes cannot have only {} parameters",
                    s.name, join(s.sample_shape),
                    s.name == "mlp" ? ", hidden " + join(s.hidden) : std::string(), s.num_classes,
                    num_params));
  };
  if (!std::isfinite(s.input_mean)) bad("input_mean: expected a finite number");
  if (!(std::isfinite(s.input_std) && s.input_std > 0)) bad("input_std: expected a number > 0");
  if (s.sample_shape.empty() || s.sample_shape.size() > 8) {
    bad(fmt::format("sample_shape {}: expected 1 to 8 dimensions", join(s.sample_shape)));
  }
  for (int64_t x : s.sample_shape) {
    if (x < 1) bad(fmt::format("sample_shape {}: expected dimensions >= 1", join(s.sample_shape)));
  }
  for (int64_t h : s.hidden) {
    if (h < 1) bad(fmt::format("hidden {}: expected widths >= 1", join(s.hidden)));
  }
  // A TorchScript module's architecture is in its archive: no size chain
  // to check here (the archive's size is checked against the bytes present).
  if (s.name.starts_with("torchscript:")) return;
  if (s.name == "dlrm") {
    uint64_t rows = 0;
    for (int64_t t : s.table_rows) {
      if (t < 1) bad(fmt::format("table_rows {}: expected rows >= 1", join(s.table_rows)));
      rows += static_cast<uint64_t>(t);
      if (rows > num_params) too_big();
    }
    if (s.table_rows.empty()) bad("table_rows: expected at least one table");
    if (rows * static_cast<uint64_t>(s.embedding_dim) > num_params) too_big();
    for (int64_t h : s.top_hidden) {
      if (h < 1 || static_cast<uint64_t>(h) > num_params) {
        bad(fmt::format("top_hidden {}: expected widths >= 1", join(s.top_hidden)));
      }
    }
  }
  // Widths along the model, each <= num_params <= 2^40, so no product of
  // two overflows.
  std::vector<uint64_t> chain{1};
  for (int64_t x : s.sample_shape) {
    if (static_cast<uint64_t>(x) > num_params) too_big();
    chain[0] *= static_cast<uint64_t>(x);
    if (chain[0] > num_params) too_big();
  }
  if (s.name == "mlp") chain.insert(chain.end(), s.hidden.begin(), s.hidden.end());
  chain.push_back(static_cast<uint64_t>(s.num_classes));
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    if (chain[i + 1] > num_params || chain[i] * chain[i + 1] > num_params) too_big();
  }
}

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

namespace {

// Writes the file under path.partial from the chunks `next` gives (false
// at the end), then renames it into place; with `finite_only`, a chunk
// holding a NaN or Inf abandons it (returns false, nothing written).
bool write_model_file(const std::string& path, const ModelSpec& spec, uint64_t num_params,
                      const std::function<bool(std::span<const float>*)>& next, bool finite_only) {
  nlohmann::json header = {
      {"name", spec.name},
      {"sample_shape", spec.sample_shape},
      {"num_classes", spec.num_classes},
      {"hidden", spec.hidden},
      {"num_params", num_params},
      {"input_mean", spec.input_mean},
      {"input_std", spec.input_std},
      {"archive_bytes", spec.archive.size()},
  };
  if (spec.name == "dlrm") {
    header["table_rows"] = spec.table_rows;
    header["embedding_dim"] = spec.embedding_dim;
    header["top_hidden"] = spec.top_hidden;
  }
  const std::string header_text = header.dump();
  std::string prefix(kMagic, kMagicLen);
  put_u32(&prefix, static_cast<uint32_t>(header_text.size()));
  prefix += header_text;

  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(partial + ": cannot create: " + std::strerror(errno));
    out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    uint32_t crc = crc_of(nullptr, 0);
    uint64_t written = 0;
    std::span<const float> chunk;
    while (next(&chunk)) {
      if (finite_only) {
        for (float v : chunk) {
          if (!std::isfinite(v)) {
            out.close();
            std::remove(partial.c_str());
            return false;
          }
        }
      }
      const size_t bytes = chunk.size() * sizeof(float);
      crc = crc_after(crc, chunk.data(), bytes);
      out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(bytes));
      written += chunk.size();
    }
    HSGD_ASSERT(written == num_params, "model file: the chunks do not add up to num_params");
    crc = crc_after(crc, spec.archive.data(), spec.archive.size());
    std::string tail;
    put_u32(&tail, crc);
    out.write(spec.archive.data(), static_cast<std::streamsize>(spec.archive.size()));
    out.write(tail.data(), static_cast<std::streamsize>(tail.size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(partial.c_str());
      throw InputError(partial + ": write failed");
    }
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(partial.c_str());
    throw InputError(path + ": cannot rename " + partial + " into place: " + why);
  }
  return true;
}

}  // namespace

void save_model(const std::string& path, const ModelSpec& spec, std::span<const float> params) {
  bool done = false;
  write_model_file(
      path, spec, params.size(),
      [&](std::span<const float>* chunk) {
        if (done) return false;
        *chunk = params;
        done = true;
        return true;
      },
      /*finite_only=*/false);
}

bool save_model_stream(const std::string& path, const ModelSpec& spec, uint64_t num_params,
                       const std::function<bool(std::span<const float>*)>& next) {
  return write_model_file(path, spec, num_params, next, /*finite_only=*/true);
}

void parse_model(const std::string& path, std::string_view bytes, ModelSpec* spec,
                 std::vector<float>* params) {
  Reader r(path, bytes);
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
    // Integers are taken only from JSON integers in range: nlohmann's get<>
    // would convert 1e300 or -1 silently (or, for floats, with UB).
    auto integer = [&](const nlohmann::json& v, const char* key, int64_t lo, int64_t hi) {
      // nlohmann stores every non-negative integer as unsigned: check both
      // bounds in the representation it has.
      const bool in_range =
          v.is_number_unsigned()
              ? v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                    (lo <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(lo))
              : v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
      if (!in_range) {
        r.fail_at(header_at, std::string("bad header: ") + key + " = " +
                                 v.dump(-1, ' ', true).substr(0, 40) +
                                 ": expected an integer in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "]");
      }
      return v.get<int64_t>();
    };
    auto integers = [&](const nlohmann::json& v, const char* key) {
      if (!v.is_array()) {
        r.fail_at(header_at, std::string("bad header: ") + key + ": expected an array");
      }
      std::vector<int64_t> out;
      for (const auto& x : v) out.push_back(integer(x, key, INT64_MIN, INT64_MAX));
      return out;
    };
    s.name = header.at("name").get<std::string>();
    s.sample_shape = integers(header.at("sample_shape"), "sample_shape");
    s.num_classes = static_cast<int>(integer(header.at("num_classes"), "num_classes", 1, INT_MAX));
    s.hidden = integers(header.at("hidden"), "hidden");
    if (s.name == "dlrm") {
      s.table_rows = integers(header.at("table_rows"), "table_rows");
      s.embedding_dim = integer(header.at("embedding_dim"), "embedding_dim", 1, INT_MAX);
      s.top_hidden = integers(header.at("top_hidden"), "top_hidden");
    }
    num_params =
        static_cast<uint64_t>(integer(header.at("num_params"), "num_params", 0, INT64_MAX));
    s.input_mean = header.value("input_mean", 0.0);
    s.input_std = header.value("input_std", 1.0);
    if (header.contains("archive_bytes")) {
      archive_bytes =
          static_cast<uint64_t>(integer(header.at("archive_bytes"), "archive_bytes", 0, INT64_MAX));
    }
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
  check_spec(r, header_at, s, num_params);
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

void load_model(const std::string& path, ModelSpec* spec, std::vector<float>* params) {
  const std::string bytes = read_whole_file(path);
  parse_model(path, bytes, spec, params);
}

}  // namespace hsgd
