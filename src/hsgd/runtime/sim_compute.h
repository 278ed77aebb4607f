// The simulator's gradient engine: computes simulated workers' pushes on a
// pool of threads, ahead of the event loop, and hands each one over when the
// loop reaches the push. A push depends only on the parameters its worker
// pulled and that worker's own state (sampler, local-SGD momentum), and a
// worker's requests form a chain (its next request is made after its last
// push was consumed), so a push is the same whichever thread computes it and
// whenever: the simulation's output does not depend on the thread count.
//
// The hook is narrow on purpose:
//   at a pull:   request(w, server params, version, due)   (the "future")
//   at the push: take(w) ... finish(w)                     (consumes it)
// and everything that reads or changes a worker's sampler or local state
// from the loop thread (checkpoints, resharding, a worker killed while it
// computes) first calls settle(w) or settle_all(), so no pool thread is
// touching that worker meanwhile.
//
// Parameters: a request keeps a snapshot of the parameters it pulled until
// a thread has started (a small model: copied them into its model) or
// finished (a large one) its push; snapshots are shared (refcounted) between
// requests that pulled the same version, and their buffers recycled. A model
// of at least `in_place_from` parameters whose kernel does not write them
// (not local:H) reads the snapshot in place and writes its push straight
// into the buffer the loop takes it from: no copy of the parameters or the
// gradient per push. Below that a copy each way costs less than rebinding
// the model's tensors (measured: softmax, 7 850 parameters, 0.5 us per copy
// against 1.4 us per bind; LeNet-5 3.6 against 8.5 us). Pool threads take
// requests earliest due first; results wait in at most `window` buffers
// ahead of the loop (plus what the loop computes itself: a push it needs
// that no pool thread has started, or the next request while a pool thread
// finishes the one it needs).
//
// With threads == 1 there is no pool: take() computes the push on the
// calling thread, from the request's snapshot (so a sync round of 256
// workers holds one copy of the parameters, not 256 gradients).
//
// Thread-safety: every method is called from one thread (the event loop's).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "hsgd/data/dataset.h"
#include "hsgd/model/model.h"
#include "hsgd/runtime/runtime.h"

namespace hsgd {

// What computes one worker's push (the simulator: its samplers and local
// steps). Called on pool threads, at most one call per worker at a time,
// and for one worker in the order of its requests.
class PushKernel {
 public:
  virtual ~PushKernel() = default;
  // Worker `worker`'s next push with `model`, which is bound to (params,
  // grads); params hold the parameters the worker pulled and may be
  // overwritten. Writes the push into grads, returns the training loss and
  // sets *samples to the samples behind it. `scratch` is reused.
  virtual double compute(int worker, Model& model, std::span<float> params, std::span<float> grads,
                         Batch* scratch, int64_t* samples) = 0;
  // Whether compute() may write `params`. If it never does, the model reads
  // the pulled parameters in place, from the snapshot shared by every
  // request of that version, instead of a copy of its own.
  virtual bool writes_params() const { return true; }
};

// A computed push. `grads` stays valid until finish(worker).
struct PushResult {
  std::span<const float> grads;
  double loss = 0;
  int64_t samples = 0;
};

class SimCompute {
 public:
  // threads >= 1 (threads == 1: no pool). Builds one model per pool thread
  // on that thread (and one for the calling thread); rethrows the first
  // error of a model's construction. `kernel` is borrowed and must outlive
  // this object; `window` bounds the results computed ahead (0: as many as
  // fit in 64 MB, at least 4 per thread, at most one per worker);
  // `in_place_from`: the model size from which pushes are computed in place
  // (above).
  static constexpr size_t kInPlaceFrom = size_t{1} << 18;  // 1 MB of parameters
  SimCompute(int threads, int workers, size_t num_params, const ModelFactory& make_model,
             PushKernel* kernel, int window = 0, size_t in_place_from = kInPlaceFrom);
  ~SimCompute();
  SimCompute(const SimCompute&) = delete;
  SimCompute& operator=(const SimCompute&) = delete;

