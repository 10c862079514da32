"""engine.save_checkpoint / load_checkpoint.

The state itself lives on the shard servers: they checkpoint their ranges
of the fp32 master weights and AdamW moments, with the workers' state,
under their own --checkpoint_dir (docs/recovery.md). What this module
writes in the caller's directory is the index DeepSpeed scripts expect:
save_dir/<tag>/zeroshard.json (the step, the job, the model size),
save_dir/<tag>/client_state.pt (the caller's client_state, torch.save'd as
DeepSpeed pickles it), save_dir/<tag>/buffers.pt (the module's persistent
buffers, e.g. BatchNorm's running stats: the servers hold parameters and
optimizer state only) and save_dir/latest (the newest tag). Rank 0 writes
them (its buffers); every rank reads them on load.

consolidated_state_dict / save_16bit_model: the module's whole weights at
any stage (at stage 3 each rank holds only what the next forward needs),
from the servers' fp32 masters.
"""
import collections
import io
import json
import os
import warnings

import torch
import torch.distributed as dist

from .errors import Error
from ._lib import CODES

INDEX = "zeroshard.json"
BUFFERS = "buffers.pt"
CLIENT_STATE = "client_state.pt"


def _buffers(module):
    """The module's persistent buffers by state_dict name: those of
    named_buffers() that state_dict() holds."""
    keys = set(module.state_dict(keep_vars=True).keys())
    return {name: b for name, b in module.named_buffers() if name in keys}


def _write_buffers(engine, folder):
    values = {name: b.detach().cpu().clone()
              for name, b in _buffers(engine.module).items()}
    tmp = os.path.join(folder, BUFFERS + ".tmp")
    torch.save(values, tmp)
    os.replace(tmp, os.path.join(folder, BUFFERS))


def _read_buffers(engine, folder):
    """The saved buffers to copy in, as [(buffer, value)], checked against
    the module (nothing changed yet); [] with a warning when the
    checkpoint has none (written before buffers were saved)."""
    mine = _buffers(engine.module)
    path = os.path.join(folder, BUFFERS)
    if not os.path.exists(path):
        if mine:
            warnings.warn(f"load_checkpoint: {folder} has no {BUFFERS} (a "
                          "checkpoint written before zeroshard saved "
                          "buffers): the module's buffers ("
                          f"{', '.join(sorted(mine)[:4])}"
                          f"{', ...' if len(mine) > 4 else ''}) were not "
                          "restored", stacklevel=3)
        return []
    try:
        saved = torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any unreadable file
        raise ValueError(f"load_checkpoint: {path}: {e}") from None
    if not isinstance(saved, dict):
        raise ValueError(f"load_checkpoint: {path} holds no buffer dict")
    out = []
    for name, b in mine.items():
        if name not in saved:
            continue
        value = saved[name]
        if not torch.is_tensor(value) or value.shape != b.shape:
            raise ValueError(
                f"load_checkpoint: {path}: buffer {name} is "
                f"{tuple(value.shape) if torch.is_tensor(value) else value!r}"
                f", the module's is {tuple(b.shape)}")
        out.append((b, value))
    missing = sorted(set(mine) - set(saved))
    extra = sorted(set(saved) - set(mine))
    if missing or extra:
        warnings.warn(f"load_checkpoint: {path}: buffers not in the "
                      f"checkpoint (left as they are): {missing}; in the "
                      f"checkpoint but not the module: {extra}",
                      stacklevel=3)
    return out


def _barrier(engine):
    if engine.world > 1:
        dist.barrier()


def _check_boundary(engine, what):
    if engine._micro != 0 or engine._backward_done:
        raise Error(CODES["FAILED_PRECONDITION"],
                    f"{what}: in the middle of a step (call it after "
                    "engine.step() at a gradient accumulation boundary)")


def _pickled(client_state):
    """client_state as torch.save writes it (DeepSpeed pickles it too:
    tensors, tuples, any keys); ValueError naming the problem before
    anything is written."""
    buf = io.BytesIO()
    try:
        torch.save(client_state or {}, buf)
    except Exception as e:  # noqa: BLE001 - whatever pickling raises
        raise ValueError("save_checkpoint: client_state cannot be saved "
                         f"with torch.save ({type(e).__name__}: {e})") from e
    return buf.getvalue()


