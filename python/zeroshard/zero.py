"""DeepSpeed's deepspeed.zero names that zeroshard has, so that a script
written for DeepSpeed finds them: zeroshard.zero.GatheredParameters and
zeroshard.zero.Init."""
import warnings

from .gathered import GatheredParameters


class Init:
    """DeepSpeed's zero.Init (a context in which a model is built already
    partitioned), accepted with its arguments and doing nothing else:
    zeroshard partitions a module's parameters when initialize() takes it
    (at stage 3 each rank then keeps only what its forward needs), so
    inside it every rank still builds the whole model in its own memory,
    once. Entering it warns so, unless enabled=False."""

    def __init__(self, module=None, *args, enabled=True, **kwargs):
        del module, args, kwargs
        self.enabled = bool(enabled)

    def __enter__(self):
        if self.enabled:
            warnings.warn(
                "zeroshard.zero.Init: the model is built whole on every "
                "rank; zeroshard partitions it when initialize() takes it "
                "(DeepSpeed would partition it as it is built)",
                stacklevel=2)
        return self

    def __exit__(self, exc_type, exc, tb):
        return False


__all__ = ["GatheredParameters", "Init"]