  int threads() const { return threads_; }

  // Worker `worker` pulled `params` (the server's parameters at `version`:
  // two calls with the same version must pass the same values); its push is
  // needed at virtual time `due` (earlier dues are computed first). The
  // worker must have no outstanding push.
  void request(int worker, std::span<const float> params, uint64_t version, double due);
  // Waits for worker's push (computing it here if no pool thread has
  // started it) and returns it; rethrows the error of its computation. The
  // worker must have an outstanding push.
  PushResult take(int worker);
  // Ends worker's outstanding push, computing it first if it was not yet
  // computed (so the worker's sampler advances whatever the thread count).
  void finish(int worker);
  // Whether worker has an outstanding push (requested, not finished).
  bool outstanding(int worker) const;
  // Waits until worker's outstanding push (if any) is computed: afterwards
  // no pool thread touches the worker's state until its next request.
  void settle(int worker);
  // settle() for every worker, computing on all threads.
  void settle_all();
  // Makes `grads` (num_params floats) worker's outstanding, computed push
  // (a push restored from a checkpoint). The worker must have none.
  void install(int worker, std::span<const float> grads, double loss, int64_t samples);
  // Requests due at or after `t` are computed only when taken or settled,
  // not ahead (the run ends before they are needed). Default: no horizon.
  void set_horizon(double t);
  // Drops pushes not started, waits for the running ones and joins the pool.
  // Afterwards only install/outstanding/take/finish of computed pushes work.
  void stop();

  // For tests: parameter snapshots alive now, and the most alive at once.
  size_t live_snapshots() const;
  size_t peak_snapshots() const;

 private:
  struct Snapshot;
  class BufferPool;
  enum class State : uint8_t { kIdle, kPending, kRunning, kReady };
  struct Slot {
    State state = State::kIdle;
    uint64_t seq = 0;
    double due = 0;
    std::shared_ptr<const Snapshot> snap;
    std::vector<float> grads;
    double loss = 0;
    int64_t samples = 0;
    std::exception_ptr error;
  };
  struct Pending {
    double due;
    uint64_t seq;
    int worker;
    bool operator>(const Pending& o) const { return due != o.due ? due > o.due : seq > o.seq; }
  };
  struct Engine;  // a model bound to its own parameter and gradient buffers

  void pool_main(Engine& e);
  // Pops stale heap entries; true if a pending request may start now
  // (within the window), or is pending at all.
  bool can_start();
  bool can_start_any();
  // Computes slot `worker` (state kRunning, snapshot moved to `snap`) with
  // `e`, outside the lock, into the slot's result fields.
  void run(int worker, Engine& e, std::shared_ptr<const Snapshot> snap);
  // Under the lock: computes `worker` here if pending, then waits while it runs.
  void complete(int worker, std::unique_lock<std::mutex>& lock);

  const int threads_;
  const size_t np_;
  const size_t window_;
  PushKernel* kernel_;
  // Models read snapshots in place: the kernel never writes its parameters
  // and the model has at least `in_place_from` of them.
  const bool in_place_;
  std::shared_ptr<BufferPool> buffers_;
  std::unique_ptr<Engine> inline_;  // the calling thread's model
  std::vector<std::thread> pool_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // pool threads: a request may start
  std::condition_variable done_cv_;  // the loop: a push is computed
  std::vector<Slot> slots_;
  std::vector<Pending> heap_;
  uint64_t next_seq_ = 0;
  size_t held_ = 0;         // computed results not finished
  size_t running_ = 0;      // pool threads computing
  bool unbounded_ = false;  // settle_all: ignore the window
  bool stop_ = false;
  double horizon_ = std::numeric_limits<double>::infinity();
  std::shared_ptr<const Snapshot> last_snap_;  // the newest version's snapshot
};

}  // namespace hsgd
