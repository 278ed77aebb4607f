#include "hsgd/model/model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/core/rng.h"
#include "hsgd/model/reference.h"
#include "hsgd/model/torch_model.h"

namespace hsgd {
namespace {

ModelSpec spec_of(const std::string& name, std::vector<int64_t> shape, int classes = 10) {
  ModelSpec s;
  s.name = name;
  s.sample_shape = std::move(shape);
  s.num_classes = classes;
  return s;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t p = 1;
  for (int64_t d : shape) p *= d;
  return p;
}

// Samples whose label shows in their features: class y brightens the y-th
// block of values. Separable, so every model can learn it.
Batch toy_batch(int64_t n, const std::vector<int64_t>& shape, int classes, uint64_t seed) {
  const int64_t size = product(shape);
  Rng rng(seed, 7);
  Batch b;
  for (int64_t i = 0; i < n; ++i) {
    const int y = static_cast<int>(rng.below(classes));
    b.labels.push_back(y);
    for (int64_t f = 0; f < size; ++f) {
      const bool on = (f * classes / size) == y;
      b.features.push_back(static_cast<float>((on ? 1.0 : 0.0) + 0.2 * rng.normal()));
    }
  }
  return b;
}

Dataset as_dataset(const Batch& b, const std::vector<int64_t>& shape, int classes) {
  Dataset d;
  d.name = "toy";
  d.sample_shape = shape;
  d.num_classes = classes;
  d.features = b.features;
  d.labels = b.labels;
  return d;
}

// A model bound to its own flat buffers.
struct Bound {
  std::unique_ptr<Model> model;
  std::vector<float> params, grads;
  explicit Bound(const ModelSpec& spec, uint64_t seed = 1) : model(make_model(spec)) {
    params.assign(model->num_params(), 0.0f);
    grads.assign(model->num_params(), 0.0f);
    model->bind(params, grads);
    model->init_params(seed);
  }
};

class ModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { configure_math_threads(); }
};

TEST_F(ModelTest, NumParams) {
  EXPECT_EQ(make_model(spec_of("softmax", {1, 28, 28}))->num_params(), 7850);
  EXPECT_EQ(make_model(spec_of("linear-test", {1, 28, 28}))->num_params(), 7850);
  EXPECT_EQ(make_model(spec_of("mlp", {1, 28, 28}))->num_params(), 784 * 128 + 128 + 1290);
  ModelSpec mlp2 = spec_of("mlp", {20}, 3);
  mlp2.hidden = {16, 8};
  EXPECT_EQ(make_model(mlp2)->num_params(), 20 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3);
  EXPECT_EQ(make_model(spec_of("lenet5", {1, 28, 28}))->num_params(), 61706);
  EXPECT_EQ(make_model(spec_of("lenet5", {1, 32, 32}))->num_params(), 61706);
  EXPECT_EQ(make_model(spec_of("cifar-cnn", {3, 32, 32}))->num_params(),
            896 + 9248 + 18496 + 131200 + 1290);
}

TEST_F(ModelTest, WrongShapeOrNameIsInputError) {
  try {
    make_model(spec_of("lenet5", {20}));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "--model lenet5: expects input shape {1,28,28} or {1,32,32}, the data has {20}");
  }
  EXPECT_THROW(make_model(spec_of("cifar-cnn", {1, 28, 28})), InputError);
  EXPECT_THROW(make_model(spec_of("nope", {20})), InputError);
  EXPECT_THROW(make_model(spec_of("softmax", {20}, 0)), InputError);
  EXPECT_THROW(make_model(spec_of("softmax", {})), InputError);
  ModelSpec bad_mlp = spec_of("mlp", {20});
  bad_mlp.hidden = {0};
  EXPECT_THROW(make_model(bad_mlp), InputError);
  // A batch or data set that does not fit the model.
  Bound m(spec_of("softmax", {20}, 3));
  Batch b = toy_batch(4, {20}, 3, 1);
  b.features.pop_back();
  EXPECT_THROW(m.model->gradient(b), InputError);
  b = toy_batch(4, {20}, 3, 1);
  b.labels[0] = 3;
  EXPECT_THROW(m.model->gradient(b), InputError);
  Dataset d = as_dataset(toy_batch(4, {21}, 3, 1), {21}, 3);
  EXPECT_THROW(m.model->evaluate(d), InputError);
  for (const auto& name : model_names()) EXPECT_FALSE(name.empty());
}

