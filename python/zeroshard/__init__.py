"""zeroshard for PyTorch: DeepSpeed's initialize / backward / step for any
torch.nn.Module, with the optimizer state on zeroshard's shard servers.

    import zeroshard
    engine, optimizer, _, _ = zeroshard.initialize(
        model=model, config="ds_config.json", servers="10.0.0.1:7000,...")
    for batch in data:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()

Pure Python over libzeroshard.so (ctypes); the manual is docs/python.md.
The torch-dependent parts (initialize, the engine) are imported on first
use, so Client, Config and LocalFleet work without torch.
"""
from .client import Client, Member
from .config import Config
from .errors import Error
from .fleet import LocalFleet
from .trainer import Trainer

__version__ = "0.1.0"


def initialize(*args, **kwargs):
    from .engine import initialize as _initialize
    return _initialize(*args, **kwargs)


initialize.__doc__ = "See zeroshard.engine.initialize."


def GatheredParameters(*args, **kwargs):  # noqa: N802 - DeepSpeed's name
    from .gathered import GatheredParameters as _gathered
    return _gathered(*args, **kwargs)


GatheredParameters.__doc__ = "See zeroshard.gathered (also zeroshard.zero)."

__all__ = ["Client", "Config", "Error", "GatheredParameters", "LocalFleet",
           "Member", "Trainer", "initialize", "__version__"]
