// The checkpoint store: atomic writes, pruning, and every refusal.
#include "hsgd/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "alloc_probe.h"
#include "hsgd/core/error.h"
#include "hsgd/core/state.h"
#include "test_helpers.h"

namespace hsgd {
namespace {

namespace fs = std::filesystem;
using testing_helpers::slurp;

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

// Issue 30: a part streamed to its file is byte for byte the part written
// from memory (the format is unchanged: old checkpoints load, new ones load
// in an older hsgd); read back, its arrays go straight into their
// destinations, with no allocation of the part's size on the way.
TEST(Checkpoint, StreamedPartsAreTheSameBytesAndReadBackWithoutACopy) {
  const size_t n = 3'000'000;  // 12 MB: many pieces, far over every buffer
  std::vector<float> a(n), b(n / 2 + 7);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<float>(i);
  const auto save = [&](StateWriter& w) {
    w.tag(0x54534554);
    w.put<int32_t>(7);
    w.put_span(std::span<const float>(a));
    for (int i = 0; i < 1000; ++i) w.put<uint64_t>(static_cast<uint64_t>(i));  // many small ones
    w.put_vec(b);
    w.put_str("end");
  };
  const std::string streamed = fresh("ckpt_streamed"), memory = fresh("ckpt_memory");
  {
    CheckpointStore store(streamed, 1);
    PendingCheckpoint p = store.begin();
    const size_t largest = test::largest_allocation([&] { p.add("server", save); });
    EXPECT_LE(largest, 2 * StateWriter::kFlushBytes);  // never the part's 18 MB
    p.add("small", std::string("abc"));
    p.commit(info(1));
  }
  {
    StateWriter w;
    save(w);
    CheckpointStore(memory, 1).write(info(1), {{"server", w.take()}, {"small", "abc"}});
  }
  const std::string ds = CheckpointStore::list(streamed).front();
  const std::string dm = CheckpointStore::list(memory).front();
  EXPECT_EQ(slurp(ds + "/server.bin"), slurp(dm + "/server.bin"));
  EXPECT_EQ(slurp(ds + "/manifest.json"), slurp(dm + "/manifest.json"));
  const Checkpoint c = CheckpointStore::load_latest(streamed, id());
  EXPECT_EQ(c.blob("small"), "abc");
  std::vector<float> a2(n), b2;
  const size_t largest = test::largest_allocation([&] {
    c.read("server", [&](StateReader& r) {
      r.expect_tag(0x54534554, "test");
      EXPECT_EQ(r.get<int32_t>(), 7);
      r.get_into(std::span<float>(a2), "a");
      for (int i = 0; i < 1000; ++i) EXPECT_EQ(r.get<uint64_t>(), static_cast<uint64_t>(i));
      b2 = r.get_vec<float>();  // its own vector: the one allocation of its size
      EXPECT_EQ(r.get_str(), "end");
    });
  });
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b2, b);
  EXPECT_LE(largest, std::max(b.size() * sizeof(float), size_t{1} << 20));
  EXPECT_TRUE(c.cache.count("server") == 0) << "a large part is not read whole";
}

// A streamed part is verified as it is read: a flipped byte is a checksum
// mismatch whether the decoding then succeeds or fails on it first; a part
// that shrank after the manifest was read is a truncated one; each one line.
TEST(Checkpoint, StreamedPartsRefuseCorruptAndTruncatedBlobsWithOneLine) {
  const std::string run = fresh("ckpt_stream_bad");
  std::vector<float> a(200'000, 1.5f);
  {
    CheckpointStore store(run, 1);
    PendingCheckpoint p = store.begin();
    p.add("server", [&](StateWriter& w) {
      w.put_vec(a);
      w.put<int64_t>(42);
    });
    p.commit(info(1));
  }
  const std::string dir = CheckpointStore::list(run).front();
  const std::string file = dir + "/server.bin";
  const std::string good = slurp(file);
  ASSERT_GT(good.size(), kVerifyWholeBytes);
  std::vector<float> into(a.size());
  const auto decode = [&](StateReader& r) {
    r.get_into(std::span<float>(into), "a");
    if (r.get<int64_t>() != 42) r.fail("corrupt (the end)");
  };
  const auto one_line = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error, expected " << part;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  const auto poke = [&](size_t at) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bad;
  };
  // Whole, it reads.
  CheckpointStore::load_latest(run, id()).read("server", decode);
  EXPECT_EQ(into, a);
  poke(good.size() / 2);  // inside the array: decodes, the checksum differs
  {
    const Checkpoint c = CheckpointStore::load_latest(run, id());  // not read yet
    one_line([&] { c.read("server", decode); }, "server.bin: checksum mismatch");
  }
  poke(0);  // the array's length: the decoding fails first
  one_line([&] { CheckpointStore::load_latest(run, id()).read("server", decode); },
           "server.bin: checksum mismatch");
  poke(good.size() - 1);  // the last value: the decoding fails on it
  one_line([&] { CheckpointStore::load_latest(run, id()).read("server", decode); },
           "server.bin: checksum mismatch");
  // Truncated before the load: by its size; after it (while read): as it reads.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << good;
  fs::resize_file(file, good.size() - 3);
  one_line([&] { CheckpointStore::load_latest(run, id()); }, "server.bin: truncated");
  std::ofstream(file, std::ios::binary | std::ios::trunc) << good;
  {
    const Checkpoint c = CheckpointStore::load_latest(run, id());
    fs::resize_file(file, good.size() / 2);
    one_line([&] { c.read("server", decode); }, "server.bin: truncated");
  }
}

// A checkpoint begun and never committed (a final checkpoint the stops
// refuse) leaves nothing behind, and the next one is numbered as if it had
// never been.
TEST(Checkpoint, APendingCheckpointNotCommittedLeavesNothing) {
  const std::string run = fresh("ckpt_pending");
  CheckpointStore store(run, 2);
  {
    PendingCheckpoint p = store.begin();
    p.add("server", std::string("gone"));
    EXPECT_TRUE(fs::exists(run + "/checkpoints/.tmp-ckpt-00000000/server.bin"));
  }
  EXPECT_FALSE(fs::exists(run + "/checkpoints/.tmp-ckpt-00000000"));
  EXPECT_TRUE(CheckpointStore::list(run).empty());
  store.write(info(1), {{"server", "kept"}});
  EXPECT_EQ(fs::path(CheckpointStore::list(run).front()).filename(), "ckpt-00000000");
  EXPECT_EQ(store.written(), 1);
}

}  // namespace
}  // namespace hsgd
