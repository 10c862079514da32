#!/usr/bin/python3
"""A small decoder-only transformer (torch.nn) trained through zeroshard's
DeepSpeed-style API on byte-level tokens: the demo's data.

    # one process, 2 shard servers started by the script:
    python3 examples/torch/train_transformer.py --local-fleet 2
    # 2 ranks on this machine; rank 0 starts the servers:
    torchrun --nproc_per_node=2 examples/torch/train_transformer.py --local-fleet 2
    # against servers that are already running:
    torchrun --nproc_per_node=2 examples/torch/train_transformer.py \
        --servers 127.0.0.1:7000,127.0.0.1:7001

Needs PYTHONPATH=python, $ZEROSHARD_LIB (libzeroshard.so) and, for
--local-fleet, $ZEROSHARD_SERVER (zeroshard-server); docs/python.md.

Data (--data): an llm.c token file (what `zeroshard-tokenize` writes, such
as the demo's /tmp/zeroshard-demo/licenses.bin), or any other file read as
bytes, one token per byte (vocabulary 256) - the same tokens the
byte-level tokenizer makes. Default: the demo's token file if it exists,
else /usr/share/common-licenses/* (the text the demo tokenizes).

The loop follows the servers' step (engine.global_steps), and each batch is
a function of (step, micro-batch, rank), so a roll back after a server
failure replays exactly the data of the steps it undid.
"""
import argparse
import glob
import json
import math
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import zeroshard

TOKEN_MAGIC = 20240520  # llm.c token file: 256 x int32 header, uint16s
DEMO_TOKENS = "/tmp/zeroshard-demo/licenses.bin"
DEMO_TEXT = "/usr/share/common-licenses"

# DeepSpeed's config, as a dict (--config FILE replaces it).
DEFAULT_CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                             "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupLR",
                  "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-3,
                             "warmup_num_steps": 10,
                             "warmup_type": "linear"}},
    "zero_optimization": {"stage": 2, "overlap_comm": True,
                          "reduce_bucket_size": 500000},
}


