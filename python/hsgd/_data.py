"""NumPy arrays as the C++ data sets: float32 C-contiguous features are used
without a copy (the C++ data set borrows the buffer, kept alive by the handle);
other float dtypes are converted to float32 once, and uint8 pixels scaled to
[0, 1] once (x / 255 in float32, the same bits as the `npy:` reader's)."""
import sys

import numpy as np

from . import _hsgd


def _as_array(a, name):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    try:
        return np.asarray(a)
    except Exception as e:  # noqa: BLE001 - any conversion failure is bad input
        raise ValueError(f"{name}: expected a NumPy array ({e})") from None


def _features(x, name):
    x = _as_array(x, name)
    if x.dtype == np.float32 and x.dtype.isnative:
        return np.ascontiguousarray(x)  # no copy when already contiguous
    if x.dtype == np.uint8:
        out = np.ascontiguousarray(x, dtype=np.float32)
        out /= np.float32(255)
        return out
    if x.dtype.kind == "f":
        return np.ascontiguousarray(x, dtype=np.float32)  # the one conversion
    if x.dtype.kind in "iu" and x.dtype.isnative:
        return np.ascontiguousarray(x)  # refused by the reader with its message
    raise ValueError(f"{name}: unsupported feature dtype {x.dtype} "
                     "(expected float32, float64 or uint8)")


def _labels(y, name):
    y = _as_array(y, name)
    if y.dtype.kind not in "iu":
        raise ValueError(f"{name}: labels of dtype {y.dtype}: expected an integer dtype")
    if not y.dtype.isnative:
        y = y.astype(y.dtype.newbyteorder("="))
    return np.ascontiguousarray(y)


def is_arrays(data):
    return isinstance(data, (tuple, list)) and len(data) == 2


def make(data, role):
    """(X, y) -> an _hsgd.Data handle; `role` is "data" or "test"."""
    if not is_arrays(data):
        raise ValueError(f"{role}: expected (X, y) arrays or a data spec string, "
                         f"got {type(data).__name__}")
    x = _features(data[0], f"{role} X")
    y = _labels(data[1], f"{role} y")
    return _hsgd.make_data(x, y, f"{role} X", f"{role} y", f"{role}=(X, y)")
