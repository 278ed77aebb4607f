"""runtime="mpi" under mpirun: every rank calls hsgd.train."""
import shutil
import subprocess
import sys

import pytest

from conftest import HERE

CODE = r"""
import sys
sys.path.insert(0, {here!r})
import hsgd
from conftest import blobs
seen = []
def callback(row):  # rank 0 only; False at the third evaluation ends the run there
    seen.append(row["time_s"])
    return len(seen) < 3
run = hsgd.train("softmax", data=blobs(600), runtime="mpi", batch=16, lr=0.05, budget=30,
                 out={out!r}, progress=False, set={{"train.eval_every": 0.5}}, callback=callback)
n = len(run.metrics["test_acc"]) if run.primary else 0
# One file per rank: mpirun forwards the ranks' stdout in pieces that can
# interleave within a line ("rankrank 1 ...").
with open({out!r} + ".rank" + str(run.rank), "w") as f:
    f.write(" ".join(str(x) for x in ("rank", run.rank, run.role, n, run.summary.get("runtime"))))
"""


def test_mpirun_np3(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun")
    p = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3",
                        sys.executable, "-c", CODE.format(here=HERE, out=str(tmp_path / "r"))],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    lines = sorted((tmp_path / f"r.rank{r}").read_text().split() for r in range(3))
    assert [l[:3] for l in lines] == [["rank", "0", "primary"], ["rank", "1", "worker"],
                                      ["rank", "2", "worker"]]
    assert int(lines[0][3]) == 3 and lines[0][4] == "mpi"  # stopped at the third row
    assert (tmp_path / "r" / "model.bin").exists()
