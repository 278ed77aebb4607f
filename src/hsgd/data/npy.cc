// NumPy readers: .npy arrays and .npz archives (a zip of .npy members, stored
// or deflated). The zip container is parsed here (central directory, local
// headers, zip64 extras) and members are inflated with zlib. Every size a
// header declares is checked against the bytes actually present before
// anything is allocated, so memory stays bounded by the file's size.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/data/file_bytes.h"
#include "hsgd/data/readers.h"

namespace hsgd {
namespace {

using data_internal::fail_at;

// ---- .npy

struct NpyArray {
  std::string name;  // for messages: the file, or "FILE (member)"
  char kind = 0;     // 'f' float, 'i' signed, 'u' unsigned integer
  int itemsize = 0;
  std::vector<int64_t> shape;
  int64_t count = 0;      // product of shape
  size_t data_at = 0;     // offset of the data in the .npy bytes
  std::string_view data;  // count * itemsize bytes, little-endian
};

uint64_t le(std::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  }
  return v;
}

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw InputError(data_internal::one_line(fmt::format("{}: {}", name, what)));
}

// Value of `key` in the header dict text: the characters after "'key':", up
// to the end of the value (a quoted string, a parenthesized tuple, or a word).
std::string_view header_value(const std::string& name, std::string_view header,
                              std::string_view key) {
  const std::string quoted = fmt::format("'{}'", key);
  size_t at = header.find(quoted);
  if (at == std::string_view::npos) {
    fail(name, fmt::format("npy header has no '{}' entry: {}", key, header));
  }
  at = header.find(':', at + quoted.size());
  if (at == std::string_view::npos) fail(name, fmt::format("malformed npy header: {}", header));
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  if (at >= header.size()) fail(name, fmt::format("malformed npy header: {}", header));
  const char open = header[at];
  const char close = open == '(' ? ')' : open == '\'' ? '\'' : open == '"' ? '"' : 0;
  if (close != 0) {
    const size_t end = header.find(close, at + 1);
    if (end == std::string_view::npos) fail(name, fmt::format("malformed npy header: {}", header));
    return header.substr(at, end + 1 - at);
  }
  size_t end = at;
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  return header.substr(at, end - at);
}

