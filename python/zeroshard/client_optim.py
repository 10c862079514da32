"""DeepSpeed's client optimizer and scheduler: a torch.optim.AdamW (or Adam
without weight decay) and a torch lr scheduler passed to initialize().

The shard servers run AdamW; a torch optimizer object cannot run there,
but the one zeroshard runs anyway can be read off it. adopt() turns its
param_groups into the config's optimizer section and initialize()'s
groups (each group's lr, betas, eps and weight decay), as Hugging Face's
Trainer passes one when the DeepSpeed config has no optimizer section.

A scheduler object bound to that optimizer keeps driving it: before each
step the engine steps the scheduler to the number of updates the servers
applied (so a skipped fp16 step does not move it, as in DeepSpeed) and
reads the rate from the optimizer's groups (ClientSchedule). Torch
schedulers scale every group alike; a group whose rate moves apart from
the first's is an error (the servers keep the groups' ratios). When the
updates go back (a server restarted from a checkpoint, load_checkpoint),
the scheduler is reset to its state at initialize() and stepped forward
again, which gives torch's schedulers the same rates.

Without a scheduler object (and without a config scheduler section, whose
schedule then drives the rates, as DeepSpeed's does) the groups' rates are
read the same way before each step, so a script that sets them (`g["lr"] = ...`) changes the next
update's rate, as with torch. Betas, eps and weight decay stay as they
were at initialize(): the servers hold them; a change is an error, and a
scheduler that would cycle the betas (OneCycleLR, CyclicLR with
cycle_momentum) or needs a metric (ReduceLROnPlateau) is refused.

The torch optimizer never steps: its groups only carry the rates.
"""
import copy
import json
import math
import os
import re
import warnings

import torch

from ._lib import CODES
from .errors import Error


def config_dict(config, errors=None):
    """The config as a dict (a copy), or None when it is not JSON this can
    read (Config then reports why; `errors`, a list, gets the reason)."""
    if isinstance(config, dict):
        return copy.deepcopy(config)
    if isinstance(config, os.PathLike):
        config = os.fspath(config)
    if not isinstance(config, str):
        return None
    try:
        if config.lstrip("\ufeff \t\r\n").startswith("{"):
            return loads(config)
        with open(config, encoding="utf-8") as f:
            return loads(f.read())
    except (OSError, ValueError) as e:
        if errors is not None:
            errors.append(str(e))
        return None


def loads(text):
    """JSON as the library's config parser reads it (worker/config/
    json_parse.h): also with comments ("#", "//", "/* */"), trailing commas
    and a byte-order mark, as DeepSpeed's hjson.load takes config files.
    ValueError (json's) otherwise."""
    out, i, n = [], 0, len(text)
    if text.startswith("\ufeff"):
        i = 1
    pending = None  # a comma not yet known not to be trailing
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if pending is not None:
                out.append(pending)
                pending = None
            out.append(text[i:j + 1])
            i = j + 1
        elif c == "#" or text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ValueError("a /* comment without its */")
            i = j + 2
        elif c == ",":
            if pending is not None:
                out.append(pending)
            pending = c
            i += 1
        elif c in " \t\r\n":
            out.append(c)
            i += 1
        else:
            if pending is not None and c not in "}]":
                out.append(pending)
            pending = None
            out.append(c)
            i += 1
    if pending is not None:
        out.append(pending)
    return json.loads("".join(out))


def _check_groups(optimizer):
    name = type(optimizer).__name__
    if isinstance(optimizer, torch.optim.AdamW):
        pass
    elif isinstance(optimizer, torch.optim.Adam):
        if any(g.get("weight_decay", 0) for g in optimizer.param_groups):
            raise ValueError(
                "initialize: torch.optim.Adam with weight_decay is L2 "
                "regularization; zeroshard's servers run AdamW (decoupled "
                "decay): pass torch.optim.AdamW, or Adam with "
                "weight_decay=0")
    else:
        raise ValueError(
            "initialize: zeroshard's servers run AdamW: pass a "
            "torch.optim.AdamW (its groups' hyperparameters are used) or "
            "give the config an optimizer section, not an optimizer object "
            f"of type {name}")
    for i, g in enumerate(optimizer.param_groups):
        if not g["eps"] > 0:
            raise ValueError(f"initialize: the optimizer's group {i} has eps "
                             f"{g['eps']}; the servers' AdamW needs eps > 0 "
                             "(with 0 a parameter whose gradients were all 0 "
                             "updates by 0/0)")
        for key in ("amsgrad", "maximize"):
            if g.get(key, False):
                raise ValueError(f"initialize: the optimizer's group {i} has "
                                 f"{key}=True, which the servers' AdamW does "
                                 "not do")
    if any(optimizer.state.get(p) for g in optimizer.param_groups
           for p in g["params"]):
        raise ValueError(
            "initialize: the optimizer has taken steps: its moments cannot "
            "move to the servers (pass a fresh one, or load a zeroshard "
            "checkpoint)")


