"""Benchmark: a torch model's training step through zeroshard (stage 2 and
stage 3, W = 2 processes over gloo, K = 2 real servers each) against
DistributedDataParallel + torch.optim.AdamW on the same model and data, in
the same run, variants alternated round by round, medians.

  bazel run //tests/python:torch_bench [-- --rounds=15 --steps=4]
  bazel run //tests/python:torch_bench -- --baseline=/path/to/python
  bazel run //tests/python:torch_bench -- --only=ddp,zero2

(Besides the step times it prints each variant's CPU per step: rank 0's
process while the variant ran, and its two servers' CPU over the whole
run divided by its steps. --only: just those variants, no RESULT line.)

(--baseline: also runs stage 2 and stage 3 through the `zeroshard`
package in that directory, e.g. another checkout's python/, as variants
zero2_base and zero3_base alternated with the others, and prints the step
time ratios against them: a before/after in one run.)

Last line: RESULT torch_zero2_vs_ddp=<ratio> torch_zero3_vs_ddp=<ratio>
torch_zero3_offload_vs_ddp=<ratio> (step time over DDP's; below 1 is
faster; zero3: the ranks all-gather the units, zero3 offload: the units
come from the servers)."""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import zeroshard
from zeroshard._ports import quiet_port

HERE = os.path.dirname(os.path.abspath(__file__))


def _cpu_seconds(pid):
    """User + system CPU seconds a live process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--only", default="",
                    help="comma-separated variants to run (ddp, zero2, "
                    "zero3, zero3o, zero2_base, zero3_base); all by default")
    ap.add_argument("--baseline", default="",
                    help="a directory holding another zeroshard package")
    a = ap.parse_args()
    base = ""
    if a.baseline:
        src = os.path.join(os.path.abspath(a.baseline), "zeroshard")
        if not os.path.isfile(os.path.join(src, "__init__.py")):
            sys.exit(f"torch_bench: --baseline: no package at {src}")
        # Under another name, so that both import in one process (the
        # package imports itself relatively).
        base = tempfile.mkdtemp(prefix="torch_bench_base")
        shutil.copytree(src, os.path.join(base, "zeroshard_base"),
                        ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    out = os.path.join(tempfile.mkdtemp(prefix="torch_bench"), "out.json")
    port = quiet_port()
    with contextlib.ExitStack() as stack:
        fleets = [stack.enter_context(zeroshard.LocalFleet(2))
                  for _ in range(5 if base else 3)]
        procs = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2",
                       LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       OMP_NUM_THREADS="1", TORCH_BENCH_ONLY=a.only)
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "torch_bench_worker.py"),
                 out, ";".join(f.address_string for f in fleets),
                 str(a.rounds), str(a.steps), base], env=env))
        codes = [p.wait() for p in procs]
        names = ["zero2", "zero3", "zero3o", "zero2_base", "zero3_base"]
        server_cpu = {n: sum(_cpu_seconds(f.pid(i))
                             for i in range(f.num_servers))
                      for n, f in zip(names, fleets)}
    if any(codes):
        sys.exit(f"torch_bench: a rank failed: exit codes {codes}")
    with open(out) as f:
        r = json.load(f)
    med = r["median"]
    need = {"ddp", "zero2", "zero3", "zero3o"}
    if not need <= set(med):  # --only: no RESULT line
        need = set()
    print(f"model: {r['params']} parameters, W = 2 processes (gloo, "
          f"1 thread each), K = 2 servers per zeroshard variant; "
          f"{a.rounds} rounds x {a.steps} steps, alternated")
    for name in med:
        lo, hi = r["spread"][name]
        print(f"  {name:6s} median {1e3 * med[name]:8.2f} ms/step "
              f"(rounds {1e3 * lo:.2f} .. {1e3 * hi:.2f})")
    for name in med:
        servers = ""
        if name in server_cpu:
            per_step = server_cpu[name] / r["steps"][name]
            servers = (f", its 2 servers {1e3 * per_step:.2f} (the whole "
                       "run over its steps)")
        print(f"  {name} CPU per step (ms): rank 0 "
              f"{1e3 * r['rank_cpu'][name]:.2f}{servers}")
    for name in (n for n in r["split"] if n in med):
        split = ", ".join(f"{k} {1e3 * v:.2f}"
                          for k, v in r["split"][name].items())
        print(f"  {name} time split per step (ms): {split}")
    if base and {"zero2_base", "zero3_base"} <= set(med):
        print(f"  against the baseline package ({a.baseline}): stage 2 "
              f"{med['zero2'] / med['zero2_base']:.3f}, stage 3 "
              f"{med['zero3'] / med['zero3_base']:.3f} of its step time; "
              f"the baseline vs DDP: stage 2 "
              f"{med['zero2_base'] / med['ddp']:.3f}, stage 3 "
              f"{med['zero3_base'] / med['ddp']:.3f}")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cores")
    if not need:
        return
    print(f"RESULT torch_zero2_vs_ddp={med['zero2'] / med['ddp']:.3f} "
          f"torch_zero3_vs_ddp={med['zero3'] / med['ddp']:.3f} "
          f"torch_zero3_offload_vs_ddp={med['zero3o'] / med['ddp']:.3f}")


if __name__ == "__main__":
    main()
