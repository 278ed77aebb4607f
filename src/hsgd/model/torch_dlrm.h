// The dlrm model (DLRM, Naumov et al. 2019, in small): a bottom MLP over the
// dense features, one embedding table per categorical field, pairwise dot
// products between the bottom MLP's output and the embeddings, a top MLP
// over [bottom output, dot products], one logit, binary cross-entropy.
//
// Flat layout (RowLayout): the bottom and top MLPs' parameters first (the
// dense part, torch views as in TorchModel), then every table's rows, table
// 0 first, each row embedding_dim floats. The tables are not torch
// parameters: each batch gathers its rows into a leaf tensor and scatters
// that tensor's gradient back, so a batch costs O(rows it touches), and the
// row-sparse gradient (Model::sparse_gradient) comes for free.
//
// Labels are 0/1; evaluate() gives the log loss, accuracy at logit 0
// (probability 0.5), AUC. Init: the MLPs as torch's defaults after
// torch::manual_seed(seed); rows uniform in +-1/sqrt(rows of the table),
// each row from its own seeded stream (Model::init_row), so a server rank
// of the mpi runtime initialises only its own rows.
#pragma once
#include <memory>

#include "hsgd/model/model.h"

namespace hsgd {

// Throws InputError if the data has no dense feature (sample_shape must be
// {d}, d >= 1), no categorical field, not 2 classes, or a size is < 1.
std::unique_ptr<Model> make_dlrm_model(const ModelSpec& spec);

}  // namespace hsgd
