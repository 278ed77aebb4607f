// _hsgd: the C++ half of `import hsgd` (python/hsgd/ is the other). A front
// end beside the CLI: it builds the same TrainArgs (a config file, then
// overrides with --set semantics) and calls the one train path
// (cli::run_train), handing in NumPy arrays and a TorchScript archive held
// in memory. No Python runs in the training loop.
//
// Threads, the GIL and Ctrl-C: train() starts the run on a thread of its
// own and, with the GIL released, waits on a channel for what the run hands
// back. The run's observer (on the runtime's driving thread) posts each
// metrics row and waits until the calling thread has handled it; the
// calling thread, woken at least every 50 ms, takes the GIL, runs
// PyErr_CheckSignals (Ctrl-C) and the Python callback on each row, answers,
// and releases the GIL again. So the callback runs only at evaluations and
// only on the calling thread, and training never holds the GIL. A callback
// returning False, or raising, and Ctrl-C each request a stop
// (core/stop.h) that the run layer honours at that evaluation (callback) or
// after the next push (Ctrl-C); the run then ends as at its budget (outputs
// and, when checkpoints are on, a final checkpoint), and train() rethrows
// the exception (KeyboardInterrupt for Ctrl-C) once the run has ended.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hsgd/cli/commands.h"
#include "hsgd/config/effective.h"
#include "hsgd/core/error.h"
#include "hsgd/core/stop.h"
#include "hsgd/data/readers.h"
#include "hsgd/metrics/recorder.h"
#include "hsgd/model/model.h"
#include "hsgd/policy/policy.h"

namespace py = pybind11;

namespace hsgd::python {
namespace {

// A data set over NumPy arrays: float32 features are borrowed (no copy),
// the arrays kept alive by this object. Built by make_data().
struct Data {
  std::shared_ptr<Dataset> dataset;
  py::object keep_x, keep_y;
};

// The buffer of a C-contiguous array (python/hsgd/_data.py makes them so)
// as an ArrayView.
ArrayView view_of(const py::buffer& b, const std::string& name) {
  const py::buffer_info info = b.request();
  ArrayView v;
  v.name = name;
  const std::string fmt = info.format;
  const char f = fmt.empty() ? 0 : fmt.back();
  switch (f) {
    case 'f':
    case 'd':
    case 'e':
      v.kind = 'f';
      break;
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
      v.kind = 'i';
      break;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
      v.kind = 'u';
      break;
    default:
      throw InputError(name + ": unsupported dtype (buffer format '" + fmt + "')");
  }
  v.itemsize = static_cast<int>(info.itemsize);
  int64_t expect = info.itemsize;
  for (auto i = static_cast<ssize_t>(info.ndim) - 1; i >= 0; --i) {
    if (info.shape[static_cast<size_t>(i)] > 1 && info.strides[static_cast<size_t>(i)] != expect) {
      throw InputError(name + ": expected a C-contiguous array");
    }
    expect *= info.shape[static_cast<size_t>(i)];
  }
  for (ssize_t d : info.shape) v.shape.push_back(static_cast<int64_t>(d));
  v.data = std::string_view(static_cast<const char*>(info.ptr),
                            static_cast<size_t>(info.size * info.itemsize));
  return v;
}

Data make_data(const py::buffer& x, const py::buffer& y, const std::string& x_name,
               const std::string& y_name, const std::string& name) {
  Data d;
  const ArrayView xv = view_of(x, x_name);
  const ArrayView yv = view_of(y, y_name);
  d.dataset = std::make_shared<Dataset>(dataset_from_arrays(xv, yv, /*borrow=*/true));
  d.dataset->name = name;
  d.keep_x = x;
  d.keep_y = y;
  return d;
}

// Rows and status from the run's thread to the calling thread.
class Channel {
 public:
  // The run's thread: hands over a row and waits until it was handled.
  void post_row(const MetricsRow& r) {
    std::unique_lock<std::mutex> lk(mu_);
    rows_.push_back(r);
    const uint64_t mine = ++posted_;
    cv_.notify_all();
    cv_.wait(lk, [&] { return handled_ >= mine; });
  }
  void post_status(const Status& s) {
    std::lock_guard<std::mutex> lk(mu_);
    status_ = s;
    cv_.notify_all();
  }
  void finish() {
    std::lock_guard<std::mutex> lk(mu_);
    finished_ = true;
    cv_.notify_all();
  }
  // The calling thread: waits up to `timeout` for rows, a status or the end.
  void wait(std::chrono::milliseconds timeout, std::vector<MetricsRow>* rows,
            std::optional<Status>* status, bool* finished) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return !rows_.empty() || status_ || finished_; });
    rows->assign(rows_.begin(), rows_.end());
    rows_.clear();
    *status = status_;
    status_.reset();
    *finished = finished_ && rows->empty();
  }
  void handled(size_t n) {
    std::lock_guard<std::mutex> lk(mu_);
    handled_ += n;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<MetricsRow> rows_;
  std::optional<Status> status_;
  uint64_t posted_ = 0, handled_ = 0;
  bool finished_ = false;
};