// Parses a .npy file held in `b`. Checks the declared shape against the data
// bytes present (no allocation depends on the header).
NpyArray parse_npy(const std::string& name, std::string_view b) {
  NpyArray a;
  a.name = name;
  static constexpr char kMagic[] = "\x93NUMPY";
  if (b.size() < 6 || std::memcmp(b.data(), kMagic, 6) != 0) {
    fail_at(name, 0, "expected the .npy magic \\x93NUMPY (bad magic: not a NumPy .npy file)");
  }
  if (b.size() < 10) fail_at(name, b.size(), "truncated .npy header");
  const int major = static_cast<unsigned char>(b[6]);
  size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = le(b, 8, 2);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) fail_at(name, b.size(), "truncated .npy header");
    header_len = le(b, 8, 4);
    header_at = 12;
  } else {
    fail_at(name, 6, fmt::format("unsupported .npy format version {}", major));
  }
  if (header_len > b.size() - header_at) {
    fail_at(name, b.size(),
            fmt::format("truncated: the .npy header declares {} bytes, {} present", header_len,
                        b.size() - header_at));
  }
  const std::string_view header = b.substr(header_at, header_len);

  // descr: '<f4', '|u1', ...
  std::string_view descr = header_value(name, header, "descr");
  if (descr.size() < 4 || (descr.front() != '\'' && descr.front() != '"')) {
    fail(name, fmt::format("unsupported dtype {} (expected float32, float64, uint8 or an "
                           "integer type)",
                           descr));
  }
  descr = descr.substr(1, descr.size() - 2);
  const char order = descr[0];
  a.kind = descr[1];
  const auto [end, ec] = std::from_chars(descr.data() + 2, descr.data() + descr.size(), a.itemsize);
  const bool known_kind = a.kind == 'f' || a.kind == 'i' || a.kind == 'u';
  if (ec != std::errc() || end != descr.data() + descr.size() || !known_kind ||
      (a.kind == 'f' && a.itemsize != 4 && a.itemsize != 8) ||
      (a.kind != 'f' && a.itemsize != 1 && a.itemsize != 2 && a.itemsize != 4 && a.itemsize != 8)) {
    fail(name, fmt::format("unsupported dtype '{}' (expected float32, float64, uint8 or an "
                           "integer type)",
                           descr));
  }
  if (order == '>' && a.itemsize > 1) {
    fail(name, fmt::format("unsupported dtype '{}': big-endian (save with "
                           "arr.astype(arr.dtype.newbyteorder('<')))",
                           descr));
  }
  if (order != '<' && order != '|' && order != '=' && order != '>') {
    fail(name, fmt::format("unsupported dtype '{}'", descr));
  }

  const std::string_view fortran = header_value(name, header, "fortran_order");

  // shape: (a, b, ...)
  std::string_view shape = header_value(name, header, "shape");
  if (shape.size() < 2 || shape.front() != '(') {
    fail(name, fmt::format("malformed npy shape {}", shape));
  }
  shape = shape.substr(1, shape.size() - 2);
  const size_t have = b.size() - header_at - header_len;
  // The largest element count the data bytes could hold.
  const uint64_t max_count = have / static_cast<size_t>(a.itemsize);
  uint64_t count = 1;
  bool overflow = false;
  while (!shape.empty()) {
    while (!shape.empty() && (shape.front() == ' ' || shape.front() == ',')) shape.remove_prefix(1);
    if (shape.empty()) break;
    uint64_t dim = 0;
    const auto [p, e] = std::from_chars(shape.data(), shape.data() + shape.size(), dim);
    if (e != std::errc() || dim > (uint64_t{1} << 50)) {
      fail(name, fmt::format("malformed npy shape ({})", shape));
    }
    shape.remove_prefix(static_cast<size_t>(p - shape.data()));
    while (!shape.empty() && shape.front() == 'L') shape.remove_prefix(1);  // Python 2 longs
    a.shape.push_back(static_cast<int64_t>(dim));
    if (dim != 0 && count > max_count / dim) overflow = true;
    count *= dim;
  }
  if (fortran.find("True") != std::string_view::npos && a.shape.size() > 1) {
    fail(name, "Fortran-order array; hsgd reads C order (save np.ascontiguousarray(arr))");
  }
  const uint64_t need = count * static_cast<uint64_t>(a.itemsize);
  if (overflow || need > have) {
    fail_at(name, b.size(),
            fmt::format("truncated: shape ({}) of {}-byte items needs more than the {} data bytes "
                        "present",
                        fmt::join(a.shape, ","), a.itemsize, have));
  }
  if (need < have) {
    fail_at(
        name, header_at + header_len + need,
        fmt::format("expected end of file after the array data, got {} more bytes", have - need));
  }
  a.count = static_cast<int64_t>(count);
  a.data_at = header_at + header_len;
  a.data = b.substr(a.data_at, need);
  return a;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("({}{})", fmt::join(shape, ", "), shape.size() == 1 ? "," : "");
}

// Element i of an integer array as int64 (unsigned 64-bit values above
// INT64_MAX come back negative, and are refused as labels anyway).
int64_t int_at(const NpyArray& a, int64_t i) {
  const char* p = a.data.data() + i * a.itemsize;
  switch (a.itemsize) {
    case 1:
      return a.kind == 'i' ? int64_t{static_cast<int8_t>(*p)}
                           : int64_t{static_cast<unsigned char>(*p)};
    case 2: {
      const auto v = static_cast<uint16_t>(le(a.data, i * 2, 2));
      return a.kind == 'i' ? int64_t{static_cast<int16_t>(v)} : int64_t{v};
    }
    case 4: {
      const auto v = static_cast<uint32_t>(le(a.data, i * 4, 4));
      return a.kind == 'i' ? int64_t{static_cast<int32_t>(v)} : int64_t{v};
    }
    default:
      return static_cast<int64_t>(le(a.data, i * 8, 8));
  }
}

double float_at(const NpyArray& a, int64_t i) {
  if (a.itemsize == 4) {
    float f;
    std::memcpy(&f, a.data.data() + i * 4, 4);
    return f;
  }
  double d;
  std::memcpy(&d, a.data.data() + i * 8, 8);
  return d;
}

