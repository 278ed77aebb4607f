#include "hsgd/mpi/param_buffers.h"

#include <fmt/format.h>

#include <algorithm>

#include "hsgd/mpi/transport.h"

namespace hsgd::mpi {

ParamBuffers::ParamBuffers(std::vector<float> initial, MPI_Comm comm,
                           const std::vector<int>& worker_ranks, int gather_rank, double timeout_s,
                           std::string what, size_t chunk)
    : comm_(comm), timeout_(timeout_s), what_(std::move(what)), worker_ranks_(worker_ranks) {
  bufs_[0] = std::move(initial);
  bufs_[1].assign(bufs_[0].size(), 0.0f);
  const int n = static_cast<int>(bufs_[0].size());
  chunks_ = chunks_of(bufs_[0].size(), chunk);
  const size_t nc = chunks_.size();
  for (int b = 0; b < 2; ++b) {
    sends_[b].assign(worker_ranks.size() * nc, MPI_REQUEST_NULL);
    for (size_t w = 0; w < worker_ranks.size(); ++w) {
      for (size_t c = 0; c < nc; ++c) {
        check(MPI_Send_init(bufs_[b].data() + chunks_[c].begin, static_cast<int>(chunks_[c].size),
                            MPI_FLOAT, worker_ranks[w], kTagParams, comm_, &sends_[b][w * nc + c]),
              "MPI_Send_init");
      }
    }
    if (gather_rank >= 0) {
      check(
          MPI_Send_init(bufs_[b].data(), n, MPI_FLOAT, gather_rank, kTagGather, comm_, &gather_[b]),
          "MPI_Send_init");
    }
  }
}

ParamBuffers::~ParamBuffers() {
  for (int b = 0; b < 2; ++b) {
    for (MPI_Request& r : sends_[b]) free_request(&r);
    free_request(&gather_[b]);
  }
}

bool ParamBuffers::idle(int b) {
  int done = 0;
  check(
      MPI_Testall(static_cast<int>(sends_[b].size()), sends_[b].data(), &done, MPI_STATUSES_IGNORE),
      "MPI_Testall");
  if (!done) return false;
  check(MPI_Test(&gather_[b], &done, MPI_STATUS_IGNORE), "MPI_Test");
  return done != 0;
}

void ParamBuffers::wait_buffer(int b) {
  wait_all(sends_[b], timeout_,
           [&] { return fmt::format("for a worker to receive {}'s parameters", what_); });
  wait_one(&gather_[b], timeout_,
           [&] { return fmt::format("for rank 0 to receive {}'s parameters", what_); });
}

bool ParamBuffers::prepare_write(int pusher) {
  if (pusher >= 0) {
    for (int b = 0; b < 2; ++b) {
      wait_all(sends_to(b, pusher), timeout_, [&] {
        return fmt::format("for worker {} (rank {}) to receive {}'s parameters", pusher,
                           worker_ranks_[static_cast<size_t>(pusher)], what_);
      });
    }
  }
  if (idle(live_)) {
    ++in_place_;
    return false;
  }
  const int other = 1 - live_;
  wait_buffer(other);  // an older version: its receivers have long had it
  std::copy(bufs_[live_].begin(), bufs_[live_].end(), bufs_[other].begin());
  live_ = other;
  ++moves_;
  return true;
}

void ParamBuffers::send(int w) {
  begin_send(w);
  const std::span<MPI_Request> to = sends_to(live_, w);
  check(MPI_Startall(static_cast<int>(to.size()), to.data()), "MPI_Startall");
}

void ParamBuffers::begin_send(int w) {
  const auto i = static_cast<size_t>(w);
  for (int b = 0; b < 2; ++b) {
    wait_all(sends_to(b, w), timeout_, [&] {
      return fmt::format("sending {}'s parameters to worker {} (rank {})", what_, w,
                         worker_ranks_[i]);
    });
  }
}

void ParamBuffers::send_chunk(int w, size_t c) {
  check(MPI_Start(&sends_to(live_, w)[c]), "MPI_Start");
}

void ParamBuffers::send_gather() {
  for (int b = 0; b < 2; ++b) {
    wait_one(&gather_[b], timeout_,
             [&] { return fmt::format("sending {}'s parameters to rank 0", what_); });
  }
  check(MPI_Start(&gather_[live_]), "MPI_Start");
}

void ParamBuffers::settle() {
  wait_buffer(0);
  wait_buffer(1);
}

}  // namespace hsgd::mpi
