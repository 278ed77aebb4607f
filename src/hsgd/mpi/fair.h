// Fair service of requests that complete together (issue 12). MPI_Testsome
// reports the completed requests in index order, so a server rank that
// serves them in that order always serves worker 0 first when several
// arrive at once. serve_order rotates them instead: the first served is the
// first at or after `start` (mod n), and the caller moves `start` past it
// for the next batch, so each worker is served first in turn.
#pragma once
#include <algorithm>
#include <span>

namespace hsgd::mpi {

// Orders the indices in `done` (distinct, in [0, n)) by their distance
// from `start` going up modulo n. Returns the next start: one past the
// first index served (start itself when `done` is empty).
inline int serve_order(std::span<int> done, int n, int start) {
  if (done.empty() || n <= 0) return start;
  const auto dist = [&](int i) { return ((i - start) % n + n) % n; };
  std::sort(done.begin(), done.end(), [&](int a, int b) { return dist(a) < dist(b); });
  return (done.front() + 1) % n;
}

}  // namespace hsgd::mpi
