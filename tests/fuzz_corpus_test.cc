// The readers' hostile-input contract (tests/fuzz/contract.h) on the
// committed seed corpora (tests/fuzz/corpus/<target>/) and on every input the
// fuzzers ever crashed on (tests/fuzz/regressions/<target>/), through the
// normal readers: checked by the ordinary suite, without clang or libFuzzer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "contract.h"
#include "hsgd/core/error.h"

namespace hsgd::fuzz {
namespace {

namespace fs = std::filesystem;

const fs::path kFuzzDir = fs::path(HSGD_SOURCE_DIR) / "tests" / "fuzz";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The files under `dir` (none if it does not exist), sorted.
std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs every file of `kind` ("corpus" or "regressions") through its target;
// returns how many files ran.
size_t run_all(const std::string& kind) {
  size_t ran = 0;
  for (const Target& t : targets()) {
    for (const fs::path& p : files_in(kFuzzDir / kind / t.name)) {
      SCOPED_TRACE(p.string());
      std::string broken;
      try {
        broken = t.check(read_bytes(p));
      } catch (const std::exception& e) {
        broken = std::string("threw something other than InputError: ") + e.what();
      }
      EXPECT_EQ(broken, "") << t.name << " on " << p;
      ++ran;
    }
  }
  return ran;
}

TEST(FuzzCorpus, SeedCorporaKeepTheContract) {
  // Every target has a seed corpus with valid and invalid files.
  for (const Target& t : targets())
    EXPECT_GE(files_in(kFuzzDir / "corpus" / t.name).size(), 5u) << t.name;
  EXPECT_GT(run_all("corpus"), 0u);
}

TEST(FuzzCorpus, RegressionInputsKeepTheContract) { EXPECT_GT(run_all("regressions"), 0u); }

// The checks themselves fail on what a misbehaving reader would return.
TEST(FuzzCorpus, ContractCatchesMalformedResults) {
  Dataset d;
  d.sample_shape = {2};
  d.num_classes = 3;
  d.features = {0.5f, 0.25f, 1.0f, 0.0f};
  d.labels = {0, 2};
  EXPECT_EQ(check_dataset(d, true), "");
  Dataset bad = d;
  bad.labels[1] = 3;
  EXPECT_NE(check_dataset(bad, false), "");  // label out of range
  bad = d;
  bad.features[0] = std::nanf("");
  EXPECT_NE(check_dataset(bad, false), "");  // NaN where none was written
  bad = d;
  bad.features.push_back(0.0f);
  EXPECT_NE(check_dataset(bad, false), "");  // sizes inconsistent
  bad = d;
  bad.sample_shape = {0};
  EXPECT_NE(check_dataset(bad, false), "");
  bad = d;
  bad.features[1] = 2.0f;
  EXPECT_NE(check_dataset(bad, true), "");  // a pixel above 1
  EXPECT_EQ(check_dataset(bad, false), "");
  bad = d;
  bad.labels.clear();
  bad.features.clear();
  EXPECT_NE(check_dataset(bad, false), "");  // empty
  EXPECT_EQ(check_message("a.csv:line 2: expected a number, got 'x'", {"a.csv"}), "");
  EXPECT_NE(check_message("", {"a.csv"}), "");
  EXPECT_NE(check_message("a.csv: two\nlines", {"a.csv"}), "");
  EXPECT_NE(check_message("expected a number", {"a.csv"}), "");  // names no file
}

}  // namespace
}  // namespace hsgd::fuzz
