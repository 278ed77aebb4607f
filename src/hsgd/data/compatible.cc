// check_compatible: can a model trained on one data set evaluate another?
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hsgd/core/error.h"
#include "hsgd/data/readers.h"

namespace hsgd {

void check_compatible(const Dataset& train, const Dataset& test) {
  if (test.sample_shape != train.sample_shape) {
    throw InputError(fmt::format(
        "{}: expected samples of shape {{{}}} like the training data {}, got {{{}}}", test.name,
        fmt::join(train.sample_shape, ", "), train.name, fmt::join(test.sample_shape, ", ")));
  }
  if (test.categorical_rows != train.categorical_rows) {
    throw InputError(fmt::format(
        "{}: expected categorical fields with rows {{{}}} like the training data {}, got {{{}}}",
        test.name, fmt::join(train.categorical_rows, ", "), train.name,
        fmt::join(test.categorical_rows, ", ")));
  }
  for (int64_t i = 0; i < test.size(); ++i) {
    const int32_t label = test.labels[static_cast<size_t>(i)];
    if (label < 0 || label >= train.num_classes) {
      throw InputError(fmt::format(
          "{}: sample {}: expected a label in 0..{} (the classes of the training data {}), got {}",
          test.name, i, train.num_classes - 1, train.name, label));
    }
  }
}

void check_compatible(const Dataset& train, Dataset* test) {
  check_compatible(train, *test);
  test->num_classes = train.num_classes;
}

}  // namespace hsgd
