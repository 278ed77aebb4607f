// Byte streams for saving and restoring run state (checkpoints). Every
// stateful part writes itself with save(StateWriter&) and reads itself back
// with load(StateReader&) (STYLE.md habit 13), so a checkpoint is a walk over
// parts. The encoding is little-endian host layout of fixed-width values and
// length-prefixed arrays; it is read back only by the same hsgd build family
// (the checkpoint manifest carries a format version).
//
// A reader never trusts a length: every read checks the bytes that remain and
// throws InputError naming the blob ("<what>: truncated ...") instead of
// reading past the end or allocating for a length the data cannot hold.
//
// Both stream when given a sink or a source (a checkpoint's blob file): the
// bytes of a large array then go between its own memory and the file with
// no copy of the whole part in between.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hsgd/core/error.h"

namespace hsgd {

// Where a streaming StateWriter puts its bytes (a checkpoint's blob file).
class StateSink {
 public:
  virtual ~StateSink() = default;
  // Takes all n bytes (the sink may write them out before returning, so
  // the caller's memory is free again); throws InputError on failure.
  virtual void write(const char* p, size_t n) = 0;
};

// Where a streaming StateReader gets its bytes.
class StateSource {
 public:
  virtual ~StateSource() = default;
  // Fills exactly n bytes at p (n never exceeds what the reader was told
  // the source holds); throws InputError naming the source when it ends
  // early.
  virtual void read(char* p, size_t n) = 0;
};

// Thread-safety: none (one writer per thread).
class StateWriter {
 public:
  // In memory: bytes() and take() return what was put.
  StateWriter() = default;
  // Streaming into `sink` (not owned; it must outlive the writer): small
  // values gather in a buffer of kFlushBytes, an array of kDirectBytes or
  // more goes to the sink straight from the caller's memory, so memory
  // never grows by more than the buffer. flush() once at the end; bytes()
  // and take() are not for a streaming writer.
  explicit StateWriter(StateSink* sink) : sink_(sink) {}

  static constexpr size_t kFlushBytes = size_t{1} << 16;
  static constexpr size_t kDirectBytes = size_t{1} << 14;

  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <class T>
  void put_span(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
  }
  // The elements alone, without a length (the reader knows it: get_raw).
  template <class T>
  void put_raw(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
  }
  template <class T>
  void put_vec(const std::vector<T>& v) {
    put_span(std::span<const T>(v));
  }
  void put_bools(const std::vector<bool>& v) {
    std::vector<uint8_t> b(v.begin(), v.end());
    put_vec(b);
  }
  void put_str(const std::string& s) { put_span(std::span<const char>(s)); }
  // A marker that load() checks, so a blob read out of step fails loudly.
  void tag(uint32_t t) { put(t); }

  // Streaming: hands the buffered bytes to the sink. In memory: nothing.
  void flush() {
    if (sink_ != nullptr && !bytes_.empty()) {
      sink_->write(bytes_.data(), bytes_.size());
      bytes_.clear();
    }
  }

  const std::string& bytes() const {
    HSGD_ASSERT(sink_ == nullptr, "bytes() of a streaming StateWriter");
    return bytes_;
  }
  std::string take() {
    HSGD_ASSERT(sink_ == nullptr, "take() of a streaming StateWriter");
    return std::move(bytes_);
  }

 private:
  void append(const char* p, size_t n) {
    if (sink_ != nullptr && n >= kDirectBytes) {
      flush();
      sink_->write(p, n);
      return;
    }
    bytes_.append(p, n);
    if (sink_ != nullptr && bytes_.size() >= kFlushBytes) flush();
  }

  StateSink* sink_ = nullptr;
  std::string bytes_;
};

// Thread-safety: none (one reader per thread).
class StateReader {
 public:
  // Over bytes in memory. `what` names the blob in messages (e.g.
  // "ckpt-000003/server.bin").
  StateReader(std::span<const char> bytes, std::string what)
      : p_(bytes.data()), avail_(bytes.size()), left_(bytes.size()), what_(std::move(what)) {}
  // Streaming `size` bytes from `source` (not owned; it must outlive the
  // reader) through a buffer of kBufferBytes; an array of that size or more
  // is read from the source straight into its destination (get_vec's
  // vector, get_into's span), with no copy in between.
  StateReader(StateSource* source, uint64_t size, std::string what)
      : source_(source),
        p_(nullptr),
        avail_(0),
        left_(static_cast<size_t>(size)),
        what_(std::move(what)) {}

