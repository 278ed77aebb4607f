// auto's pilot (runtime/pilot.h): its candidate sets and how it chooses.
// The pilot run end to end is tested from the CLI (auto_cli_test.cc).
#include "hsgd/runtime/pilot.h"

#include <gtest/gtest.h>

#include <cmath>

#include "hsgd/config/config.h"

namespace hsgd {
namespace {

PilotCandidate cand(const std::string& policy, double whole, double ranked) {
  PilotCandidate c;
  c.policy = policy;
  c.interval_mean = whole;
  c.ranked = ranked;
  return c;
}

// The choice follows what ranks (the pilot's last share), not the whole
// pilot's mean, where the two disagree; ties go to the earlier candidate; a
// stopped candidate (NaN) is never chosen; none finite: sync.
TEST(Pilot, ChoosesTheBestRankedFigure) {
  EXPECT_EQ(pilot_choice({cand("async", 0.70, 0.74), cand("kasync:4", 0.66, 0.77)}), "kasync:4");
  EXPECT_EQ(pilot_choice({cand("kasync:2", 0.7, 0.75), cand("kasync:4", 0.7, 0.75)}), "kasync:2");
  EXPECT_EQ(pilot_choice({cand("async", NAN, NAN), cand("sync", 0.2, 0.3)}), "sync");
  EXPECT_EQ(pilot_choice({cand("async", NAN, NAN), cand("kasync:2", NAN, NAN)}), "sync");
  EXPECT_EQ(pilot_choice({}), "sync");
}

// With a margin, constant-K figures within it of the best K are not told
// apart and the largest K among them is kept (sync: the workers); one just
// outside it, or a margin of 0, leaves the best figure; a candidate without
// a constant K is kept when it ranks best.
TEST(Pilot, AMarginKeepsTheLargestKWithinIt) {
  const std::vector<PilotCandidate> cs = {cand("sync", 0, 0.700), cand("async", 0, 0.760),
                                          cand("kasync:2", 0, 0.758), cand("kasync:4", 0, 0.756),
                                          cand("kasync:8", 0, 0.754)};
  EXPECT_EQ(pilot_choice(cs, 0, 9), "async");
  EXPECT_EQ(pilot_choice(cs, 0.005, 9), "kasync:4");
  EXPECT_EQ(pilot_choice(cs, 0.006, 9), "kasync:8");
  EXPECT_EQ(pilot_choice(cs, 0.07, 9), "sync");  // sync is K = 9 here
  EXPECT_EQ(pilot_choice(cs, 0.001, 9), "async");
  // A figure exactly the margin below the best is within it, whichever way
  // the figures' last bit was rounded (seed 3 of random-2035-08: 0.80175
  // and 0.79675 at a margin of 0.005).
  const double tie = 0.79675;
  for (double below : {std::nextafter(tie, 0.0), tie, std::nextafter(tie, 1.0)}) {
    EXPECT_EQ(pilot_choice({cand("kasync:2", 0, 0.80175), cand("kasync:4", 0, below)}, 0.005, 9),
              "kasync:4");
  }
  EXPECT_EQ(pilot_choice({cand("kasync:2", 0, 0.80175), cand("kasync:4", 0, tie - 1e-6)}, 0.005, 9),
            "kasync:2");
  std::vector<PilotCandidate> rule = cs;
  rule.push_back(cand("rule", 0, 0.761));
  EXPECT_EQ(pilot_choice(rule, 0.005, 9), "rule");
  rule.back().ranked = 0.759;  // the rule below the best K: the margin among the K
  EXPECT_EQ(pilot_choice(rule, 0.005, 9), "kasync:4");
  EXPECT_EQ(pilot_choice({cand("async", NAN, NAN), cand("kasync:2", NAN, NAN)}, 0.005, 9), "sync");
  EXPECT_EQ(constant_k("kasync:16", 20), 16);
  EXPECT_EQ(constant_k("hybrid", 20), std::nullopt);
}

std::vector<std::string> candidates(int workers, const std::string& set, const std::string& optim,
                                    bool sparse = false) {
  Config c;
  c.train.workers = workers;
  c.policy.auto_candidates = set;
  c.optim.kind = optim;
  c.model.sparse = sparse;
  return pilot_candidates(c);
}

// The second round's candidates: the best `keep` by the ranked figure
// (ties: the earlier), never one that stopped, in candidate order.
TEST(Pilot, TheSecondRoundKeepsTheBestRanked) {
  const std::vector<PilotCandidate> cs = {cand("sync", 0, 0.70), cand("async", 0, NAN),
                                          cand("kasync:2", 0, 0.75), cand("kasync:4", 0, 0.72),
                                          cand("kasync:8", 0, 0.72)};
  EXPECT_EQ(pilot_survivors(cs, 2), (std::vector<std::string>{"kasync:2", "kasync:4"}));
  EXPECT_EQ(pilot_survivors(cs, 1), (std::vector<std::string>{"kasync:2"}));
  EXPECT_EQ(pilot_survivors(cs, 3), (std::vector<std::string>{"kasync:2", "kasync:4", "kasync:8"}));
  EXPECT_EQ(pilot_survivors(cs, 9),
            (std::vector<std::string>{"sync", "kasync:2", "kasync:4", "kasync:8"}));
  EXPECT_TRUE(pilot_survivors(cs, 0).empty());
  EXPECT_TRUE(pilot_survivors({cand("async", 0, NAN)}, 2).empty());
}

TEST(Pilot, CandidateSets) {
  using V = std::vector<std::string>;
  EXPECT_EQ(candidates(4, "k", "sgd"), (V{"sync", "async", "kasync:2"}));
  EXPECT_EQ(candidates(9, "k", "momentum"),
            (V{"sync", "async", "kasync:2", "kasync:4", "kasync:8"}));
  EXPECT_EQ(candidates(19, "k", "sgd").size(), 5u);  // 16 only from 20 workers
  EXPECT_EQ(candidates(20, "k", "sgd").back(), "kasync:16");
  EXPECT_EQ(candidates(4, "k+hybrid", "sgd"), (V{"sync", "async", "kasync:2", "hybrid"}));
  EXPECT_EQ(candidates(4, "k+hybrid", "nesterov"),
            (V{"sync", "async", "kasync:2", "hybrid", "async+staleness.momentum_correction=true"}));
  // Row-sparse models cannot run the correction (server/sparse.cc).
  EXPECT_EQ(candidates(4, "k+hybrid", "momentum", true),
            (V{"sync", "async", "kasync:2", "hybrid"}));
  // auto's own rule last, with or without momentum.
  EXPECT_EQ(candidates(4, "k+rule", "momentum"), (V{"sync", "async", "kasync:2", "rule"}));
  EXPECT_EQ(candidates(9, "k+rule", "sgd").back(), "rule");
}

}  // namespace
}  // namespace hsgd
