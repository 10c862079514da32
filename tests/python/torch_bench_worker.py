"""One rank of torch_bench.py (torchrun's environment): the same model
trained by DDP + torch.optim.AdamW, by zeroshard at stage 2 and at stage 3,
variants alternated round by round; rank 0 writes the per-step times and
the engines' time split to OUT as JSON.

  torch_bench_worker.py OUT SERVERS ROUNDS STEPS [BASE]

SERVERS: the fleets' addresses joined by ";" (stage 2, stage 3, stage 3
with offload_param to the servers, then with BASE stage 2 and stage 3
through the package zeroshard_base in the directory BASE).
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import zeroshard

WIDTH, BLOCKS, BATCH = 320, 8, 64


def model():
    torch.manual_seed(0)
    layers = []
    for _ in range(BLOCKS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.LayerNorm(WIDTH),
                   torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10))


def data(step, rank):
    g = torch.Generator().manual_seed(7919 * step + rank)
    return (torch.randn(BATCH, WIDTH, generator=g),
            torch.randint(0, 10, (BATCH,), generator=g))


def config(stage, offload=False):
    extra = {"offload_param": {"device": "server"}} if offload else {}
    return {"train_micro_batch_size_per_gpu": BATCH,
            "optimizer": {"type": "AdamW",
                          "params": {"lr": 1e-3, "weight_decay": 0.01}},
            "zero_optimization": {"stage": stage, "overlap_comm": True,
                                  "reduce_bucket_size": 200000, **extra}}


def main():
    out, servers = sys.argv[1], sys.argv[2].split(";")
    rounds, steps = int(sys.argv[3]), int(sys.argv[4])
    base = sys.argv[5] if len(sys.argv) > 5 else ""
    servers2, servers3, servers3o = servers[:3]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = model()
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    e2, _, _, _ = zeroshard.initialize(model=model(), config=config(2),
                                       servers=servers2, job_id="bench2")
    e3, _, _, _ = zeroshard.initialize(model=model(), config=config(3),
                                       servers=servers3, job_id="bench3")
    e3o, _, _, _ = zeroshard.initialize(model=model(),
                                        config=config(3, offload=True),
                                        servers=servers3o, job_id="bench3o")
    engines = {"zero2": e2, "zero3": e3, "zero3o": e3o}
    if base:
        sys.path.insert(0, base)
        import zeroshard_base
        for name, stage, sv in (("zero2_base", 2, servers[3]),
                                ("zero3_base", 3, servers[4])):
            engines[name], _, _, _ = zeroshard_base.initialize(
                model=model(), config=config(stage), servers=sv,
                job_id=name)
    loss_fn = torch.nn.functional.cross_entropy

    def ddp_step(step):
        x, y = data(step, rank)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()

    def engine_step(engine):
        def run(step):
            x, y = data(step, rank)
            engine.backward(loss_fn(engine(x), y))
            engine.step()
        return run

    variants = {"ddp": ddp_step}
    variants.update((k, engine_step(e)) for k, e in engines.items())
    only = [v for v in os.environ.get("TORCH_BENCH_ONLY", "").split(",")
            if v]
    if only:
        variants = {k: v for k, v in variants.items() if k in only}
    times = {name: [] for name in variants}
    cpu = dict.fromkeys(variants, 0.0)
    step = 0
    for name, run in variants.items():  # warm-up
        for _ in range(3):
            run(step)
            step += 1
    for e in engines.values():
        e.timings = dict.fromkeys(e.timings, 0.0)
    for _ in range(rounds):
        for name, run in variants.items():
            dist.barrier()
            start, cpu0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                run(step)
                step += 1
            cpu[name] += time.process_time() - cpu0
            dist.barrier()
            times[name].append((time.perf_counter() - start) / steps)
    if rank == 0:
        n = rounds * steps
        result = {
            "params": sum(p.numel() for p in net.parameters()),
            "median": {k: statistics.median(v) for k, v in times.items()},
            "spread": {k: [min(v), max(v)] for k, v in times.items()},
            "rank_cpu": {k: v / n for k, v in cpu.items()},
            "steps": {k: n + 3 for k in times},
            "split": {name: {k: v / n for k, v in e.timings.items()}
                      for name, e in engines.items()}}
        with open(out, "w") as f:
            json.dump(result, f)
    for e in engines.values():
        e.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
