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
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "hsgd/core/error.h"

namespace hsgd {

class StateWriter {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes_.append(p, sizeof(T));
  }
  template <class T>
  void put_span(std::span<const T> v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
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

  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class StateReader {
 public:
  // `what` names the blob in messages (e.g. "ckpt-000003/server.bin").
  StateReader(std::span<const char> bytes, std::string what)
      : p_(bytes.data()), left_(bytes.size()), what_(std::move(what)) {}

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
    const uint64_t n = get<uint64_t>();
    if (n > left_ / sizeof(T)) {
      throw InputError(what_ + ": truncated (an array of " + std::to_string(n) + " elements, " +
                       std::to_string(left_) + " bytes left)");
    }
    std::vector<T> v(static_cast<size_t>(n));
    if (n) std::memcpy(v.data(), p_, n * sizeof(T));
    advance(n * sizeof(T));
    return v;
  }
  // Reads an array that must have exactly `n` elements into `out`.
  template <class T>
  void get_into(std::span<T> out, const char* field) {
    std::vector<T> v = get_vec<T>();
    if (v.size() != out.size()) {
      throw InputError(what_ + ": " + field + " has " + std::to_string(v.size()) +
                       " elements, expected " + std::to_string(out.size()));
    }
    std::copy(v.begin(), v.end(), out.begin());
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
  // Throws "<what>: <message>" (for checks by the caller).
  [[noreturn]] void fail(const std::string& message) const {
    throw InputError(what_ + ": " + message);
  }
  const std::string& what() const { return what_; }

 private:
  void need(size_t n) const {
    if (n > left_) {
      throw InputError(what_ + ": truncated (needed " + std::to_string(n) + " more bytes, " +
                       std::to_string(left_) + " left)");
    }
  }
  void advance(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const char* p_;
  size_t left_;
  std::string what_;
};

// CRC-32C (Castagnoli), as used by iSCSI, ext4 and LevelDB. `crc` chains.
uint32_t crc32c(std::span<const char> bytes, uint32_t crc = 0);

}  // namespace hsgd
