// The simulator's event queue: events at virtual times, taken in (time,
// order of scheduling) order, saved and restored whole (STYLE.md habit 13).
// Internal to sim_runtime.cc.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "hsgd/core/state.h"

namespace hsgd::sim {

// kFault: a membership fault of the worker may be due (issue 10; stale ones
// are ignored: the fault plan says what is due). kNetwork, kComputeDone,
// kShardDone: the simulated cluster's (sim_fabric.h; `worker` holds the
// worker, or the shard of kShardDone, or 0).
enum class EventType : int32_t {
  kPullArrive,
  kPushArrive,
  kServerDone,
  kFault,
  kNetwork,
  kComputeDone,
  kShardDone
};

struct Event {
  double time;
  uint64_t seq;  // ties at equal times: first scheduled, first taken
  EventType type;
  int32_t worker;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

// A binary min-heap on (time, seq) whose storage can be saved and restored.
class EventQueue {
 public:
  void push(double time, EventType type, int worker) {
    heap_.push_back(Event{time, next_seq_++, type, worker});
    std::push_heap(heap_.begin(), heap_.end(), std::greater<Event>());
  }
  bool empty() const { return heap_.empty(); }
  const Event& top() const { return heap_.front(); }
  Event pop() {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Event>());
    Event e = heap_.back();
    heap_.pop_back();
    return e;
  }
  // Drops the worker's pull and push events (it left): the order of the
  // others is unchanged, (time, seq) being a total order.
  void drop_worker(int worker) {
    std::erase_if(heap_, [&](const Event& e) {
      return e.worker == worker &&
             (e.type == EventType::kPullArrive || e.type == EventType::kPushArrive ||
              e.type == EventType::kComputeDone);
    });
    std::make_heap(heap_.begin(), heap_.end(), std::greater<Event>());
  }
  void save(StateWriter& w) const {
    w.put_vec(heap_);
    w.put(next_seq_);
  }
  void load(StateReader& r, int workers, int servers) {
    heap_ = r.get_vec<Event>();
    next_seq_ = r.get<uint64_t>();
    for (const Event& e : heap_) {
      const int ids = e.type == EventType::kShardDone ? servers
                      : e.type == EventType::kNetwork ? 1
                                                      : workers;
      if (e.worker < 0 || e.worker >= ids || e.seq >= next_seq_ || static_cast<int>(e.type) < 0 ||
          static_cast<int>(e.type) > 6) {
        r.fail("corrupt (an event of an unknown worker or type)");
      }
    }
    if (!std::is_heap(heap_.begin(), heap_.end(), std::greater<Event>())) {
      r.fail("corrupt (the event queue is not ordered)");
    }
  }

 private:
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;

 public:
  // Whether worker w has an event of `type` queued.
  std::vector<bool> workers_with(EventType type, int workers) const {
    std::vector<bool> out(static_cast<size_t>(workers), false);
    for (const Event& e : heap_) {
      if (e.type == type) out[static_cast<size_t>(e.worker)] = true;
    }
    return out;
  }
};

}  // namespace hsgd::sim
