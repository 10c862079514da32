#!/usr/bin/python3
"""Independent reader/writer of llm.c's GPT-2 model files and token files.

Written from the format description (not from zeroshard's C++), for the
interop tests: a file written by one side must load in the other bit for
bit. Needs numpy (Debian: /usr/bin/python3 with python3-numpy).

Model file: 256 little-endian int32 header -- magic 20240326, version
(3: fp32 parameters, 5: bf16 parameters), max_seq_len, vocab_size,
num_layers, num_heads, channels, padded_vocab_size, zeros -- then the
parameters grouped by kind across layers: wte (Vp, C), wpe (maxT, C),
ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C),
attprojb (L, C), ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C).

As a dict, tensors are named like a state dict: "wte", "wpe", "h.3.qkvw",
"lnfw", with torch.nn.Linear's (out, in) shapes.

Token file: 256 int32 header -- magic 20240520, version 1, token count N --
then N little-endian uint16 tokens.

zeroshard's flat buffer ("raw" files here) holds the same tensors in
MEMORY order: wte, wpe, then for each layer its 12 tensors (ln1w ... fcprojb),
then lnfw, lnfb; fp32.

Commands (exit 0 on success, 1 on a mismatch or bad file):
  write-model OUT RAW --config maxT,V,Vp,L,NH,C --version 3|5 --seed S
      random parameters (with special values); RAW gets the flat buffer a
      reader must produce (for version 5: the bf16 values widened).
  check-model FILE RAW [--config ...] [--round-bf16]
      reads FILE, compares its flat buffer with RAW bit for bit. With
      --round-bf16, RAW holds fp32 values that FILE (version 5) stores
      rounded to bf16 (nearest, ties to even; NaN: quiet, payload kept).
  write-tokens OUT RAW --count N --vocab V --seed S
      random tokens below V; RAW gets them as raw uint16.
  check-tokens FILE RAW [--from-bytes]
      reads FILE, compares its tokens with RAW (raw uint16, or with
      --from-bytes one token per byte of RAW).
"""

import argparse
import sys

import numpy as np

MODEL_MAGIC = 20240326
TOKEN_MAGIC = 20240520
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
BLOCK_KINDS = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"]
CONFIG_KEYS = ["max_seq_len", "vocab_size", "padded_vocab_size",
               "num_layers", "num_heads", "channels"]


class FormatError(Exception):
    pass


def kind_shape(kind, cfg):
    c = cfg["channels"]
    return {
        "wte": (cfg["padded_vocab_size"], c), "wpe": (cfg["max_seq_len"], c),
        "qkvw": (3 * c, c), "qkvb": (3 * c,), "attprojw": (c, c),
        "fcw": (4 * c, c), "fcb": (4 * c,), "fcprojw": (c, 4 * c),
    }.get(kind, (c,))


def file_order(cfg):
    """(name, shape) in llm.c's file order."""
    out = [("wte", kind_shape("wte", cfg)), ("wpe", kind_shape("wpe", cfg))]
    for kind in BLOCK_KINDS:
        for layer in range(cfg["num_layers"]):
            out.append(("h.%d.%s" % (layer, kind), kind_shape(kind, cfg)))
    out += [("lnfw", kind_shape("lnfw", cfg)), ("lnfb", kind_shape("lnfb", cfg))]
    return out


def memory_order(cfg):
    """(name, shape) in zeroshard's flat-buffer order (blocks contiguous)."""
    out = [("wte", kind_shape("wte", cfg)), ("wpe", kind_shape("wpe", cfg))]
    for layer in range(cfg["num_layers"]):
        for kind in BLOCK_KINDS:
            out.append(("h.%d.%s" % (layer, kind), kind_shape(kind, cfg)))
    out += [("lnfw", kind_shape("lnfw", cfg)), ("lnfb", kind_shape("lnfb", cfg))]
    return out


