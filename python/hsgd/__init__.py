"""hsgd from Python: train a PyTorch model on NumPy arrays through hsgd's
parameter server, with any synchronization policy, on the threads, sim or mpi
runtime. The training loop is hsgd's C++ one (no Python in it); this package
builds the config the CLI would and calls the same train path.

    run = hsgd.train(model, data=(X, y), test=(Xt, yt), policy="hybrid",
                     runtime="sim", workers=8, budget=30)
    run.metrics["test_acc"], run.summary, run.model, run.state_dict()

Full API: docs/python.md.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import _hsgd
from ._data import is_arrays as _is_arrays, make as _make_data
from ._errors import Diverged, HsgdError, TooFewWorkers
from ._model import resolve as _resolve_model
from ._run import Run, parse_row as _parse_row
from ._values import override_text as _text, toml_string as _quoted

__version__ = _hsgd.__version__  # CMakeLists.txt project(VERSION), as hsgd --version
__all__ = ["train", "compare", "sweep", "eval", "policies", "config_keys", "Run", "Compared",
           "Diverged", "TooFewWorkers", "HsgdError", "__version__"]


def policies():
    """The policy names train(policy=...) takes (":K" where a number follows)."""
    return list(_hsgd.policies())


def config_keys():
    """{key: {"type", "doc", "default"}} for every config key set= takes."""
    return {k["key"]: {"type": k["type"], "doc": k["doc"], "default": k["default"]}
            for k in _hsgd.config_keys()}


def _overrides(named, set_):
    """The flags' overrides (named keyword arguments) then set=, in order."""
    out = [(key, _text(v)) for key, v in named if v is not None]
    for key, v in (set_ or {}).items():
        out.append((str(key), _text(v)))
    return out


class _Progress:
    """A tqdm bar over the training budget (or epochs), fed by the run's status
    lines and rows (on the calling thread)."""

    def __init__(self, budget, epochs):
        from tqdm.auto import tqdm
        self.by_time = bool(budget) or not epochs
        total = float(budget) if budget else float(epochs) if epochs else None
        self.bar = tqdm(total=total, unit="s" if self.by_time else "epoch",
                        bar_format="{l_bar}{bar}| {n:.1f}/{total_fmt} [{elapsed}<{remaining}]"
                                   "{postfix}")
        self.acc = float("nan")
        self.last = None  # (time_s, samples) of the previous update

    def _show(self, time_s, epochs, samples, k):
        done = time_s if self.by_time else epochs
        self.bar.n = min(done, self.bar.total) if self.bar.total else done
        rate = ""
        if self.last is not None and time_s > self.last[0]:
            rate = f", {(samples - self.last[1]) / (time_s - self.last[0]):.0f} samples/s"
        self.last = (time_s, samples)
        self.bar.set_postfix_str(f"K {k}{rate}, test_acc {100 * self.acc:.2f}%", refresh=True)

    def status(self, s):
        self._show(s["time_s"], s["epochs"], s["samples"], s["k"])

    def row(self, r):
        self.acc = r["test_acc"]
        self._show(r["time_s"], r["epoch"], r["samples"], r["k"])

    def close(self):
        self.bar.close()


def _inputs(model, data, test):
    """-> (overrides, data handle, test handle, archive)."""
    overrides = []
    data_h = test_h = None
    example = None
    if isinstance(data, str):
        overrides.append(("data.spec", _quoted(data)))
    elif data is not None:
        data_h = _make_data(data, "data")
        overrides.append(("data.spec", _quoted("numpy")))
        import numpy as np
        x = np.asarray(data[0][:2])
        example = np.ascontiguousarray(x, dtype=np.float32) if x.dtype.kind in "fu" else None
    if isinstance(test, str):
        overrides.append(("data.test", _quoted(test)))
    elif test is not None:
        if data_h is None:
            raise ValueError("test: NumPy arrays for the test set need data= as arrays too")
        test_h = _make_data(test, "test")
        overrides.append(("data.test", _quoted("numpy")))
    archive = b""
    if model is not None:
        name, archive = _resolve_model(model, example)
        overrides.append(("model.name", _quoted(name)))
    return overrides, data_h, test_h, archive


def _on_row(callback, progress):
    def on_row(header, line):
        row = _parse_row(header, line)
        if progress is not None:
            progress.row(row)
        if callback is not None:
            return callback(row)
        return None
    return on_row


