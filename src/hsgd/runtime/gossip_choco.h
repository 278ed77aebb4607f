// CHOCO compressed gossip (issue 28; Koloskova, Stich & Jaggi, ICML 2019,
// "Decentralized Stochastic Optimization and Gossip Algorithms with
// Compressed Communication", Algorithm 1 in its memory-efficient form;
// Koloskova et al., ICLR 2020, for deep learning). The state and the step,
// the same on every runtime (gossip_sim, gossip_threads, mpi/gossip): the
// runtimes decide when each part runs and move the bytes.
//
// Every worker i keeps, besides its model x_i, its public copy xhat_i (what
// its neighbours know of x_i) and s_i = sum_j w_ij xhat_j over its
// in-neighbours and itself. A gossip round of worker i (adapt-then-combine:
// after its local step):
//   encode   q_i = C(a (x_i - xhat_i)) with compress.push's codec (a =
//            memory_scale, <1 only for a qsgd that does not contract by
//            itself); the encoded bytes go to the out-peers; xhat_i += q_i.
//   combine  with every in-peer's q_j: s_i += sum_j w_ij q_j (j over the
//            mixing row, i included), then x_i += gamma (s_i - xhat_i),
//            gamma = gossip.consensus_lr.
// There is no separate error feedback: xhat_i is the memory. Every xhat_i
// and s_i start at the initial model, which every worker holds. xhat_i and
// s_i are kept in double: s_i integrates every round's messages, and in
// float its rounding would drift from sum_j w_ij xhat_j within a hundred
// rounds (sum_i x_i would then drift too); in double the models' own float
// rounding is all that remains. With the none compressor and gamma = 1
// this is plain adapt-then-combine gossip (x_i <- sum_j w_ij x_j, up to
// float rounding). After a global average (gossip.global_every) every
// worker holds the average x: xhat_i = s_i = x (the average is the
// all-reduce's, uncompressed; nothing more is sent).
//
// Thread-safety: none; calls on different workers touch different state
// (threads: one worker per thread is fine), calls on one worker are the
// caller's to serialise.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/compress/codec.h"
#include "hsgd/config/config.h"
#include "hsgd/core/state.h"
#include "hsgd/core/topology.h"
#include "hsgd/policy/gossip.h"

namespace hsgd {

class ChocoGossip {
 public:
  // `held` workers, ids first_id .. first_id + held - 1 (sim and threads:
  // all n from 0; an mpi rank: its own), each with xhat = s = init.
  // `shapes`: the model's parameter shapes (the codec's tensors).
  ChocoGossip(const Config& c, const std::vector<std::vector<int64_t>>& shapes,
              std::span<const float> init, int held, int first_id = 0);
  // Null unless a gossip policy runs with compress.push other than none.
  static std::unique_ptr<ChocoGossip> make(const Config& c,
                                           const std::vector<std::vector<int64_t>>& shapes,
                                           std::span<const float> init, int held, int first_id = 0);

  size_t num_params() const { return np_; }
  double gamma() const { return gamma_; }
  // Bytes of one round message (compressed, header included).
  size_t message_bytes() const;

  // Held worker i, at its local step `step` (with its id, the randomk and
  // qsgd key), encodes its round: *bytes = C(a (x - xhat_i)), q = what
  // every receiver decodes from it (num_params floats), xhat_i += q.
  void encode(int i, int64_t step, std::span<const float> x, std::string* bytes,
              std::span<float> q);
  // Another worker's round message into q (num_params floats). Throws
  // InputError naming `what` for bytes that are not one.
  void decode(std::span<const char> bytes, std::span<float> q, const std::string& what) const;
  // Held worker i's round ends: s_i += sum_k row[k].w q[k] (q[k] the message
  // of worker row[k].j, its own included, in the row's order), then
  // x += gamma (s_i - xhat_i).
  void combine(int i, const MixRow& row, const std::vector<std::span<const float>>& q,
               std::span<float> x);
  // After a global average: xhat_i = s_i = x.
  void reset(int i, std::span<const float> x);

  std::span<const double> xhat(int i) const { return held_[static_cast<size_t>(i)].xhat; }
  std::span<const double> s(int i) const { return held_[static_cast<size_t>(i)].s; }

  // Held worker i's xhat, s and codec state (powersgd's warm start).
  void save_worker(int i, StateWriter& w) const;
  // Throws InputError (via r) when the part holds another shape.
  void load_worker(int i, StateReader& r);

 private:
  struct Held {
    std::vector<double> xhat, s;
    Codec codec;
    std::vector<float> diff;  // scratch: a (x - xhat)
  };
  size_t np_;
  double gamma_;
  double scale_;
  uint64_t seed_;
  int first_id_;
  std::vector<Held> held_;
  Codec decoder_;
};

// Gossip-PGA's global average on a runtime that holds every worker (sim,
// threads): every live model becomes the average (GossipModels::
// global_average, `outer` its SlowMo hook), and with CHOCO on (`choco` not
// null) every public copy becomes it too, xhat_i = s_i = x_i.
void gossip_global_average(GossipModels& models, ChocoGossip* choco,
                           const std::function<void(std::span<float>)>& outer);

// "gossip_choco" (sim: every worker's state) and "gossip_choco-W" (threads
// and mpi: worker W's).
inline constexpr const char* kGossipChocoBlob = "gossip_choco";
std::string gossip_choco_blob(int w);
// Throws InputError (one line naming ck.path) when a run with CHOCO resumes
// from a checkpoint without its state (a run without compression).
void require_choco_blob(const Checkpoint& ck, const std::string& blob);

}  // namespace hsgd