class ChannelObserver final : public Observer {
 public:
  explicit ChannelObserver(Channel& c) : c_(c) {}
  void on_row(const MetricsRow& r) override { c_.post_row(r); }
  void on_status(const Status& s) override { c_.post_status(s); }

 private:
  Channel& c_;
};

py::dict status_dict(const Status& s) {
  py::dict d;
  d["time_s"] = s.time_s;
  d["updates"] = s.updates;
  d["samples"] = s.samples;
  d["k"] = s.k;
  d["train_loss"] = s.train_loss;
  d["test_acc"] = s.test_acc;
  d["samples_per_s"] = s.samples_per_s;
  d["epochs"] = s.epochs;
  return d;
}

// The stop line of a callback that returned False.
std::string fmt_stop(const MetricsRow& r) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "the callback returned False at the evaluation at %.3f s",
                r.time_s);
  return buf;
}

// The stop line of a callback that raised.
std::string fmt_raised(const MetricsRow& r) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "the callback raised an exception at the evaluation at %.3f s",
                r.time_s);
  return buf;
}

// Runs `body` (a run_train or compare) on a thread of its own while the
// calling thread, GIL released, serves the channel: rows to `on_row`
// (a Python callable taking the header and the metrics.csv line, returning
// False to stop), status to `on_status`, Ctrl-C. Rethrows the first Python
// exception (the callback's, or KeyboardInterrupt) after the run ended, and
// InputError as ValueError.
template <typename Body>
void serve(Body body, const py::object& on_row, const py::object& on_status, StopRequest& stop) {
  Channel channel;
  std::exception_ptr failure;
  std::optional<py::error_already_set> py_error;
  std::thread runner([&] {
    try {
      body(channel);
    } catch (...) {
      failure = std::current_exception();
    }
    channel.finish();
  });
  {
    py::gil_scoped_release release;
    std::vector<MetricsRow> rows;
    std::optional<Status> status;
    bool finished = false;
    while (!finished) {
      channel.wait(std::chrono::milliseconds(50), &rows, &status, &finished);
      {
        py::gil_scoped_acquire gil;
        if (!py_error && PyErr_CheckSignals() != 0) {
          py_error.emplace();  // fetches KeyboardInterrupt (or the handler's exception)
          stop.request("KeyboardInterrupt (Ctrl-C)");
        }
        for (const MetricsRow& r : rows) {
          if (py_error || on_row.is_none()) break;
          try {
            const py::object keep_going =
                on_row(csv_header_of(Columns::of(r)), csv_line(r, Columns::of(r)));
            if (keep_going.is(py::bool_(false))) {
              stop.request(fmt_stop(r), /*at_evaluation=*/true);
            }
          } catch (py::error_already_set& e) {
            // Ctrl-C while the callback ran is Ctrl-C (the run ends after
            // its next push, with a final checkpoint); any other exception
            // ends it at this evaluation.
            const bool interrupt = e.matches(PyExc_KeyboardInterrupt);
            py_error.emplace(std::move(e));
            if (interrupt) {
              stop.request("KeyboardInterrupt (Ctrl-C)");
            } else {
              stop.request(fmt_raised(r), /*at_evaluation=*/true);
            }
          }
        }
        if (status && !on_status.is_none() && !py_error) {
          try {
            on_status(status_dict(*status));
          } catch (py::error_already_set& e) {
            py_error.emplace(std::move(e));
            stop.request("the progress display raised an exception");
          }
        }
      }
      channel.handled(rows.size());
    }
  }
  runner.join();
  if (py_error) throw std::move(*py_error);
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const InputError& e) {
      throw py::value_error(e.what());
    }
  }
}

cli::TrainArgs train_args(const std::string& config, const std::vector<Override>& overrides,
                          bool quiet, const std::string& resume) {
  cli::TrainArgs a;
  a.config_path = config;
  a.overrides = overrides;
  a.quiet = quiet;
  a.resume_dir = resume;
  return a;
}

cli::TrainInputs train_inputs(const Data* train, const Data* test, const py::bytes& archive) {
  cli::TrainInputs in;
  if (train) in.train = train->dataset;
  if (test) in.test = test->dataset;
  in.model_archive = archive;
  return in;
}

