"""Checks DeepSpeed monitor output against a worker's --metrics_file.

  metrics_monitor_check.py csv|tensorboard DIR METRICS_JSONL BATCH [fp32]

csv: DIR holds DeepSpeed's csv_monitor files (Train_Samples_<name>.csv,
header "step,<name>"); tensorboard: DIR holds one event file, read with
TensorBoard's event_accumulator. Either way the tags train_loss, lr and
loss_scale must have one point per step record of METRICS_JSONL at step =
record's step * BATCH, with its loss, lr and loss_scale (with fp32: no
loss_scale, and none may be written). Exits 1 naming the first mismatch.
"""

import csv
import json
import math
import os
import sys

NAMES = {"train_loss": "loss", "lr": "lr", "loss_scale": "loss_scale"}


def expected(path, batch, names):
    steps = [json.loads(line) for line in open(path) if '"event":"step"' in line]
    if not steps:
        sys.exit(f"no step records in {path}")
    return {name: [(r["step"] * batch, r[NAMES[name]]) for r in steps]
            for name in names}


def read_csv(d, names):
    if "loss_scale" not in names and os.path.exists(
            os.path.join(d, "Train_Samples_loss_scale.csv")):
        sys.exit(f"{d}: a loss_scale file in an fp32 run")
    got = {}
    for name in names:
        path = os.path.join(d, f"Train_Samples_{name}.csv")
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if rows[0] != ["step", name]:
            sys.exit(f"{path}: header {rows[0]}, want ['step', '{name}']")
        got[name] = [(int(s), float(v)) for s, v in rows[1:]]
    return got, 1e-6


def read_tensorboard(d, names):
    from tensorboard.backend.event_processing import event_accumulator
    files = [f for f in os.listdir(d) if "tfevents" in f]
    if len(files) != 1:
        sys.exit(f"{d}: want one event file, found {files}")
    acc = event_accumulator.EventAccumulator(d)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    if "loss_scale" not in names and "Train/Samples/loss_scale" in tags:
        sys.exit(f"{d}: a loss_scale tag in an fp32 run")
    got = {}
    for name in names:
        tag = f"Train/Samples/{name}"
        if tag not in tags:
            sys.exit(f"{tag} not among the scalars {tags}")
        got[name] = [(e.step, e.value) for e in acc.Scalars(tag)]
    return got, 1e-6  # float32 values


def main():
    kind, d, metrics, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    names = [n for n in NAMES if n != "loss_scale" or sys.argv[5:] != ["fp32"]]
    want = expected(metrics, batch, names)
    got, rel = read_csv(d, names) if kind == "csv" else read_tensorboard(d, names)
    for name, points in want.items():
        if [s for s, _ in got[name]] != [s for s, _ in points]:
            sys.exit(f"{name}: steps {[s for s, _ in got[name]]}, want {[s for s, _ in points]}")
        for (step, v), (_, w) in zip(got[name], points):
            # The metrics file keeps 6-9 significant digits.
            if not math.isclose(v, w, rel_tol=max(rel, 1e-5)):
                sys.exit(f"{name} at step {step}: {v}, metrics file {w}")
        print(f"  {name}: {len(points)} points, steps {points[0][0]}..{points[-1][0]}, "
              f"last {got[name][-1][1]:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
