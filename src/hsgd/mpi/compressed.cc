#include "hsgd/mpi/compressed.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>

#include "hsgd/core/error.h"
#include "hsgd/runtime/clock.h"

namespace hsgd::mpi {
namespace {

constexpr uint32_t kShardTagV1 = 0x4D435331;  // "MCS1": before the seconds were kept
constexpr uint32_t kShardTag = 0x4D435332;    // "MCS2"
constexpr uint32_t kWorkerTag = 0x4D435731;   // "MCW1"

int as_count(size_t n) {
  if (n > static_cast<size_t>(INT_MAX)) {
    throw MpiError(
        fmt::format("a compressed message of {} bytes is larger than one MPI message", n));
  }
  return static_cast<int>(n);
}

// The larger of a codec's compressed and raw (warm-up) message sizes.
size_t max_message(const Codec& c) { return std::max(c.encoded_size(), c.raw_size()); }

}  // namespace

uint64_t shard_seed(uint64_t seed, int shard) {
  return seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(shard));
}

ShardCompression::ShardCompression(const CompressOptions& o,
                                   const std::vector<std::vector<int64_t>>& shapes, Shard range,
                                   int shard, int servers, int workers, uint64_t seed,
                                   std::span<const float> initial, MPI_Comm comm, double timeout)
    : shard_(shard), servers_(servers), workers_(workers), comm_(comm), timeout_(timeout) {
  const std::vector<TensorSlot> layout = make_layout(shapes, range.begin, range.begin + range.size);
  const auto nw = static_cast<size_t>(workers);
  if (!o.push.none()) {
    push_ = std::make_unique<PushDecoder>(o, layout);
    push_max_ = max_message(Codec(o.push, layout, static_cast<size_t>(o.min_bytes), 0));
    push_buf_.assign(nw, std::vector<char>(push_max_));
  }
  if (!o.pull.none()) {
    pull_ = std::make_unique<PullStage>(o, layout, shard_seed(seed, shard), workers, initial);
    initial_.assign(initial.begin(), initial.end());
    pull_buf_.resize(nw);
    pull_send_.assign(nw, MPI_REQUEST_NULL);
  }
}

ShardCompression::~ShardCompression() {
  for (MPI_Request& r : pull_send_) free_request(&r);
}

std::string ShardCompression::who(int w) const { return worker_name(w, servers_); }

void ShardCompression::init_push_recv(int w, MPI_Request* r) {
  check(MPI_Recv_init(push_buf_[static_cast<size_t>(w)].data(), as_count(push_max_), MPI_BYTE,
                      servers_ + w, kTagGradient, comm_, r),
        "MPI_Recv_init");
}

void ShardCompression::take_push(int w, MPI_Request* r, std::span<float> grad) {
  const size_t n = wait_count(r, timeout_, [&] {
    return fmt::format("waiting for the compressed gradient of {} on server shard {}", who(w),
                       shard_);
  });
  const std::vector<char>& b = push_buf_[static_cast<size_t>(w)];
  const auto t0 = SteadyClock::now();
  push_->decode(std::span<const char>(b.data(), n), grad,
                fmt::format("server shard {}: the push of {}", shard_, who(w)));
  seconds_ += since(t0);
}

void ShardCompression::send_pull(int w, std::span<const float> params, uint64_t version) {
  const auto i = static_cast<size_t>(w);
  wait_one(&pull_send_[i], timeout_, [&] {
    return fmt::format("sending shard {}'s compressed parameters to {}", shard_, who(w));
  });
  std::string& b = pull_buf_[i];
  const auto t0 = SteadyClock::now();
  pull_->pull(w, params, version, &b);
  seconds_ += since(t0);
  check(MPI_Isend(b.data(), as_count(b.size()), MPI_BYTE, servers_ + w, kTagParams, comm_,
                  &pull_send_[i]),
        "MPI_Isend");
}

void ShardCompression::settle() {
  wait_all(pull_send_, timeout_, [&] {
    return fmt::format("for a worker to receive shard {}'s compressed parameters", shard_);
  });
}

void ShardCompression::forget(int w) {
  if (pull_) pull_->reset(w, initial_);
}

void ShardCompression::save(StateWriter& w) const {
  w.tag(kShardTag);
  w.put<double>(seconds_);
  w.put<int32_t>(workers_);
  StateWriter z;
  if (pull_) pull_->save(z);
  w.put_str(z.take());
}

void ShardCompression::load(StateReader& r) {
  const auto tag = r.get<uint32_t>();
  if (tag != kShardTag && tag != kShardTagV1)
    r.fail("corrupt (mpi shard compression section missing)");
  seconds_ = tag == kShardTag ? r.get<double>() : 0;  // MCS1 did not keep them
  const int32_t workers = r.get<int32_t>();
  const std::string z = r.get_str();
  if (workers != workers_ || !pull_) return;  // another worker count: afresh
  StateReader zr(z, r.what() + " (compression)");
  pull_->load(zr);
  zr.expect_end();
}

