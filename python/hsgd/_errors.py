"""The exceptions of hsgd.train (bad input and config raise ValueError)."""


class HsgdError(Exception):
    """A run that ended early for a reason of its own; `run` is its partial Run."""

    def __init__(self, message, run=None):
        super().__init__(message)
        self.run = run


class Diverged(HsgdError):
    """The run diverged (non-finite parameters or loss, a loss blow-up, too many
    non-finite pushes): exit code 3 in the CLI. `run` holds the metrics so far."""


class TooFewWorkers(HsgdError):
    """Fewer than train.min_workers workers were live: exit code 3 in the CLI."""
