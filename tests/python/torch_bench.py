"""Benchmark: a torch model's training step through zeroshard (stage 2 and
stage 3, W = 2 processes over gloo, K = 2 real servers each) against
DistributedDataParallel + torch.optim.AdamW on the same model and data, in
the same run, variants alternated round by round, medians.

  bazel run //tests/python:torch_bench [-- --rounds=5 --steps=10]

Last line: RESULT torch_zero2_vs_ddp=<ratio> torch_zero3_vs_ddp=<ratio>
torch_zero3_offload_vs_ddp=<ratio> (step time over DDP's; below 1 is
faster; zero3: the ranks all-gather the units, zero3 offload: the units
come from the servers)."""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

import zeroshard

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    out = os.path.join(tempfile.mkdtemp(prefix="torch_bench"), "out.json")
    port = free_port()
    with zeroshard.LocalFleet(2) as f2, zeroshard.LocalFleet(2) as f3, \
            zeroshard.LocalFleet(2) as f3o:
        procs = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2",
                       LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "torch_bench_worker.py"),
                 out, f2.address_string, f3.address_string,
                 f3o.address_string, str(a.rounds),
                 str(a.steps)], env=env))
        codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"torch_bench: a rank failed: exit codes {codes}")
    with open(out) as f:
        r = json.load(f)
    med = r["median"]
    print(f"model: {r['params']} parameters, W = 2 processes (gloo, "
          f"1 thread each), K = 2 servers per zeroshard variant; "
          f"{a.rounds} rounds x {a.steps} steps, alternated")
    for name in ("ddp", "zero2", "zero3", "zero3o"):
        lo, hi = r["spread"][name]
        print(f"  {name:6s} median {1e3 * med[name]:8.2f} ms/step "
              f"(rounds {1e3 * lo:.2f} .. {1e3 * hi:.2f})")
    for name in ("zero2", "zero3", "zero3o"):
        split = ", ".join(f"{k} {1e3 * v:.2f}"
                          for k, v in r["split"][name].items())
        print(f"  {name} time split per step (ms): {split}")
    print(f"RESULT torch_zero2_vs_ddp={med['zero2'] / med['ddp']:.3f} "
          f"torch_zero3_vs_ddp={med['zero3'] / med['ddp']:.3f} "
          f"torch_zero3_offload_vs_ddp={med['zero3o'] / med['ddp']:.3f}")


if __name__ == "__main__":
    main()
