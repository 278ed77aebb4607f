#include "hsgd/mpi/transport.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "hsgd/core/error.h"

namespace hsgd::mpi {

std::vector<Chunk> chunks_of(size_t n, size_t chunk) {
  HSGD_ASSERT(chunk > 0, "chunks of no floats");
  std::vector<Chunk> out;
  for (size_t b = 0; b < n; b += chunk) out.push_back({b, std::min(chunk, n - b)});
  if (out.empty()) out.push_back({0, 0});
  return out;
}

void check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw MpiError(fmt::format("{} failed: {}", op, std::string(msg, static_cast<size_t>(len))));
}

void Backoff::idle() {
  using namespace std::chrono;
  if (n_ == 0) start_ = steady_clock::now();
  if (n_ >= 0) {
    ++n_;
    if ((n_ & 15) != 0) return;  // poll again at once
    const auto waited = steady_clock::now() - start_;
    if (waited < microseconds(kSpinUs)) return;
    if (waited < microseconds(kYieldUs)) {
      sched_yield();
      return;
    }
    n_ = -1;  // the polling phase is over
  }
  const int us = n_ == -1 ? kSleepUs : 2 * kSleepUs;
  --n_;
  std::this_thread::sleep_for(microseconds(us));
}

void wait_all(std::span<MPI_Request> reqs, double timeout_s,
              const std::function<std::string()>& what, MPI_Status* statuses) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  Backoff backoff;
  size_t first = 0;  // the requests before it have completed
  for (int polls = 0;; ++polls) {
    // In order (a test progresses every request): one that completes
    // restarts the backoff, so that a message in chunks is taken chunk by
    // chunk as they come, not after a sleep each.
    bool progressed = false;
    while (first < reqs.size()) {
      int done = 0;
      check(MPI_Test(&reqs[first], &done,
                     statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[first]),
            "MPI_Test");
      if (!done) break;
      ++first;
      progressed = true;
    }
    if (first == reqs.size()) return;
    if (progressed) {
      backoff.reset();
      continue;
    }
    if ((polls & 63) == 63 && Clock::now() > deadline) {
      throw MpiError(
          fmt::format("timed out after {:g} s {} (raise mpi.timeout if this is slow, not "
                      "stuck)",
                      timeout_s, what()));
    }
    backoff.idle();
  }
}

size_t wait_count(MPI_Request* r, double timeout_s, const std::function<std::string()>& what) {
  MPI_Status st;
  wait_all(std::span<MPI_Request>(r, 1), timeout_s, what, &st);
  int count = 0;
  check(MPI_Get_count(&st, MPI_BYTE, &count), "MPI_Get_count");
  return static_cast<size_t>(count);
}

void cancel_and_free(MPI_Request* r) {
  if (*r == MPI_REQUEST_NULL) return;
  int done = 0;
  MPI_Test(r, &done, MPI_STATUS_IGNORE);
  if (!done) {
    MPI_Cancel(r);
    MPI_Wait(r, MPI_STATUS_IGNORE);
  }
  free_request(r);
}

void free_request(MPI_Request* r) {
  if (*r != MPI_REQUEST_NULL) MPI_Request_free(r);
}

std::string worker_name(int w, int servers) {
  return fmt::format("worker {} (rank {})", w, servers + w);
}

void send_bytes(MPI_Comm comm, int dest, const std::string& bytes, double timeout_s,
                const std::function<std::string()>& what) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    throw MpiError("checkpoint state of " + std::to_string(bytes.size()) +
                   " bytes is larger than one MPI message (2 GiB)");
  }
  MPI_Request r = MPI_REQUEST_NULL;
  check(
      MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, kTagState, comm, &r),
      "MPI_Isend");
  wait_one(&r, timeout_s, what);
}

std::string recv_bytes(MPI_Comm comm, int src, double timeout_s,
                       const std::function<std::string()>& what) {
  const auto t0 = std::chrono::steady_clock::now();
  Backoff backoff;
  MPI_Status st;
  for (;;) {
    int flag = 0;
    check(MPI_Iprobe(src, kTagState, comm, &flag, &st), "MPI_Iprobe");
    if (flag) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      throw MpiError(fmt::format("timed out after {:g} s {}", timeout_s, what()));
    }
    backoff.idle();
  }
  int count = 0;
  check(MPI_Get_count(&st, MPI_BYTE, &count), "MPI_Get_count");
  std::string bytes(static_cast<size_t>(count), '\0');
  check(MPI_Recv(bytes.data(), count, MPI_BYTE, src, kTagState, comm, MPI_STATUS_IGNORE),
        "MPI_Recv");
  return bytes;
}

}  // namespace hsgd::mpi