# ----------------------------------------------------------------- model
class Block(nn.Module):
    """Pre-norm block: causal self-attention, then a GELU MLP. Every
    parameter is used by calling the module that owns it, which is what
    ZeRO stage 3 needs (a module's parameters exist only in its forward)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = F.softmax(att.masked_fill(mask[:t, :t], float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab=256, seq_len=64, d=128, heads=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied: one parameter, two users
        self.register_buffer("mask", torch.ones(seq_len, seq_len).triu(1)
                             .bool(), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
                if name.endswith(("proj.weight", "fc_proj.weight")):
                    p.data.mul_(1 / math.sqrt(2 * layers))

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.head(self.ln_f(x)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]),
                               targets.reshape(-1))


# ------------------------------------------------------------------ data
def load_tokens(path):
    """(tokens as an int64 tensor, what was read)."""
    if path is None:
        path = DEMO_TOKENS if os.path.exists(DEMO_TOKENS) else DEMO_TEXT
    if os.path.isdir(path):
        files = sorted(f for f in glob.glob(os.path.join(path, "*"))
                       if os.path.isfile(f))
        data = b"".join(open(f, "rb").read() for f in files)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).long(), \
            f"{path}/* as bytes"
    with open(path, "rb") as f:
        data = f.read()
    if len(data) >= 1024 and struct.unpack_from("<i", data)[0] == TOKEN_MAGIC:
        n = struct.unpack_from("<i", data, 8)[0]
        if len(data) != 1024 + 2 * n:
            raise SystemExit(f"{path}: a token file of {n} tokens must be "
                             f"{1024 + 2 * n} bytes, not {len(data)}")
        body = bytearray(data[1024:])
        tokens = torch.frombuffer(body, dtype=torch.int16).long() & 0xFFFF
        return tokens, f"{path} (llm.c token file)"
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long(), \
        f"{path} as bytes"


def batch_for(tokens, step, micro, rank, batch, seq_len, seed):
    """Micro-batch `micro` of step `step` on rank `rank`: a pure function of
    them, so that a replayed step sees the same data."""
    g = torch.Generator().manual_seed(
        seed * 1_000_003 + (step * 1009 + micro) * 4099 + rank)
    starts = torch.randint(0, tokens.numel() - seq_len - 1, (batch,),
                           generator=g)
    rows = torch.stack([tokens[s:s + seq_len + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


# ------------------------------------------------------------------ main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--servers", help="host:port,... of running "
                       "zeroshard-server processes")
    where.add_argument("--local-fleet", type=int, metavar="K",
                       help="start K servers on loopback (rank 0 of this "
                       "machine starts them; all ranks must be on it)")
    p.add_argument("--config", help="DeepSpeed JSON config (default: an "
                   "inline stage-2 config)")
    p.add_argument("--stage", type=int, choices=[0, 1, 2, 3],
                   help="override zero_optimization.stage")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--data", help="token file or text (default: the demo's "
                   f"{DEMO_TOKENS}, else {DEMO_TEXT}/*)")
    p.add_argument("--checkpoint-dir", help="with --local-fleet: the "
                   "servers' --checkpoint_dir is DIR/servers; the script "
                   "saves tag 'final' in DIR at the end")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--log-every", type=int, default=1)
    return p.parse_args(argv)


def start_servers(args, rank, world):
    """The server addresses every rank passes to initialize, and the fleet
    this rank started (or None)."""
    if args.servers:
        return args.servers, None
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local_world != world:
        raise SystemExit("--local-fleet starts servers on loopback: every "
                         "rank must be on one machine; use --servers")
    fleet, addresses = None, [None]
    if rank == 0:
        ckpt = None
        if args.checkpoint_dir:
            ckpt = os.path.join(args.checkpoint_dir, "servers")
        fleet = zeroshard.LocalFleet(args.local_fleet, checkpoint_dir=ckpt)
        addresses = [fleet.address_string]
    if world > 1:
        dist.broadcast_object_list(addresses, src=0)
    return addresses[0], fleet


def main(argv=None):
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_cuda = torch.cuda.is_available()
    device = torch.device("cpu")
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    if world > 1:  # zeroshard.initialize would do it; the fleet needs it now
        dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    servers, fleet = start_servers(args, rank, world)

    if args.config:
        with open(args.config) as f:
            config = json.load(f)
    else:
        config = json.loads(json.dumps(DEFAULT_CONFIG))
    if args.stage is not None:
        config.setdefault("zero_optimization", {})["stage"] = args.stage

    tokens, source = load_tokens(args.data)
    vocab = max(256, int(tokens.max()) + 1)
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = TinyGPT(vocab, args.seq_len, args.d_model, args.heads,
                    args.layers).to(device)
    # zeroshard.initialize casts the module to the config's 16-bit type as
    # DeepSpeed does (fp16 only on a GPU); the servers keep fp32 masters.
    n_params = sum(p.numel() for p in model.parameters())  # stage 3 frees them

    # The config's "auto" values (the schedule's total_num_steps) are
    # filled from --steps, as zeroshard train fills them from its flags.
    engine, _, _, _ = zeroshard.initialize(model=model, config=config,
                                           servers=servers,
                                           auto_values={"steps": args.steps})
    try:
        micro = engine.train_micro_batch_size_per_gpu()
        gas = engine.gradient_accumulation_steps()
        if rank == 0:
            print(f"data: {tokens.numel()} tokens from {source}")
            print(f"model: {n_params} parameters, L={args.layers} "
                  f"C={args.d_model} T={args.seq_len} V={vocab}; "
                  f"{engine.config.describe()}; servers {servers}",
                  flush=True)
        first = last = None
        start, start_step = time.time(), engine.global_steps
        while engine.global_steps < args.steps:
            step = engine.global_steps
            lr = engine.get_lr()[0]  # this update's rate
            total = 0.0
            for m in range(gas):
                x, y = batch_for(tokens, step, m, rank, micro, args.seq_len,
                                 args.seed)
                loss = engine(x.to(device), y.to(device))
                engine.backward(loss)
                engine.step()
                total += float(loss) / gas
            if world > 1:  # the mean over ranks, for the log line only
                t = torch.tensor([total], device=device)
                dist.all_reduce(t)
                total = float(t) / world
            first = total if first is None else first
            last = total
            if rank == 0 and (step % args.log_every == 0 or
                              engine.global_steps >= args.steps):
                note = "" if engine.global_steps == step + 1 else \
                    f"  (now at step {engine.global_steps})"
                print(f"step {step + 1:4d}/{args.steps}  loss {total:.4f}  "
                      f"lr {lr:.2e}{note}", flush=True)
        if args.checkpoint_dir:
            engine.save_checkpoint(args.checkpoint_dir, tag="final")
        seconds = time.time() - start
        if rank == 0:
            done = engine.global_steps - start_step
            rate = done * engine.train_batch_size() * args.seq_len / \
                max(seconds, 1e-9)
            print(f"done: {engine.global_steps} steps, loss {first:.4f} -> "
                  f"{last:.4f}, {seconds:.1f} s, {rate:.0f} tokens/s "
                  f"(batch {engine.train_batch_size()} x {args.seq_len})",
                  flush=True)
    finally:
        engine.close()
        if world > 1:
            dist.barrier()  # every rank is done with the servers
            # Before the interpreter finalises: a gloo group still alive
            # then can abort the process.
            dist.destroy_process_group()
        if fleet is not None:
            fleet.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
