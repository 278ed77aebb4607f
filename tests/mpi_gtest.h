// GoogleTest under mpirun, for the tests that run every rank at once
// (mpi_runtime_test, mpi_gossip_test): rank 0 prints the progress, the
// other ranks only their failures, and a rank that leaves a test early (an
// exception) aborts the launch rather than pairing its next collective with
// another test's and hanging. run_all_tests() returns the worst rank's code.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>

#include "hsgd/mpi/transport.h"

namespace hsgd::mpi_gtest {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

class LockStep : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    const long long mine = static_cast<long long>(std::hash<std::string>()(name) & 0x7fffffffffff);
    long long lo = 0, hi = 0;
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Iallreduce(&mine, &lo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD, &r[0]);
    MPI_Iallreduce(&mine, &hi, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &r[1]);
    try {
      mpi::wait_all(r, 120, [&] { return "after " + name + ": the ranks are out of step"; });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", world_rank(), e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (lo != hi) {
      std::fprintf(stderr, "rank %d: after %s the ranks are in different tests\n", world_rank(),
                   name.c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
};

// On ranks other than 0 (whose progress output is off): their failures.
class FailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: %s\n", world_rank(), r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }
};

// After ::testing::InitGoogleTest.
inline int run_all_tests() {
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world_rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter);
  }
  listeners.Append(new LockStep);
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

}  // namespace hsgd::mpi_gtest