def train(model=None, data=None, test=None, policy=None, runtime=None, workers=None, batch=None,
          lr=None, budget=None, epochs=None, seed=None, config=None, set=None, out=None,
          callback=None, progress=True, resume=None):
    """Train `model` on `data` and return a Run (see docs/python.md).

    model: a torch.nn.Module (scripted, or traced with a batch of the data if
    scripting fails), a torch.jit.ScriptModule, a zoo name ("lenet5") or
    "torchscript:PATH". data/test: (X, y) NumPy arrays or a data spec string.
    The keyword settings are `hsgd train`'s flags: None leaves the config's
    value (a `config` TOML file, applied first, else the defaults: hybrid,
    threads, 4 workers, batch 64, lr 0.01; budget 60 s when neither budget
    nor epochs is set anywhere); `set` is --set (any config key). `out`: the
    run's directory (None: a new temporary one, kept). `callback(row)` runs at
    every evaluation on this thread; returning False stops the run there.
    `resume`: a run directory to continue from its newest checkpoint.

    Raises ValueError (bad input or config; nothing written), Diverged,
    TooFewWorkers (each with .run), KeyboardInterrupt (Ctrl-C: the run was
    stopped and its outputs written).
    """
    overrides, data_h, test_h, archive = _inputs(model, data, test)
    named = [("policy.name", policy), ("train.runtime", runtime), ("train.workers", workers),
             ("train.batch", batch), ("optim.lr", lr), ("train.budget", budget),
             ("train.epochs", epochs), ("train.seed", seed)]
    given = {k for k, v in named if v is not None} | {str(k) for k in (set or {})}
    if (resume is None and config is None and budget is None and epochs is None
            and not {"train.budget", "train.epochs"} & given):
        named.append(("train.budget", 60.0))
    made_out = None
    if resume is not None:
        overrides = [o for o in overrides if o[0] not in ("data.spec", "data.test", "model.name")]
        if out is not None:
            raise ValueError("out: a resumed run writes into its own directory (resume=)")
    else:
        if out is None:
            made_out = out = tempfile.mkdtemp(prefix="hsgd-run-")
        overrides.append(("train.out", _quoted(os.fspath(out))))
    overrides += _overrides(named, set)

    bar = None
    if progress:
        try:
            bar = _Progress(budget, epochs)
        except ImportError:
            bar = None  # the CLI's progress line instead
    try:
        result = _hsgd.train(
            config=os.fspath(config) if config is not None else "", overrides=overrides,
            quiet=not progress, resume=os.fspath(resume) if resume is not None else "",
            data=data_h, test=test_h, archive=archive,
            on_row=_on_row(callback, bar),
            on_status=bar.status if bar is not None else None,
            progress_line=bar is None)
    except ValueError:
        if made_out is not None:
            shutil.rmtree(made_out, ignore_errors=True)
        raise
    except KeyboardInterrupt:
        # Stopped before anything was written (during auto's pilot): no
        # empty run directory left behind. A run stopped later keeps its
        # outputs.
        if made_out is not None and not os.listdir(made_out):
            os.rmdir(made_out)
        raise
    finally:
        if bar is not None:
            bar.close()
    if result["code"] == 2:  # refused under mpirun (every rank agreed)
        raise ValueError(result["error"])
    run = Run(result["out"], role=result["role"], rank=result["rank"], stopped=result["stopped"])
    if not run.primary and made_out is not None:
        shutil.rmtree(made_out, ignore_errors=True)
    kind = result["stop_kind"]
    if kind == "diverged":
        raise Diverged(result["stopped"], run)
    if kind == "too_few_workers":
        raise TooFewWorkers(result["stopped"], run)
    return run


def _policy_dir(p):
    return "".join("-" if c in ":=/" else c for c in p)


def _flatten(entry, prefix=""):
    """A compare.json policy entry as one table row: {"policy", "final_test_acc",
    "final_test_acc_std", "diff_test_acc_avg", ...} (means over rounds, and stds)."""
    row = {}
    for k, v in entry.items():
        name = prefix + k
        if isinstance(v, dict) and "mean" in v:
            row[name] = v["mean"]
            row[name + "_std"] = v["std"]
        elif isinstance(v, dict):
            row.update(_flatten(v, name + "_"))
        else:
            row[name] = v
    return row


