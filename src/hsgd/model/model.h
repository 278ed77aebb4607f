// The Model seam. A Model knows nothing of distribution: it computes a
// gradient of the mean loss over a batch into the flat gradient buffer, given
// the flat parameter buffer it is bound to, and evaluates a data set.
// This header does not include torch.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hsgd/core/error.h"
#include "hsgd/data/dataset.h"

namespace hsgd {

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy
  double accuracy = 0.0;  // fraction in [0, 1]
  // Binary models (dlrm): the area under the ROC curve of the logit and the
  // log loss (mean binary cross-entropy, the same as `loss`); NaN for
  // multi-class models.
  double auc = std::nan("");
  double log_loss = std::nan("");
  // Mixture models (dpgmm): the components with E[pi_k] > 1 % and the
  // adjusted Rand index of the most probable component against the labels;
  // NaN for the others (and ari for data without labels).
  double effective_k = std::nan("");
  double ari = std::nan("");
};

// Where a model keeps embedding rows (row-sparse models: dlrm). The flat
// parameters are [dense part: `dense` floats | `rows` rows of `dim` floats];
// table j's row r is global row table_offset[j] + r. A model without rows
// has rows = 0 and dense = num_params().
struct RowLayout {
  int64_t dense = 0;
  int64_t rows = 0;
  int64_t dim = 0;
  std::vector<int64_t> table_offset;  // per categorical field
};

// Thread-safety: a Model instance is used by one thread at a time. Different
// instances may run concurrently on different threads.
class Model {
 public:
  virtual ~Model() = default;
  virtual int64_t num_params() const = 0;
  // The shapes of the parameter tensors in flat-buffer order (their element
  // counts sum to num_params()); the compressors use them (powersgd
  // factorises the matrix-shaped ones). Default: one vector.
  virtual std::vector<std::vector<int64_t>> param_shapes() const { return {{num_params()}}; }
  // Makes the model read its parameters from `params` and write gradients to
  // `grads` (both num_params() floats, owned by the caller, which must keep
  // them alive while bound). Parameters are views: writing `params` changes
  // the model with no further call.
  virtual void bind(std::span<float> params, std::span<float> grads) = 0;
  // Writes initial parameter values (seeded) into the bound parameters.
  virtual void init_params(uint64_t seed) = 0;
  // Computes d(loss)/d(params) into the bound gradient buffer (overwriting
  // it) and returns the loss, loss = mean_i(w_i * l_i) over the batch, l_i
  // example i's cross-entropy and w_i = batch.weights[i] (1 when
  // batch.weights is empty; else it has batch.size() entries). If `losses`
  // is not empty it has batch.size() entries and receives every l_i
  // (unweighted), e.g. as importance-sampling scores.
  virtual double gradient(const Batch& batch, std::span<float> losses) = 0;
  // The same without per-example losses.
  double gradient(const Batch& batch) { return gradient(batch, {}); }
  // Mean loss and accuracy over `data`, with the bound parameters.
  virtual EvalResult evaluate(const Dataset& data) = 0;

  // Row-sparse models (dlrm) override these three; the others keep the
  // defaults (no rows).
  virtual RowLayout row_layout() const {
    RowLayout l;
    l.dense = num_params();
    return l;
  }
  // The global rows `batch` reads (its categorical ids mapped through
  // table_offset), sorted, without duplicates, into *rows.
  virtual void batch_rows(const Batch& batch, std::vector<int64_t>* rows) const {
    (void)batch;
    rows->clear();
  }
  // The gradient of gradient(batch) in row-sparse form: the dense part into
  // the bound gradient buffer's first row_layout().dense floats (the rest of
  // the buffer is not touched), and the gradients of the rows `rows` (which
  // must be batch_rows(batch)) into `row_grads`, rows.size() x dim, in the
  // order of `rows`: a row used by several samples or fields gets the sum.
  // Reads only the dense part and the rows `rows` of the bound parameters.
  // Returns the loss as gradient() does.
  virtual double sparse_gradient(const Batch& batch, std::span<const int64_t> rows,
                                 std::span<float> row_grads, std::span<float> losses) {
    (void)rows;
    (void)row_grads;
    return gradient(batch, losses);
  }
  // Row-sparse models: the initial value of global row `row` (row_layout().dim
  // floats into `out`) for `seed`, a function of the seed and the row alone;
  // init_params(seed) writes the same values, so a server rank can
  // initialise only the rows it owns (mpi). Needs no bind.
  virtual void init_row(uint64_t seed, int64_t row, std::span<float> out) const {
    (void)seed;
    (void)row;
    (void)out;
    HSGD_ASSERT(false, "init_row on a model without rows");
  }
  // init_params(seed) without the rows: writes the bound parameters' first
  // row_layout().dense floats only (all of them for a model without rows).
  virtual void init_dense(uint64_t seed) { init_params(seed); }

  // The state of the random stream the model's random operations (dropout)
  // draw from, as bytes: what a checkpoint saves so that a resumed run draws
  // what the uninterrupted one would. Empty for models that draw nothing
  // (the zoo, linear-test). TorchScript models draw from torch's
  // process-wide CPU generator, so theirs is that generator's state, shared
  // by every torch model of the process (the simulator runs them on one
  // thread for that reason).
  virtual std::string rng_state() const { return {}; }
  // Puts back a state rng_state() returned. Throws InputError naming `what`
  // for bytes that are not one (of this model kind, or of this build).
  virtual void set_rng_state(std::string_view state, const std::string& what) {
    if (!state.empty()) throw InputError(what + ": a random-stream state for a model without one");
  }
};

