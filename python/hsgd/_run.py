"""Run: what a training run left in its directory, as Python objects."""
import csv
import json
import os

import numpy as np

_INT_COLUMNS = {"updates", "samples", "k", "staleness_max", "dropped", "nonfinite",
                "live_workers", "seed", "bytes_pushed", "bytes_pulled"}


def parse_row(header, line):
    """A metrics.csv line as a dict (the same names and values)."""
    row = {}
    for name, text in zip(header.split(","), line.split(",")):
        if name == "policy":
            row[name] = text
        elif name in _INT_COLUMNS:
            row[name] = int(text)
        else:
            row[name] = float(text)
    return row


def read_metrics(path):
    """metrics.csv as {column: NumPy array} (policy as strings)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = list(reader)
    out = {}
    for i, name in enumerate(header):
        values = [r[i] for r in rows]
        if name == "policy":
            out[name] = np.array(values, dtype=object)
        elif name in _INT_COLUMNS:
            out[name] = np.array([int(v) for v in values], dtype=np.int64)
        else:
            out[name] = np.array([float(v) for v in values], dtype=np.float64)
    return out


class Run:
    """A finished (or stopped) run: its directory `out` holds exactly what
    `hsgd train --out` writes. On mpi ranks other than 0, `role` is "server"
    or "worker" and there is nothing else (rank 0's `role` is "primary";
    threads and sim: "")."""

    def __init__(self, out, role="", rank=0, stopped=""):
        self.out = out
        self.role = role
        self.rank = rank
        self.stopped = stopped  # why it ended early ("" if it ran to its end)
        self._metrics = None
        self._summary = None
        self._model = None

    @property
    def primary(self):
        return self.role in ("", "primary")

    def __repr__(self):
        if not self.primary:
            return f"Run(role={self.role!r}, rank={self.rank})"
        s = self.summary
        return (f"Run(out={self.out!r}, policy={s.get('policy')!r}, "
                f"test_acc={s.get('test_acc')}, train_s={s.get('train_s')})")

    def _path(self, name):
        return os.path.join(self.out, name)

    @property
    def metrics(self):
        """{column: NumPy array}: metrics.csv, one entry per evaluation."""
        if self._metrics is None:
            self._metrics = read_metrics(self._path("metrics.csv")) if self.primary else {}
        return self._metrics

    @property
    def summary(self):
        """summary.json as a dict."""
        if self._summary is None:
            if self.primary:
                with open(self._path("summary.json")) as f:
                    self._summary = json.load(f)
            else:
                self._summary = {}
        return self._summary

    @property
    def model(self):
        """The trained model (model.pt) as a torch.jit.ScriptModule in eval mode: it
        takes inputs as given to train (it applies the standardization itself)."""
        if self._model is None:
            import torch
            self._model = torch.jit.load(self._path("model.pt"), map_location="cpu").eval()
        return self._model

    def state_dict(self):
        """The trained parameters and buffers as {name: tensor}, keyed as the
        model's own state_dict(): load them into a fresh instance of your
        nn.Module with load_state_dict(). That module takes inputs standardized
        as in training: (x - run.model.input_mean) / run.model.input_std."""
        prefix = "net."
        return {k[len(prefix):]: v.detach().clone()
                for k, v in self.model.state_dict().items() if k.startswith(prefix)}

    def to_pandas(self):
        """The metrics as a pandas DataFrame."""
        import pandas as pd
        return pd.DataFrame(self.metrics)

    def plot(self):
        """A matplotlib Figure with plot.png's panels against training time."""
        import matplotlib.pyplot as plt
        m = self.metrics
        fig, axes = plt.subplots(2, 2, figsize=(10, 7))
        panels = [("test_acc", "test accuracy"), ("test_loss", "test loss"),
                  ("staleness_mean", "mean staleness"), ("idle_frac", "idle fraction")]
        label = str(m["policy"][0]) if len(m.get("policy", [])) else None
        for ax, (col, title) in zip(axes.flat, panels):
            ax.plot(m["time_s"], m[col], marker=".", label=label)
            ax.set_title(title)
            ax.set_xlabel("time (s)")
            ax.grid(True)
        if label:
            axes.flat[0].legend()
        fig.tight_layout()
        return fig
