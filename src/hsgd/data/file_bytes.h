// Internal to hsgd/data: whole-file reads, gzip detected by magic bytes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "hsgd/core/error.h"

namespace hsgd::data_internal {

// The raw bytes of `path` (not decompressed). Throws InputError:
//   "<path>: cannot open (<strerror>)" / "<path>: cannot read (<strerror>)"
//   "<path>: expected a file, got a directory"
std::string read_raw(const std::string& path);

// `raw` itself, or, if it starts with the gzip magic (0x1f 0x8b), its
// decompression written into `*storage` (concatenated gzip members are
// joined). The result views `raw` or `*storage`. Memory is bounded by what
// the stream really inflates to, never by its ISIZE field. Throws InputError
// "<name>: offset <n>: expected gzip data, got ..." (n in the compressed bytes).
std::string_view decode(const std::string& name, std::string_view raw, std::string* storage);

// read_raw then decode, into one string.
std::string read_file(const std::string& path);

// Decompresses an in-memory gzip stream; `path` only names it in messages.
std::string gunzip(const std::string& path, std::string_view compressed);

bool file_exists(const std::string& path);

// Asks the kernel to back [p, p + bytes) with huge pages where it can (Linux
// transparent huge pages in "madvise" mode); a no-op elsewhere. For buffers
// of many megabytes about to be written: page faults dominate their cost.
void advise_huge_pages(void* p, size_t bytes);

// Resizes `v` (a std::vector or std::string) to `n` elements, advising huge
// pages for the new storage before it is first touched.
template <class V>
void resize_for_bulk_write(V* v, size_t n) {
  v->reserve(n);
  advise_huge_pages(v->data(), n * sizeof(*v->data()));
  v->resize(n);
}

// `text` on one line: control characters (a newline in a quoted header, a
// member name) become '?', and anything past `max` bytes is cut with "...".
std::string one_line(std::string_view text, size_t max = 400);

// Throws InputError "<file>: offset <offset>: <what>" (made one line).
[[noreturn]] void fail_at(const std::string& file, uint64_t offset, const std::string& what);

}  // namespace hsgd::data_internal
