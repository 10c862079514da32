"""The GPU check kit's torch part (tools/gpu_check.sh run): zeroshard's
PyTorch engine on a CUDA device against torch itself, in one process.

1. Parity (fp32, a small GPT-2 without qkv bias, deterministic; see
   parity()): zeroshard stages 0, 2 and 3 (K = 2 real servers each)
   trained for --parity-steps steps from the same weights on the same
   batches as torch.optim.AdamW on the device, as a plain loop (the
   formula the servers follow: gating) and fused (reported). Per stage
   and reference: the largest loss difference and max|theta_zs -
   theta_torch| over max|theta_torch - theta_0| (the error as a fraction
   of the update), and where it is; PASS when it is <= 4e-4 (the CPU
   engine's bound against PyTorch), or with --exact when it is 0 (what
   the CPU gives). On CUDA also torch's loop against its own fused run:
   the rounding floor.
2. Benchmark (GPT-2 124M by default: 12 layers, 12 heads, 768 channels,
   T = 1024, tied embeddings, fp32): tokens/s of
     eager     torch, AdamW(fused=True) on the device
     zero2     zeroshard stage 2, the optimizer on K = 2 servers here
     fsdp2     torch FSDP2 (fully_shard) with CPUOffloadPolicy: the
               optimizer on this machine's CPU (torch.optim.AdamW)
   with the same model, batch and data; variants alternated round by
   round, medians of per-round tokens/s; MFU of eager and zero2 from
   6*N + 6*L*T*C flops per token (llm.c's count) over the device's dense
   bf16 peak (--peak-tflops, default by device name).

Last line: RESULT parity_max=<x> mfu_eager=<x> mfu_zero2=<x>
zero2_vs_torch_eager=<x> zero2_vs_fsdp2_offload=<x> (ratios of tokens/s:
above 1 is zeroshard faster). Exit status 1 when a parity check fails.
Runs on the CPU too (--device=cpu, a tiny model), which is how it is
tested without a GPU.

Needs PYTHONPATH=python, $ZEROSHARD_LIB and $ZEROSHARD_SERVER (the kit sets
them); a single process with a world of one (NCCL on CUDA, gloo on CPU).
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import zeroshard
from zeroshard._ports import quiet_port

PARITY_BOUND = 4e-4
# Dense bf16 tensor-core peaks (TFLOP/s, SXM parts): NVIDIA's data sheets.
PEAKS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}


# ----------------------------------------------------------------- model
def attention(q, k, v, fused=True):
    """Causal softmax(q k^T / sqrt(d)) v; (B, H, T, D) each. torch's fused
    kernel where it exists (2.x) and fused, else the plain formula (whose
    backward on a GPU is deterministic: the fused kernels add with
    atomics)."""
    if fused and hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v


class Block(nn.Module):
    """GPT-2 block: x + attn(ln1(x)), then x + mlp(ln2(x)).
    x: (B, T, C) -> (B, T, C)."""

    def __init__(self, c, heads, qkv_bias=True):
        super().__init__()
        self.heads = heads
        self.fused_attention = True
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c, bias=qkv_bias)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        y = attention(q, k, v, self.fused_attention)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)),
                                       approximate="tanh"))


class GPT2(nn.Module):
    """tokens (B, T) int64 -> logits (B, T, V); the head shares wte."""

    def __init__(self, vocab, seq, layers, c, heads, qkv_bias=True):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, heads, qkv_bias)
                                    for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        for m in self.modules():  # GPT-2's initialization
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                               targets.reshape(-1))


def make_model(shape, device, seed=1234, fused_attention=True,
               qkv_bias=True):
    torch.manual_seed(seed)
    model = GPT2(*shape, qkv_bias=qkv_bias)
    for block in model.blocks:
        block.fused_attention = fused_attention
    return model.to(device)


def batch(step, b, t, vocab, device):
    g = torch.Generator().manual_seed(1000003 * step + 17)
    tok = torch.randint(0, vocab, (b, t + 1), generator=g)
    return tok[:, :-1].to(device), tok[:, 1:].to(device)


def ds_config(stage, b, lr, bucket=5e7):
    return {"train_micro_batch_size_per_gpu": b,
            "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW",
                          "params": {"lr": lr, "betas": [0.9, 0.95],
                                     "eps": 1e-8, "weight_decay": 0.1}},
            "zero_optimization": {"stage": stage, "overlap_comm": True,
                                  "reduce_bucket_size": bucket,
                                  "allgather_bucket_size": 5e7}}


def torch_adamw(model, lr, **kw):
    """torch's AdamW as zeroshard's default group has it (docs/python.md):
    weight decay on every parameter, as DeepSpeed's config optimizer."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                             eps=1e-8, weight_decay=0.1, **kw)