def adopt(optimizer, lr_scheduler, config):
    """(config, groups, schedule): the config with an optimizer section
    taken from `optimizer`, initialize()'s torch-style groups (None without
    an optimizer) and a ClientSchedule (None without a scheduler).
    ValueError naming the problem otherwise; nothing is changed."""
    if optimizer is None:
        if lr_scheduler is not None:
            raise ValueError(
                "initialize: an lr_scheduler object drives the torch "
                "optimizer it was made for: pass that optimizer too "
                "(optimizer=), or give the schedule in the config's "
                "scheduler section")
        return config, None, None
    why = []
    cfg = config_dict(config, why)
    if cfg is None:
        raise ValueError("initialize: with an optimizer object the config "
                         "must be a dict, JSON text or a JSON file this can "
                         "read, to take the optimizer's section ("
                         f"{why[0] if why else type(config).__name__})")
    if "optimizer" in cfg:
        raise ValueError("initialize: give the optimizer either in the "
                         "config's optimizer section or as an object, not "
                         "both")
    _check_groups(optimizer)
    groups = optimizer.param_groups
    base = groups[0]["lr"] or max((g["lr"] for g in groups), default=0.0)
    first = groups[0]
    cfg["optimizer"] = {"type": "AdamW", "params": {
        "lr": float(base), "betas": [float(b) for b in first["betas"]],
        "eps": float(first["eps"]),
        "weight_decay": float(first["weight_decay"])}}
    out = [{"params": list(g["params"]), "lr": float(g["lr"]),
            "betas": tuple(float(b) for b in g["betas"]),
            "eps": float(g["eps"]),
            "weight_decay": float(g["weight_decay"])} for g in groups]
    schedule = None
    if lr_scheduler is not None:
        if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
            lr_scheduler = lr_scheduler(optimizer)  # DeepSpeed's callable
        if getattr(lr_scheduler, "optimizer", None) is not optimizer:
            raise ValueError("initialize: the lr_scheduler drives another "
                             "optimizer than the one passed")
        if "scheduler" in cfg:
            raise ValueError("initialize: give the schedule either in the "
                             "config's scheduler section or as an "
                             "lr_scheduler object, not both")
        _check_scheduler(lr_scheduler)
    elif "scheduler" in cfg:
        return cfg, out, None  # the config's schedule drives the rates
    return cfg, out, ClientSchedule(optimizer, lr_scheduler)


def _check_scheduler(scheduler):
    name = type(scheduler).__name__
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ValueError(
            "initialize: lr_scheduler ReduceLROnPlateau steps on a metric; "
            "zeroshard steps the scheduler with the servers' updates "
            "(replayed after a rollback), so it needs one that depends on "
            "the step count only")
    if getattr(scheduler, "cycle_momentum", False):
        raise ValueError(
            f"initialize: lr_scheduler {name} cycles the optimizer's betas "
            "(cycle_momentum=True); the servers keep each group's betas "
            "fixed: make it with cycle_momentum=False")


_TORCH_ORDER_WARNING = re.escape("Detected call of `lr_scheduler.step()` "
                                 "before")


class ClientSchedule:
    """The torch optimizer's rates, its scheduler (if any) stepped to the
    servers' applied updates."""

    def __init__(self, optimizer, scheduler):
        self.optimizer, self.scheduler = optimizer, scheduler
        self._start = (copy.deepcopy(scheduler.state_dict())
                       if scheduler is not None else None,
                       [g["lr"] for g in optimizer.param_groups])
        self._fixed = [_fixed(g) for g in optimizer.param_groups]
        self._at = 0  # scheduler steps taken since the start

    def _seek(self, updates):
        if self.scheduler is None:
            return
        if updates < self._at:
            state, lrs = self._start
            self.scheduler.load_state_dict(copy.deepcopy(state))
            for g, lr in zip(self.optimizer.param_groups, lrs):
                g["lr"] = lr
            self._at = 0
        with warnings.catch_warnings():
            # Torch warns of a scheduler stepped before its optimizer: this
            # one's optimizer never steps (the servers do).
            warnings.filterwarnings("ignore", message=_TORCH_ORDER_WARNING)
            while self._at < updates:
                self.scheduler.step()
                self._at += 1

    def lrs(self, updates):
        """The groups' rates for the update after `updates` applied ones."""
        self._seek(int(updates))
        groups = self.optimizer.param_groups
        for i, (g, fixed) in enumerate(zip(groups, self._fixed)):
            if _fixed(g) != fixed:
                raise Error(CODES["FAILED_PRECONDITION"],
                            f"optimizer: group {i}'s betas, eps or "
                            f"weight_decay changed ({fixed} at initialize, "
                            f"now {_fixed(g)}); the servers hold them fixed: "
                            "only the groups' lr may change")
        return [float(g["lr"]) for g in groups]

    def base_lr(self, updates, scales):
        """The step's rate for group scale 1; Error when a group's rate is
        not its scale times the first's."""
        return common_rate(self.lrs(updates), scales)


def common_rate(lrs, scales):
    """The rate for group scale 1 that gives each group its lr; Error when
    the groups' rates are not in their scales' ratios."""
    base = next((lr / s for lr, s in zip(lrs, scales) if s > 0), 0.0)
    for i, (lr, s) in enumerate(zip(lrs, scales)):
        if not math.isclose(lr, base * s, rel_tol=1e-6, abs_tol=1e-30):
            raise Error(CODES["FAILED_PRECONDITION"],
                        f"optimizer: group {i}'s lr {lr:g} is not {s:g} "
                        "times the first group's, as it was at initialize; "
                        "the servers keep the groups' ratios fixed: scale "
                        "every group's lr alike")
    return base


def _fixed(group):
    """What the servers hold of a group: betas, eps, weight decay."""
    return (tuple(float(b) for b in group["betas"]), float(group["eps"]),
            float(group["weight_decay"]))
