// The MPI process environment: initialisation, this rank's place, and the
// agreement on errors that lets every rank stop together before training
// starts. Only the mpi runtime and the CLI's train command use it.
#pragma once
#include <string>

namespace hsgd::mpi {

// True when this process was started by mpirun (Open MPI or another PMI
// launcher sets these variables).
bool launched_by_mpirun();

// MPI_Init_thread on construction (MPI_THREAD_FUNNELED: only the thread that
// made the session calls MPI), MPI_Finalize on destruction. One per process.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Collective. Every rank passes its setup error ("" for none). Returns
  // true when no rank failed. Otherwise rank 0 prints the error of the
  // lowest failing rank as one line on stderr ("hsgd: error: ...", prefixed
  // with "rank R: " when R is not 0) and every rank gets false.
  bool agree(const std::string& error) const;

  // Collective. Returns rank 0's `text` on every rank. The other ranks wait
  // for it sleeping (1 ms between polls), not spinning, so that rank 0 has
  // the cores for whatever it computes first (auto's pilot).
  std::string broadcast(const std::string& text) const;

  // Prints "hsgd: error: rank R: message" and ends every rank with `code`
  // (MPI_Abort). For errors after training started, when the other ranks may
  // be blocked waiting for this one.
  [[noreturn]] void abort(const std::string& message, int code) const;

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace hsgd::mpi
