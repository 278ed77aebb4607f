"""Models as the C++ side takes them: a zoo name, "torchscript:PATH", or a
TorchScript archive held in memory (an nn.Module is scripted, or traced when
scripting fails). torch is imported only here, and only for a module."""
import io
import sys
import warnings


def _torch():
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # noqa: F401 - only a torch object brings us here
    return torch


def is_torch_module(model):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, (torch.nn.Module, torch.jit.ScriptModule))


def _archive(scripted):
    buf = io.BytesIO()
    _torch().jit.save(scripted, buf)
    return buf.getvalue()


def resolve(model, example=None):
    """-> (model.name, archive bytes or b""). `example`: a float32 batch of
    the data (for tracing), or None."""
    if isinstance(model, str):
        return model, b""
    if not is_torch_module(model):
        raise ValueError(f"model: expected a torch.nn.Module, a torch.jit.ScriptModule, a zoo "
                         f"name or 'torchscript:PATH', got {type(model).__name__}")
    torch = _torch()
    name = getattr(model, "original_name", None) or type(model).__name__
    if isinstance(model, torch.jit.ScriptModule):
        return f"torchscript:{name}.pt", _archive(model)
    try:
        scripted = torch.jit.script(model)
    except Exception as e:  # noqa: BLE001 - any scripting failure falls back to tracing
        if example is None:
            raise ValueError(f"model: torch.jit.script failed ({str(e).splitlines()[0]}) and "
                             "there is no batch of NumPy data to trace it with") from None
        warnings.warn(
            f"hsgd: torch.jit.script({name}) failed ({str(e).splitlines()[0]}); traced it with a "
            "batch of the data instead. Tracing freezes the control flow and the Python values "
            "of that one call (branches, loops, batch-size-dependent code) into the model.",
            stacklevel=3)
        was_training = model.training
        model.train()
        with torch.no_grad():
            scripted = torch.jit.trace(model, torch.from_numpy(example))
        model.train(was_training)
    return f"torchscript:{name}.pt", _archive(scripted)
