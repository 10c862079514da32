"""A DeepSpeed JSON config, resolved by the library (the C++ engine's
parser, worker/config/ds_config.h): the same keys, defaults, rules and
messages. Nothing here re-parses the JSON."""
import ctypes
import json
import os
import re

from . import _lib
from ._lib import check, enc
from .errors import Error


# The inputs, as zeroshard train's flags name them (auto_inputs.h).
INPUTS = ("learning_rate", "per_device_train_batch_size",
          "gradient_accumulation_steps", "adam_beta1", "adam_beta2",
          "adam_epsilon", "weight_decay", "warmup_steps", "max_grad_norm",
          "precision", "steps", "hidden_size")


def _python_words(message):
    """The library's message about an input, with the input named as a
    Python caller gives it (a keyword, an auto_values key) instead of as
    zeroshard train's flag."""
    out = re.sub(r"unknown flag --(\w+)", r"unknown input \1", message)
    out = re.sub(r"\bflag --(\w+)", r"input \1", out)
    out = re.sub(r"--(%s)\b" % "|".join(INPUTS), r"\1", out)
    if out == message:
        return message
    return (out + " (inputs are Config keywords, or initialize's "
            "auto_values keys: {'steps': 1000, ...})")


class Config:
    """The resolved config for `world_size` workers. Fields are the
    C API's zs_train_config (`cfg.stage`, `cfg.reduce_bucket_size`, ...);
    `warnings` lists what the parser warned about.

    `inputs` fill the config's "auto" values (as Hugging Face's Trainer
    writes them), named as zeroshard train's flags: learning_rate,
    per_device_train_batch_size, gradient_accumulation_steps, adam_beta1,
    adam_beta2, adam_epsilon, weight_decay, warmup_steps, max_grad_norm,
    precision ("fp32", "fp16", "bf16"), steps and hidden_size, e.g.
    Config("hf_zero3.json", 2, learning_rate=3e-4, precision="bf16",
    per_device_train_batch_size=4, steps=1000, hidden_size=768). The
    library resolves them (worker/config/auto_inputs.h); `resolved` lists
    every key as {"key", "value", "source"}, `table` is the same as text,
    `server_flags` the zeroshard-server flags an NVMe offload needs."""

    def __init__(self, config, world_size, **inputs):
        lib = _lib.load()
        self._c = _lib.TrainConfig()
        json_text, path = None, None
        if isinstance(config, (str, os.PathLike)) and not str(
                config).lstrip("\ufeff \t\r\n").startswith("{"):
            path = enc(os.fspath(config))
        elif isinstance(config, dict):
            try:
                json_text = enc(json.dumps(config, allow_nan=False))
            except (TypeError, ValueError) as e:
                raise ValueError(f"config: not JSON-serialisable: {e}") \
                    from None
        elif isinstance(config, str):
            json_text = enc(config)
        else:
            raise ValueError("config: expected a dict, a JSON string or "
                             f"a file path, got {type(config).__name__}")
        args = []
        for name, value in inputs.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(
                    value, (int, float, str)) or " " in str(value):
                raise ValueError(f"config input {name}: expected a number "
                                 f"or a word, got {value!r}")
            args.append(f"--{name}={value!r}" if isinstance(value, float)
                        else f"--{name}={value}")
        cap = 1 << 16
        while True:
            report = ctypes.create_string_buffer(cap)
            length = _lib.size_t()
            code = lib.zs_config_resolve(json_text, path, int(world_size),
                                         enc(" ".join(args)),
                                         ctypes.byref(self._c), report, cap,
                                         ctypes.byref(length))
            if length.value < cap:
                break
            cap = length.value + 1  # the report was cut: again, whole
        try:
            check(code)
        except Error as e:
            raise Error(e.code, _python_words(e.message)) from None
        out = json.loads(report.value.decode("utf-8", "replace"))
        self.warnings = list(out.get("warnings", []))
        self.resolved = list(out.get("resolved", []))
        self.table = out.get("table", "")
        self.server_flags = list(out.get("server_flags", []))
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
