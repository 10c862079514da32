"""DeepSpeed's tensorboard and csv_monitor files from the Python engine
(rank 0), in the same formats as the C++ worker's
(worker/train/monitor_writers.h, docs/monitoring.md): a TensorBoard event
file (TFRecord framing with masked CRC-32C, hand-encoded Event protos; no
TensorFlow) and DeepSpeed's CSV layout, with the tags
Train/Samples/train_loss, Train/Samples/lr and (fp16)
Train/Samples/loss_scale at step = global samples.

The sections were already checked by the library's config parser (Config);
this module only reads their values from the same JSON. Files are flushed
after every step; a monitor whose write fails (OSError) is closed with one
warning naming it, and training goes on. Not thread-safe: the training
thread calls write()."""
import csv
import os
import socket
import struct
import time
import warnings

_CRC_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def masked_crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(number, payload):  # a length-delimited field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _record(event):
    length = struct.pack("<Q", len(event))
    return (length + struct.pack("<I", masked_crc32c(length)) + event +
            struct.pack("<I", masked_crc32c(event)))


def _event(wall_time, step=None, tag=None, value=None, version=None):
    e = _varint(1 << 3 | 1) + struct.pack("<d", wall_time)
    if version is not None:
        return e + _field(3, version.encode())
    value_msg = _field(1, tag.encode()) + _varint(2 << 3 | 5) + \
        struct.pack("<f", value)
    return e + _varint(2 << 3) + _varint(step) + _field(5, _field(1, value_msg))


def _sections(config):
    if isinstance(config, dict):
        return config
    from .client_optim import loads  # comments, as the library reads them
    if isinstance(config, str) and \
            config.lstrip("\ufeff \t\r\n").startswith("{"):
        return loads(config)
    with open(os.fspath(config), encoding="utf-8") as f:
        return loads(f.read())


def _dir(section):
    return os.path.join(section.get("output_path") or "",
                        section.get("job_name") or "DeepSpeedJobName")


class Monitors:
    """The enabled file monitors of one run; open() returns None when no
    monitor is enabled."""

    @classmethod
    def open(cls, config, fp16):
        sections = _sections(config)
        tb = sections.get("tensorboard") or {}
        cv = sections.get("csv_monitor") or {}
        if not tb.get("enabled") and not cv.get("enabled"):
            return None
        return cls(_dir(tb) if tb.get("enabled") else None,
                   _dir(cv) if cv.get("enabled") else None, fp16)

    def __init__(self, tb_dir, csv_dir, fp16):
        self.fp16 = fp16
        self.tb = None
        self.csv_dir = csv_dir
        self.csv_files = {}
        if tb_dir is not None:
            os.makedirs(tb_dir, exist_ok=True)
            now = time.time()
            path = os.path.join(tb_dir, f"events.out.tfevents.{int(now)}."
                                f"{socket.gethostname()}.{os.getpid()}")
            self.tb = open(path, "ab")
            self.tb.write(_record(_event(now, version="brain.Event:2")))
            self.tb.flush()
        if csv_dir is not None:
            os.makedirs(csv_dir, exist_ok=True)

    def write(self, samples, loss, lr, loss_scale):
        events = [("Train/Samples/train_loss", loss)]
        if self.fp16:
            events.append(("Train/Samples/loss_scale", loss_scale))
        events.append(("Train/Samples/lr", lr))
        try:
            self._write_tensorboard(samples, events)
        except OSError as e:
            warnings.warn(f"tensorboard: {e}; closed", stacklevel=2)
            self.tb = None
        try:
            self._write_csv(samples, events)
        except OSError as e:
            warnings.warn(f"csv_monitor: {e}; closed", stacklevel=2)
            self.csv_dir = None

    def _write_tensorboard(self, samples, events):
        if self.tb is not None:
            now = time.time()
            self.tb.write(b"".join(_record(_event(now, samples, tag, value))
                                   for tag, value in events))
            self.tb.flush()

    def _write_csv(self, samples, events):
        if self.csv_dir is not None:
            for tag, value in events:
                name = tag.replace("/", "_").replace(" ", "_")
                f = self.csv_files.get(name)
                if f is None:
                    f = open(os.path.join(self.csv_dir, name + ".csv"), "a",
                             newline="")
                    self.csv_files[name] = f
                    csv.writer(f).writerow(["step", tag.split("/")[-1]])
                csv.writer(f).writerow([samples, value])
                f.flush()

    def close(self):
        for f in [self.tb] + list(self.csv_files.values()):
            if f is not None:
                f.close()
        self.tb, self.csv_files, self.csv_dir = None, {}, None
