// Data set readers. Each throws InputError with one line naming the file, the
// byte offset or line number, and what was expected, on any malformed input:
//   "<file>: offset <n>: expected ..., got ..."          (binary formats)
//   "<file>:line <n> field <m>: expected ..., got '...'"  (text formats)
// A file that cannot be opened gives "<file>: cannot open (<reason>)".
// Every reader accepts a gzip-compressed file (detected by magic bytes); the
// offsets in messages then count uncompressed bytes, except for a corrupt
// gzip stream, whose offset is in the compressed file.
// Readers set Dataset::name to the file (or, for CIFAR-10, the directory).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hsgd/data/ctr.h"
#include "hsgd/data/dataset.h"

namespace hsgd {

// IDX (MNIST/Fashion-MNIST layout), gzip-compressed or raw (detected by magic
// bytes, not by name). Images: magic 0x00000803, dims n,rows,cols, ubyte
// pixels scaled to [0,1]. Labels: magic 0x00000801. 10 classes.
Dataset read_idx(const std::string& images_path, const std::string& labels_path);

// Reads the train or test pair from a directory holding the standard file
// names (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
// t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]).
Dataset read_idx_dir(const std::string& dir, bool train);
// Whether `dir` holds both files of the train or test pair (either spelling).
bool has_idx_split(const std::string& dir, bool train);

// CIFAR-10 binary batches (data_batch_1..5.bin / test_batch.bin in `dir`):
// records of 1 label byte + 3072 pixel bytes, scaled to [0,1], shape {3,32,32}.
// Every file must be a whole number of records; labels must be < 10.
Dataset read_cifar10_dir(const std::string& dir, bool train);
// Whether `dir` holds data_batch_1.bin (train) or test_batch.bin (test).
bool has_cifar10_split(const std::string& dir, bool train);

// CSV: `label,f1,...,fn` per line, no header; every row the same width.
// Labels are integers >= 0; num_classes = max label + 1; sample_shape {n}.
// Features must be finite numbers. Blank lines may only trail the data.
Dataset read_csv(const std::string& path);

// LIBSVM: `label idx:val idx:val ...`, 1-based strictly increasing indices,
// `#` starts a comment. Labels are integers >= 0; num_features = max index
// seen; the result is dense (absent entries are 0), sample_shape {features}.
// rows x features may not exceed 256 per byte of (decompressed) input, nor
// 2^30, whichever is less (but at least 2^20): memory follows the file.
Dataset read_libsvm(const std::string& path);

// In-memory forms of the readers above: `raw` is a whole file's bytes as
// they are on disk (gzip detected the same way), `name` names it in messages
// and in Dataset::name. The path readers read the file and call these; the
// fuzz targets (tests/fuzz/) call them directly. Same contract, same errors.
// Every size a header declares is checked against the bytes really present
// before anything is allocated for it, so memory is bounded by the input.
Dataset parse_idx(const std::string& images_name, std::string_view images_raw,
                  const std::string& labels_name, std::string_view labels_raw);
// One CIFAR-10 batch file (a whole number of 3073-byte records).
Dataset parse_cifar10_batch(const std::string& name, std::string_view raw);
Dataset parse_csv(const std::string& name, std::string_view raw);
Dataset parse_libsvm(const std::string& name, std::string_view raw);

// NumPy arrays: features X and integer labels Y, each a .npy file (format
// 1.0-3.0, little-endian, C order; Fortran order is refused). X: float32,
// float64 or uint8 (uint8 scaled to [0, 1] as for IDX), shape N x D
// (sample_shape {D}), N x H x W ({1, H, W}) or N x C x H x W ({C, H, W}).
// Y: shape (N,) or (N, 1), any integer dtype, or a float dtype holding
// integers; labels in [0, 2^31 - 2]; num_classes = max label + 1. Messages
// name the file (for an .npz, "FILE (member.npy)"). Memory is bounded by the
// file size: declared shapes are checked against the bytes present first.
Dataset read_npy(const std::string& x_path, const std::string& y_path);

// An .npz archive (np.savez or np.savez_compressed: a zip, members stored or
// deflated, zip64 understood). With both keys empty: arrays "x" and "y" if
// present (and then, if `test` is not null and the archive also holds
// "x_test" and "y_test", those into *test), else the first two arrays. With
// keys: those arrays (key = member name without ".npy").
Dataset read_npz(const std::string& path, const std::string& x_key, const std::string& y_key,
                 std::optional<Dataset>* test);
// In-memory forms of the two (same contract and errors; used by the fuzz
// targets).
// An array held in memory by the caller (the Python module's NumPy
// arrays): dtype kind ('f' float, 'i' signed, 'u' unsigned integer) and item
// size, shape, and the product-of-shape x itemsize bytes, C order, little-endian.
// `name` names it in messages.
struct ArrayView {
  std::string name;
  char kind = 0;
  int itemsize = 0;
  std::vector<int64_t> shape;
  std::string_view data;
};
// The data set of features `x` and labels `y`, checked and converted as
// npy:X,Y files are (the same one-line InputErrors). With `borrow` and
// float32 features, the features are not copied: the data set's
// `borrowed` points into x.data (aligned for float), which the caller keeps
// alive; other dtypes are converted into `features` once.
Dataset dataset_from_arrays(const ArrayView& x, const ArrayView& y, bool borrow);
Dataset parse_npy_pair(const std::string& x_name, std::string_view x_raw, const std::string& y_name,
                       std::string_view y_raw);
Dataset parse_npz(const std::string& path, std::string_view bytes, const std::string& x_key,
                  const std::string& y_key, std::optional<Dataset>* test);

struct SyntheticOptions {
  int64_t samples = 10000;
  int64_t features = 20;
  int classes = 10;
  // Std of each coordinate of the class centres. 0.6 with the other defaults
  // gives a linear classifier 77-84 % test accuracy (nearest centroid, seeds
  // 1-5): learnable, not trivial.
  double class_sep = 0.6;
  double noise = 1.0;  // std of the per-sample Gaussian noise
  uint64_t seed = 1;
  // synthetic-ctr and criteo:FILE (data/ctr.h); ctr.seed follows `seed`.
  CtrOptions ctr;
};
// A Gaussian-mixture classification set like the paper's (20 dims, 10
// classes, 10 000 samples): class centres ~ N(0, class_sep^2) per feature,
// drawn once; balanced labels (i % classes, shuffled); each sample is its
// centre plus N(0, noise^2) per feature. Deterministic for a seed. Throws
// InputError for samples < 1, features < 1, classes < 2, negative sep/noise.
Dataset make_synthetic(const SyntheticOptions& o);

// A mixture of diagonal Gaussians for density estimation (synthetic-gmm,
// issue 31): o.classes components with centres ~ N(0, class_sep^2) per
// dimension, per-dimension stds noise x U(0.5, 1.5), weights proportional to
// 1 + U(0, 1); each sample's label is its component. o.features dimensions,
// o.samples samples. Deterministic for o.seed. Throws InputError like
// make_synthetic.
Dataset make_synthetic_gmm(const SyntheticOptions& o);
// Checks that `test` can be evaluated by a model trained on `train` (used for
// a separate --test-data): equal sample shapes, test labels below
// train.num_classes (the test set may hold fewer classes). Throws InputError
// naming both data sets.
void check_compatible(const Dataset& train, const Dataset& test);
// Same check, then sets test->num_classes = train.num_classes.
void check_compatible(const Dataset& train, Dataset* test);

}  // namespace hsgd
