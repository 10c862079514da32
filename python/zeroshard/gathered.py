"""DeepSpeed's zero.GatheredParameters for a zeroshard engine: whole
parameters for a block of code, and a rank's edits of them written to the
servers' master weights.

    with zeroshard.GatheredParameters(model.embed.weight, modifier_rank=0):
        if engine.global_rank == 0:
            with torch.no_grad():
                model.embed.weight[0].zero_()

Entering (between steps): at stage 3 the units that hold the parameters
are gathered (and released again at the exit); at stages 0-2 every rank
already holds them whole (the engine waits for a fetch still behind the
last step). With modifier_rank=r, the exit is collective (every rank of
the job enters the block): rank r writes the elements it changed into
the servers' fp32 master weights (under fp16/bf16 an element it did not
change keeps its fp32 master, not the 16-bit copy's value), then every
rank fetches the parameters again, so all hold rank r's values. The AdamW
moments and the step stay as they were (as in DeepSpeed). Parameters of a
module no engine trains (before initialize()) are left alone, as DeepSpeed
leaves parameters it has not partitioned.

A block that raises writes nothing, and the module gets the servers'
values back. Errors (zeroshard.Error FAILED_PRECONDITION, nothing
written): an exit
with modifier_rank while a step's gradients are pending (after a
backward() whose step() has not run), in an elastic job, or with
parameters of two engines.
"""
import weakref

import torch

from . import _lib
from .errors import Error

_FAILED_PRECONDITION = _lib.CODES["FAILED_PRECONDITION"]

# Every engine initialize() made that is still open (engine.py adds them).
ENGINES = weakref.WeakSet()


def _as_list(params):
    if params is None:
        return []
    if isinstance(params, torch.Tensor):
        return [params]
    return list(params)


def _owner(params):
    """The engine training `params` and their entries, or (None, [])."""
    found, entries = None, []
    for engine in list(ENGINES):
        if engine._closed:
            continue
        by_id = {id(e.param): e for e in engine.entries}
        mine = [by_id[id(p)] for p in params if id(p) in by_id]
        if not mine:
            continue
        if found is not None:
            raise Error(_FAILED_PRECONDITION, "GatheredParameters: the "
                        "parameters belong to two engines; gather each "
                        "engine's in a block of its own")
        found, entries = engine, mine
    # One entry per parameter (a tied weight passed twice counts once).
    unique = list({id(e): e for e in entries}.values())
    return found, unique


class GatheredParameters:
    """DeepSpeed's signature: params (a tensor, an iterable of them, or
    None), modifier_rank (None: read only), fwd_module (accepted; stage 3
    here gathers a module's parameters for its forward by itself), enabled
    (False: the block runs as it is)."""

    def __init__(self, params, modifier_rank=None, fwd_module=None,
                 enabled=True):
        del fwd_module
        self._params = _as_list(params) if enabled else []
        if modifier_rank is not None and (
                isinstance(modifier_rank, bool) or
                not isinstance(modifier_rank, int) or modifier_rank < 0):
            raise ValueError("GatheredParameters: modifier_rank must be "
                             f"None or a rank, got {modifier_rank!r}")
        self._modifier = modifier_rank
        self._engine, self._entries = None, []
        self._units, self._before = [], {}

    def __enter__(self):
        engine, entries = _owner(self._params)
        if engine is None:
            return self
        engine._check_open()
        if self._modifier is not None:
            if self._modifier >= engine.world:
                raise ValueError(
                    f"GatheredParameters: modifier_rank {self._modifier} is "
                    f"not a rank of this job (world size {engine.world})")
            if engine._elastic is not None:
                raise Error(_FAILED_PRECONDITION, "GatheredParameters: "
                            "modifier_rank is not supported with elastic "
                            "workers (the group may change inside the "
                            "block)")
        engine.wait_parameters()
        self._engine, self._entries = engine, entries
        if engine.stage == 3:
            params = engine._params
            wanted = sorted({u for e in entries
                             for u in params.unit_of.get(id(e.param), [])})
            self._units = [params.units[u] for u in wanted
                           if not params.units[u].live]
            for unit in self._units:
                params._materialise(unit)
        if self._modifier == engine.rank and engine.precision != "fp32":
            self._before = {id(e): e.param.detach().clone()
                            for e in entries}
        return self

    def __exit__(self, exc_type, exc, tb):
        engine = self._engine
        if engine is None:
            return False
        try:
            if self._modifier is not None and exc_type is None:
                try:
                    self._write_back(engine)
                except BaseException:
                    self._restore(engine)
                    raise
            elif self._modifier is not None:
                self._restore(engine)
        finally:
            if engine.stage == 3 and not engine._closed:
                for unit in self._units:
                    engine._params._release(unit)
            self._engine, self._units, self._before = None, [], {}
        return False

    @staticmethod
    def _restore(engine):
        """Nothing was written: the module gets the servers' values back
        (an edit half made stays out of the next forward)."""
        if not engine._closed:
            engine._params.fetch()

    def _write_back(self, engine):
        if engine._micro != 0 or engine._backward_done:
            raise Error(_FAILED_PRECONDITION, "GatheredParameters: "
                        "modifier_rank between steps only: a backward()'s "
                        "gradients are pending (call step() first)")
        # Every rank's fetch of the last step is in before the servers'
        # values change (each waited for it entering the block), and the
        # write is done before any rank fetches again.
        self._agree(engine, 0)
        failed = None
        if engine.rank == self._modifier:
            try:
                for e in self._entries:
                    engine._client.write_parameters(e.offset, self._master(
                        engine, e))
            except Exception as e:  # every rank hears of it, then raises
                failed = e
        if self._agree(engine, int(failed is not None)):
            if failed is not None:
                raise failed
            raise Error(_FAILED_PRECONDITION, "GatheredParameters: rank "
                        f"{self._modifier}'s write to the servers failed "
                        "(its error is in its output)")
        if engine.stage == 3:
            for unit in self._units:
                engine._params._release(unit)
            self._units = []
        engine._params.fetch()

    @staticmethod
    def _agree(engine, failed):
        """A barrier of the job's ranks that also tells whether any of
        them failed (the largest `failed`)."""
        if engine.world == 1:
            return failed
        group = engine._group
        flag = torch.tensor([failed], dtype=torch.int32, device=group.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX,
                                     group=group.group)
        return int(flag.item())

    def _master(self, engine, e):
        """The fp32 values to write for entry `e`: the parameter's own
        (fp32); under fp16/bf16 the servers' masters with the elements
        this rank changed replaced."""
        now = e.param.detach().reshape(-1).cpu()
        if engine.precision == "fp32":
            return now.float().contiguous()
        before = self._before[id(e)].reshape(-1).cpu()
        changed = (now != before) & ~(now.isnan() & before.isnan())
        master = torch.empty(e.numel, dtype=torch.float32)
        engine._client.gather(e.offset, master)
        master[changed] = now[changed].float()
        return master