class Compared:
    """What compare() wrote: .table (the rows of compare.md, as dicts), .json
    (compare.json), .runs ({policy: [Run per round]}), .out."""

    def __init__(self, out, policies_, rounds):
        self.out = out
        with open(os.path.join(out, "compare.json")) as f:
            self.json = json.load(f)
        self.table = [_flatten(p) for p in self.json["policies"]]
        self.runs = {p: [Run(os.path.join(out, _policy_dir(p), f"round-{r}"))
                         for r in range(rounds)] for p in policies_}

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.table)

    def __repr__(self):
        return f"Compared(out={self.out!r}, policies={list(self.runs)})"


def compare(model=None, data=None, test=None, policies=("sync", "async", "hybrid"), rounds=1,
            runtime=None, baseline=None, workers=None, batch=None, lr=None, budget=None,
            epochs=None, seed=None, config=None, set=None, out=None):
    """`hsgd compare` on a model and data of your own: every policy for
    `rounds` rounds (round r with seed + r, the same for every policy), then
    the table. Returns a Compared. Settings as train(); baseline: the policy
    the others are compared with (default: "async" if listed, else the first)."""
    policies_ = [str(p) for p in policies]
    if baseline is None:
        baseline = "async" if "async" in policies_ else policies_[0]
    overrides, data_h, test_h, archive = _inputs(model, data, test)
    named = [("train.runtime", runtime), ("train.workers", workers), ("train.batch", batch),
             ("optim.lr", lr), ("train.budget", budget), ("train.epochs", epochs),
             ("train.seed", seed)]
    given = {k for k, v in named if v is not None} | {str(k) for k in (set or {})}
    if config is None and not {"train.budget", "train.epochs"} & given:
        named.append(("train.budget", 60.0))
    if out is None:
        out = tempfile.mkdtemp(prefix="hsgd-compare-")
    overrides += _overrides(named, set)
    code = _hsgd.compare(config=os.fspath(config) if config is not None else "",
                         policies=policies_, rounds=int(rounds), out=os.fspath(out),
                         baseline=baseline, overrides=overrides, data=data_h, test=test_h,
                         archive=archive)
    if code != 0:
        raise HsgdError(f"hsgd compare ended with code {code}")
    return Compared(os.fspath(out), policies_, int(rounds))


def _cli():
    """The hsgd executable: beside the package (an install), in the build tree,
    or on PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "bin", "hsgd"), os.path.join(here, "..", "..", "hsgd")):
        if os.access(path, os.X_OK) and os.path.isfile(path):
            return os.path.normpath(path)
    found = shutil.which("hsgd")
    if found is None:
        raise FileNotFoundError("hsgd: the hsgd executable (for sweep) is not installed")
    return found


def sweep(grid, out="runs/sweep", jobs=None, rescore=False):
    """`hsgd sweep GRID --out OUT`: returns sweep.json as a dict. With
    rescore=True (`--rescore`), the tables again from the finished runs in
    OUT, running nothing."""
    cmd = [_cli(), "sweep", os.fspath(grid), "--out", os.fspath(out)]
    if jobs is not None:
        cmd += ["--jobs", str(int(jobs))]
    if rescore:
        cmd.append("--rescore")
    p = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(p.stderr)
    if p.returncode == 2:
        lines = [l for l in p.stderr.splitlines() if l.startswith("hsgd: error: ")]
        raise ValueError(lines[-1][len("hsgd: error: "):] if lines else p.stderr.strip())
    if p.returncode != 0:
        raise HsgdError(f"hsgd sweep ended with code {p.returncode}")
    with open(os.path.join(out, "sweep.json")) as f:
        return json.load(f)


def eval(model, data):  # noqa: A001 - the CLI's name
    """`hsgd eval --json`: model is a Run, a run directory or a model.bin;
    data a data spec string or (X, y) arrays. Returns the JSON object as a dict."""
    if isinstance(model, Run):
        path = os.path.join(model.out, "model.bin")
    else:
        path = os.fspath(model)
        if os.path.isdir(path):
            path = os.path.join(path, "model.bin")
    if isinstance(data, str):
        return json.loads(_hsgd.eval(path, data, None))
    return json.loads(_hsgd.eval(path, "test=(X, y)", _make_data(data, "test")))
