// Test helpers: NumPy .npy bytes and .npz (zip) archives, written in C++ so
// the tests need no Python. Header-only; links zlib.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace hsgd::testing {

// The bytes of a .npy file (format 1.0): `descr` like "<f4", the shape, the
// raw little-endian data.
inline std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape,
                             const std::string& data, bool fortran = false) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (" +
                       dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string b = "\x93NUMPY";
  b += '\x01';
  b += '\x00';
  b += static_cast<char>(header.size() & 0xff);
  b += static_cast<char>(header.size() >> 8);
  return b + header + data;
}

// Raw bytes of a vector of trivially copyable values.
template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

struct ZipMember {
  std::string name;  // e.g. "x.npy"
  std::string data;  // uncompressed
  bool deflate = false;
};

inline void put_le(std::string* b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline std::string raw_deflate(const std::string& in) {
  z_stream s{};
  deflateInit2(&s, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&s, in.size()), '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

// A zip archive of `members` (what np.savez / np.savez_compressed write).
inline std::string zip_bytes(const std::vector<ZipMember>& members) {
  std::string out, cd;
  for (const auto& m : members) {
    const std::string packed = m.deflate ? raw_deflate(m.data) : m.data;
    const auto crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), static_cast<uInt>(m.data.size())));
    const uint64_t offset = out.size();
    const int method = m.deflate ? 8 : 0;
    put_le(&out, 0x04034b50, 4);
    put_le(&out, 20, 2);
    put_le(&out, 0, 2);
    put_le(&out, method, 2);
    put_le(&out, 0, 4);  // time, date
    put_le(&out, crc, 4);
    put_le(&out, packed.size(), 4);
    put_le(&out, m.data.size(), 4);
    put_le(&out, m.name.size(), 2);
    put_le(&out, 0, 2);
    out += m.name + packed;
    put_le(&cd, 0x02014b50, 4);
    put_le(&cd, 20, 2);
    put_le(&cd, 20, 2);
    put_le(&cd, 0, 2);
    put_le(&cd, method, 2);
    put_le(&cd, 0, 4);
    put_le(&cd, crc, 4);
    put_le(&cd, packed.size(), 4);
    put_le(&cd, m.data.size(), 4);
    put_le(&cd, m.name.size(), 2);
    put_le(&cd, 0, 2);  // extra
    put_le(&cd, 0, 2);  // comment
    put_le(&cd, 0, 2);  // disk
    put_le(&cd, 0, 2);  // internal attributes
    put_le(&cd, 0, 4);  // external attributes
    put_le(&cd, offset, 4);
    cd += m.name;
  }
  const uint64_t cd_offset = out.size();
  out += cd;
  put_le(&out, 0x06054b50, 4);
  put_le(&out, 0, 4);
  put_le(&out, members.size(), 2);
  put_le(&out, members.size(), 2);
  put_le(&out, cd.size(), 4);
  put_le(&out, cd_offset, 4);
  put_le(&out, 0, 2);
  return out;
}

}  // namespace hsgd::testing
