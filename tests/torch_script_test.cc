// Tests for TorchScript models (hsgd/model/torch_script.cc): parameters as
// views into flat buffers, gradients against plain autograd, train/eval
// modes, buffers recomputed from the training set, the export that
// torch.jit.load reads back, and one clear error per kind of bad module. The
// modules were saved from Python by tests/data/torchscript/make_fixtures.py.
#include "hsgd/model/torch_script.h"

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/data/readers.h"
#include "hsgd/model/model.h"

namespace hsgd {
namespace {

const std::string kDir = std::string(HSGD_SOURCE_DIR) + "/tests/data/torchscript/";

ModelSpec spec_of(const std::string& file, std::vector<int64_t> shape, int classes) {
  ModelSpec s;
  s.name = "torchscript:" + kDir + file;
  s.sample_shape = std::move(shape);
  s.num_classes = classes;
  return s;
}

void expect_input_error(const ModelSpec& spec, const std::vector<std::string>& parts) {
  try {
    make_model(spec);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << "\n" << p;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// 28x28 images whose class shows as a bright block, plus noise.
Dataset blocks(int64_t n, int classes, uint64_t seed) {
  Rng rng(seed, 3);
  Dataset d;
  d.name = "blocks";
  d.sample_shape = {1, 28, 28};
  d.num_classes = classes;
  for (int64_t i = 0; i < n; ++i) {
    const int y = static_cast<int>(i % classes);
    d.labels.push_back(y);
    for (int r = 0; r < 28; ++r) {
      for (int c = 0; c < 28; ++c) {
        const bool on = r / 7 == y % 4 && c / 14 == y / 4;
        d.features.push_back(static_cast<float>((on ? 2.0 : 0.0) + 0.5 * rng.normal()));
      }
    }
  }
  return d;
}

void sgd_steps(Model& m, std::vector<float>& params, const std::vector<float>& grads,
               const Dataset& d, int steps, int batch, float lr) {
  ShardSampler sampler(d, 0, 1, 1);
  Batch b;
  for (int s = 0; s < steps; ++s) {
    sampler.next(batch, &b);
    m.gradient(b);
    for (size_t i = 0; i < params.size(); ++i) params[i] -= lr * grads[i];
  }
}

TEST(TorchScript, ScriptedMlpFlatLayoutInitAndGradientMatchAutograd) {
  const ModelSpec spec = spec_of("mlp_scripted.pt", {8}, 3);
  auto m = make_model(spec);
  ASSERT_EQ(m->num_params(), 8 * 16 + 16 + 16 * 3 + 3);
  std::vector<float> p(m->num_params()), g(p.size());
  m->bind(p, g);
  m->init_params(7);
  // init_params copies the archive's weights, in parameters() order.
  torch::jit::Module ref = torch::jit::load(kDir + "mlp_scripted.pt");
  std::vector<float> expected;
  for (const auto& t : ref.parameters()) {
    const auto c = t.contiguous();
    expected.insert(expected.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  EXPECT_EQ(p, expected);

  const Dataset d = read_npy(kDir + "blobs_x.npy", kDir + "blobs_y.npy");
  Batch b;
  gather(d, std::vector<int64_t>{0, 1, 2, 3, 4}, &b);
  const double loss = m->gradient(b);
  // The same with plain autograd on the module loaded from the file.
  const torch::Tensor x = torch::from_blob(b.features.data(), {5, 8}).clone();
  const torch::Tensor y = torch::from_blob(b.labels.data(), {5}, torch::kInt32).to(torch::kInt64);
  for (auto t : ref.parameters()) t.mutable_grad() = torch::Tensor();
  const torch::Tensor ref_loss =
      torch::nn::functional::cross_entropy(ref.forward({x}).toTensor(), y);
  ref_loss.backward();
  EXPECT_NEAR(loss, ref_loss.item<double>(), 1e-6);
  size_t at = 0;
  for (const auto& t : ref.parameters()) {
    const auto gr = t.grad().contiguous();
    for (int64_t i = 0; i < gr.numel(); ++i, ++at) {
      EXPECT_NEAR(g[at], gr.data_ptr<float>()[i], 1e-6) << at;
    }
  }
  EXPECT_EQ(at, g.size());

  // Parameters are views: writing the flat buffer changes the model.
  const double before = m->evaluate(d).loss;
  p[0] += 1.0f;
  EXPECT_NE(m->evaluate(d).loss, before);
}

TEST(TorchScript, ScriptedMlpLearnsBlobs) {
  const Dataset d = read_npy(kDir + "blobs_x.npy", kDir + "blobs_y.npy");
  auto m = make_model(spec_of("mlp_scripted.pt", {8}, 3));
  std::vector<float> p(m->num_params()), g(p.size());
  m->bind(p, g);
  m->init_params(1);
  const EvalResult start = m->evaluate(d);
  sgd_steps(*m, p, g, d, 200, 16, 0.05f);
  const EvalResult end = m->evaluate(d);
  EXPECT_LT(end.loss, start.loss * 0.5);
  EXPECT_GT(end.accuracy, 0.9);
}

// Model::rng_state / set_rng_state (issue 25, defect 9): the dropout draws
// after a restore are those after the save; bytes that are not a state are
// one clear error; the zoo's linear-test has no stream.
TEST(TorchScript, TheRandomStreamSavesAndRestores) {
  const Dataset d = blocks(64, 8, 1);
  auto m = make_model(spec_of("bn_cnn_scripted.pt", {1, 28, 28}, 10));
  std::vector<float> p(m->num_params()), g(p.size());
  m->bind(p, g);
  m->init_params(1);
  Batch b;
  gather(d, std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, &b);
  m->gradient(b);  // some draws first
  const std::string state = m->rng_state();
  ASSERT_FALSE(state.empty());
  const double l1 = m->gradient(b);
  const std::vector<float> first = g;
  const double l2 = m->gradient(b);
  ASSERT_NE(l1, l2);  // dropout: the stream moved on
  m->set_rng_state(state, "model_rng.bin");
  EXPECT_EQ(m->rng_state(), state);
  EXPECT_EQ(m->gradient(b), l1);
  EXPECT_EQ(g, first);
  for (const std::string& bad : {std::string("abc"), std::string(state.size(), '\xff')}) {
    try {
      m->set_rng_state(bad, "ckpt/model_rng.bin");
      if (bad.size() == 3) ADD_FAILURE() << "3 bytes accepted as a generator state";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("ckpt/model_rng.bin"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  ModelSpec linear;
  linear.name = "linear-test";
  linear.sample_shape = {8};
  linear.num_classes = 3;
  auto plain = make_model(linear);
  EXPECT_TRUE(plain->rng_state().empty());
  EXPECT_THROW(plain->set_rng_state(state, "x.bin"), InputError);
  plain->set_rng_state("", "x.bin");  // nothing to restore
}

TEST(TorchScript, TrainModeForGradientEvalModeForEvaluate) {
  // bn_cnn_scripted has dropout: two gradients of one batch differ (train
  // mode); two evaluations agree (eval mode).
  const Dataset d = blocks(64, 8, 1);
  auto m = make_model(spec_of("bn_cnn_scripted.pt", {1, 28, 28}, 10));
  std::vector<float> p(m->num_params()), g1(p.size());
  m->bind(p, g1);
  m->init_params(1);
  Batch b;
  gather(d, std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, &b);
  const double l1 = m->gradient(b);
  const std::vector<float> first = g1;
  const double l2 = m->gradient(b);
  EXPECT_NE(l1, l2);
  EXPECT_NE(first, g1);
  EXPECT_EQ(m->evaluate(d).loss, m->evaluate(d).loss);
}

TEST(TorchScript, BuffersRecomputedFromTheCalibrationSet) {
  const Dataset train = blocks(300, 8, 2);
  const ModelSpec spec = spec_of("bn_cnn_scripted.pt", {1, 28, 28}, 10);
  auto made = make_torchscript_model(spec, &train);
  auto& m = dynamic_cast<TorchScriptModel&>(*made);
  std::vector<float> p(m.num_params()), g(p.size());
  m.bind(p, g);
  m.init_params(1);
  m.recompute_buffers();
  // bn1 follows conv1: its running mean must be the mean over calibration
  // chunks (256 + 44 samples) of conv1's per-channel batch mean, and its
  // running variance the mean of the unbiased batch variances.
  torch::NoGradGuard no_grad;
  torch::jit::Module conv1 = m.module().attr("conv1").toModule();
  torch::jit::Module bn1 = m.module().attr("bn1").toModule();
  torch::Tensor mean_sum, var_sum;
  for (int64_t begin : {int64_t{0}, int64_t{256}}) {
    const int64_t n = std::min<int64_t>(256, 300 - begin);
    const torch::Tensor x =
        torch::from_blob(const_cast<float*>(train.features.data()) + begin * 784, {n, 1, 28, 28});
    const torch::Tensor h = conv1.forward({x}).toTensor();
    const torch::Tensor mu = h.mean({0, 2, 3});
    const torch::Tensor var = h.var({0, 2, 3}, /*unbiased=*/true);
    mean_sum = mean_sum.defined() ? mean_sum + mu : mu;
    var_sum = var_sum.defined() ? var_sum + var : var;
  }
  const torch::Tensor running_mean = bn1.attr("running_mean").toTensor();
  const torch::Tensor running_var = bn1.attr("running_var").toTensor();
  EXPECT_TRUE(torch::allclose(running_mean, mean_sum / 2, 1e-4, 1e-5)) << running_mean;
  EXPECT_TRUE(torch::allclose(running_var, var_sum / 2, 1e-3, 1e-5)) << running_var;
  // Integer buffers (num_batches_tracked) keep their value.
  EXPECT_EQ(bn1.attr("num_batches_tracked").toTensor().item<int64_t>(), 0);
}

TEST(TorchScript, BatchNormNetworkEvaluatesSanely) {
  // After training, evaluation (eval mode, recomputed statistics) is as
  // accurate as the training batches; the untouched statistics of the
  // archive (mean 0, variance 1) are not what it evaluates with.
  const Dataset train = blocks(512, 8, 3), test = blocks(200, 8, 4);
  const ModelSpec spec = spec_of("bn_cnn_scripted.pt", {1, 28, 28}, 10);
  auto m = make_model(spec, &train);
  std::vector<float> p(m->num_params()), g(p.size());
  m->bind(p, g);
  m->init_params(1);
  sgd_steps(*m, p, g, train, 60, 32, 0.05f);
  const EvalResult calibrated = m->evaluate(test);
  EXPECT_GT(calibrated.accuracy, 0.95);
  // The same parameters on a model without a calibration set use the
  // archive's statistics: a different (here worse or equal) result.
  auto raw = make_model(spec);
  std::vector<float> g2(p.size());
  raw->bind(p, g2);
  EXPECT_NE(raw->evaluate(test).loss, calibrated.loss);
}

TEST(TorchScript, TracedBatchNormCnnTrains) {
  std::optional<Dataset> test;
  const Dataset d = read_npz(kDir + "images.npz", "", "", &test);
  auto m = make_model(spec_of("bn_cnn_traced.pt", {1, 8, 8}, 3), &d);
  std::vector<float> p(m->num_params()), g(p.size());
  m->bind(p, g);
  m->init_params(1);
  const EvalResult start = m->evaluate(*test);
  sgd_steps(*m, p, g, d, 100, 16, 0.05f);
  const EvalResult end = m->evaluate(*test);
  EXPECT_LT(end.loss, start.loss);
  EXPECT_GT(end.accuracy, 0.9);
}

TEST(TorchScript, ExportLoadsBackWithTheSameLogits) {
  Dataset train = blocks(300, 8, 5);
  ModelSpec spec = spec_of("bn_cnn_scripted.pt", {1, 28, 28}, 10);
  spec.input_mean = 0.25;
  spec.input_std = 0.75;
  auto m = make_model(spec, &train);
  std::vector<float> p(m->num_params()), g(p.size());
  m->bind(p, g);
  m->init_params(1);
  sgd_steps(*m, p, g, train, 20, 32, 0.05f);
  const EvalResult here = m->evaluate(train);

  // The bare module (what model.bin embeds) rebuilds the same model.
  ModelSpec saved = spec;
  saved.archive = export_torchscript(spec, p, &train, /*standalone=*/false);
  ASSERT_FALSE(saved.archive.empty());
  const std::string file = ::testing::TempDir() + "/hsgd_ts_export.bin";
  save_model(file, saved, p);
  ModelSpec loaded;
  std::vector<float> lp;
  load_model(file, &loaded, &lp);
  std::filesystem::remove(file);
  EXPECT_EQ(loaded.archive, saved.archive);
  auto again = make_model(loaded);  // no calibration: the embedded buffers
  std::vector<float> g2(lp.size());
  again->bind(lp, g2);
  const EvalResult there = again->evaluate(train);
  EXPECT_NEAR(there.loss, here.loss, 1e-5);
  EXPECT_EQ(there.accuracy, here.accuracy);

  // model.pt: forward takes unstandardized inputs, gives the same logits.
  const std::string pt = export_torchscript(spec, p, &train, /*standalone=*/true);
  std::istringstream in(pt);
  torch::jit::Module standalone = torch::jit::load(in);
  EXPECT_FALSE(standalone.is_training());
  EXPECT_DOUBLE_EQ(standalone.attr("input_mean").toDouble(), 0.25);
  EXPECT_DOUBLE_EQ(standalone.attr("input_std").toDouble(), 0.75);
  torch::NoGradGuard no_grad;
  const torch::Tensor x =
      torch::from_blob(train.features.data(), {50, 1, 28, 28}).clone();  // standardized
  torch::jit::Module bare = [&] {
    std::istringstream b(saved.archive);
    return torch::jit::load(b);
  }();
  bare.eval();
  const torch::Tensor want = bare.forward({x}).toTensor();
  const torch::Tensor got = standalone.forward({x * 0.75 + 0.25}).toTensor();
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4));
}

TEST(TorchScript, ZooModelsExportWithTheSameLoss) {
  for (const auto& [name, shape] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"softmax", {1, 28, 28}},
                                                                 {"mlp", {1, 28, 28}},
                                                                 {"lenet5", {1, 28, 28}},
                                                                 {"cifar-cnn", {3, 32, 32}}}) {
    SCOPED_TRACE(name);
    ModelSpec s;
    s.name = name;
    s.sample_shape = shape;
    s.num_classes = 10;
    s.input_mean = 0.5;
    s.input_std = 2.0;
    auto m = make_model(s);
    std::vector<float> p(m->num_params()), g(p.size());
    m->bind(p, g);
    m->init_params(3);
    Dataset d = blocks(40, 8, 6);  // standardized inputs; 28x28 or tiled to 3x32x32
    d.sample_shape = shape;
    int64_t size = 1;
    for (int64_t v : shape) size *= v;
    d.features.resize(static_cast<size_t>(40 * size), 0.25f);
    const double loss = m->evaluate(d).loss;
    std::istringstream in(export_torchscript(s, p, nullptr, /*standalone=*/true));
    torch::jit::Module pt = torch::jit::load(in);
    std::vector<int64_t> xs = {40};
    xs.insert(xs.end(), shape.begin(), shape.end());
    const torch::Tensor x = torch::from_blob(d.features.data(), xs).clone() * 2.0 + 0.5;
    const torch::Tensor y = torch::from_blob(d.labels.data(), {40}, torch::kInt32);
    torch::NoGradGuard no_grad;
    const double pt_loss =
        torch::nn::functional::cross_entropy(pt.forward({x}).toTensor(), y.to(torch::kInt64))
            .item<double>();
    EXPECT_NEAR(pt_loss, loss, 1e-4);
  }
  ModelSpec lin;
  lin.name = "linear-test";
  lin.sample_shape = {4};
  lin.num_classes = 2;
  EXPECT_TRUE(export_torchscript(lin, std::vector<float>(10), nullptr, true).empty());
}

TEST(TorchScript, BadModulesOneClearLine) {
  expect_input_error(spec_of("state_dict.pt", {8}, 3),
                     {"state_dict.pt: not a TorchScript module", "torch.jit.script"});
  const std::string junk = ::testing::TempDir() + "/hsgd_junk.pt";
  std::ofstream(junk) << "definitely not a zip archive";
  ModelSpec j = spec_of("x", {8}, 3);
  j.name = "torchscript:" + junk;
  expect_input_error(j, {junk + ": not a TorchScript module"});
  std::filesystem::remove(junk);
  j.name = "torchscript:/nonexistent/model.pt";
  expect_input_error(j, {"/nonexistent/model.pt: cannot open"});
  expect_input_error(spec_of("wide.pt", {8}, 3),
                     {"wide.pt: forward fails on a batch of shape {2,8}",
                      "the data's samples are {8}", "2x8 and 20x3"});
  expect_input_error(spec_of("mlp_scripted.pt", {1, 28, 28}, 3),
                     {"forward fails on a batch of shape {2,1,28,28}"});
  expect_input_error(spec_of("bad_output.pt", {8}, 3),
                     {"bad_output.pt: forward returns shape {2,1,3}", "expected {2,3}"});
  expect_input_error(spec_of("mlp_scripted.pt", {8}, 5),
                     {"forward returns shape {2,3}", "the data has 5 classes"});
  expect_input_error(spec_of("no_params.pt", {8}, 3),
                     {"no_params.pt: the module has no parameters"});
  expect_input_error(spec_of("float64.pt", {8}, 3),
                     {"float64.pt: parameter 'fc1.weight' is Double", "float32"});
}

}  // namespace
}  // namespace hsgd
