"""A DeepSpeed JSON config, resolved by the library (the C++ engine's
parser, worker/config/ds_config.h): the same keys, defaults, rules and
messages. Nothing here re-parses the JSON."""
import ctypes
import json
import os

from . import _lib
from ._lib import check, enc
from .errors import Error


class Config:
    """The resolved config for `world_size` workers. Fields are the
    C API's zs_train_config (`cfg.stage`, `cfg.reduce_bucket_size`, ...);
    `warnings` lists what the parser warned about."""

    def __init__(self, config, world_size):
        lib = _lib.load()
        self._c = _lib.TrainConfig()
        cap = 1 << 16
        warn = ctypes.create_string_buffer(cap)
        length = _lib.size_t()
        if isinstance(config, (str, os.PathLike)) and not str(
                config).lstrip().startswith("{"):
            code = lib.zs_config_parse_file(enc(os.fspath(config)),
                                            int(world_size),
                                            ctypes.byref(self._c), warn, cap,
                                            ctypes.byref(length))
        else:
            if isinstance(config, dict):
                try:
                    text = json.dumps(config, allow_nan=False)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"config: not JSON-serialisable: {e}") \
                        from None
            elif isinstance(config, str):
                text = config
            else:
                raise ValueError("config: expected a dict, a JSON string or "
                                 f"a file path, got {type(config).__name__}")
            code = lib.zs_config_parse(enc(text), int(world_size),
                                       ctypes.byref(self._c), warn, cap,
                                       ctypes.byref(length))
        check(code)
        text = warn.value.decode("utf-8", "replace")
        self.warnings = [line for line in text.split("\n") if line]
        self._lib = lib

    def __getattr__(self, name):
        c = self.__dict__.get("_c")
        if c is None or not hasattr(c, name):
            raise AttributeError(name)
        value = getattr(c, name)
        return value.decode() if isinstance(value, bytes) else value

    @property
    def struct(self):
        return self._c

    @property
    def server_list(self):
        return [s for s in self.servers.split(",") if s]

    @property
    def precision(self):
        return {_lib.PRECISION_FP32: "fp32", _lib.PRECISION_FP16: "fp16",
                _lib.PRECISION_BF16: "bf16"}[self._c.precision]

    def describe(self):
        buf = ctypes.create_string_buffer(1024)
        self._lib.zs_config_describe(ctypes.byref(self._c), buf, 1024)
        return buf.value.decode()

    @property
    def base_lr(self):
        """optimizer.params.lr (the `lr` field; `lr()` is the schedule)."""
        return self._c.lr

    def lr(self, updates):
        """The learning rate of update number `updates` (0-based)."""
        out = ctypes.c_double()
        check(self._lib.zs_config_lr(ctypes.byref(self._c), int(updates),
                                     ctypes.byref(out)))
        return out.value

    def initial_scaler_state(self, state):
        """state (a dict of trainer-state fields) with the loss scaler's
        initial fields filled in."""
        s = _lib.fill(_lib.TrainerState, state, "trainer state")
        check(self._lib.zs_loss_scaler_init(ctypes.byref(self._c),
                                            ctypes.byref(s)))
        return s.as_dict()

    def update_scaler(self, state, overflow):
        """state after DeepSpeed's loss-scaler update for one step."""
        s = _lib.fill(_lib.TrainerState, state, "trainer state")
        check(self._lib.zs_loss_scaler_update(ctypes.byref(self._c),
                                              ctypes.byref(s),
                                              1 if overflow else 0))
        return s.as_dict()


__all__ = ["Config", "Error"]
