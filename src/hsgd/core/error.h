// Error taxonomy (see README "Errors"):
//  - InputError: bad input or bad config. One line naming the file/offset or
//    key and what was expected. The CLI prints it and exits with code 2.
//  - HSGD_ASSERT: a broken invariant, i.e. a bug in hsgd. Aborts.
#pragma once
#include <stdexcept>
#include <string>

namespace hsgd {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* msg);

}  // namespace hsgd

#define HSGD_ASSERT(cond, msg) \
  ((cond) ? (void)0 : ::hsgd::assert_fail(#cond, __FILE__, __LINE__, (msg)))
