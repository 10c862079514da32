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


def init_distributed(dist_backend=None, timeout=None, dist_init_required=None,
                     **unused):
    """DeepSpeed's deepspeed.init_distributed for a script torchrun (or
    `zeroshard run`) started: the default process group from torchrun's
    environment, as initialize() would start it, unless there is one
    (dist_init_required=False: nothing). dist_backend: "gloo" or "nccl";
    None: NCCL where torch sees a GPU, else gloo (as DeepSpeed picks its
    accelerator's). timeout: the group's (a datetime.timedelta). Its other
    arguments (auto_mpi_discovery, distributed_port, verbose, init_method,
    config, rank, world_size) are for DeepSpeed's own launchers: a value
    other than their default is a ValueError."""
    defaults = {"auto_mpi_discovery": True, "distributed_port": 29500,
                "verbose": True, "init_method": None, "config": None,
                "rank": -1, "world_size": -1}
    for key, value in unused.items():
        if key not in defaults:
            raise TypeError(f"init_distributed: unexpected argument {key!r}")
        if value != defaults[key] and key != "verbose":
            raise ValueError(f"init_distributed: {key}={value!r} is not "
                             "supported: start the script with torchrun "
                             "(or zeroshard run), whose environment gives "
                             "the ranks")
    if dist_init_required is False:
        return
    import torch
    from . import dist
    if dist_backend is None:
        dist_backend = "nccl" if torch.cuda.is_available() else "gloo"
    if dist_backend not in ("gloo", "nccl"):
        raise ValueError(f"init_distributed: dist_backend must be 'gloo' or "
                         f"'nccl', got {dist_backend!r}")
    dist.init_distributed("cuda" if dist_backend == "nccl" else "cpu",
                          backend=dist_backend, timeout=timeout)


def add_config_arguments(parser):
    """DeepSpeed's deepspeed.add_config_arguments: adds --deepspeed (a flag
    for the script's own use), --deepspeed_config (the JSON config that
    initialize(args=...) reads) and DeepSpeed's deprecated --deepscale and
    --deepscale_config to an argparse parser; returns it."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="enable DeepSpeed (for the script's own use)")
    group.add_argument("--deepspeed_config", default=None, type=str,
                       help="DeepSpeed JSON config file")
    group.add_argument("--deepscale", default=False, action="store_true",
                       help="deprecated: --deepspeed")
    group.add_argument("--deepscale_config", default=None, type=str,
                       help="deprecated: --deepspeed_config")
    return parser


def GatheredParameters(*args, **kwargs):  # noqa: N802 - DeepSpeed's name
    from .gathered import GatheredParameters as _gathered
    return _gathered(*args, **kwargs)


GatheredParameters.__doc__ = "See zeroshard.gathered (also zeroshard.zero)."

__all__ = ["Client", "Config", "Error", "GatheredParameters", "LocalFleet",
           "Member", "Trainer", "add_config_arguments", "init_distributed",
           "initialize", "__version__"]
