// Data specs as given on the command line: fashion-mnist | synthetic |
// idx:DIR | cifar10:DIR | csv:FILE | libsvm:FILE | npy:X.npy,Y.npy |
// npz:FILE[:XKEY,YKEY] | synthetic-gmm | synthetic-ctr | criteo:FILE (data/ctr.h).
#pragma once
#include <optional>
#include <string>

#include "hsgd/data/readers.h"

namespace hsgd {

struct LoadedData {
  Dataset train;
  std::optional<Dataset> test;  // set when the spec has its own test split
};

// Loads a spec. `fashion-mnist` reads /usr/share/datasets/fashion-mnist (the
// Debian package dataset-fashion-mnist) and returns both splits; idx:DIR and
// cifar10:DIR return both splits when the test files exist, npz:FILE when it
// holds x_test and y_test besides x and y; the others return only `train`. Throws InputError for an
// unknown spec kind
// ("--data 'xyz': expected one of fashion-mnist, synthetic, idx:DIR, ...") or
// any reader error. Dataset::name is the file or directory read, or
// "synthetic".
LoadedData load_data(const std::string& spec, const SyntheticOptions& synthetic);

// Loads a spec for use as a test set: the test split if it has one, else all
// of it. Messages name the option "--test-data". Callers then run
// check_compatible(train, &test).
Dataset load_test_data(const std::string& spec, const SyntheticOptions& synthetic);

}  // namespace hsgd
