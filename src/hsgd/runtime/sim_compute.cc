#include "hsgd/runtime/sim_compute.h"

#include <algorithm>
#include <functional>

#include "hsgd/core/error.h"

namespace hsgd {

// Recycles num_params-float buffers (snapshots and results), so a 40 MB
// buffer is not faulted in afresh for every pull. Thread-safe: a snapshot's
// last reference may drop on any thread.
class SimCompute::BufferPool {
 public:
  BufferPool(size_t n, size_t keep) : n_(n), keep_(keep) {}
  std::vector<float> get() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        std::vector<float> v = std::move(free_.back());
        free_.pop_back();
        return v;
      }
    }
    return std::vector<float>(n_);
  }
  void put(std::vector<float> v) {
    if (v.size() != n_) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < keep_) free_.push_back(std::move(v));
  }
  void snapshot_born() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_snapshots_ = std::max(peak_snapshots_, ++live_snapshots_);
  }
  void snapshot_died() {
    std::lock_guard<std::mutex> lock(mu_);
    --live_snapshots_;
  }
  size_t live_snapshots() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_snapshots_;
  }
  size_t peak_snapshots() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_snapshots_;
  }

 private:
  const size_t n_, keep_;
  std::mutex mu_;
  std::vector<std::vector<float>> free_;
  size_t live_snapshots_ = 0, peak_snapshots_ = 0;
};

// The server's parameters at one version; shared by every request that
// pulled that version; its buffer goes back to the pool with the last one.
struct SimCompute::Snapshot {
  uint64_t version = 0;
  std::vector<float> params;
};

// A model and its scratch. Small models stay bound to buffers of their own
// (a push copies its parameters in and its gradient out: cheaper than
// rebinding a model's tensors); large ones are bound per push to the
// snapshot they read and the buffer their push goes to, in place.
struct SimCompute::Engine {
  Engine(const ModelFactory& make, size_t n, bool in_place) : model(make()) {
    HSGD_ASSERT(static_cast<size_t>(model->num_params()) == n, "sim: model size mismatch");
    if (!in_place) {
      params.resize(n);
      grads.resize(n);
      bind(params, grads);
    }
  }
  void bind(std::span<float> p, std::span<float> g) {
    if (p.data() == bound_params && g.data() == bound_grads) return;
    model->bind(p, g);
    bound_params = p.data();
    bound_grads = g.data();
  }
  std::unique_ptr<Model> model;
  std::vector<float> params, grads;  // small models' own buffers
  Batch scratch;
  const float* bound_params = nullptr;
  const float* bound_grads = nullptr;
};

namespace {
// Results computed ahead: as many as fit in 64 MB, at least 4 per thread
// (so no thread idles on the window), at most one per worker.
size_t default_window(int threads, int workers, size_t np) {
  const size_t by_memory = (size_t{64} << 20) / (4 * std::max<size_t>(np, 1));
  const size_t lo = 4 * static_cast<size_t>(std::max(1, threads));
  return std::max(lo, std::min(by_memory, static_cast<size_t>(std::max(1, workers))));
}
}  // namespace

SimCompute::SimCompute(int threads, int workers, size_t num_params, const ModelFactory& make_model,
                       PushKernel* kernel, int window, size_t in_place_from)
    : threads_(std::max(1, threads)),
      np_(num_params),
      window_(window > 0 ? static_cast<size_t>(window)
                         : default_window(threads, workers, num_params)),
      kernel_(kernel),
      in_place_(!kernel->writes_params() && num_params >= in_place_from),
      buffers_(std::make_shared<BufferPool>(num_params, window_ + 8)),
      slots_(static_cast<size_t>(workers)) {
  inline_ = std::make_unique<Engine>(make_model, np_, in_place_);
  if (threads_ == 1) return;
  // Each pool thread builds its model on itself (ModelFactory's contract)
  // and reports; the first error is rethrown here.
  std::mutex ready_mu;
  std::condition_variable ready_cv;
  int ready = 0;
  std::exception_ptr error;
  for (int i = 0; i < threads_; ++i) {
    pool_.emplace_back([&, i] {
      std::unique_ptr<Engine> e;
      try {
        e = std::make_unique<Engine>(make_model, np_, in_place_);
      } catch (...) {
        std::lock_guard<std::mutex> lock(ready_mu);
        if (!error) error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(ready_mu);
        ++ready;
        ready_cv.notify_all();
      }
      if (e) pool_main(*e);
    });
  }
  std::unique_lock<std::mutex> lock(ready_mu);
  ready_cv.wait(lock, [&] { return ready == threads_; });
  if (error) {
    lock.unlock();
    stop();
    std::rethrow_exception(error);
  }
}