// Writing the flat parameter buffer changes the model with no further call.
TEST_F(ModelTest, BindMakesParamsViews) {
  for (const auto& spec : {spec_of("softmax", {1, 28, 28}), spec_of("mlp", {1, 28, 28}),
                           spec_of("lenet5", {1, 28, 28}), spec_of("cifar-cnn", {3, 32, 32})}) {
    SCOPED_TRACE(spec.name);
    Bound m(spec);
    const Dataset d = as_dataset(toy_batch(8, spec.sample_shape, 10, 2), spec.sample_shape, 10);
    const double before = m.model->evaluate(d).loss;
    EXPECT_GT(std::abs(before - std::log(10.0)), 1e-6);
    std::fill(m.params.begin(), m.params.end(), 0.0f);  // all logits 0
    EXPECT_NEAR(m.model->evaluate(d).loss, std::log(10.0), 1e-6);
    // The module's tensors point into the caller's buffers.
    auto& module = dynamic_cast<TorchModel&>(*m.model).module();
    int64_t offset = 0;
    for (const auto& p : module.parameters()) {
      EXPECT_EQ(p.data_ptr<float>(), m.params.data() + offset);
      EXPECT_EQ(p.grad().data_ptr<float>(), m.grads.data() + offset);
      offset += p.numel();
    }
    EXPECT_EQ(offset, m.model->num_params());
  }
}

// backward() writes straight into the flat gradient buffer, which matches a
// central finite difference of the mean loss.
TEST_F(ModelTest, SoftmaxGradientLandsInFlatBufferAndMatchesFiniteDifferences) {
  const std::vector<int64_t> shape = {12};
  Bound m(spec_of("softmax", shape, 4), 3);
  const Batch b = toy_batch(16, shape, 4, 4);
  const double loss = m.model->gradient(b);
  EXPECT_GT(loss, 0.0);
  const std::vector<float> analytic = m.grads;
  double norm = 0;
  for (float g : analytic) norm += g * g;
  EXPECT_GT(norm, 1e-6);
  // The module's .grad tensors still alias the buffer after backward().
  auto& module = dynamic_cast<TorchModel&>(*m.model).module();
  EXPECT_EQ(module.parameters()[0].grad().data_ptr<float>(), m.grads.data());

  const float eps = 1e-2f;
  for (int64_t i :
       {int64_t{0}, int64_t{5}, int64_t{13}, int64_t{30}, int64_t{47}, int64_t{48}, int64_t{51}}) {
    const float saved = m.params[i];
    m.params[i] = saved + eps;
    const double up = m.model->gradient(b);
    m.params[i] = saved - eps;
    const double down = m.model->gradient(b);
    m.params[i] = saved;
    EXPECT_NEAR(analytic[i], (up - down) / (2 * eps), 2e-3) << "param " << i;
  }
}