// Builds the data set from features `x` and labels `y` (borrowing float32
// features with `borrow`: data_from_arrays).
Dataset to_dataset(const NpyArray& x, const NpyArray& y, bool borrow = false) {
  if (x.shape.size() < 2 || x.shape.size() > 4) {
    fail(x.name, fmt::format("features have shape {}; expected N x D, N x H x W or N x C x H x W",
                             shape_text(x.shape)));
  }
  if (!(x.kind == 'f' || (x.kind == 'u' && x.itemsize == 1))) {
    fail(x.name, fmt::format("unsupported feature dtype {}{} (expected float32, float64 or uint8)",
                             x.kind, x.itemsize));
  }
  if (y.shape.size() < 1 || y.shape.size() > 2 || (y.shape.size() == 2 && y.shape[1] != 1)) {
    fail(y.name, fmt::format("labels have shape {}; expected (N,) or (N, 1)", shape_text(y.shape)));
  }
  const int64_t n = x.shape[0];
  if (y.shape[0] != n) {
    fail(y.name, fmt::format("{} labels for the {} samples of {} (shape {})", y.shape[0], n, x.name,
                             shape_text(x.shape)));
  }
  if (n == 0) fail(x.name, "expected at least one sample, got 0");
  Dataset d;
  d.name = x.name;
  d.sample_shape.assign(x.shape.begin() + 1, x.shape.end());
  if (d.sample_shape.size() == 2) d.sample_shape.insert(d.sample_shape.begin(), 1);  // N x H x W
  for (int64_t dim : d.sample_shape) {
    if (dim == 0) fail(x.name, fmt::format("samples of shape {} are empty", shape_text(x.shape)));
  }

  constexpr int64_t kMaxLabel = std::numeric_limits<int32_t>::max() - 1;  // max + 1 must fit
  d.labels.resize(static_cast<size_t>(n));
  int64_t max_label = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = 0;
    if (y.kind == 'f') {
      const double v = float_at(y, i);
      if (!(v >= 0 && v <= static_cast<double>(kMaxLabel)) || v != std::floor(v)) {
        fail(y.name,
             fmt::format("label {} at index {}: expected an integer in [0, {}]", v, i, kMaxLabel));
      }
      label = static_cast<int64_t>(v);
    } else {
      label = int_at(y, i);
      const bool huge_unsigned = y.kind == 'u' && y.itemsize == 8 && label < 0;
      if (huge_unsigned || label < 0 || label > kMaxLabel) {
        fail(y.name, fmt::format("label {} at index {}: expected an integer in [0, {}]",
                                 huge_unsigned ? std::to_string(static_cast<uint64_t>(label))
                                               : std::to_string(label),
                                 i, kMaxLabel));
      }
    }
    d.labels[i] = static_cast<int32_t>(label);
    max_label = std::max(max_label, label);
  }
  d.num_classes = static_cast<int>(max_label + 1);

  if (borrow && x.kind == 'f' && x.itemsize == 4) {
    const auto* values = reinterpret_cast<const float*>(x.data.data());
    HSGD_ASSERT(reinterpret_cast<uintptr_t>(values) % alignof(float) == 0,
                "dataset_from_arrays: float32 features not aligned");
    d.borrowed = std::span<const float>(values, static_cast<size_t>(x.count));
    for (int64_t i = 0; i < x.count; ++i) {
      if (!std::isfinite(values[i])) {
        fail(x.name, fmt::format("feature {} of sample {} is {}, expected a finite number",
                                 i % d.sample_size(), i / d.sample_size(), values[i]));
      }
    }
    return d;
  }
  data_internal::resize_for_bulk_write(&d.features, static_cast<size_t>(x.count));
  float* out = d.features.data();
  if (x.kind == 'u') {
    const auto* p = reinterpret_cast<const unsigned char*>(x.data.data());
    for (int64_t i = 0; i < x.count; ++i) out[i] = static_cast<float>(p[i]) / 255.0f;
    return d;
  }
  if (x.itemsize == 4) {
    std::memcpy(out, x.data.data(), x.data.size());
  } else {
    for (int64_t i = 0; i < x.count; ++i) out[i] = static_cast<float>(float_at(x, i));
  }
  for (int64_t i = 0; i < x.count; ++i) {
    if (!std::isfinite(out[i])) {
      fail(x.name, fmt::format("feature {} of sample {} is {}, expected a finite number",
                               i % d.sample_size(), i / d.sample_size(), out[i]));
    }
  }
  return d;
}