py::dict train(const std::string& config, const std::vector<Override>& overrides, bool quiet,
               const std::string& resume, const Data* train_data, const Data* test_data,
               const py::bytes& archive, const py::object& on_row, const py::object& on_status,
               bool progress_line) {
  const cli::TrainArgs args = train_args(config, overrides, quiet, resume);
  const cli::TrainInputs in = train_inputs(train_data, test_data, archive);
  StopRequest stop;
  cli::TrainOutcome o;
  serve(
      [&](Channel& channel) {
        ChannelObserver observer(channel);
        cli::TrainHooks hooks;
        hooks.observer = &observer;
        hooks.stop = &stop;
        hooks.progress_line = progress_line;
        o = cli::run_train(args, in, hooks);
      },
      on_row, on_status, stop);
  py::dict d;
  d["code"] = o.code;
  d["out"] = o.out;
  d["stopped"] = o.stopped;
  d["stop_kind"] = o.stop_kind;
  d["error"] = o.error;
  d["primary"] = o.primary;
  d["role"] = o.role;
  d["rank"] = o.rank;
  return d;
}

int compare(const std::string& config, const std::vector<std::string>& policies, int rounds,
            const std::string& out, const std::string& baseline,
            const std::vector<Override>& overrides, const Data* train_data, const Data* test_data,
            const py::bytes& archive) {
  cli::CompareArgs a;
  a.config_path = config;
  a.policies = policies;
  a.rounds = rounds;
  a.out = out;
  a.baseline = baseline;
  a.overrides = overrides;
  const cli::TrainInputs in = train_inputs(train_data, test_data, archive);
  StopRequest stop;
  int code = 0;
  serve(
      [&](Channel&) {
        cli::TrainHooks hooks;
        hooks.stop = &stop;
        code = cli::compare(a, in, hooks);
      },
      py::none(), py::none(), stop);
  return code;
}

std::string eval(const std::string& model_path, const std::string& data_name, const Data* data) {
  cli::EvalArgs a;
  a.model_path = model_path;
  a.data = data_name;
  try {
    py::gil_scoped_release release;
    return cli::eval_json(a, data ? data->dataset.get() : nullptr);
  } catch (const InputError& e) {
    throw py::value_error(e.what());
  }
}

}  // namespace
}  // namespace hsgd::python

PYBIND11_MODULE(_hsgd, m) {
  using namespace hsgd::python;
  m.doc() = "hsgd's C++ core (use the hsgd package, not this module)";
  m.attr("__version__") = HSGD_VERSION;  // CMakeLists.txt's project(VERSION)
  hsgd::configure_math_threads();
  py::class_<Data>(m, "Data")
      .def_property_readonly("size", [](const Data& d) { return d.dataset->size(); })
      .def_property_readonly("num_classes", [](const Data& d) { return d.dataset->num_classes; })
      .def_property_readonly("sample_shape", [](const Data& d) { return d.dataset->sample_shape; })
      .def_property_readonly("borrowed",
                             [](const Data& d) { return !d.dataset->borrowed.empty(); });
  m.def(
      "make_data",
      [](const py::buffer& x, const py::buffer& y, const std::string& xn, const std::string& yn,
         const std::string& name) {
        try {
          return make_data(x, y, xn, yn, name);
        } catch (const hsgd::InputError& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("x"), py::arg("y"), py::arg("x_name"), py::arg("y_name"), py::arg("name"));
  m.def("train", &train, py::arg("config"), py::arg("overrides"), py::arg("quiet"),
        py::arg("resume"), py::arg("data").none(true), py::arg("test").none(true),
        py::arg("archive"), py::arg("on_row").none(true), py::arg("on_status").none(true),
        py::arg("progress_line"));
  m.def("compare", &compare, py::arg("config"), py::arg("policies"), py::arg("rounds"),
        py::arg("out"), py::arg("baseline"), py::arg("overrides"), py::arg("data").none(true),
        py::arg("test").none(true), py::arg("archive"));
  m.def("eval", &eval, py::arg("model_path"), py::arg("data_name"), py::arg("data").none(true));
  m.def("policies", [] { return hsgd::policy_names(); });
  m.def("config_keys", [] {
    py::list out;
    for (const hsgd::KeyInfo& k : hsgd::config_keys()) {
      py::dict d;
      d["key"] = k.key;
      d["type"] = k.type;
      d["doc"] = k.doc;
      d["default"] = k.default_value;
      out.append(d);
    }
    return out;
  });
}