  static constexpr size_t kBufferBytes = size_t{1} << 16;

  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    advance(sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> get_vec() {
    static_assert(std::is_trivially_copyable_v<T>);
    const uint64_t n = get_count<T>();
    std::vector<T> v(static_cast<size_t>(n));
    read_bytes(reinterpret_cast<char*>(v.data()), n * sizeof(T));
    return v;
  }
  // Reads an array that must have exactly `n` elements into `out`.
  template <class T>
  void get_into(std::span<T> out, const char* field) {
    const uint64_t n = get_count<T>();
    if (n != out.size()) {
      throw InputError(what_ + ": " + field + " has " + std::to_string(n) + " elements, expected " +
                       std::to_string(out.size()));
    }
    read_bytes(reinterpret_cast<char*>(out.data()), out.size_bytes());
  }
  // Exactly out.size() elements written by put_raw.
  template <class T>
  void get_raw(std::span<T> out) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (out.size_bytes() > left_) {
      throw InputError(what_ + ": truncated (needed " + std::to_string(out.size_bytes()) +
                       " more bytes, " + std::to_string(left_) + " left)");
    }
    read_bytes(reinterpret_cast<char*>(out.data()), out.size_bytes());
  }
  std::vector<bool> get_bools() {
    std::vector<uint8_t> b = get_vec<uint8_t>();
    return std::vector<bool>(b.begin(), b.end());
  }
  std::string get_str() {
    std::vector<char> v = get_vec<char>();
    return std::string(v.begin(), v.end());
  }
  void expect_tag(uint32_t t, const char* part) {
    if (get<uint32_t>() != t) throw InputError(what_ + ": corrupt (" + part + " section missing)");
  }
  // Throws unless every byte was read.
  void expect_end() const {
    if (left_ != 0) {
      throw InputError(what_ + ": corrupt (" + std::to_string(left_) + " unexpected bytes at end)");
    }
  }
  // Bytes not yet read.
  uint64_t left() const { return left_; }
  // Throws "<what>: <message>" (for checks by the caller).
  [[noreturn]] void fail(const std::string& message) const {
    throw InputError(what_ + ": " + message);
  }
  const std::string& what() const { return what_; }

 private:
  // An array's length, checked against the bytes that remain.
  template <class T>
  uint64_t get_count() {
    const uint64_t n = get<uint64_t>();
    if (n > left_ / sizeof(T)) {
      throw InputError(what_ + ": truncated (an array of " + std::to_string(n) + " elements, " +
                       std::to_string(left_) + " bytes left)");
    }
    return n;
  }
  void need(size_t n) {
    if (n > left_) {
      throw InputError(what_ + ": truncated (needed " + std::to_string(n) + " more bytes, " +
                       std::to_string(left_) + " left)");
    }
    if (n > avail_) refill(n);
  }
  void advance(size_t n) {
    p_ += n;
    avail_ -= n;
    left_ -= n;
  }
  // Streaming: the buffer holds at least n bytes (n <= left_) after it.
  void refill(size_t n) {
    if (buffer_.size() < std::max(n, kBufferBytes)) buffer_.resize(std::max(n, kBufferBytes));
    if (avail_ > 0) std::memmove(buffer_.data(), p_, avail_);
    const size_t more = std::min(left_, buffer_.size()) - avail_;
    source_->read(buffer_.data() + avail_, more);
    avail_ += more;
    p_ = buffer_.data();
  }
  // n bytes (n <= left_) to dst: the buffered ones, then straight from the
  // source (a large remainder) or through the buffer (a small one).
  void read_bytes(char* dst, size_t n) {
    const size_t from_buffer = std::min(n, avail_);
    if (from_buffer > 0) std::memcpy(dst, p_, from_buffer);
    advance(from_buffer);
    const size_t rest = n - from_buffer;
    if (rest == 0) return;
    if (rest >= kBufferBytes) {
      source_->read(dst + from_buffer, rest);  // avail_ is 0 here
      left_ -= rest;
      return;
    }
    need(rest);
    std::memcpy(dst + from_buffer, p_, rest);
    advance(rest);
  }

  StateSource* source_ = nullptr;
  std::vector<char> buffer_;
  const char* p_;
  size_t avail_;  // bytes at p_ (in memory: all of them)
  size_t left_;   // bytes not yet read, avail_ included
  std::string what_;
};

// CRC-32C (Castagnoli), as used by iSCSI, ext4 and LevelDB. `crc` chains.
uint32_t crc32c(std::span<const char> bytes, uint32_t crc = 0);

}  // namespace hsgd