// Per-example losses and weights (importance sampling), for a torch model
// and the plain-C++ linear-test model: the losses average to the returned
// loss; weight 1 is the unweighted gradient; the gradient of a batch
// weighted w is sum_i w_i grad_i / n, checked against per-sample gradients.
TEST_F(ModelTest, PerExampleLossesAndWeights) {
  for (const char* name : {"mlp", "linear-test", "lenet5"}) {
    const std::vector<int64_t> shape =
        std::string(name) == "lenet5" ? std::vector<int64_t>{1, 28, 28} : std::vector<int64_t>{12};
    Bound m(spec_of(name, shape, 4));
    Batch b = toy_batch(5, shape, 4, 3);
    std::vector<float> losses(5);
    const double mean = m.model->gradient(b, losses);
    const std::vector<float> g_plain = m.grads;
    double sum = 0;
    for (float l : losses) sum += l;
    EXPECT_NEAR(sum / 5, mean, 1e-5) << name;
    b.weights.assign(5, 1.0f);
    EXPECT_NEAR(m.model->gradient(b), mean, 1e-5) << name;
    for (size_t i = 0; i < g_plain.size(); ++i) ASSERT_NEAR(m.grads[i], g_plain[i], 1e-6) << name;
    // sum_i w_i grad_i / n from one-sample gradients.
    const std::vector<float> w = {0.5f, 2.0f, 0.0f, 1.0f, 3.0f};
    std::vector<double> expect(g_plain.size(), 0.0);
    double expect_loss = 0;
    for (int64_t i = 0; i < 5; ++i) {
      Batch one;
      const int64_t ss = product(shape);
      one.features.assign(b.features.begin() + i * ss, b.features.begin() + (i + 1) * ss);
      one.labels = {b.labels[static_cast<size_t>(i)]};
      expect_loss += w[static_cast<size_t>(i)] * m.model->gradient(one) / 5;
      for (size_t k = 0; k < expect.size(); ++k)
        expect[k] += w[static_cast<size_t>(i)] * m.grads[k] / 5;
    }
    b.weights = w;
    EXPECT_NEAR(m.model->gradient(b, losses), expect_loss, 1e-5) << name;
    for (size_t k = 0; k < expect.size(); ++k) ASSERT_NEAR(m.grads[k], expect[k], 1e-5) << name;
    // The per-example losses stay unweighted.
    std::vector<float> again(5);
    b.weights.clear();
    m.model->gradient(b, again);
    EXPECT_EQ(losses, again) << name;
  }
}

TEST_F(ModelTest, GradientOverwritesRatherThanAccumulates) {
  for (const auto& spec : {spec_of("softmax", {1, 28, 28}), spec_of("lenet5", {1, 28, 28})}) {
    SCOPED_TRACE(spec.name);
    Bound m(spec);
    std::fill(m.grads.begin(), m.grads.end(), 7.0f);
    const Batch b = toy_batch(8, spec.sample_shape, 10, 5);
    const double l1 = m.model->gradient(b);
    const std::vector<float> g1 = m.grads;
    const double l2 = m.model->gradient(b);
    EXPECT_EQ(l1, l2);
    EXPECT_EQ(g1, m.grads);
  }
}

TEST_F(ModelTest, InitParamsIsDeterministicForASeed) {
  for (const auto& spec : {spec_of("softmax", {20}, 3), spec_of("lenet5", {1, 32, 32})}) {
    SCOPED_TRACE(spec.name);
    Bound a(spec, 9), b(spec, 9), c(spec, 10);
    EXPECT_EQ(a.params, b.params);
    EXPECT_NE(a.params, c.params);
    a.model->init_params(10);
    EXPECT_EQ(a.params, c.params);
  }
}

TEST_F(ModelTest, EvaluateChunksAgreeWithOneBatch) {
  const std::vector<int64_t> shape = {1, 28, 28};
  Bound m(spec_of("mlp", shape));
  const Batch b = toy_batch(2 * TorchModel::kEvalChunk + 37, shape, 10, 6);
  const double batch_loss = m.model->gradient(b);
  const EvalResult r = m.model->evaluate(as_dataset(b, shape, 10));
  EXPECT_NEAR(r.loss, batch_loss, 1e-4);
  EXPECT_GE(r.accuracy, 0.0);
  EXPECT_LE(r.accuracy, 1.0);
}

TEST_F(ModelTest, SgdOnTheFlatBufferReducesLossForLenet5) {
  const std::vector<int64_t> shape = {1, 28, 28};
  Bound m(spec_of("lenet5", shape), 2);
  const Batch b = toy_batch(64, shape, 10, 8);
  const double first = m.model->gradient(b);
  double last = first;
  for (int step = 0; step < 30; ++step) {
    for (size_t i = 0; i < m.params.size(); ++i) m.params[i] -= 0.1f * m.grads[i];
    last = m.model->gradient(b);
  }
  EXPECT_LT(last, 0.9 * first) << "first " << first << " last " << last;
}

