// hsgd eval and hsgd plot.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "hsgd/cli/commands.h"
#include "hsgd/core/error.h"
#include "hsgd/data/spec.h"
#include "hsgd/metrics/plot.h"
#include "hsgd/model/model.h"

namespace hsgd::cli {

namespace {

struct Evaluated {
  ModelSpec spec;
  std::string data_name;
  int64_t samples = 0;
  EvalResult e;
  nlohmann::json json(const std::string& model_path) const {
    nlohmann::json j = {{"model", model_path},
                        {"data", data_name},
                        {"samples", samples},
                        {"test_loss", e.loss},
                        {"test_acc", e.accuracy}};
    if (std::isfinite(e.auc)) j["test_auc"] = e.auc;
    return j;
  }
};

Evaluated evaluate_saved(const EvalArgs& a, const Dataset* in) {
  Evaluated out;
  ModelSpec& spec = out.spec;
  std::vector<float> params;
  load_model(a.model_path, &spec, &params);
  SyntheticOptions synthetic;
  if (!spec.table_rows.empty()) synthetic.ctr.rows = spec.table_rows[0];  // criteo's buckets
  Dataset data = in ? *in : load_test_data(a.data, synthetic);
  if (data.sample_shape != spec.sample_shape) {
    throw InputError(fmt::format(
        "--data {}: samples have shape {{{}}}, the model {} expects {{{}}}", a.data,
        fmt::join(data.sample_shape, ","), a.model_path, fmt::join(spec.sample_shape, ",")));
  }
  for (int32_t l : data.labels) {
    if (l >= spec.num_classes) {
      throw InputError(fmt::format("--data {}: label {} is outside the model's {} classes", a.data,
                                   l, spec.num_classes));
    }
  }
  data.num_classes = spec.num_classes;
  if (!data.borrowed.empty()) {  // evaluate() takes owned data
    Dataset owned = data;
    owned.borrowed = {};
    owned.features.assign(data.borrowed.begin(), data.borrowed.end());
    data = std::move(owned);
  }
  standardize(&data, spec.input_mean, spec.input_std);
  std::unique_ptr<Model> m = make_model(spec);
  if (m->num_params() != static_cast<int64_t>(params.size())) {
    throw InputError(fmt::format("{}: holds {} parameters, a {} model has {}", a.model_path,
                                 params.size(), spec.name, m->num_params()));
  }
  std::vector<float> grads(params.size());
  m->bind(params, grads);
  out.e = m->evaluate(data);
  out.data_name = data.name;
  out.samples = data.size();
  return out;
}

}  // namespace

std::string eval_json(const EvalArgs& a, const Dataset* data) {
  return evaluate_saved(a, data).json(a.model_path).dump();
}

int eval(const EvalArgs& a) {
  const Evaluated ev = evaluate_saved(a, nullptr);
  const EvalResult& e = ev.e;
  if (a.json) {
    std::printf("%s\n", ev.json(a.model_path).dump().c_str());
  } else {
    std::printf("%s on %s (%lld samples): test_acc %.2f%%  test_loss %.4f%s\n",
                ev.spec.name.c_str(), ev.data_name.c_str(), static_cast<long long>(ev.samples),
                100.0 * e.accuracy, e.loss,
                std::isfinite(e.auc) ? fmt::format("  test_auc {:.4f}", e.auc).c_str() : "");
  }
  return 0;
}

int plot(const std::vector<std::string>& dirs, std::string out) {
  if (out.empty()) out = dirs.size() == 1 ? dirs[0] + "/plot.png" : "plot.png";
  plot_runs(dirs, out);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace hsgd::cli
