// Fixtures shared by the unit tests: a per-test scratch directory and the
// check that an input error is one line naming what was wrong.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>

#include "hsgd/core/error.h"

namespace hsgd::testing_helpers {

// Asserts `fn` throws InputError whose message contains every one of
// `parts` and is one line.
inline void expect_input_error(const std::function<void()>& fn,
                               std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nmissing: " << p;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The bytes of the file at `path` ("" if it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A fresh directory per test (CTest runs tests as parallel processes),
// removed after it.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (std::string("hsgd_") + info->test_suite_name() + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes `bytes` to the file `name` in the directory; returns its path.
  std::string write(const std::string& name, std::string_view bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }

  std::filesystem::path dir_;
};

}  // namespace hsgd::testing_helpers
