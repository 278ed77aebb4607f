#include "hsgd/data/file_bytes.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

namespace hsgd::data_internal {
namespace {

std::string errno_text(int e) { return std::generic_category().message(e); }

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// ISIZE of the last member: the uncompressed size mod 2^32, a capacity hint.
size_t size_hint(std::string_view gz) {
  if (gz.size() < 18) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(gz.data() + gz.size() - 4);
  return static_cast<size_t>(p[0]) | static_cast<size_t>(p[1]) << 8 |
         static_cast<size_t>(p[2]) << 16 | static_cast<size_t>(p[3]) << 24;
}

struct InflateGuard {
  z_stream* s;
  ~InflateGuard() { inflateEnd(s); }
};

}  // namespace

std::string one_line(std::string_view text, size_t max) {
  std::string out;
  for (char ch : text.substr(0, max)) {
    const auto u = static_cast<unsigned char>(ch);
    out += (u < 0x20 || u == 0x7f) ? '?' : ch;
  }
  if (text.size() > max) out += "...";
  return out;
}

void fail_at(const std::string& file, uint64_t offset, const std::string& what) {
  throw InputError(one_line(fmt::format("{}: offset {}: {}", file, offset, what)));
}

void advise_huge_pages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::string gunzip(const std::string& path, std::string_view in) {
  z_stream s{};
  if (inflateInit2(&s, 15 + 16) != Z_OK) {  // +16: gzip wrapper only
    throw InputError(fmt::format("{}: cannot decompress (zlib: out of memory)", path));
  }
  InflateGuard guard{&s};
  // ISIZE is a claim: trust it only up to 8x the compressed size (real IDX
  // and CSV files compress 2-6x); beyond that the buffer grows by doubling
  // as the stream really produces bytes, so a lying ISIZE costs nothing.
  const size_t hint = std::min(size_hint(in), in.size() * 8);
  std::string out;
  resize_for_bulk_write(&out, std::max<size_t>(hint + 64, 1 << 12));
  size_t consumed = 0;                 // compressed bytes fed to zlib
  size_t produced = 0;                 // uncompressed bytes written to out
  constexpr size_t kChunk = 1u << 30;  // zlib counts in 32-bit uInt
  for (;;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    size_t in_avail = std::min(in.size() - consumed, kChunk);
    size_t out_avail = std::min(out.size() - produced, kChunk);
    s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + consumed));
    s.avail_in = static_cast<uInt>(in_avail);
    s.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    s.avail_out = static_cast<uInt>(out_avail);
    int rc = inflate(&s, Z_NO_FLUSH);
    consumed += in_avail - s.avail_in;
    produced += out_avail - s.avail_out;
    if (rc == Z_STREAM_END) {
      if (consumed == in.size()) break;
      if (!is_gzip(in.substr(consumed))) {
        fail_at(path, consumed,
                fmt::format("expected end of file or another gzip member, got {} trailing bytes",
                            in.size() - consumed));
      }
      inflateReset(&s);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && s.avail_out == 0) continue;  // output full: grow
    if (rc == Z_BUF_ERROR && consumed == in.size()) {
      fail_at(path, consumed, "expected more gzip data, got end of file (truncated gzip stream)");
    }
    fail_at(path, consumed,
            fmt::format("expected gzip data, got a corrupt stream (zlib: {})",
                        s.msg != nullptr ? s.msg : zError(rc)));
  }
  out.resize(produced);
  return out;
}

std::string read_raw(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError(fmt::format("{}: expected a file, got a directory", path));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw InputError(fmt::format("{}: cannot open ({})", path, errno_text(errno)));
  std::string bytes;
  auto size = std::filesystem::file_size(path, ec);
  if (!ec) resize_for_bulk_write(&bytes, size);
  size_t got = std::fread(bytes.data(), 1, bytes.size(), f.get());
  bytes.resize(got);
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f.get())) > 0;) bytes.append(buf, n);
  if (std::ferror(f.get())) {
    throw InputError(fmt::format("{}: cannot read ({})", path, errno_text(errno)));
  }
  return bytes;
}

std::string_view decode(const std::string& name, std::string_view raw, std::string* storage) {
  if (!is_gzip(raw)) return raw;
  *storage = gunzip(name, raw);
  return *storage;
}

std::string read_file(const std::string& path) {
  std::string raw = read_raw(path);
  if (!is_gzip(raw)) return raw;
  return gunzip(path, raw);
}

}  // namespace hsgd::data_internal