WorkerCompression::WorkerCompression(const CompressOptions& o,
                                     const std::vector<std::vector<int64_t>>& shapes,
                                     std::vector<Shard> shards, int worker, uint64_t seed,
                                     MPI_Comm comm, double timeout)
    : shards_(std::move(shards)), comm_(comm), timeout_(timeout) {
  for (const Shard& s : shards_) num_params_ = std::max(num_params_, s.begin + s.size);
  for (size_t s = 0; s < shards_.size(); ++s) {
    const Shard& sh = shards_[s];
    const std::vector<TensorSlot> layout = make_layout(shapes, sh.begin, sh.begin + sh.size);
    if (!o.push.none()) {
      push_.emplace_back(o, layout, shard_seed(seed, static_cast<int>(s)), worker);
    }
    if (!o.pull.none()) {
      pull_.emplace_back(o.pull, layout, static_cast<size_t>(o.min_bytes), 0);
      pull_max_.push_back(max_message(pull_.back()));
      pull_buf_.emplace_back(pull_max_.back());
    }
  }
  push_bytes_.resize(push_.size());
}

void WorkerCompression::encode_push(std::span<const float> grads, uint64_t version) {
  const auto t0 = SteadyClock::now();
  for (size_t s = 0; s < push_.size(); ++s) {
    const Shard& sh = shards_[s];
    sent_.resize(sh.size);
    push_[s].compress(grads.subspan(sh.begin, sh.size), version, &push_bytes_[s], sent_);
    push_bytes_total_ += static_cast<int64_t>(push_bytes_[s].size());
  }
  compress_s_ += since(t0);
}

void WorkerCompression::send_push(std::span<MPI_Request> reqs) {
  for (size_t s = 0; s < push_bytes_.size(); ++s) {
    const std::string& b = push_bytes_[s];
    check(MPI_Isend(b.data(), as_count(b.size()), MPI_BYTE, static_cast<int>(s), kTagGradient,
                    comm_, &reqs[s]),
          "MPI_Isend");
  }
}

void WorkerCompression::count_plain_push() {
  push_bytes_total_ += 4 * static_cast<int64_t>(num_params_);
}

void WorkerCompression::init_pull_recv(size_t s, MPI_Request* r) {
  check(MPI_Recv_init(pull_buf_[s].data(), as_count(pull_max_[s]), MPI_BYTE, static_cast<int>(s),
                      kTagParams, comm_, r),
        "MPI_Recv_init");
}

void WorkerCompression::take_pull(std::span<MPI_Request> reqs, std::span<float> params,
                                  const std::string& me) {
  for (size_t s = 0; s < pull_.size(); ++s) {
    const size_t n = wait_count(&reqs[s], timeout_, [&] {
      return fmt::format("on {} waiting for its compressed parameters from shard {}", me, s);
    });
    const auto t0 = SteadyClock::now();
    const Shard& sh = shards_[s];
    const std::span<float> held = std::span<float>(held_).subspan(sh.begin, sh.size);
    apply_pull(pull_[s], std::span<const char>(pull_buf_[s].data(), n), held, &scratch_,
               fmt::format("{}: the pull from shard {}", me, s));
    std::copy(held.begin(), held.end(), params.begin() + static_cast<ptrdiff_t>(sh.begin));
    compress_s_ += since(t0);
    pull_bytes_total_ += static_cast<int64_t>(n);
  }
}

void WorkerCompression::count_plain_pull() {
  pull_bytes_total_ += 4 * static_cast<int64_t>(num_params_);
}

void WorkerCompression::report(Request* r) {
  r->push_bytes = push_bytes_total_;
  r->pull_bytes = pull_bytes_total_;
  r->compress_s = compress_s_;
  push_bytes_total_ = pull_bytes_total_ = 0;
  compress_s_ = 0;
}

void WorkerCompression::start_held(std::span<const float> initial) {
  if (pull_on()) held_.assign(initial.begin(), initial.end());
}

void WorkerCompression::save(StateWriter& w) const {
  w.tag(kWorkerTag);
  w.put<uint64_t>(push_.size());
  for (const PushStage& p : push_) p.save(w);
  w.put<uint8_t>(pull_on() ? 1 : 0);
  if (pull_on()) w.put_vec(held_);
}

void WorkerCompression::load(StateReader& r, std::span<float> params) {
  r.expect_tag(kWorkerTag, "mpi worker compression");
  if (r.get<uint64_t>() != push_.size()) r.fail("corrupt (push compressor shard count)");
  for (PushStage& p : push_) p.load(r);
  if ((r.get<uint8_t>() != 0) != pull_on()) r.fail("corrupt (pull compressor)");
  if (pull_on()) {
    held_.resize(num_params_);
    r.get_into(std::span<float>(held_), "the worker's pulled copy");
    std::copy(held_.begin(), held_.end(), params.begin());
  }
}

}  // namespace hsgd::mpi
