// The contract every reader keeps on hostile bytes, checked by the libFuzzer
// targets (fuzz_target.cc, the fuzz preset) and by the ordinary test suite
// on the committed corpora and regression inputs (tests/fuzz_corpus_test.cc).
//
// A reader given any bytes either returns a well-formed result or throws
// InputError with a non-empty one-line message naming the input. Well-formed
// data set: at least one sample, a sample shape of positive dimensions whose
// product times the sample count is the feature count, num_classes >= 1,
// every label in [0, num_classes), every feature finite (none of these
// formats can write a NaN or an infinity), and pixels in [0, 1] for image
// formats. Crashes, sanitizer reports, leaks, other exceptions, and time or
// memory limits are the fuzzer's to catch.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "hsgd/data/dataset.h"

namespace hsgd::fuzz {

// Runs one reader on `bytes`. Returns "" if the contract holds, else a
// description of what broke. Exceptions other than InputError propagate.
using Check = std::string (*)(std::string_view bytes);

struct Target {
  const char* name;  // also the folder under tests/fuzz/corpus and regressions
  Check check;
};

// IDX: the input is a 4-byte little-endian length L, then L bytes of the
// image file (fewer if the input ends first), then the label file.
std::string check_idx(std::string_view bytes);
// The same framing; a part that does not start with the gzip magic gets it
// prepended, so every input goes through the gzip decoder.
std::string check_idx_gz(std::string_view bytes);
std::string check_cifar10(std::string_view bytes);  // one batch file
std::string check_csv(std::string_view bytes);
std::string check_libsvm(std::string_view bytes);
// A TOML config through parse_config (what `hsgd train --config` runs: parse,
// key checks, validate); an accepted config must validate again and
// round-trip through to_toml.
std::string check_config(std::string_view bytes);
std::string check_model(std::string_view bytes);  // a saved model file
// NumPy: the idx framing (4-byte length L, L bytes of X's .npy, then Y's);
// and one .npz archive (default keys, its test pair checked too).
std::string check_npy(std::string_view bytes);
std::string check_npz(std::string_view bytes);
// A checkpoint manifest (CheckpointStore::parse_manifest): accepted ones
// have plain blob names and sane counts.
std::string check_checkpoint_manifest(std::string_view bytes);
// A server-state blob (Server::load) into a sync server of 3 workers and
// 210 parameters with momentum (the seed corpus's layout): an accepted state
// saves and loads again, byte for byte.
std::string check_server_state(std::string_view bytes);

// The parts of the contract, exposed so their own tests can show they fail:
// "" if `d` is a well-formed data set (pixels: every feature in [0, 1]);
std::string check_dataset(const Dataset& d, bool pixels);
// "" if `msg` is a usable error: non-empty, one line, containing one of `names`.
std::string check_message(const std::string& msg, std::initializer_list<std::string_view> names);

// Every target, in a fixed order.
const std::vector<Target>& targets();

}  // namespace hsgd::fuzz