def torch_step(opt):
    """A training step of a plain torch model (or FSDP's) with opt."""
    def step(model, x, y):
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------- parity
def reference_run(shape, device, b, t, lr, steps, **adamw):
    """torch's own training of the parity model: (losses, {name: theta})."""
    ref = make_model(shape, device, fused_attention=False, qkv_bias=False)
    step = torch_step(torch_adamw(ref, lr, **adamw))
    losses = [step(ref, *batch(s, b, t, shape[0], device)).item()
              for s in range(steps)]
    return losses, {n: p.detach().float().reshape(-1).cpu()
                    for n, p in ref.named_parameters()}


def parity(args, device):
    """Returns (ok, the worst error over the update against the gating
    reference). References: torch's AdamW as a plain loop ("loop": the
    formula the servers follow, gating) and, on CUDA, fused=True
    ("fused": what a torch job on a GPU runs; reported).

    The parity model has no qkv bias: the key bias's true gradient is
    zero (softmax ignores a constant added to every key), so what it gets
    is rounding noise, which Adam scales up to a full-size update. That
    noise follows every ulp of the rest of the model: on an H200, torch's
    own loop and fused AdamW runs ended 1.9e-3 of the update apart there,
    and zeroshard 1.9e-3 from either. Deterministic too: the plain
    attention formula and torch.use_deterministic_algorithms (the fused
    attention and embedding backward add with atomics on a GPU)."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return _parity(args, device)
    finally:
        torch.use_deterministic_algorithms(False)


def _parity(args, device):
    shape = (args.parity_vocab, 64, 2, 128, 4)
    b, t, lr, steps = 4, 64, 1e-3, args.parity_steps
    theta0 = {n: p.detach().float().reshape(-1).cpu()
              for n, p in make_model(shape, device,
                                     qkv_bias=False).named_parameters()}
    # (the initial values do not depend on the attention kernel)
    refs = {"loop": reference_run(shape, device, b, t, lr, steps,
                                  foreach=False)}
    if device.type == "cuda":
        refs["fused"] = reference_run(shape, device, b, t, lr, steps,
                                      fused=True)
    update = {k: max((th[n] - theta0[n]).abs().max().item() for n in th)
              for k, (_, th) in refs.items()}
    if "fused" in refs:  # torch against itself: the rounding of AdamW
        spread = max((refs["fused"][1][n] - th).abs().max().item()
                     for n, th in refs["loop"][1].items())
        print(f"parity torch loop vs fused: max|dtheta| over update "
              f"{spread / update['loop']:.3e}", flush=True)
    worst, ok = 0.0, True
    for stage in (0, 2, 3):
        model = make_model(shape, device, fused_attention=False,
                           qkv_bias=False)
        fleet = zeroshard.LocalFleet(2)  # a fleet serves one model
        engine, _, _, _ = zeroshard.initialize(
            model=model, config=ds_config(stage, b, lr),
            servers=fleet.address_string, job_id=f"parity{stage}")
        losses = []
        for s in range(steps):
            x, y = batch(s, b, t, shape[0], device)
            loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        # The servers' fp32 masters (every stage keeps them there), laid
        # out as the engine's entries say.
        engine.wait_parameters()
        masters = torch.empty(engine.numel)
        engine._client.gather(0, masters)
        engine.close()
        fleet.close()
        for k, (ref_losses, th) in refs.items():
            dloss = max(abs(x - y) for x, y in zip(losses, ref_losses))
            diffs = {e.name: (masters[e.offset:e.end] - th[e.name]).abs()
                     for e in engine.entries}
            name = max(diffs, key=lambda n: diffs[n].max().item())
            i = int(diffs[name].argmax())
            err = diffs[name][i].item() / update[k]
            zs = masters[next(e for e in engine.entries
                              if e.name == name).offset + i].item()
            line = (f"parity stage={stage} reference={k} steps={steps} "
                    f"max_loss_diff={dloss:.3e} param_err_over_update="
                    f"{err:.3e} update={update[k]:.3e} worst={name}[{i}] "
                    f"(theta0 {theta0[name][i].item():.8e}, torch "
                    f"{th[name][i].item():.8e}, zeroshard {zs:.8e})")
            if k == "loop":
                good = err == 0.0 if args.exact else err <= PARITY_BOUND
                ok = ok and good
                worst = max(worst, err)
                line += " PASS" if good else " FAIL"
            print(line, flush=True)
    return ok, worst


# ------------------------------------------------------------- benchmark
class Variant:
    def __init__(self, name, model, step):
        self.name, self.model, self.step, self.tps = name, model, step, []


def bench(args, device, fleet):
    shape = (args.vocab, args.seq_len, args.layers, args.d_model, args.heads)
    b, t, lr = args.batch, args.seq_len, 6e-4
    variants = []

    m = make_model(shape, device)
    # torch's fastest AdamW on a GPU
    opt = torch_adamw(m, lr, **({"fused": True} if device.type == "cuda"
                                else {}))

    variants.append(Variant("eager", m, torch_step(opt)))

    m = make_model(shape, device)
    engine, _, _, _ = zeroshard.initialize(
        model=m, config=ds_config(2, b, lr, args.bucket),
        servers=fleet.address_string, job_id="bench2")

    def zero2_step(model, x, y, engine=engine):
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
    variants.append(Variant("zero2", m, zero2_step))

    try:
        try:
            from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import (CPUOffloadPolicy,
                                                            fully_shard)
        m = make_model(shape, device)
        for block in m.blocks:
            fully_shard(block, offload_policy=CPUOffloadPolicy())
        fully_shard(m, offload_policy=CPUOffloadPolicy())
        # on the CPU (foreach)
        variants.append(Variant("fsdp2", m, torch_step(torch_adamw(m, lr))))
    except Exception as e:  # noqa: BLE001 - reported, the rest still runs
        print(f"bench fsdp2 unavailable: {type(e).__name__}: {e}",
              flush=True)

    n_params = sum(p.numel() for p in variants[0].model.parameters())
    flops_per_token = 6 * n_params + 6 * args.layers * t * args.d_model
    step = 0
    for v in variants:  # warm up: allocator, cuBLAS plans, servers' state
        for _ in range(args.warmup):
            x, y = batch(step, b, t, shape[0], device)
            v.step(v.model, x, y)
            step += 1
    for r in range(args.rounds):
        for v in variants:
            sync(device)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                x, y = batch(step, b, t, shape[0], device)
                v.step(v.model, x, y)
                step += 1
            sync(device)
            v.tps.append(b * t * args.steps / (time.perf_counter() - t0))
        print(f"bench round={r} " + " ".join(
            f"{v.name}={v.tps[-1]:.0f}" for v in variants), flush=True)
    med = {v.name: statistics.median(v.tps) for v in variants}
    n = args.warmup + args.rounds * args.steps
    print("bench zero2_split_ms_per_step " + " ".join(
        f"{k}={1e3 * v / n:.1f}" for k, v in engine.timings.items()))
    mfu = {}
    if device.type == "cuda":
        mem = torch.cuda.max_memory_allocated() / 2**30
        print(f"bench device_max_allocated_gib={mem:.2f}")
    engine.close()
    peak = args.peak_tflops * 1e12
    for name, tps in med.items():
        mfu[name] = flops_per_token * tps / peak if peak > 0 else math.nan
        print(f"bench variant={name} tokens_per_s={tps:.0f} "
              f"step_ms={1e3 * b * t / tps:.1f} mfu={mfu[name]:.4f}")
    print(f"bench params={n_params} batch={b} seq={t} servers={args.servers} "
          f"bucket={args.bucket:.0e} "
          f"flops_per_token={flops_per_token} peak_tflops={args.peak_tflops}")
    return med, mfu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cuda",
                                                         "cpu"])
    ap.add_argument("--parity-steps", type=int, default=5)
    ap.add_argument("--parity-vocab", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="steps per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="dense bf16 peak for MFU (default: by device name)")
    ap.add_argument("--servers", type=int, default=2,
                    help="shard servers for the benchmark's zero2 (K)")
    ap.add_argument("--bucket", type=float, default=5e7,
                    help="the benchmark's reduce_bucket_size (elements)")
    ap.add_argument("--exact", action="store_true",
                    help="parity must be bit for bit (the CPU: torch's loop "
                         "and the servers' AdamW round alike)")
    ap.add_argument("--skip-parity", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    args = ap.parse_args()
    # cuBLAS's reproducible workspace, for the deterministic parity runs;
    # set before CUDA starts.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_torch_check: --device=cuda but torch sees no CUDA "
                 "device")
    device = torch.device(args.device)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    if args.peak_tflops == 0.0:
        args.peak_tflops = next((v for k, v in PEAKS.items() if k in name),
                                0.0)
    print(f"gpu_torch_check device={name} torch={torch.__version__}",
          flush=True)
    # A world of one, as torchrun would set it: DDP-free, but FSDP2 and
    # zeroshard's engine see an initialized group (NCCL on CUDA).
    port = quiet_port()
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                       "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    if device.type == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    ok, res = True, {}
    if not args.skip_parity:
        ok, worst = parity(args, device)
        res["parity_max"] = f"{worst:.3e}"
    if not args.skip_bench:
        with zeroshard.LocalFleet(args.servers) as fleet:
            med, mfu = bench(args, device, fleet)
            res.update({f"mfu_{k}": f"{v:.4f}" for k, v in mfu.items()
                        if k in ("eager", "zero2")})
            if "zero2" in med:
                res["zero2_vs_torch_eager"] = \
                    f"{med['zero2'] / med['eager']:.3f}"
                if "fsdp2" in med:
                    res["zero2_vs_fsdp2_offload"] = \
                        f"{med['zero2'] / med['fsdp2']:.3f}"
    dist.destroy_process_group()
    print("RESULT " + " ".join(f"{k}={v}" for k, v in res.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
