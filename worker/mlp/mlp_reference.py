#!/usr/bin/env python3
"""The MLP of worker/mlp/mlp.h in PyTorch, trained with torch.optim.AdamW:
the independent reference of //worker/mlp:mlp_reference_test.

Usage: mlp_reference.py DIR

DIR/config.txt holds "key value" lines: inputs, hidden (comma-separated, may
be empty), classes, steps, rows (samples per step), lr, beta1, beta2, eps,
weight_decay, max_norm (0: no clipping). DIR/params.bin: the initial
parameters, float32, laid out l0.weight (out, in), l0.bias, l1.weight, ...
DIR/features.bin: steps·rows·inputs float32; DIR/labels.bin: steps·rows
int32. Each step's loss is the mean cross-entropy over its rows (what the
engine's mean over W·gas micro-batch means is).

Writes DIR/grads0.bin (the gradients of step 0, before clipping) and
DIR/final.bin (the parameters after `steps` steps), both float32 in the
same layout, and prints one line per step: "step S loss L norm N".
"""
import sys

import numpy as np
import torch


def main(d):
    cfg = {}
    for line in open(d + "/config.txt"):
        k, _, v = line.strip().partition(" ")
        cfg[k] = v
    inputs, classes = int(cfg["inputs"]), int(cfg["classes"])
    hidden = [int(h) for h in cfg["hidden"].split(",") if h]
    steps, rows = int(cfg["steps"]), int(cfg["rows"])
    dims = []
    last = inputs
    for h in hidden + [classes]:
        dims.append((last, h))
        last = h
    torch.set_num_threads(1)
    flat = np.fromfile(d + "/params.bin", dtype=np.float32)
    layers, at = [], 0
    for (i, o) in dims:
        lin = torch.nn.Linear(i, o)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(flat[at:at + o * i].reshape(o, i)))
            at += o * i
            lin.bias.copy_(torch.from_numpy(flat[at:at + o]))
            at += o
        layers.append(lin)
    assert at == flat.size, (at, flat.size)

    def forward(x):
        for k, lin in enumerate(layers):
            x = lin(x)
            if k + 1 < len(layers):
                x = torch.tanh(x)
        return x

    weights = [l.weight for l in layers]
    biases = [l.bias for l in layers]
    opt = torch.optim.AdamW(
        [{"params": weights, "weight_decay": float(cfg["weight_decay"])},
         {"params": biases, "weight_decay": 0.0}],
        lr=float(cfg["lr"]), betas=(float(cfg["beta1"]), float(cfg["beta2"])),
        eps=float(cfg["eps"]))
    feats = np.fromfile(d + "/features.bin", dtype=np.float32).reshape(
        steps, rows, inputs)
    labels = np.fromfile(d + "/labels.bin", dtype=np.int32).reshape(steps, rows)
    max_norm = float(cfg["max_norm"])
    params = [p for l in layers for p in (l.weight, l.bias)]
    for s in range(steps):
        opt.zero_grad()
        logits = forward(torch.from_numpy(feats[s]))
        loss = torch.nn.functional.cross_entropy(
            logits, torch.from_numpy(labels[s].astype(np.int64)))
        loss.backward()
        if s == 0:
            torch.cat([p.grad.reshape(-1) for p in params]).detach().numpy() \
                .astype(np.float32).tofile(d + "/grads0.bin")
        norm = torch.norm(torch.stack([torch.norm(p.grad) for p in params]))
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
        print("step %d loss %.7f norm %.6f" % (s, loss.item(), norm.item()))
    torch.cat([p.reshape(-1) for p in params]).detach().numpy() \
        .astype(np.float32).tofile(d + "/final.bin")


if __name__ == "__main__":
    main(sys.argv[1])
