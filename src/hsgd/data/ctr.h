// Click-through-rate (CTR) data: dense features plus categorical ids, binary
// labels. Two sources: a seeded generator with a planted model
// (synthetic-ctr) and the Criteo display-ads TSV layout (criteo:FILE).
// Torch-free. The ids live in Dataset::categorical (data/dataset.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "hsgd/data/dataset.h"

namespace hsgd {

struct CtrOptions {
  int64_t samples = 20000;  // data.ctr_samples
  int64_t dense = 13;       // data.ctr_dense: dense (Gaussian) features per sample
  int64_t fields = 8;       // data.ctr_fields: categorical features per sample
  int64_t rows = 1000;      // model.table_rows: ids per field (criteo: hash buckets)
  double zipf = 1.1;        // data.zipf: id rank r has probability ~ r^-zipf (>= 0)
  uint64_t seed = 1;        // data.synthetic_seed
};

// synthetic-ctr. Per sample: dense x ~ N(0, 1) per feature; field j's id is
// a Zipf draw: rank r in 1..rows with probability proportional to r^-zipf,
// id = r - 1 (low ids are the hot rows). The label is Bernoulli(sigmoid(z)),
//   z = b + w . x + sum_j e_j[id_j],
// the planted model: w ~ N(0, 1 / dense) per feature, e_j[i] ~ N(0, 1 /
// fields) per (field, id), b chosen so that about a quarter of the labels
// are 1. Dataset::planted_auc is the AUC of z itself on the samples drawn:
// the AUC a perfect model reaches in expectation. Streams: seed with
// data_internal::kCtr* (data/streams.h). Deterministic for the options.
// Throws InputError "synthetic-ctr: <key>: expected ..., got ..." for
// samples < 2, dense < 0, fields < 0, dense + fields == 0, rows < 1 or
// rows > 2^31 - 1, zipf < 0 or not finite.
Dataset make_synthetic_ctr(const CtrOptions& o);

// criteo:FILE, the Criteo display-ads TSV layout: per line 40 tab-separated
// fields, the label (0 or 1), 13 integer features, 26 categorical features
// written in hex (Criteo hashes them to 8 hex digits). Any feature may be
// empty (missing). Integers become log(1 + max(x, 0)) (missing: 0);
// categorical field j's value v becomes row 1 + (H(j, v) mod (rows - 1)) of
// table j, a fixed 64-bit hash H, and a missing value row 0, so `rows` >= 2.
// Blank lines may only trail the data; gzip is detected. Throws InputError,
// one line: "<file>:line <n>: expected 40 tab-separated fields (label, 13
// integers, 26 categorical), got <m>", or "<file>:line <n> field <m>:
// expected ..., got '...'". num_classes = 2, sample_shape {13},
// categorical_rows = 26 x rows.
Dataset read_criteo(const std::string& path, int64_t rows);
// The same on a whole file's bytes in memory (`name` names it in messages).
Dataset parse_criteo(const std::string& name, std::string_view raw, int64_t rows);

// The area under the ROC curve of `scores` for binary `labels` (1 =
// positive), ties counted as one half; NaN when either class is absent.
double binary_auc(const float* scores, const int32_t* labels, int64_t n);

}  // namespace hsgd