// ---- .npz (zip)

struct ZipMember {
  std::string name;
  uint16_t method = 0;
  uint16_t flags = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0;
  uint64_t uncompressed = 0;
  uint64_t local_offset = 0;
};

std::vector<ZipMember> zip_members(const std::string& path, std::string_view b) {
  constexpr size_t kEocd = 22;
  if (b.size() < 4 || b.substr(0, 2) != "PK") {
    fail_at(path, 0, "expected a zip archive (an .npz from np.savez), got bad magic");
  }
  if (b.size() < kEocd)
    fail_at(path, b.size(), "truncated zip archive: no end of central directory");
  // The end-of-central-directory record: the last "PK\5\6" within 64 KiB + 22.
  size_t eocd = std::string_view::npos;
  const size_t lowest = b.size() > kEocd + 65535 ? b.size() - kEocd - 65535 : 0;
  for (size_t at = b.size() - kEocd + 1; at-- > lowest;) {
    if (le(b, at, 4) == 0x06054b50) {
      eocd = at;
      break;
    }
  }
  if (eocd == std::string_view::npos) {
    fail_at(path, b.size(), "truncated or corrupt zip archive: no end of central directory");
  }
  uint64_t entries = le(b, eocd + 10, 2);
  uint64_t cd_size = le(b, eocd + 12, 4);
  uint64_t cd_offset = le(b, eocd + 16, 4);
  if (entries == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // zip64: the locator sits just before the record.
    if (eocd < 20 || le(b, eocd - 20, 4) != 0x07064b50) {
      fail_at(path, eocd, "corrupt zip archive: zip64 end-of-central-directory locator missing");
    }
    const uint64_t z = le(b, eocd - 20 + 8, 8);
    if (z > b.size() || b.size() - z < 56 || le(b, z, 4) != 0x06064b50) {
      fail_at(path, eocd - 20, "corrupt zip archive: bad zip64 end-of-central-directory offset");
    }
    entries = le(b, z + 32, 8);
    cd_size = le(b, z + 40, 8);
    cd_offset = le(b, z + 48, 8);
  }
  if (cd_offset > b.size() || cd_size > b.size() - cd_offset) {
    fail_at(path, eocd,
            fmt::format("truncated zip archive: central directory at {} of {} bytes runs past the "
                        "end of the {}-byte file",
                        cd_offset, cd_size, b.size()));
  }
  std::vector<ZipMember> out;
  size_t at = cd_offset;
  const size_t cd_end = cd_offset + cd_size;
  for (uint64_t e = 0; e < entries; ++e) {
    if (cd_end - at < 46 || le(b, at, 4) != 0x02014b50) {
      fail_at(path, at, "corrupt zip archive: expected a central directory entry");
    }
    ZipMember m;
    m.flags = static_cast<uint16_t>(le(b, at + 8, 2));
    m.method = static_cast<uint16_t>(le(b, at + 10, 2));
    m.crc = static_cast<uint32_t>(le(b, at + 16, 4));
    m.compressed = le(b, at + 20, 4);
    m.uncompressed = le(b, at + 24, 4);
    const size_t name_len = le(b, at + 28, 2), extra_len = le(b, at + 30, 2),
                 comment_len = le(b, at + 32, 2);
    m.local_offset = le(b, at + 42, 4);
    if (cd_end - at - 46 < name_len + extra_len + comment_len) {
      fail_at(path, at, "corrupt zip archive: central directory entry runs past its end");
    }
    m.name = std::string(b.substr(at + 46, name_len));
    // zip64 extra field: 64-bit values for the fields saturated at 0xffffffff.
    std::string_view extra = b.substr(at + 46 + name_len, extra_len);
    while (extra.size() >= 4) {
      const uint64_t id = le(extra, 0, 2), size = le(extra, 2, 2);
      if (size > extra.size() - 4) break;
      if (id == 0x0001) {
        size_t f = 4;
        auto take = [&](uint64_t* v) {
          if (*v != 0xffffffff) return;
          if (f + 8 > 4 + size) fail_at(path, at, "corrupt zip archive: short zip64 extra field");
          *v = le(extra, f, 8);
          f += 8;
        };
        take(&m.uncompressed);
        take(&m.compressed);
        take(&m.local_offset);
      }
      extra.remove_prefix(4 + size);
    }
    out.push_back(std::move(m));
    at += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

// The uncompressed bytes of `m`: a view into `b` when stored, else inflated
// into `*storage`.
std::string_view zip_extract(const std::string& path, std::string_view b, const ZipMember& m,
                             std::string* storage) {
  const std::string where = fmt::format("{} ({})", path, m.name);
  if (m.flags & 1) fail(where, "encrypted zip member");
  const uint64_t lh = m.local_offset;
  if (lh > b.size() || b.size() - lh < 30 || le(b, lh, 4) != 0x04034b50) {
    fail_at(path, lh, fmt::format("corrupt zip archive: no local header for {}", m.name));
  }
  const uint64_t data_at = lh + 30 + le(b, lh + 26, 2) + le(b, lh + 28, 2);
  if (data_at > b.size() || m.compressed > b.size() - data_at) {
    fail_at(path, b.size(),
            fmt::format("truncated: member {} declares {} compressed bytes at offset {}, the "
                        "file has {} bytes",
                        m.name, m.compressed, data_at, b.size()));
  }
  const std::string_view packed = b.substr(data_at, m.compressed);
  std::string_view out;
  if (m.method == 0) {
    if (m.uncompressed != m.compressed) {
      fail(where, fmt::format("corrupt zip entry: stored with {} bytes, {} declared", m.compressed,
                              m.uncompressed));
    }
    out = packed;
  } else if (m.method == 8) {
    // Deflate expands at most ~1032:1: a larger claim is corrupt.
    if (m.uncompressed > m.compressed * 1032 + 1024) {
      fail(where, fmt::format("corrupt zip entry: {} bytes cannot inflate to the {} declared",
                              m.compressed, m.uncompressed));
    }
    z_stream s{};
    if (inflateInit2(&s, -15) != Z_OK) fail(where, "cannot decompress (zlib: out of memory)");
    // Inflated 64 KiB at a time into storage, which grows with what the
    // stream really produces (never to the declared size up front: a header
    // may lie by up to 1032x), to one byte past the declared size at most,
    // which detects excess output.
    constexpr size_t kIn = 1u << 30, kOut = 1u << 16;
    storage->clear();
    size_t consumed = 0, produced = 0;
    int rc = Z_OK;
    while (rc == Z_OK && produced <= m.uncompressed) {
      const size_t in_avail = std::min(packed.size() - consumed, kIn);
      const auto out_avail =
          static_cast<size_t>(std::min<uint64_t>(kOut, m.uncompressed + 1 - produced));
      storage->resize(produced + out_avail);
      s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data() + consumed));
      s.avail_in = static_cast<uInt>(in_avail);
      s.next_out = reinterpret_cast<Bytef*>(storage->data() + produced);
      s.avail_out = static_cast<uInt>(out_avail);
      rc = inflate(&s, Z_NO_FLUSH);
      consumed += in_avail - s.avail_in;
      produced += out_avail - s.avail_out;
      storage->resize(produced);
      if (rc == Z_BUF_ERROR && (in_avail - s.avail_in > 0 || out_avail - s.avail_out > 0)) {
        rc = Z_OK;  // progress made across a chunk boundary
      }
    }
    inflateEnd(&s);
    if (produced > m.uncompressed) {
      fail(where,
           fmt::format("corrupt zip entry: inflates past the {} bytes declared", m.uncompressed));
    }
    if (rc != Z_STREAM_END) {
      fail(where, consumed == packed.size()
                      ? std::string("truncated deflate stream")
                      : fmt::format("corrupt deflate stream at byte {} (zlib: {})", consumed,
                                    s.msg != nullptr ? s.msg : zError(rc)));
    }
    if (produced != m.uncompressed) {
      fail(where, fmt::format("corrupt zip entry: inflates to {} bytes, {} declared", produced,
                              m.uncompressed));
    }
    out = *storage;
  } else {
    fail(where, fmt::format("unsupported zip compression method {} (expected stored or deflate)",
                            m.method));
  }
  const auto crc = static_cast<uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(out.data()), out.size()));
  if (crc != m.crc) fail(where, "CRC32 mismatch: the archive is corrupt");
  return out;
}

