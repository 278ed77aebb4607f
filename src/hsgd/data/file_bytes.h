// Internal to hsgd/data: whole-file reads, gzip detected by magic bytes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "hsgd/core/error.h"

namespace hsgd::data_internal {

// The bytes of `path`, decompressed if they start with the gzip magic
// (0x1f 0x8b; concatenated gzip members are joined). Throws InputError:
//   "<path>: cannot open (<strerror>)" / "<path>: cannot read (<strerror>)"
//   "<path>: offset <n>: expected gzip data, got ..." (n in the compressed file)
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

// Throws InputError "<file>: offset <offset>: <what>".
[[noreturn]] void fail_at(const std::string& file, uint64_t offset, const std::string& what);

}  // namespace hsgd::data_internal