def save(engine, save_dir, tag, client_state, save_latest):
    _check_boundary(engine, "save_checkpoint")
    step = engine.global_steps
    tag = str(tag) if tag is not None else f"global_step{step}"
    if not tag or "/" in tag or tag in (".", ".."):
        raise ValueError(f"save_checkpoint: tag {tag!r} is not a plain name")
    # Every rank checks its own client_state before any collective, so a
    # bad one fails each rank alike rather than leaving the others waiting.
    pickled = _pickled(client_state)
    if engine.rank == 0:
        engine._client.checkpoint(step, engine._state, tag)
        folder = os.path.join(save_dir, tag)
        os.makedirs(folder, exist_ok=True)
        # The buffers and the client state before the index that names
        # them: a checkpoint whose index exists is whole.
        _write_buffers(engine, folder)
        tmp = os.path.join(folder, CLIENT_STATE + ".tmp")
        with open(tmp, "wb") as f:
            f.write(pickled)
        os.replace(tmp, os.path.join(folder, CLIENT_STATE))
        index = {"step": step, "tag": tag, "job_id": engine._client.job_id,
                 "model_elements": engine.numel, "buffers": BUFFERS,
                 "client_state_file": CLIENT_STATE,
                 # A rate the script set in param_groups (no schedule), as
                 # DeepSpeed's optimizer state_dict keeps the groups' lr.
                 "lr_override": engine._lr_override}
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
            # DeepSpeed's answer, which "resume if there is a checkpoint"
            # scripts rely on: a warning and (None, None), nothing changed.
            warnings.warn(f"zeroshard: load_checkpoint: no {latest}: no "
                          "checkpoint loaded (give a tag to load one "
                          "without it)", stacklevel=3)
            return None, None
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
    buffers = _read_buffers(engine, os.path.join(load_dir, str(tag)))
    if "client_state_file" in index:
        with open(os.path.join(load_dir, str(tag),
                               index["client_state_file"]), "rb") as f:
            client_state = torch.load(f)
    else:  # written before client states were pickled
        client_state = index.get("client_state", {})
    epoch = engine._epoch + 1
    if engine.rank == 0:
        engine._client.restore(int(index["step"]), epoch)
    _barrier(engine)
    engine._epoch = epoch
    engine._lr_override = index.get("lr_override")
    engine._start(resume=True)
    engine._refresh_view()
    with torch.no_grad():
        for b, value in buffers:
            b.copy_(value)
    return os.path.join(load_dir, str(tag)), client_state


def consolidated_state_dict(engine, exclude_frozen=False):
    """The module's state_dict with every trainable parameter whole: the
    servers' fp32 masters of the last committed step, cast to the
    parameter's dtype (a tied parameter under each of its names, as
    state_dict has it); frozen parameters and buffers as this rank holds
    them (frozen ones left out with exclude_frozen). CPU tensors. Not
    collective: each caller gathers from the servers."""
    flat = torch.empty(engine.numel, dtype=torch.float32)
    engine._client.gather(0, flat)
    by_id = {id(e.param): e for e in engine.entries}
    params = {id(p) for p in engine.module.parameters()}
    out = collections.OrderedDict()
    for name, value in engine.module.state_dict(keep_vars=True).items():
        e = by_id.get(id(value))
        if e is not None:
            out[name] = flat[e.offset:e.end].view(e.shape).to(
                value.dtype).clone()
        elif not (exclude_frozen and id(value) in params):
            out[name] = value.detach().cpu().clone()
    return out


def save_16bit_model(engine, save_dir, save_filename, exclude_frozen):
    """Rank 0 writes consolidated_state_dict with torch.save to
    save_dir/save_filename (a temporary file, then a rename); every rank
    returns once it is there. Collective."""
    _check_boundary(engine, "save_16bit_model")
    if engine.rank == 0:
        state = consolidated_state_dict(engine, exclude_frozen)
        os.makedirs(save_dir, exist_ok=True)
        path = os.path.join(save_dir, save_filename)
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
    _barrier(engine)
    return True