SimCompute::~SimCompute() { stop(); }

void SimCompute::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && pool_.empty()) return;
    stop_ = true;
    for (Slot& s : slots_) {
      if (s.state == State::kPending) {
        s.state = State::kIdle;
        s.snap.reset();
      }
    }
    heap_.clear();
  }
  work_cv_.notify_all();
  for (std::thread& t : pool_) t.join();
  pool_.clear();
  last_snap_.reset();
}

void SimCompute::pool_main(Engine& e) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || can_start(); });
    if (stop_) return;
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Pending>());
    const int w = heap_.back().worker;
    heap_.pop_back();
    Slot& s = slots_[static_cast<size_t>(w)];
    s.state = State::kRunning;
    std::shared_ptr<const Snapshot> snap = std::move(s.snap);
    ++running_;
    lock.unlock();
    run(w, e, std::move(snap));
    lock.lock();
    --running_;
    ++held_;
    slots_[static_cast<size_t>(w)].state = State::kReady;
    done_cv_.notify_all();
  }
}

bool SimCompute::can_start() {
  return can_start_any() && (unbounded_ || held_ + running_ < window_);
}

bool SimCompute::can_start_any() {
  while (!heap_.empty()) {
    const Pending& top = heap_.front();
    const Slot& s = slots_[static_cast<size_t>(top.worker)];
    if (s.state == State::kPending && s.seq == top.seq) break;
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Pending>());
    heap_.pop_back();  // taken by the loop meanwhile
  }
  return !heap_.empty() && (unbounded_ || heap_.front().due < horizon_);
}

void SimCompute::run(int worker, Engine& e, std::shared_ptr<const Snapshot> snap) {
  Slot& s = slots_[static_cast<size_t>(worker)];
  // Only this thread touches the slot's result fields while it is kRunning.
  if (s.grads.size() != np_) s.grads = buffers_->get();
  std::span<float> params = e.params, grads = e.grads;
  if (in_place_) {
    // Read only (writes_params() is false): every request of the version
    // may read it at once; its buffer is reused only after the last.
    params = std::span<float>(const_cast<float*>(snap->params.data()), np_);
    grads = s.grads;
    e.bind(params, grads);
  } else {
    std::copy(snap->params.begin(), snap->params.end(), e.params.begin());
    snap.reset();
  }
  s.error = nullptr;
  try {
    int64_t samples = 0;
    s.loss = kernel_->compute(worker, *e.model, params, grads, &e.scratch, &samples);
    s.samples = samples;
    if (!in_place_) std::copy(e.grads.begin(), e.grads.end(), s.grads.begin());
  } catch (...) {
    s.error = std::current_exception();
  }
}

void SimCompute::request(int worker, std::span<const float> params, uint64_t version, double due) {
  HSGD_ASSERT(params.size() == np_, "sim: request of the wrong size");
  Slot& s = slots_[static_cast<size_t>(worker)];
  if (!last_snap_ || last_snap_->version != version) {
    auto pool = buffers_;
    auto* raw = new Snapshot{version, pool->get()};
    std::copy(params.begin(), params.end(), raw->params.begin());
    pool->snapshot_born();
    last_snap_ = std::shared_ptr<const Snapshot>(raw, [pool](const Snapshot* p) {
      pool->put(std::move(const_cast<Snapshot*>(p)->params));
      pool->snapshot_died();
      delete p;
    });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    HSGD_ASSERT(s.state == State::kIdle, "sim: a worker requested two pushes at once");
    s.state = State::kPending;
    s.seq = next_seq_++;
    s.due = due;
    s.snap = last_snap_;
    if (pool_.empty()) return;  // take() computes it
    heap_.push_back(Pending{due, s.seq, worker});
    std::push_heap(heap_.begin(), heap_.end(), std::greater<Pending>());
  }
  work_cv_.notify_one();
}

