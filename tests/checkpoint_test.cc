// The checkpoint store: atomic writes, pruning, and every refusal.
#include "hsgd/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;

std::string fresh(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

CheckpointIdentity id() { return {"0123abcd", "lenet5", 61706}; }

CheckpointInfo info(int64_t updates) {
  CheckpointInfo i;
  i.id = id();
  i.runtime = "sim";
  i.workers = 4;
  i.train_s = 1.5 * static_cast<double>(updates);
  i.updates = updates;
  i.rows = 3;
  return i;
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    FAIL() << "no error, expected one containing '" << part << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, WritesLoadsAndKeepsTheNewest) {
  const std::string run = fresh("ckpt_keep");
  CheckpointStore store(run, 2);
  for (int i = 1; i <= 4; ++i) {
    store.write(info(i), {{"server", std::string(100 * i, 'x')}, {"sim", "abc"}});
  }
  EXPECT_EQ(store.written(), 4);
  EXPECT_GE(store.seconds_spent(), 0.0);
  ASSERT_EQ(CheckpointStore::list(run).size(), 2u);
  const Checkpoint c = CheckpointStore::load_latest(run, id());
  EXPECT_EQ(c.info.updates, 4);
  EXPECT_EQ(c.info.rows, 3);
  EXPECT_EQ(c.blob("server").size(), 400u);
  EXPECT_EQ(c.blob("sim"), "abc");
  expect_error([&] { c.blob("threads"); }, "no blob 'threads'");
  // A store opened later (a resumed run) numbers after the existing ones.
  CheckpointStore again(run, 2);
  again.write(info(5), {{"server", "y"}});
  EXPECT_EQ(CheckpointStore::load_latest(run, id()).info.updates, 5);
}

TEST(Checkpoint, AnInterruptedWriteIsNeverPickedUp) {
  const std::string run = fresh("ckpt_tmp");
  CheckpointStore store(run, 2);
  store.write(info(1), {{"server", "good"}});
  // What a kill during the next write leaves: a temporary directory.
  fs::create_directories(run + "/checkpoints/.tmp-ckpt-00000001");
  std::ofstream(run + "/checkpoints/.tmp-ckpt-00000001/server.bin") << "half";
  EXPECT_EQ(CheckpointStore::load_latest(run, id()).blob("server"), "good");
  store.write(info(2), {{"server", "next"}});  // removes the leftover
  EXPECT_FALSE(fs::exists(run + "/checkpoints/.tmp-ckpt-00000001"));
}

TEST(Checkpoint, RefusesEachKindOfBadCheckpointWithOneLine) {
  const std::string run = fresh("ckpt_bad");
  expect_error([&] { CheckpointStore::load_latest(run, id()); }, "no checkpoint to resume from");
  CheckpointStore store(run, 1);
  store.write(info(1), {{"server", std::string(64, 's')}});
  const std::string dir = CheckpointStore::list(run).front();
  // Another model, another parameter count, another config.
  expect_error(
      [&] {
        CheckpointStore::load_latest(run, {"0123abcd", "mlp", 61706});
      },
      "model \"lenet5\" with 61706 parameters");
  expect_error(
      [&] {
        CheckpointStore::load_latest(run, {"0123abcd", "lenet5", 7});
      },
      "61706 parameters");
  expect_error(
      [&] {
        CheckpointStore::load_latest(run, {"ffffffff", "lenet5", 61706});
      },
      "another configuration");
  // A flipped byte, then a truncated blob.
  {
    std::fstream f(dir + "/server.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('t');
  }
  expect_error([&] { CheckpointStore::load_latest(run, id()); }, "server.bin: checksum mismatch");
  fs::resize_file(dir + "/server.bin", 20);
  expect_error([&] { CheckpointStore::load_latest(run, id()); }, "server.bin: truncated");
  // Another format version; a manifest that is not JSON.
  std::string m;
  {
    std::ifstream in(dir + "/manifest.json");
    m.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = m.find("\"format\": 1");
  ASSERT_NE(at, std::string::npos);
  std::ofstream(dir + "/manifest.json") << m.substr(0, at) << "\"format\": 99" << m.substr(at + 11);
  expect_error([&] { CheckpointStore::load_latest(run, id()); }, "checkpoint format 99");
  std::ofstream(dir + "/manifest.json") << "{ not json";
  expect_error([&] { CheckpointStore::load_latest(run, id()); }, "not a checkpoint manifest");
}

// Issue 25: a format version per part. Every blob's entry carries its
// part's version; a part of a version this hsgd does not read is refused
// by the manifest alone, naming the part, before any blob is read; a
// manifest without versions (before parts had them) reads as version 1.
TEST(Checkpoint, EachPartHasAFormatVersionCheckedFromTheManifest) {
  EXPECT_EQ(checkpoint_part_version("server"), 1);
  EXPECT_EQ(checkpoint_part_version("server-3"), checkpoint_part_version("server"));
  EXPECT_EQ(checkpoint_part_version("worker-12"), checkpoint_part_version("worker"));
  // Parts whose format changed: threads 2 (pending pushes), sim 2 (in-flight
  // push bytes), sim 3 (the simulated cluster, issue 27).
  EXPECT_EQ(checkpoint_part_version("threads"), 2);
  EXPECT_EQ(checkpoint_part_version("sim"), 3);
  const std::string run = fresh("ckpt_parts");
  CheckpointStore store(run, 1);
  store.write(info(1), {{"server-0", "s0"}, {"membership", "abc"}, {"worker-2", ""}});
  const std::string dir = CheckpointStore::list(run).front();
  const std::string mpath = dir + "/manifest.json";
  std::string m;
  {
    std::ifstream in(mpath);
    m.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Each blob's entry has its version.
  size_t versions = 0;
  for (size_t at = m.find("\"version\": 1"); at != std::string::npos;
       at = m.find("\"version\": 1", at + 1)) {
    ++versions;
  }
  EXPECT_EQ(versions, 3u) << m;
  Checkpoint c = CheckpointStore::load_latest(run, id());
  EXPECT_EQ(c.version("membership"), 1);
  EXPECT_EQ(c.versions.size(), 3u);
  auto rewrite = [&](const std::string& text) { std::ofstream(mpath) << text; };
  // A part of a newer format: refused naming the part, even with its
  // blob gone (the manifest is checked first).
  const size_t part = m.find("\"name\": \"membership\"");
  ASSERT_NE(part, std::string::npos);
  const size_t v = m.find("\"version\": 1", part);
  ASSERT_NE(v, std::string::npos);
  const std::string newer = m.substr(0, v) + "\"version\": 2" + m.substr(v + 12);
  rewrite(newer);
  fs::remove(dir + "/membership.bin");
  expect_error([&] { CheckpointStore::load_latest(run, id()); },
               "part 'membership' (membership.bin) is format version 2; this hsgd reads version 1");
  try {
    CheckpointStore::load_latest(run, id());
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  // A bad version is an error naming the field.
  std::string zero = m;
  zero.replace(zero.find("\"version\": 1"), 12, "\"version\": 0");
  rewrite(zero);
  expect_error([&] { CheckpointStore::load_latest(run, id()); }, "'version' = 0");
  // A checkpoint written before parts had versions: every part is version 1.
  std::ofstream(dir + "/membership.bin") << "abc";
  std::string old = m;
  for (size_t at = old.find(",\n      \"version\": 1"); at != std::string::npos;
       at = old.find(",\n      \"version\": 1")) {
    old.erase(at, std::string(",\n      \"version\": 1").size());
  }
  ASSERT_EQ(old.find("version"), std::string::npos) << old;
  rewrite(old);
  c = CheckpointStore::load_latest(run, id());
  EXPECT_EQ(c.blob("membership"), "abc");
  EXPECT_EQ(c.version("server-0"), 1);
  EXPECT_EQ(c.version("membership"), 1);
}

}  // namespace
}  // namespace hsgd