std::string key_of(const ZipMember& m) {
  const std::string& n = m.name;
  return n.size() > 4 && n.ends_with(".npy") ? n.substr(0, n.size() - 4) : n;
}

const ZipMember* find_member(const std::vector<ZipMember>& members, std::string_view key) {
  for (const auto& m : members) {
    if (key_of(m) == key) return &m;
  }
  return nullptr;
}

// Reads the pair (x_key, y_key) of an opened archive.
Dataset npz_pair(const std::string& path, std::string_view bytes, const ZipMember& mx,
                 const ZipMember& my) {
  std::string sx, sy;
  const std::string_view bx = zip_extract(path, bytes, mx, &sx);
  const NpyArray x = parse_npy(fmt::format("{} ({})", path, mx.name), bx);
  const std::string_view by = zip_extract(path, bytes, my, &sy);
  const NpyArray y = parse_npy(fmt::format("{} ({})", path, my.name), by);
  Dataset d = to_dataset(x, y);
  d.name = key_of(mx) == "x" ? path : fmt::format("{} ({})", path, key_of(mx));
  return d;
}

}  // namespace

Dataset dataset_from_arrays(const ArrayView& xv, const ArrayView& yv, bool borrow) {
  const auto array = [](const ArrayView& v) {
    NpyArray a;
    a.name = v.name;
    a.kind = v.kind;
    a.itemsize = v.itemsize;
    a.shape = v.shape;
    a.count = 1;
    for (int64_t dim : v.shape) a.count *= dim;
    a.data = v.data;
    HSGD_ASSERT(a.count * a.itemsize == static_cast<int64_t>(v.data.size()),
                "dataset_from_arrays: the bytes do not match the shape");
    return a;
  };
  return to_dataset(array(xv), array(yv), borrow);
}

