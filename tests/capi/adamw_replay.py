"""Replays a train_check run with torch.optim.AdamW and compares bit for bit.

Usage: /usr/bin/python3 adamw_replay.py DIR

DIR (written by train_check.c) holds meta.txt (the flat layout, tensors,
param groups, slices of the ranks, max_norm, where the norm came from),
steps.txt (per step: step, lr, the decision's norm, clip coefficient and
skip, as the program saw them; a step redone after a roll back appears
again and the last line counts), g<t>.bin (the fp32 gradient of step t) and
p<t>.bin (the fp32 parameters gathered when the servers were at step t).

The reference is independent of zeroshard: starting from p0.bin it makes
every step the way a PyTorch loop would — the global norm of the gradient
(fp64 sums of squares per rank slice, added in rank order: the formula the
C API documents), torch 1.13's clip_grad_norm_ arithmetic on it, a skip
when a gradient element is NaN/Inf, then torch.optim.AdamW (one param
group per zeroshard group, lr times lr_scale, foreach=False) — and checks
after every step that the servers' parameters are the same bits, and that
the program's decision (norm, clip, skip) is the reference's.
Prints a summary and exits 0, or names the first difference and exits 1.
"""

import array
import math
import os
import sys


def load(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def main():
    d = sys.argv[1]
    import torch

    meta = {"slice": [], "tensor": [], "group": []}
    with open(os.path.join(d, "meta.txt")) as f:
        for line in f:
            k, *v = line.split()
            if k in meta:
                meta[k].append(v)
            else:
                meta[k] = v[0]
    n, steps = int(meta["n"]), int(meta["steps"])
    max_norm = float.fromhex(meta["max_norm"])
    slices = [(int(o), int(c)) for o, c in meta["slice"]]
    groups = [[float.fromhex(x) for x in g[1:]] for g in meta["group"]]
    records = {}
    with open(os.path.join(d, "steps.txt")) as f:
        for line in f:
            t, lr, norm, clip, skipped = line.split()
            records[int(t)] = (float.fromhex(lr), float.fromhex(norm),
                               float.fromhex(clip), int(skipped))

    p0 = torch.tensor(load(os.path.join(d, "p0.bin")), dtype=torch.float32)
    tensors = []  # (offset, count, group, parameter)
    for name, off, cnt, grp in meta["tensor"]:
        off, cnt, grp = int(off), int(cnt), int(grp)
        tensors.append((off, cnt, grp,
                        torch.nn.Parameter(p0[off:off + cnt].clone())))
    param_groups = []
    for i, (beta1, beta2, eps, wd, lr_scale) in enumerate(groups):
        param_groups.append({
            "params": [t[3] for t in tensors if t[2] == i],
            "betas": (beta1, beta2), "eps": eps,
            "weight_decay": wd, "lr": 0.0})
    opt = torch.optim.AdamW(param_groups, amsgrad=False, foreach=False)

    applied = skipped_steps = clipped = 0
    for t in range(steps):
        lr, norm_seen, clip_seen, skipped_seen = records[t]
        g = load(os.path.join(d, "g%d.bin" % t))
        skip = any(not math.isfinite(x) for x in g)
        if skip != bool(skipped_seen):
            print("step %d: skip is %d, the reference says %d"
                  % (t, skipped_seen, skip))
            return 1
        if skip:
            skipped_steps += 1
        else:
            partials = []
            for off, cnt in slices:
                s = 0.0
                for x in g[off:off + cnt]:
                    s += x * x  # exact in fp64 (float32 products)
                partials.append(s)
            total = 0.0
            for s in partials:
                total += s
            norm = math.sqrt(total)
            # zeroshard's own norm: exact when the ranks summed it; the
            # servers add their ranges in another order (fp64 rounding).
            exact = meta["norm"] == "workers"
            if (norm_seen != norm if exact else
                    abs(norm_seen - norm) > 1e-12 * norm):
                print("step %d: norm %r, the reference's %r"
                      % (t, norm_seen, norm))
                return 1
            # torch 1.13 clip_grad_norm_: the norm as a float32 tensor.
            total_norm = torch.tensor(norm, dtype=torch.float32)
            coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
            if coef.item() != clip_seen:
                print("step %d: clip %r, the reference's %r"
                      % (t, clip_seen, coef.item()))
                return 1
            clipped += coef.item() < 1.0
            gt = torch.tensor(g, dtype=torch.float32)
            for off, cnt, grp, param in tensors:
                param.grad = gt[off:off + cnt].clone().mul_(coef)
            for i, group in enumerate(opt.param_groups):
                group["lr"] = lr * groups[i][4]
            opt.step()
            applied += 1
        want = torch.tensor(load(os.path.join(d, "p%d.bin" % (t + 1))),
                            dtype=torch.float32)
        mine = torch.cat([param.detach() for _, _, _, param in tensors])
        if not torch.equal(mine.view(torch.int32), want.view(torch.int32)):
            i = int((mine.view(torch.int32) != want.view(torch.int32))
                    .nonzero()[0])
            print("step %d: parameter %d is %r on the servers, %r in torch "
                  "(%d differ)" % (t, i, want[i].item(), mine[i].item(),
                                   int((mine != want).sum())))
            return 1
    print("torch %s AdamW replay: %d steps (%d applied, %d skipped, %d "
          "clipped), parameters equal bit for bit after every step"
          % (torch.__version__, steps, applied, skipped_steps, clipped))
    if clipped == 0 or clipped == applied:
        print("the run must have clipped and unclipped steps (max_norm %g)"
              % max_norm)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