// What a model is; enough to rebuild it (stored in saved model files).
struct ModelSpec {
  // softmax | mlp | lenet5 | cifar-cnn | dlrm | linear-test | dpgmm |
  // torchscript:FILE
  std::string name;
  std::vector<int64_t> sample_shape;  // per-sample input shape
  int num_classes = 0;
  std::vector<int64_t> hidden = {128};  // mlp hidden layer widths
  // The input standardization the model was trained with: every feature x
  // was fed as (x - input_mean) / input_std. Applied to the data by the
  // caller (train and eval), recorded here so a saved model is evaluated on
  // the same scale.
  double input_mean = 0.0;
  double input_std = 1.0;
  // dlrm: rows of each embedding table (one per categorical field of the
  // data), the embedding width, the top MLP's hidden widths (`hidden` is
  // the bottom MLP's).
  std::vector<int64_t> table_rows;
  int64_t embedding_dim = 16;
  std::vector<int64_t> top_hidden = {64};
  // dpgmm: the truncation and the DP concentration (model/dpgmm.h). Not
  // stored in model files: the truncation follows from the parameter count,
  // alpha is in the parameters' prior block.
  int64_t truncation = 50;
  double alpha = 1.0;
  // torchscript:FILE models: the TorchScript archive the model is built
  // from (FILE's bytes, read by read_model_archive; in a saved model file,
  // the trained module with its buffers). Empty for the zoo.
  std::string archive;
};

// Whether `name` is a torchscript:FILE model.
bool is_torchscript(const std::string& name);

// For a torchscript:FILE spec with no archive yet, reads FILE into
// spec->archive (InputError "FILE: cannot open (...)" if unreadable); does
// nothing for other models.
void read_model_archive(ModelSpec* spec);

// Builds a model. Throws InputError if the name is unknown or the input shape
// does not suit the model (e.g. lenet5 needs {1,28,28} or {1,32,32};
// cifar-cnn needs {3,32,32}), and for torchscript:FILE if spec.archive is not
// TorchScript, its forward fails on a batch shaped like the data or does not
// return N x num_classes logits, it has no parameters, or a parameter is not
// float32. The model uses one intra-op thread.
//
// `calibration` (borrowed; must outlive the model; may be null) is the
// training set. Models with buffers (BatchNorm running statistics) recompute
// them from it at every evaluate(): see TorchScriptModel. Without it they
// evaluate with the buffers they hold (those of the archive).
std::unique_ptr<Model> make_model(const ModelSpec& spec, const Dataset* calibration = nullptr);

// The trained model as a TorchScript archive that torch.jit.load reads:
// a torchscript:FILE model with `params` bound and its buffers recomputed
// from `calibration` (if not null), in eval mode. With `standalone`, the
// module is wrapped so that forward takes unstandardized inputs (it applies
// (x - input_mean) / input_std first, attributes of the wrapper) and returns
// the logits: model.pt. Without, the bare module: what a model file embeds.
// Zoo models (softmax, mlp, lenet5, cifar-cnn) are rebuilt as TorchScript
// from their layers, for `standalone` only (their model files need no
// archive). Returns an empty string where there is no TorchScript form
// (linear-test, which is plain C++; zoo models without `standalone`).
std::string export_torchscript(const ModelSpec& spec, std::span<const float> params,
                               const Dataset* calibration, bool standalone);

// Names accepted by make_model, for help and error messages.
std::vector<std::string> model_names();

// Saves/loads a trained model: spec + parameters + checksum. Loading throws
// InputError on a truncated or corrupt file (naming the file and offset).
// save writes `path + ".partial"` then renames, so no half-written file
// stands under the final name.
void save_model(const std::string& path, const ModelSpec& spec, std::span<const float> params);
// The same file written from chunks of the flat parameters, in order
// (`next` sets *chunk and returns true, or returns false after the last;
// the chunks add up to num_params floats): bounded memory for parameters
// that never exist whole in one place (row-sparse on mpi). Returns false,
// writing nothing, when a value is not finite.
bool save_model_stream(const std::string& path, const ModelSpec& spec, uint64_t num_params,
                       const std::function<bool(std::span<const float>*)>& next);
void load_model(const std::string& path, ModelSpec* spec, std::vector<float>* params);
// load_model on a whole file's bytes held in memory (`path` names it in
// messages); load_model reads the file and calls this, the fuzz target
// calls it directly. Also checks the header against itself: dimensions >= 1,
// input_mean and input_std finite (std > 0), and no weight matrix of the
// model (input x classes, or the mlp's chain through `hidden`) larger than
// num_params, which is itself checked against the file's length, so no
// model built from a loaded spec is larger than its file.
void parse_model(const std::string& path, std::string_view bytes, ModelSpec* spec,
                 std::vector<float>* params);

// Call once per process before any model is built: one OpenBLAS thread, one
// torch intra-op/inter-op thread (workers are the parallelism). With glibc it
// also sets malloc to keep freed blocks of up to 32 MiB in the heap rather
// than returning them to the OS (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD): torch
// allocates each batch's activations afresh, and re-faulting their pages
// cost up to 3x the gradient time of the CNNs. Process-wide; safe to call
// again. Defined in hsgd_models (torch).
void configure_math_threads();

}  // namespace hsgd
