"""zeroshard.Trainer: the library's step protocol (client/step_protocol.h)
over a Client and a group of ranks.

The group is any object with `rank`, `size`, `broadcast(buf)` (rank 0's
bytes into `buf` on every rank) and `all_gather(mine, out)` (every rank's
bytes in rank order into `out`), where buffers are writable ctypes byte
arrays; `zeroshard.dist.TorchGroup` implements it over torch.distributed.
None: a single rank. Calls are collective: every rank makes the same calls
in the same order, one at a time.
"""
import ctypes

from . import _lib
from ._lib import check
from .errors import Error


class Outcome:
    """What a collective call ended in: kind "ok", "rolled_back",
    "continued" or "retry"; the push epoch; the workers' state (a dict)."""
    KINDS = {0: "ok", 1: "rolled_back", 2: "continued", 3: "retry"}

    def __init__(self, o):
        self.kind = self.KINDS.get(o.kind, str(o.kind))
        self.epoch = o.epoch
        self.world_epoch = o.world_epoch
        self.state = o.state.as_dict()

    @property
    def moved(self):
        return self.kind in ("rolled_back", "continued")

    def __repr__(self):
        return (f"Outcome({self.kind}, epoch={self.epoch}, "
                f"step={self.state['step']})")


class Decision:
    def __init__(self, d):
        self.grad_norm = d.grad_norm
        self.clip_coef = d.clip_coef
        self.grad_scale = d.grad_scale
        self.skipped = bool(d.skipped)


def _state(d):
    return _lib.fill(_lib.TrainerState, d, "trainer state")


class Trainer:
    def __init__(self, client, group=None, *, checkpoint_interval=0,
                 recovery_timeout_seconds=60.0, elastic=False, min_epoch=0,
                 member=None):
        self._lib = client._lib
        self._client = client  # kept alive with the trainer
        self._error = None
        self._group = group
        g = None
        if group is not None:
            self._bcast = _lib.BROADCAST_FN(self._on_broadcast)
            self._gather = _lib.ALL_GATHER_FN(self._on_all_gather)
            g = _lib.Group(int(group.rank), int(group.size), self._bcast,
                           self._gather, None)
        o = _lib.TrainerOptions()
        self._lib.zs_trainer_options_init(ctypes.byref(o))
        o.checkpoint_interval = int(checkpoint_interval)
        o.recovery_timeout_seconds = float(recovery_timeout_seconds)
        o.elastic = 1 if elastic else 0
        o.min_epoch = int(min_epoch)
        o.member = member.handle if member is not None else None
        h = ctypes.c_void_p()
        check(self._lib.zs_trainer_create(client.handle,
                                          ctypes.byref(g) if g else None,
                                          ctypes.byref(o), ctypes.byref(h)))
        self._h = h

    # Group callbacks: exceptions are kept and re-raised by the call.
    def _on_broadcast(self, data, nbytes, _user):
        try:
            buf = (ctypes.c_uint8 * nbytes).from_address(data)
            self._group.broadcast(buf)
            return 0
        except BaseException as e:  # noqa: BLE001 - must not cross into C
            self._error = e
            return _lib.CODES["UNAVAILABLE"]

    def _on_all_gather(self, mine, nbytes, out, _user):
        try:
            src = (ctypes.c_uint8 * nbytes).from_address(mine)
            dst = (ctypes.c_uint8 * (nbytes * self._group.size)).from_address(
                out)
            self._group.all_gather(src, dst)
            return 0
        except BaseException as e:  # noqa: BLE001
            self._error = e
            return _lib.CODES["UNAVAILABLE"]

    def _call(self, fn, *args):
        self._error = None
        code = fn(self._h, *args)
        if code != _lib.OK:
            message = _lib.last_error()
            if self._error is not None:
                raise Error(code, f"{message} (the group failed: "
                            f"{self._error!r})") from self._error
            raise Error(code, message)

    def start(self, initial=None, now=None):
        """initial: the leader's fp32 parameters (a contiguous float32 CPU
        tensor or array of the whole model), or None; now: the workers'
        state of a fresh job (dict). Returns the Outcome."""
        out = _lib.Outcome()
        addr, nbytes = None, 0
        if initial is not None:
            from .client import buffer_of
            addr, nbytes, code, _ = buffer_of(initial, "start: initial")
            if code != _lib.DTYPE_FP32:
                raise ValueError("start: initial must be float32")
        s = _state(now) if now else None
        self._call(self._lib.zs_trainer_start, addr, nbytes,
                   _lib.WRITE_INITIAL_FN(), None,
                   ctypes.byref(s) if s else None, ctypes.byref(out))
        return Outcome(out)

    @staticmethod
    def _args(a):
        return _lib.fill(_lib.StepArgs, a, "step args")

    def step(self, args, after=None):
        d, out = _lib.Decision(), _lib.Outcome()
        a = self._args(args)
        s = _state(after) if after else None
        self._call(self._lib.zs_trainer_step, ctypes.byref(a),
                   ctypes.byref(s) if s else None, ctypes.byref(d),
                   ctypes.byref(out))
        return Decision(d), Outcome(out)

    def decide(self, args):
        d, out = _lib.Decision(), _lib.Outcome()
        a = self._args(args)
        self._call(self._lib.zs_trainer_decide, ctypes.byref(a),
                   ctypes.byref(d), ctypes.byref(out))
        return Decision(d), Outcome(out)

    def commit(self, after):
        out = _lib.Outcome()
        s = _state(after)
        self._call(self._lib.zs_trainer_commit, ctypes.byref(s),
                   ctypes.byref(out))
        return Outcome(out)

    def after_fetch(self, status=0):
        out = _lib.Outcome()
        self._call(self._lib.zs_trainer_after_fetch, int(status),
                   ctypes.byref(out))
        return Outcome(out)

    def close(self):
        if getattr(self, "_h", None) is not None:
            h, self._h = self._h, None
            check(self._lib.zs_trainer_close(h))

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
