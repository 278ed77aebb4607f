// The [faults] config and the deterministic fault plan (core/faults.h).
#include "hsgd/core/faults.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "hsgd/config/config.h"
#include "hsgd/core/error.h"

namespace hsgd {
namespace {

std::string error_of(std::vector<Override> o) {
  o.insert(o.begin(), {"train.budget", "10"});
  try {
    parse_config("", "", o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Faults, ConfigParsesEveryKeyAndRoundTrips) {
  const Config c = parse_config(
      "f.toml",
      "[train]\nworkers = 6\nbudget = 10\nmin_workers = 2\n[faults]\nkill = [\"worker:3@20s\", "
      "\"worker:5@35.5\"]\nrejoin = [\"worker:3@50s\"]\nkill_rate = 0.5\nrejoin_after = 10\n"
      "exception_rate = 0.01\n",
      {});
  EXPECT_EQ(c.train.min_workers, 2);
  EXPECT_EQ(c.faults.kill, (std::vector<FaultAt>{{3, 20}, {5, 35.5}}));
  EXPECT_EQ(c.faults.rejoin, (std::vector<FaultAt>{{3, 50}}));
  EXPECT_DOUBLE_EQ(c.faults.kill_rate, 0.5);
  EXPECT_DOUBLE_EQ(c.faults.rejoin_after, 10);
  EXPECT_DOUBLE_EQ(c.faults.exception_rate, 0.01);
  const Config back = parse_config("back.toml", to_toml(c), {});
  EXPECT_EQ(to_toml(back), to_toml(c));
  EXPECT_EQ(back.faults.kill, c.faults.kill);
  // --set: comma-separated specs, rejoin_after off.
  const Config s = parse_config("", "",
                                {{"train.budget", "10"},
                                 {"faults.kill", "worker:0@1s,worker:1@2s"},
                                 {"faults.rejoin_after", "off"}});
  EXPECT_EQ(s.faults.kill.size(), 2u);
  EXPECT_LT(s.faults.rejoin_after, 0);
}

TEST(Faults, AFaultFreeConfigWritesNoFaultsSectionSoItsHashIsUnchanged) {
  const Config c = parse_config("", "", {{"train.budget", "10"}});
  EXPECT_EQ(to_toml(c).find("[faults]"), std::string::npos);
  EXPECT_EQ(to_toml(c).find("min_workers"), std::string::npos);
}

TEST(Faults, BadInputIsOneLineNamingTheKey) {
  EXPECT_NE(error_of({{"faults.nope", "1"}}).find("unknown key 'faults.nope'"), std::string::npos);
  EXPECT_NE(error_of({{"faults.kill", "worker3@20s"}}).find("expected worker:W@Ts"),
            std::string::npos);
  EXPECT_NE(error_of({{"faults.kill", "worker:3@-1s"}}).find("expected worker:W@Ts"),
            std::string::npos);
  EXPECT_NE(error_of({{"faults.kill", "worker:9@1s"}}).find("worker 9 does not exist"),
            std::string::npos);
  EXPECT_NE(error_of({{"faults.kill_rate", "-1"}}).find("faults.kill_rate = -1"),
            std::string::npos);
  EXPECT_NE(error_of({{"faults.exception_rate", "1.5"}}).find("faults.exception_rate"),
            std::string::npos);
  EXPECT_NE(error_of({{"faults.rejoin_after", "-3"}}).find("faults.rejoin_after"),
            std::string::npos);
  EXPECT_NE(error_of({{"faults.rejoin_after", "never"}}).find("'off'"), std::string::npos);
  EXPECT_NE(error_of({{"train.min_workers", "0"}}).find("train.min_workers = 0"),
            std::string::npos);
  EXPECT_NE(error_of({{"train.min_workers", "9"}}).find("train.workers"), std::string::npos);
  EXPECT_NE(error_of({{"train.runtime", "mpi"}, {"faults.kill_rate", "1"}}).find("not on mpi"),
            std::string::npos);
  EXPECT_NE(error_of({{"policy.name", "hogwild"}, {"faults.kill_rate", "1"}}).find("hogwild"),
            std::string::npos);
  for (const std::string& e :
       {error_of({{"faults.kill", "x"}}), error_of({{"faults.kill_rate", "-1"}})}) {
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(Faults, ScheduledKillsAndRejoinsComeInOrder) {
  FaultOptions o;
  o.kill = {{1, 20}, {1, 5}};
  o.rejoin = {{1, 10}};
  FaultPlan p(o, 2, 1);
  EXPECT_TRUE(std::isinf(p.next(0, true).time));
  FaultDue d = p.next(1, true);
  EXPECT_DOUBLE_EQ(d.time, 5);
  EXPECT_FALSE(d.join);
  p.apply({5, 1, false, d.cause, ""});
  d = p.next(1, false);
  EXPECT_DOUBLE_EQ(d.time, 10);
  EXPECT_TRUE(d.join);
  p.apply({10, 1, true, d.cause, ""});
  EXPECT_DOUBLE_EQ(p.next(1, true).time, 20);
  p.apply({20, 1, false, MembershipCause::kKill, ""});
  EXPECT_TRUE(std::isinf(p.next(1, false).time));  // no rejoin after a scheduled kill
}

TEST(Faults, RandomKillsAreSeededRejoinAfterAndSaveRestoreExactly) {
  FaultOptions o;
  o.kill_rate = 6;  // one per 10 s per worker on average
  o.rejoin_after = 3;
  FaultPlan a(o, 3, 42), b(o, 3, 42), c(o, 3, 43);
  EXPECT_DOUBLE_EQ(a.next(2, true).time, b.next(2, true).time);
  EXPECT_NE(a.next(2, true).time, c.next(2, true).time);
  const FaultDue k = a.next(2, true);
  EXPECT_EQ(k.cause, MembershipCause::kRandomKill);
  EXPECT_GT(k.time, 0);
  a.apply({k.time, 2, false, k.cause, ""});
  EXPECT_DOUBLE_EQ(a.next(2, false).time, k.time + 3);
  StateWriter w;
  a.save(w);
  const auto bytes = w.take();
  FaultPlan r(o, 3, 42);
  StateReader rd(bytes, "plan");
  r.load(rd);
  a.apply({k.time + 3, 2, true, MembershipCause::kRejoin, ""});
  r.apply({k.time + 3, 2, true, MembershipCause::kRejoin, ""});
  EXPECT_DOUBLE_EQ(a.next(2, true).time, r.next(2, true).time);
  // Mean inter-kill time near 10 s over many draws.
  FaultPlan m(o, 1, 7);
  double t = 0, sum = 0;
  for (int i = 0; i < 2000; ++i) {
    const FaultDue d = m.next(0, true);
    sum += d.time - t;
    m.apply({d.time, 0, false, d.cause, ""});
    m.apply({d.time, 0, true, MembershipCause::kRejoin, ""});
    t = d.time;
  }
  EXPECT_NEAR(sum / 2000, 10.0, 1.0);
}

TEST(Faults, ExceptionDrawsFollowTheRate) {
  FaultOptions o;
  o.exception_rate = 0.25;
  FaultPlan p(o, 1, 3);
  int hits = 0;
  for (int i = 0; i < 4000; ++i) hits += p.gradient_throws(0);
  EXPECT_NEAR(hits / 4000.0, 0.25, 0.03);
  FaultPlan none(FaultOptions{}, 1, 3);
  EXPECT_FALSE(none.enabled());
  EXPECT_FALSE(none.gradient_throws(0));
}

}  // namespace
}  // namespace hsgd
