"""Ranks from torchrun's environment and torch.distributed.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR
and MASTER_PORT; init_distributed() starts the default process group from
them (gloo on the CPU, NCCL when the model is on a GPU) unless the script
did; a group it started is destroyed at interpreter exit (atexit), unless
the script destroyed it first. TorchGroup is the trainer's group over that
process group.

Why at exit: a process that ends with gloo's process group alive aborts
now and then ("terminate called without an active exception"; once in
about 430 two-rank runs of a plain torch script here, no zeroshard
involved), because the group is torn down while the interpreter is
finalising. An atexit handler tears it down while the interpreter is still
whole; doing it in engine.close() instead would take the group from a
script that still uses it after the engine.
"""
import atexit
import os

import torch
import torch.distributed as dist


def env_int(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"${name} is {value!r}, not an integer") from None


_RENDEZVOUS = ("RANK", "MASTER_ADDR", "MASTER_PORT")


def init_distributed(device_type="cpu", backend=None, timeout=None):
    """(rank, world size, local rank, local world size). Starts the group
    for W > 1, and for W = 1 under torchrun (its rendezvous variables set:
    a script may then call torch.distributed as it would under DeepSpeed,
    which starts a group of one); backend: gloo on the CPU, NCCL for
    device_type "cuda", unless given."""
    world = env_int("WORLD_SIZE", 1)
    launched = all(name in os.environ for name in _RENDEZVOUS)
    if (world > 1 or launched) and not dist.is_initialized():
        for name in _RENDEZVOUS:
            if name not in os.environ:
                raise ValueError(f"WORLD_SIZE is {world} but ${name} is not "
                                 "set (start the script with torchrun)")
        backend = backend or ("nccl" if device_type == "cuda" else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(env_int("LOCAL_RANK", 0))
        kwargs = {} if timeout is None else {"timeout": timeout}
        dist.init_process_group(backend=backend, **kwargs)
        atexit.register(destroy_if_default, dist.group.WORLD)
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    local_rank = env_int("LOCAL_RANK", 0)
    local_world = env_int("LOCAL_WORLD_SIZE", 1)
    return rank, world, local_rank, local_world


def destroy_if_default(group):
    """Destroys `group` if it is still the default process group (the
    script may have destroyed it, or destroyed it and started another,
    which is then the script's). The exit handler of the groups zeroshard
    starts (here and in elastic.py)."""
    if group is not None and dist.is_initialized() and \
            dist.group.WORLD is group:
        dist.destroy_process_group()


class TorchGroup:
    """The trainer's group over a torch.distributed process group (the
    default one when None). Byte buffers travel as uint8 tensors; under NCCL
    they are staged through the GPU."""

    def __init__(self, group=None, device=None):
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        backend = dist.get_backend(group)
        self.device = device or (f"cuda:{torch.cuda.current_device()}"
                                 if backend == "nccl" else "cpu")

    def _tensor(self, buf):
        t = torch.frombuffer(buf, dtype=torch.uint8)
        return t, (t.to(self.device) if self.device != "cpu" else t)

    def broadcast(self, buf):
        host, t = self._tensor(buf)
        dist.broadcast(t, src=0, group=self.group)
        if t is not host:
            host.copy_(t.cpu())

    def all_gather(self, mine, out):
        _, src = self._tensor(mine)
        host, dst = self._tensor(out)
        parts = list(dst.chunk(self.size))
        dist.all_gather(parts, src, group=self.group)
        if dst is not host:
            host.copy_(dst.cpu())
