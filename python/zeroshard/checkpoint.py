"""engine.save_checkpoint / load_checkpoint.

The state itself lives on the shard servers: they checkpoint their ranges
of the fp32 master weights and AdamW moments, with the workers' state,
under their own --checkpoint_dir (docs/recovery.md). What this module
writes in the caller's directory is the index DeepSpeed scripts expect:
save_dir/<tag>/zeroshard.json (the step, the job, the model size and the
caller's client_state) and save_dir/latest (the newest tag).
"""
import json
import os

import torch.distributed as dist

from .errors import Error
from ._lib import CODES

INDEX = "zeroshard.json"


def _barrier(engine):
    if engine.world > 1:
        dist.barrier()


def _check_boundary(engine, what):
    if engine._micro != 0 or engine._backward_done:
        raise Error(CODES["FAILED_PRECONDITION"],
                    f"{what}: in the middle of a step (call it after "
                    "engine.step() at a gradient accumulation boundary)")


def save(engine, save_dir, tag, client_state, save_latest):
    _check_boundary(engine, "save_checkpoint")
    step = engine.global_steps
    tag = str(tag) if tag is not None else f"global_step{step}"
    if not tag or "/" in tag or tag in (".", ".."):
        raise ValueError(f"save_checkpoint: tag {tag!r} is not a plain name")
    if engine.rank == 0:
        engine._client.checkpoint(step, engine._state, tag)
        folder = os.path.join(save_dir, tag)
        os.makedirs(folder, exist_ok=True)
        index = {"step": step, "tag": tag, "job_id": engine._client.job_id,
                 "model_elements": engine.numel,
                 "client_state": client_state or {}}
        tmp = os.path.join(folder, INDEX + ".tmp")
        with open(tmp, "w") as f:
            json.dump(index, f, indent=1)
        os.replace(tmp, os.path.join(folder, INDEX))
        if save_latest:
            tmp = os.path.join(save_dir, "latest.tmp")
            with open(tmp, "w") as f:
                f.write(tag)
            os.replace(tmp, os.path.join(save_dir, "latest"))
    _barrier(engine)
    return True


def load(engine, load_dir, tag):
    _check_boundary(engine, "load_checkpoint")
    if tag is None:
        latest = os.path.join(load_dir, "latest")
        if not os.path.exists(latest):
            raise ValueError(f"load_checkpoint: no tag given and no {latest}")
        with open(latest) as f:
            tag = f.read().strip()
    path = os.path.join(load_dir, str(tag), INDEX)
    try:
        with open(path) as f:
            index = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"load_checkpoint: {path} does not exist") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"load_checkpoint: {path}: {e}") from None
    if index.get("model_elements") != engine.numel:
        raise ValueError(f"load_checkpoint: {path} is of a model of "
                         f"{index.get('model_elements')} elements, this one "
                         f"has {engine.numel}")
    epoch = engine._epoch + 1
    if engine.rank == 0:
        engine._client.restore(int(index["step"]), epoch)
    _barrier(engine)
    engine._epoch = epoch
    engine._start(resume=True)
    return os.path.join(load_dir, str(tag)), index.get("client_state", {})