Dataset parse_npy_pair(const std::string& x_name, std::string_view x_raw, const std::string& y_name,
                       std::string_view y_raw) {
  const NpyArray x = parse_npy(x_name, x_raw);
  const NpyArray y = parse_npy(y_name, y_raw);
  return to_dataset(x, y);
}

Dataset read_npy(const std::string& x_path, const std::string& y_path) {
  const std::string bx = data_internal::read_file(x_path);
  const std::string by = data_internal::read_file(y_path);
  return parse_npy_pair(x_path, bx, y_path, by);
}

Dataset read_npz(const std::string& path, const std::string& x_key, const std::string& y_key,
                 std::optional<Dataset>* test) {
  const std::string bytes = data_internal::read_file(path);
  return parse_npz(path, bytes, x_key, y_key, test);
}

Dataset parse_npz(const std::string& path, std::string_view bytes, const std::string& x_key,
                  const std::string& y_key, std::optional<Dataset>* test) {
  const std::vector<ZipMember> members = zip_members(path, bytes);
  const ZipMember* mx = nullptr;
  const ZipMember* my = nullptr;
  if (!x_key.empty() || !y_key.empty()) {
    mx = find_member(members, x_key);
    my = find_member(members, y_key);
    for (const auto& [m, key] : {std::pair{mx, x_key}, std::pair{my, y_key}}) {
      if (m == nullptr) {
        std::string keys;
        for (const auto& k : members) keys += (keys.empty() ? "" : ", ") + key_of(k);
        fail(path, fmt::format("no array '{}' (the archive holds: {})", key, keys));
      }
    }
  } else {
    mx = find_member(members, "x");
    my = find_member(members, "y");
    if (mx == nullptr || my == nullptr) {
      if (members.size() < 2) {
        fail(path, fmt::format("expected two arrays (features and labels), the archive holds {}",
                               members.size()));
      }
      mx = &members[0];
      my = &members[1];
    } else if (test != nullptr) {
      const ZipMember* tx = find_member(members, "x_test");
      const ZipMember* ty = find_member(members, "y_test");
      if (tx != nullptr && ty != nullptr) *test = npz_pair(path, bytes, *tx, *ty);
    }
  }
  return npz_pair(path, bytes, *mx, *my);
}

}  // namespace hsgd
