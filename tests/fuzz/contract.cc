#include "contract.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/config/config.h"
#include "hsgd/core/error.h"
#include "hsgd/data/readers.h"
#include "hsgd/model/model.h"
#include "hsgd/server/server.h"

namespace hsgd::fuzz {

std::string check_message(const std::string& msg, std::initializer_list<std::string_view> names) {
  if (msg.empty()) return "InputError with an empty message";
  if (msg.find_first_of("\n\r") != std::string::npos) {
    return "InputError message is not one line: " + msg;
  }
  for (std::string_view n : names) {
    if (msg.find(n) != std::string::npos) return "";
  }
  return "InputError message does not name the input: " + msg;
}

std::string check_dataset(const Dataset& d, bool pixels) {
  if (d.labels.empty()) return "no samples";
  if (d.sample_shape.empty()) return "empty sample shape";
  uint64_t size = 1;
  for (int64_t dim : d.sample_shape) {
    if (dim < 1) return fmt::format("sample shape has dimension {}", dim);
    if (static_cast<uint64_t>(dim) > d.features.size()) return "sample shape larger than the data";
    size *= static_cast<uint64_t>(dim);
    if (size > d.features.size()) return "sample shape larger than the data";
  }
  if (size * d.labels.size() != d.features.size()) {
    return fmt::format("{} samples of {} values but {} features", d.labels.size(), size,
                       d.features.size());
  }
  if (d.num_classes < 1) return fmt::format("num_classes {}", d.num_classes);
  for (int32_t l : d.labels) {
    if (l < 0 || l >= d.num_classes) {
      return fmt::format("label {} outside [0, {})", l, d.num_classes);
    }
  }
  for (float v : d.features) {
    if (!std::isfinite(v)) return "a feature that is not finite";
    if (pixels && !(v >= 0.0f && v <= 1.0f)) return fmt::format("a pixel of {}", v);
  }
  return "";
}

namespace {

// Runs `read`, returning the contract's verdict on its result or its error.
template <class Read>
std::string verdict(Read read, bool pixels, std::initializer_list<std::string_view> names) {
  try {
    return check_dataset(read(), pixels);
  } catch (const InputError& e) {
    return check_message(e.what(), names);
  }
}

void split_idx(std::string_view bytes, std::string_view* images, std::string_view* labels) {
  uint32_t len = 0;
  for (size_t i = 0; i < 4 && i < bytes.size(); ++i) {
    len |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  bytes.remove_prefix(std::min<size_t>(4, bytes.size()));
  *images = bytes.substr(0, len);
  *labels = bytes.substr(images->size());
}

std::string with_gzip_magic(std::string_view part) {
  if (part.size() >= 2 && part[0] == '\x1f' && part[1] == '\x8b') return std::string(part);
  return std::string("\x1f\x8b") + std::string(part);
}

}  // namespace

std::string check_idx(std::string_view bytes) {
  std::string_view images, labels;
  split_idx(bytes, &images, &labels);
  return verdict([&] { return parse_idx("images.idx", images, "labels.idx", labels); }, true,
                 {"images.idx", "labels.idx"});
}

std::string check_idx_gz(std::string_view bytes) {
  std::string_view images, labels;
  split_idx(bytes, &images, &labels);
  const std::string gz_images = with_gzip_magic(images), gz_labels = with_gzip_magic(labels);
  return verdict([&] { return parse_idx("images.idx.gz", gz_images, "labels.idx.gz", gz_labels); },
                 true, {"images.idx.gz", "labels.idx.gz"});
}

std::string check_cifar10(std::string_view bytes) {
  return verdict([&] { return parse_cifar10_batch("batch.bin", bytes); }, true, {"batch.bin"});
}

std::string check_csv(std::string_view bytes) {
  return verdict([&] { return parse_csv("data.csv", bytes); }, false, {"data.csv"});
}

std::string check_libsvm(std::string_view bytes) {
  return verdict([&] { return parse_libsvm("data.libsvm", bytes); }, false, {"data.libsvm"});
}

std::string check_config(std::string_view bytes) {
  Config c;
  try {
    c = parse_config("job.toml", bytes, {});
  } catch (const InputError& e) {
    // Value errors name the key ("train.workers = 0: ..."), not the file.
    std::string m = check_message(e.what(), {"job.toml", "."});
    return m;
  }
  try {
    validate(c);
  } catch (const InputError& e) {
    return std::string("an accepted config fails validate: ") + e.what();
  }
  const std::string text = to_toml(c);
  try {
    if (to_toml(parse_config("round-trip.toml", text, {})) != text) {
      return "to_toml does not round-trip:\n" + text;
    }
  } catch (const InputError& e) {
    return std::string("to_toml of an accepted config is rejected: ") + e.what() + "\n" + text;
  }
  return "";
}

std::string check_model(std::string_view bytes) {
  ModelSpec spec;
  std::vector<float> params;
  try {
    parse_model("model.bin", bytes, &spec, &params);
  } catch (const InputError& e) {
    return check_message(e.what(), {"model.bin"});
  }
  if (spec.sample_shape.empty()) return "empty sample shape";
  uint64_t in = 1;
  for (int64_t d : spec.sample_shape) {
    if (d < 1) return fmt::format("sample shape dimension {}", d);
    in *= static_cast<uint64_t>(d);
    if (in > params.size()) return "more inputs than parameters";
  }
  if (spec.num_classes < 1) return "num_classes < 1";
  for (int64_t h : spec.hidden) {
    if (h < 1 || (spec.name == "mlp" && static_cast<uint64_t>(h) > params.size())) {
      return fmt::format("hidden width {}", h);
    }
  }
  // Every weight matrix fits in the parameters: input x classes, or along an
  // mlp's chain input x hidden... x classes (a narrow hidden layer makes an
  // mlp smaller than input x classes). A TorchScript archive holds its own.
  if (!spec.name.starts_with("torchscript:")) {
    std::vector<uint64_t> chain{in};
    if (spec.name == "mlp") chain.insert(chain.end(), spec.hidden.begin(), spec.hidden.end());
    chain.push_back(static_cast<uint64_t>(spec.num_classes));
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      if (chain[i] * chain[i + 1] > params.size())
        return "a weight matrix larger than the parameters";
    }
  }
  if (!std::isfinite(spec.input_mean) || !std::isfinite(spec.input_std) || !(spec.input_std > 0)) {
    return "input_mean / input_std not finite, or std <= 0";
  }
  return "";
}

std::string check_npy(std::string_view bytes) {
  std::string_view x, y;
  split_idx(bytes, &x, &y);
  return verdict([&] { return parse_npy_pair("x.npy", x, "y.npy", y); }, false, {"x.npy", "y.npy"});
}

std::string check_npz(std::string_view bytes) {
  std::optional<Dataset> test;
  std::string broken =
      verdict([&] { return parse_npz("data.npz", bytes, "", "", &test); }, false, {"data.npz"});
  if (broken.empty() && test) broken = check_dataset(*test, false);
  return broken;
}

std::string check_checkpoint_manifest(std::string_view bytes) {
  CheckpointManifest m;
  try {
    m = CheckpointStore::parse_manifest(bytes, "manifest.json");
  } catch (const InputError& e) {
    return check_message(e.what(), {"manifest.json"});
  }
  for (const CheckpointManifest::Blob& b : m.blobs) {
    if (b.name.empty() || b.name.find('/') != std::string::npos || b.name.find("..") == 0) {
      return "blob name '" + b.name + "' accepted";
    }
  }
  if (m.info.workers < 0 || m.info.rows < 0 || !(m.info.train_s >= 0)) return "negative counts";
  return "";
}

// One server configuration: `noise` (train.noise_scale) adds its state.
std::string check_server_state_with(std::string_view bytes, bool noise) {
  const size_t n = 210;
  auto make = [n, noise](std::vector<float>& params) {
    ServerOptions so;
    so.workers = 3;
    so.noise_scale = noise;
    PolicyOptions po;
    po.kind = "sync";
    OptimizerOptions oo;
    oo.kind = "momentum";
    return std::make_unique<Server>(params, so, make_policy(po, 3, 0.1), make_optimizer(oo, n));
  };
  std::vector<float> p1(n), p2(n);
  std::unique_ptr<Server> a = make(p1), b = make(p2);
  try {
    StateReader r(bytes, "server.bin");
    a->load(r);
    r.expect_end();
  } catch (const InputError& e) {
    return check_message(e.what(), {"server.bin"});
  }
  StateWriter w1;
  a->save(w1);
  try {
    StateReader r(w1.bytes(), "again");
    b->load(r);
  } catch (const InputError& e) {
    return std::string("an accepted state does not load again: ") + e.what();
  }
  StateWriter w2;
  b->save(w2);
  return w1.bytes() == w2.bytes() ? "" : "an accepted state does not round-trip";
}

std::string check_server_state(std::string_view bytes) {
  for (const bool noise : {false, true}) {
    std::string bad = check_server_state_with(bytes, noise);
    if (!bad.empty()) return (noise ? "noise_scale on: " : "") + bad;
  }
  return "";
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"idx", check_idx},
      {"idx_gz", check_idx_gz},
      {"cifar10", check_cifar10},
      {"csv", check_csv},
      {"libsvm", check_libsvm},
      {"config", check_config},
      {"model", check_model},
      {"npy", check_npy},
      {"npz", check_npz},
      {"checkpoint_manifest", check_checkpoint_manifest},
      {"server_state", check_server_state},
  };
  return all;
}

}  // namespace hsgd::fuzz
