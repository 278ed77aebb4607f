#include "hsgd/mpi/session.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace hsgd::mpi {

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

Session::Session(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  // Errors come back as return codes; hsgd turns them into exceptions.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

Session::~Session() { MPI_Finalize(); }

bool Session::agree(const std::string& error) const {
  int mine = error.empty() ? INT_MAX : rank_;
  int first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == INT_MAX) return true;
  constexpr int kTag = 77;
  if (rank_ == first && first != 0) {
    MPI_Send(error.data(), static_cast<int>(error.size()), MPI_CHAR, 0, kTag, MPI_COMM_WORLD);
  }
  if (rank_ == 0) {
    std::string msg = error;
    if (first != 0) {
      MPI_Status st;
      MPI_Probe(first, kTag, MPI_COMM_WORLD, &st);
      int n = 0;
      MPI_Get_count(&st, MPI_CHAR, &n);
      msg.assign(static_cast<size_t>(n), '\0');
      MPI_Recv(msg.data(), n, MPI_CHAR, first, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      msg = "rank " + std::to_string(first) + ": " + msg;
    }
    std::fprintf(stderr, "hsgd: error: %s\n", msg.c_str());
  }
  return false;
}

namespace {

void wait_sleeping(MPI_Request* r) {
  int done = 0;
  MPI_Test(r, &done, MPI_STATUS_IGNORE);
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    MPI_Test(r, &done, MPI_STATUS_IGNORE);
  }
}

}  // namespace

std::string Session::broadcast(const std::string& text) const {
  long long n = rank_ == 0 ? static_cast<long long>(text.size()) : 0;
  MPI_Request r;
  MPI_Ibcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, &r);
  wait_sleeping(&r);
  std::string out = rank_ == 0 ? text : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) {
    MPI_Ibcast(out.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD, &r);
    wait_sleeping(&r);
  }
  return out;
}

void Session::abort(const std::string& message, int code) const {
  std::fprintf(stderr, "hsgd: error: rank %d: %s\n", rank_, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace hsgd::mpi
