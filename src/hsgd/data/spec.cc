// Data specs: fashion-mnist | synthetic | idx:DIR | cifar10:DIR | csv:FILE | libsvm:FILE |
// npy:X,Y | npz:FILE[:XKEY,YKEY] | synthetic-gmm | synthetic-ctr | criteo:FILE.
#include "hsgd/data/spec.h"

#include <fmt/format.h>

#include <string_view>

#include "hsgd/core/error.h"
#include "hsgd/data/readers.h"

namespace hsgd {
namespace {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

enum class Kind {
  kFashionMnist,
  kSynthetic,
  kIdx,
  kCifar10,
  kCsv,
  kLibsvm,
  kNpy,
  kNpz,
  kSyntheticCtr,
  kCriteo,
  kSyntheticGmm
};

struct Spec {
  Kind kind;
  std::string path;  // DIR or FILE; empty for fashion-mnist and synthetic
};

// `option` names the flag in messages ("--data", "--test-data").
Spec parse_spec(const std::string& spec, const char* option) {
  if (spec == "fashion-mnist") return {Kind::kFashionMnist, kFashionMnistDir};
  if (spec == "synthetic") return {Kind::kSynthetic, {}};
  if (spec == "synthetic-ctr") return {Kind::kSyntheticCtr, {}};
  if (spec == "synthetic-gmm") return {Kind::kSyntheticGmm, {}};
  const size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    const std::string_view kind = std::string_view(spec).substr(0, colon);
    std::string path = spec.substr(colon + 1);
    const struct {
      std::string_view name;
      Kind kind;
      const char* what;
    } kinds[] = {{"idx", Kind::kIdx, "a directory"}, {"cifar10", Kind::kCifar10, "a directory"},
                 {"csv", Kind::kCsv, "a file"},      {"libsvm", Kind::kLibsvm, "a file"},
                 {"npy", Kind::kNpy, "X.npy,Y.npy"}, {"npz", Kind::kNpz, "a file"},
                 {"criteo", Kind::kCriteo, "a file"}};
    for (const auto& k : kinds) {
      if (kind != k.name) continue;
      if (path.empty()) {
        throw InputError(fmt::format("{} '{}': expected {} after '{}:', got nothing", option, spec,
                                     k.what, k.name));
      }
      if (k.kind == Kind::kNpy && path.find(',') == std::string::npos) {
        throw InputError(
            fmt::format("{} '{}': expected npy:X.npy,Y.npy (two files)", option, spec));
      }
      return {k.kind, std::move(path)};
    }
  }
  throw InputError(fmt::format(
      "{} '{}': expected one of fashion-mnist, synthetic, idx:DIR, cifar10:DIR, csv:FILE, "
      "libsvm:FILE, npy:X.npy,Y.npy, npz:FILE[:XKEY,YKEY], synthetic-gmm, synthetic-ctr, "
      "criteo:FILE",
      option, spec));
}

// npy:X,Y: split at the first comma.
Dataset read_npy_spec(const std::string& path) {
  const size_t comma = path.find(',');
  return read_npy(path.substr(0, comma), path.substr(comma + 1));
}

// npz:FILE or npz:FILE:XKEY,YKEY (keys: a last ':' followed by one comma and
// no '/').
Dataset read_npz_spec(const std::string& path, std::optional<Dataset>* test) {
  const size_t colon = path.rfind(':');
  if (colon != std::string::npos) {
    const std::string keys = path.substr(colon + 1);
    const size_t comma = keys.find(',');
    if (comma != std::string::npos && keys.find(',', comma + 1) == std::string::npos &&
        keys.find('/') == std::string::npos) {
      return read_npz(path.substr(0, colon), keys.substr(0, comma), keys.substr(comma + 1),
                      nullptr);
    }
  }
  return read_npz(path, "", "", test);
}

Dataset read_fashion_mnist(bool train) {
  if (!has_idx_split(kFashionMnistDir, train)) {
    throw InputError(fmt::format(
        "{}/{}-images-idx3-ubyte.gz: cannot open (No such file or directory; install the Debian "
        "package dataset-fashion-mnist)",
        kFashionMnistDir, train ? "train" : "t10k"));
  }
  return read_idx_dir(kFashionMnistDir, train);
}

CtrOptions ctr_options(const SyntheticOptions& s) {
  CtrOptions o = s.ctr;
  o.seed = s.seed;
  return o;
}

}  // namespace

LoadedData load_data(const std::string& spec_text, const SyntheticOptions& synthetic) {
  const Spec spec = parse_spec(spec_text, "--data");
  LoadedData out;
  switch (spec.kind) {
    case Kind::kFashionMnist:
      out.train = read_fashion_mnist(true);
      out.test = read_fashion_mnist(false);
      break;
    case Kind::kSynthetic:
      out.train = make_synthetic(synthetic);
      break;
    case Kind::kSyntheticGmm:
      out.train = make_synthetic_gmm(synthetic);
      break;
    case Kind::kIdx:
      out.train = read_idx_dir(spec.path, true);
      if (has_idx_split(spec.path, false)) out.test = read_idx_dir(spec.path, false);
      break;
    case Kind::kCifar10:
      out.train = read_cifar10_dir(spec.path, true);
      if (has_cifar10_split(spec.path, false)) out.test = read_cifar10_dir(spec.path, false);
      break;
    case Kind::kCsv:
      out.train = read_csv(spec.path);
      break;
    case Kind::kLibsvm:
      out.train = read_libsvm(spec.path);
      break;
    case Kind::kNpy:
      out.train = read_npy_spec(spec.path);
      break;
    case Kind::kNpz:
      out.train = read_npz_spec(spec.path, &out.test);
      break;
    case Kind::kSyntheticCtr:
      out.train = make_synthetic_ctr(ctr_options(synthetic));
      break;
    case Kind::kCriteo:
      out.train = read_criteo(spec.path, synthetic.ctr.rows);
      break;
  }
  return out;
}

Dataset load_test_data(const std::string& spec_text, const SyntheticOptions& synthetic) {
  const Spec spec = parse_spec(spec_text, "--test-data");
  switch (spec.kind) {
    case Kind::kFashionMnist:
      return read_fashion_mnist(false);
    case Kind::kSynthetic:
      return make_synthetic(synthetic);
    case Kind::kSyntheticGmm:
      return make_synthetic_gmm(synthetic);
    case Kind::kIdx:
      return read_idx_dir(spec.path, !has_idx_split(spec.path, false));
    case Kind::kCifar10:
      return read_cifar10_dir(spec.path, !has_cifar10_split(spec.path, false));
    case Kind::kCsv:
      return read_csv(spec.path);
    case Kind::kLibsvm:
      return read_libsvm(spec.path);
    case Kind::kNpy:
      return read_npy_spec(spec.path);
    case Kind::kNpz: {
      std::optional<Dataset> test;
      Dataset all = read_npz_spec(spec.path, &test);
      return test ? std::move(*test) : std::move(all);
    }
    case Kind::kSyntheticCtr:
      return make_synthetic_ctr(ctr_options(synthetic));
    case Kind::kCriteo:
      return read_criteo(spec.path, synthetic.ctr.rows);
  }
  HSGD_ASSERT(false, "load_test_data: unhandled spec kind");
  return {};
}

}  // namespace hsgd