TEST_F(ModelTest, ReferenceSoftmaxLearnsSeparableSet) {
  const std::vector<int64_t> shape = {1, 6, 6};
  const Dataset train = as_dataset(toy_batch(600, shape, 4, 10), shape, 4);
  const Dataset test = as_dataset(toy_batch(200, shape, 4, 11), shape, 4);
  // Zero epochs: the initial weights are the zoo softmax's for the same seed.
  const EvalResult untrained = train_reference_softmax(train, test, 32, 0.1, 0, 5);
  Bound m(spec_of("softmax", shape, 4), 5);
  EXPECT_NEAR(untrained.loss, m.model->evaluate(test).loss, 1e-6);

  const EvalResult r = train_reference_softmax(train, test, 32, 0.1, 5, 5);
  EXPECT_GT(r.accuracy, 0.95);
  EXPECT_LT(r.loss, 0.5 * untrained.loss);
  const EvalResult again = train_reference_softmax(train, test, 32, 0.1, 5, 5);
  EXPECT_EQ(r.loss, again.loss);
  EXPECT_EQ(r.accuracy, again.accuracy);
}

// Rebinding moves the model onto new buffers; the old ones are left alone.
TEST_F(ModelTest, RebindSwitchesBuffers) {
  const std::vector<int64_t> shape = {1, 28, 28};
  Bound m(spec_of("lenet5", shape), 4);
  std::vector<float> p2 = m.params, g2(m.params.size(), 0.0f);
  m.model->bind(p2, g2);
  const Batch b = toy_batch(8, shape, 10, 3);
  std::fill(m.grads.begin(), m.grads.end(), 0.0f);
  m.model->gradient(b);
  EXPECT_TRUE(std::all_of(m.grads.begin(), m.grads.end(), [](float g) { return g == 0.0f; }));
  EXPECT_FALSE(std::all_of(g2.begin(), g2.end(), [](float g) { return g == 0.0f; }));
  m.model->init_params(5);
  EXPECT_NE(p2, m.params);
}

// Instances share nothing: built, initialized and trained on two threads at
// once, they give the same numbers as one after the other.
TEST_F(ModelTest, InstancesRunConcurrently) {
  const std::vector<int64_t> shape = {1, 28, 28};
  auto run = [&](uint64_t seed, std::vector<float>* out) {
    Bound m(spec_of("lenet5", shape), seed);
    const Batch b = toy_batch(16, shape, 10, seed);
    for (int step = 0; step < 5; ++step) {
      m.model->gradient(b);
      for (size_t i = 0; i < m.params.size(); ++i) m.params[i] -= 0.05f * m.grads[i];
    }
    *out = m.params;
  };
  std::vector<float> a_seq, b_seq, a_par, b_par;
  run(1, &a_seq);
  run(2, &b_seq);
  std::thread ta(run, 1, &a_par);
  std::thread tb(run, 2, &b_par);
  ta.join();
  tb.join();
  EXPECT_EQ(a_seq, a_par);
  EXPECT_EQ(b_seq, b_par);
}

// Not a check: prints the gradient time per batch of 64 on one thread, the
// number the simulator's cost model is calibrated from.
TEST_F(ModelTest, GradientTimePerBatchOf64) {
  for (const auto& spec : {spec_of("linear-test", {1, 28, 28}), spec_of("softmax", {1, 28, 28}),
                           spec_of("mlp", {1, 28, 28}), spec_of("lenet5", {1, 28, 28}),
                           spec_of("cifar-cnn", {3, 32, 32})}) {
    Bound m(spec);
    const Batch b = toy_batch(64, spec.sample_shape, 10, 12);
    for (int i = 0; i < 3; ++i) m.model->gradient(b);
    const int reps = spec.name == "cifar-cnn" ? 10 : 50;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) m.model->gradient(b);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        reps;
    std::printf("gradient time, batch 64, 1 thread: %-12s %8.3f ms\n", spec.name.c_str(), ms);
  }
}

}  // namespace
}  // namespace hsgd
