// The gossip policies' checkpoints on the threads and mpi runtimes (issue
// 28): one layout for both, each part saving and restoring itself. (The
// simulator's gossip checkpoint, gossip_sim.h, holds its event queue and
// network too, and has a layout of its own.)
//
// Blobs of a checkpoint:
//   gossip_run        the run's counters (alike on every mpi rank: the
//                     per-step agreement) and the rows' bookkeeping;
//   gossip_worker-W   worker W: its model, momentum and push-sum weight
//                     (GossipModels::save_worker), its step and where in
//                     the step it is (GossipPhase), the gradient in hand,
//                     its sampler, its adpsgd pairing and straggler-delay
//                     streams, its own counters, and the messages posted to
//                     it and not yet taken (threads);
//   run               the run layer's stops and schedule (save_run_state);
// and, with [faults] (threads only: mpi refuses them),
//   gossip_membership who is live, the round generation, and per worker
//                     the generation of its last post, the steps it took
//                     over from donors and its joins (GossipLiveState);
//   membership        the fault plan's position, the membership log and
//                     the shards (Membership::save, as the other runtimes).
// A resume needs the same train.workers (the graph is over the workers).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hsgd/checkpoint/checkpoint.h"
#include "hsgd/core/state.h"
#include "hsgd/data/dataset.h"
#include "hsgd/policy/gossip.h"
#include "hsgd/runtime/delay.h"
#include "hsgd/runtime/gossip_row.h"

namespace hsgd {

// Where a worker is in its step at a cut.
enum GossipPhase : int32_t {
  kGossipBetween = 0,   // between steps
  kGossipGradient = 1,  // its gradient computed (the sampler past its batch;
                        // cta: the round posted), not yet taken: the run
                        // ended before the step could count (budget, stop)
  kGossipRound = 2,     // its part of the step's round done (atc, pdsgdm,
                        // sgp: the local step and the post; cta: the post,
                        // the gradient in hand): waiting for its in-peers
  kGossipBarrier = 3,   // its step done: waiting for the global average
};

// A gossip message posted to a worker and not yet taken.
struct GossipMail {
  int64_t round = 0;
  int32_t from = 0;
  double weight = 0;  // push-sum: the sender's share of its weight
  std::vector<float> payload;
};

// One worker's state apart from its model, sampler and delay stream.
struct GossipWorkerState {
  int64_t step = 0;  // local steps completed
  int32_t phase = kGossipBetween;
  double loss = 0;       // the step in progress (phase kGossipGradient or kGossipRound)
  int64_t batch = 0;     // its samples
  uint8_t finite = 1;    // its gradient and loss finite
  uint64_t pairing = 0;  // adpsgd's pairing stream (Rng::state)
  double idle = 0, sent = 0, received = 0;  // seconds waited, bytes
  int64_t rounds = 0;                       // gossip rounds completed
  std::vector<GossipMail> inbox;            // threads: posted to it, not yet taken
};

// The run's part: counts since the start and since the last row.
struct GossipRunState {
  GossipCounts counts;
  int64_t consecutive_nonfinite = 0, global_averages = 0;
  double last_time = 0, last_idle = 0, last_acc = 0;  // the last row's time, idle total, accuracy
};

// The threads runtime's part of the membership ([faults]): what the live
// graph and the round bookkeeping need beyond Membership's own part. A
// worker that left holds x = 0, w = 0 in its gossip_worker-W part.
struct GossipLiveState {
  int64_t gen = 0;                 // membership changes so far (the round generation)
  std::vector<char> live;          // live[w] != 0: worker w is live
  std::vector<int64_t> post_gen;   // per worker: the generation of its last post
  std::vector<int64_t> inherited;  // per worker: steps taken over from donors at joins
  std::vector<int32_t> lives;      // per worker: its joins so far
};

// A gossip checkpoint's manifest info, alike on every runtime: the cut at
// training time t after `steps` local steps in all, `rows` metrics rows.
CheckpointInfo gossip_cut_info(const CheckpointIdentity& id, const char* runtime, int workers,
                               double t, int64_t steps, size_t rows);

inline constexpr const char* kGossipRunBlob = "gossip_run";
// "gossip_worker-W".
std::string gossip_worker_blob(int w);

// Worker `id`'s part: `models`' worker i (i = id on threads, 0 on an mpi
// rank), `grad` the gradient in hand (empty when there is none).
void save_gossip_worker(StateWriter& w, int id, const GossipModels& models, int i,
                        const ShardSampler& sampler, const DelayModel& delays,
                        const GossipWorkerState& s, std::span<const float> grad);
// Restores what save_gossip_worker saved; `grad` (num_params floats)
// receives the gradient in hand, if any: returns whether there was one.
// Throws InputError naming the blob when it is another worker's, or corrupt
// (phase gradient without one, a message from a worker outside `workers`).
bool load_gossip_worker(StateReader& r, int id, int workers, GossipModels& models, int i,
                        ShardSampler& sampler, DelayModel& delays, GossipWorkerState* s,
                        std::span<float> grad);

void save_gossip_run(StateWriter& w, int workers, const GossipRunState& s);
void load_gossip_run(StateReader& r, int workers, GossipRunState* s);

inline constexpr const char* kGossipMembershipBlob = "gossip_membership";
void save_gossip_membership(StateWriter& w, const GossipLiveState& s);
// Throws InputError naming the blob when it holds another worker count or
// is corrupt (a post in a generation still to come, a negative count).
void load_gossip_membership(StateReader& r, int workers, GossipLiveState* s);

// Before anything is restored: `ck` must be a gossip checkpoint of this
// layout (not a parameter server's, nor the simulator's), written by
// `runtime` ("threads" or "mpi"), with `workers` workers. Throws
// InputError, one line naming ck.path and what was expected.
void check_gossip_checkpoint(const Checkpoint& ck, const std::string& policy,
                             const std::string& runtime, int workers);

// With `faults` ([faults] on), `ck` must hold the membership
// (gossip_membership and membership), and without, none: a resume keeps
// the run's [faults] (its keys are in the config hash; this guards the
// jobs built without that check). Throws InputError, one line naming
// ck.path.
void check_gossip_membership(const Checkpoint& ck, const std::string& policy, bool faults);

// A parameter-server runtime's check of the same: throws InputError when
// `ck` holds a gossip policy's state (naming ck.path and `policy`).
void refuse_gossip_checkpoint(const Checkpoint& ck, const std::string& policy);

}  // namespace hsgd