void SimCompute::complete(int worker, std::unique_lock<std::mutex>& lock) {
  Slot& s = slots_[static_cast<size_t>(worker)];
  for (;;) {
    int w = -1;
    if (s.state == State::kPending) {
      w = worker;  // no pool thread has started it: compute it here
    } else if (s.state == State::kRunning && !pool_.empty() && can_start_any()) {
      // A pool thread computes it: compute the next request meanwhile
      // rather than sleep (a wake-up on a loaded machine costs more).
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<Pending>());
      w = heap_.back().worker;
      heap_.pop_back();
    } else if (s.state == State::kRunning) {
      done_cv_.wait(lock, [&] { return s.state != State::kRunning; });
      return;
    } else {
      return;
    }
    Slot& t = slots_[static_cast<size_t>(w)];
    t.state = State::kRunning;
    std::shared_ptr<const Snapshot> snap = std::move(t.snap);
    lock.unlock();
    run(w, *inline_, std::move(snap));
    lock.lock();
    t.state = State::kReady;
    ++held_;
    done_cv_.notify_all();  // (nobody else waits on the loop's work today)
  }
}

PushResult SimCompute::take(int worker) {
  Slot& s = slots_[static_cast<size_t>(worker)];
  {
    std::unique_lock<std::mutex> lock(mu_);
    HSGD_ASSERT(s.state != State::kIdle, "sim: take of a push never requested");
    complete(worker, lock);
  }
  if (s.error) std::rethrow_exception(s.error);
  return PushResult{s.grads, s.loss, s.samples};
}

void SimCompute::finish(int worker) {
  Slot& s = slots_[static_cast<size_t>(worker)];
  std::vector<float> buf;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (s.state == State::kIdle) return;
    complete(worker, lock);
    s.state = State::kIdle;
    s.error = nullptr;
    buf = std::move(s.grads);
    s.grads = {};
    --held_;
  }
  work_cv_.notify_one();
  buffers_->put(std::move(buf));
}

bool SimCompute::outstanding(int worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_[static_cast<size_t>(worker)].state != State::kIdle;
}

void SimCompute::settle(int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  if (slots_[static_cast<size_t>(worker)].state != State::kIdle) complete(worker, lock);
}

void SimCompute::settle_all() {
  std::unique_lock<std::mutex> lock(mu_);
  unbounded_ = true;
  work_cv_.notify_all();
  for (size_t w = 0; w < slots_.size(); ++w) {
    if (slots_[w].state != State::kIdle) complete(static_cast<int>(w), lock);
  }
  unbounded_ = false;
}

void SimCompute::install(int worker, std::span<const float> grads, double loss, int64_t samples) {
  HSGD_ASSERT(grads.size() == np_, "sim: installed push of the wrong size");
  Slot& s = slots_[static_cast<size_t>(worker)];
  std::vector<float> buf = buffers_->get();
  std::copy(grads.begin(), grads.end(), buf.begin());
  std::lock_guard<std::mutex> lock(mu_);
  HSGD_ASSERT(s.state == State::kIdle, "sim: install over an outstanding push");
  s.grads = std::move(buf);
  s.loss = loss;
  s.samples = samples;
  s.error = nullptr;
  s.state = State::kReady;
  ++held_;
}

void SimCompute::set_horizon(double t) {
  std::lock_guard<std::mutex> lock(mu_);
  horizon_ = t;
}

size_t SimCompute::live_snapshots() const { return buffers_->live_snapshots(); }
size_t SimCompute::peak_snapshots() const { return buffers_->peak_snapshots(); }

}  // namespace hsgd