def widen_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(values):
    """fp32 -> bf16 bits: nearest, ties to even; NaN -> quiet, top bits kept."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    bits = bits.astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(values)
    rounded[nan] = (bits[nan] >> 16) | 0x40
    return rounded.astype(np.uint16)


def read_header(path, data, magic, kind):
    if len(data) < HEADER_BYTES:
        raise FormatError("%s: %d bytes, shorter than the %d-byte header"
                          % (path, len(data), HEADER_BYTES))
    header = np.frombuffer(data[:HEADER_BYTES], dtype="<i4")
    if header[0] != magic:
        raise FormatError("%s: magic %d, not a %s (%d)"
                          % (path, header[0], kind, magic))
    return header


def read_model(path):
    """Returns (config dict, version, {name: float32 array})."""
    with open(path, "rb") as f:
        data = f.read()
    h = read_header(path, data, MODEL_MAGIC, "model file")
    version = int(h[1])
    if version not in (3, 5):
        raise FormatError("%s: unsupported version %d" % (path, version))
    cfg = {"max_seq_len": int(h[2]), "vocab_size": int(h[3]),
           "num_layers": int(h[4]), "num_heads": int(h[5]),
           "channels": int(h[6]), "padded_vocab_size": int(h[7])}
    if min(cfg.values()) <= 0 or cfg["channels"] % cfg["num_heads"]:
        raise FormatError("%s: bad config %s" % (path, cfg))
    dtype = np.dtype("<f4") if version == 3 else np.dtype("<u2")
    tensors = file_order(cfg)
    total = sum(int(np.prod(s)) for _, s in tensors)
    if len(data) != HEADER_BYTES + total * dtype.itemsize:
        raise FormatError("%s: %d bytes, header implies %d" % (
            path, len(data), HEADER_BYTES + total * dtype.itemsize))
    flat = np.frombuffer(data, dtype=dtype, offset=HEADER_BYTES)
    params, pos = {}, 0
    for name, shape in tensors:
        n = int(np.prod(shape))
        chunk = flat[pos:pos + n]
        values = chunk.copy() if version == 3 else widen_bf16(chunk)
        params[name] = values.reshape(shape)
        pos += n
    return cfg, version, params


def write_model(path, cfg, params, version=3):
    """params: {name: float32 array}, or for version 5 uint16 bf16 bits
    (written as they are) or float32 (rounded)."""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = [MODEL_MAGIC, version, cfg["max_seq_len"], cfg["vocab_size"],
                  cfg["num_layers"], cfg["num_heads"], cfg["channels"],
                  cfg["padded_vocab_size"]]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, shape in file_order(cfg):
            a = params[name]
            assert a.shape == shape, (name, a.shape, shape)
            if version == 3:
                assert a.dtype == np.float32
                f.write(a.tobytes())
            elif a.dtype == np.uint16:
                f.write(a.astype("<u2").tobytes())
            else:
                f.write(round_to_bf16(a).astype("<u2").tobytes())


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    h = read_header(path, data, TOKEN_MAGIC, "token file")
    if h[1] != 1:
        raise FormatError("%s: unsupported version %d" % (path, h[1]))
    n = int(h[2])
    if n <= 0 or len(data) != HEADER_BYTES + 2 * n:
        raise FormatError("%s: %d bytes, header says %d tokens"
                          % (path, len(data), n))
    return np.frombuffer(data, dtype="<u2", offset=HEADER_BYTES).copy()


def write_tokens(path, tokens):
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = [TOKEN_MAGIC, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def flatten(cfg, params):
    flat = np.concatenate([params[name].reshape(-1)
                           for name, _ in memory_order(cfg)])
    assert flat.dtype == np.float32  # no conversion: NaN payloads stay
    return flat


def parse_config(text):
    values = [int(v) for v in text.split(",")]
    return dict(zip(CONFIG_KEYS, values))


# Bit patterns worth carrying through: zeros, infinities, NaNs with
# payloads (quiet and signalling), subnormals, extremes.
SPECIAL_FP32 = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000,
                         0x7FC00000, 0xFFC12345, 0x7F800001, 0x7FA5A5A5,
                         0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x3F808000,
                         0x3F818000, 0x3F80C000], dtype=np.uint32)


def random_params(cfg, rng, version):
    params = {}
    for name, shape in memory_order(cfg):
        n = int(np.prod(shape))
        if version == 5:  # every bf16 bit pattern, NaNs included
            params[name] = rng.integers(0, 1 << 16, n).astype(np.uint16)
        else:
            a = (rng.standard_normal(n) * 0.02).astype(np.float32)
            k = min(n, len(SPECIAL_FP32))
            a.view(np.uint32)[:k] = SPECIAL_FP32[:k]
            params[name] = a
        params[name] = params[name].reshape(shape)
    return params


def compare(label, got_bits, want_bits, names=None):
    if got_bits.shape != want_bits.shape:
        print("%s: MISMATCH: %d values, expected %d"
              % (label, got_bits.size, want_bits.size))
        return 1
    bad = np.nonzero(got_bits != want_bits)[0]
    if len(bad) == 0:
        print("%s: OK, %d values identical bit for bit" % (label, got_bits.size))
        return 0
    print("%s: MISMATCH at %d of %d values" % (label, len(bad), got_bits.size))
    for i in bad[:8]:
        where = names(i) if names else ""
        print("  index %d%s: got 0x%x, expected 0x%x"
              % (i, where, got_bits[i], want_bits[i]))
    return 1


def name_of(cfg):
    bounds, pos = [], 0
    for name, shape in memory_order(cfg):
        n = int(np.prod(shape))
        bounds.append((pos, pos + n, name))
        pos += n

    def names(i):
        for lo, hi, name in bounds:
            if lo <= i < hi:
                return " (%s[%d])" % (name, i - lo)
        return ""
    return names


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write-model")
    w.add_argument("out")
    w.add_argument("raw")
    w.add_argument("--config", required=True)
    w.add_argument("--version", type=int, choices=[3, 5], default=3)
    w.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("check-model")
    c.add_argument("file")
    c.add_argument("raw")
    c.add_argument("--config")
    c.add_argument("--round-bf16", action="store_true")
    wt = sub.add_parser("write-tokens")
    wt.add_argument("out")
    wt.add_argument("raw")
    wt.add_argument("--count", type=int, required=True)
    wt.add_argument("--vocab", type=int, required=True)
    wt.add_argument("--seed", type=int, default=0)
    ct = sub.add_parser("check-tokens")
    ct.add_argument("file")
    ct.add_argument("raw")
    ct.add_argument("--from-bytes", action="store_true")
    a = p.parse_args(argv)

    try:
        if a.cmd == "write-model":
            cfg = parse_config(a.config)
            params = random_params(cfg, np.random.default_rng(a.seed),
                                   a.version)
            write_model(a.out, cfg, params, a.version)
            flat = (np.concatenate([widen_bf16(params[n].reshape(-1))
                                    for n, _ in memory_order(cfg)])
                    if a.version == 5 else flatten(cfg, params))
            flat.astype("<f4").tofile(a.raw)
            print("wrote %s (version %d, %d parameters)"
                  % (a.out, a.version, flat.size))
            return 0
        if a.cmd == "check-model":
            cfg, version, params = read_model(a.file)
            if a.config and parse_config(a.config) != cfg:
                print("%s: config %s, expected %s"
                      % (a.file, cfg, parse_config(a.config)))
                return 1
            got = flatten(cfg, params).view(np.uint32)
            want = np.fromfile(a.raw, dtype="<f4")
            if a.round_bf16:
                if version != 5:
                    print("%s: version %d, expected 5" % (a.file, version))
                    return 1
                want = widen_bf16(round_to_bf16(want))
            return compare("%s (version %d)" % (a.file, version), got,
                           want.view(np.uint32), name_of(cfg))
        if a.cmd == "write-tokens":
            rng = np.random.default_rng(a.seed)
            tokens = rng.integers(0, a.vocab, a.count).astype(np.uint16)
            write_tokens(a.out, tokens)
            tokens.astype("<u2").tofile(a.raw)
            print("wrote %s (%d tokens)" % (a.out, len(tokens)))
            return 0
        if a.cmd == "check-tokens":
            got = read_tokens(a.file)
            want = (np.fromfile(a.raw, dtype=np.uint8).astype(np.uint16)
                    if a.from_bytes else np.fromfile(a.raw, dtype="<u2"))
            return compare(a.file, got, want)
    except (FormatError, OSError) as e:
        print("error: %s" % e)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
