"""PyTorch reference of a ZeRO engine run (reference_test.cc): the same
training on one process with torch.optim.AdamW, in fp32 or in emulated fp16
or bf16 mixed precision (worker/engine/precision.h).

Usage: /usr/bin/python3 zero_reference.py GPT2_REFERENCE_DIR DIR

DIR (written by the C++ side) holds
  config.txt  "key value" lines: max_seq_len vocab_size padded_vocab_size
              num_layers num_heads channels B T steps micro (micro-batches
              of B rows per step) threads, and
              lr beta1 beta2 eps weight_decay max_norm as C99 hex floats;
              optional (defaults in brackets):
                precision  fp32 | fp16 | bf16                       [fp32]
                ranks      the engine's W: each micro-batch's B rows are
                           ranks groups of B/ranks consecutive rows, each
                           group's gradient rounded on its own           [1]
                fp16 loss scaling (ignored for fp32 and bf16: scale 1):
                loss_scale (hex) > 0: static; 0: dynamic            [0]
                initial_scale (hex)                                 [2^16]
                scale_window                                        [1000]
                hysteresis                                          [2]
                min_scale (hex)                                     [1]
                consecutive_hysteresis  0 | 1                       [0]
                delayed_from  N > 0: the one-step delayed update from
                           step N on (0-based): step s >= N computes its
                           gradients on the master weights as they were
                           before step s-1's update                   [0]
  params.bin  float32 initial parameters in memory order
  tokens.bin  int32 [steps][micro][2][B][T]
  lrs.bin     float64 [steps], optional: the learning rate of the k-th
              update that is not skipped (else config lr throughout)

Each step, with S the loss scale (fp16: the scaler's; else 1) and round()
rounding fp32 to the precision (nearest even; past fp16's range +-inf;
identity for fp32):
  1. the model reads w = round(master) (the fp32 parameters of AdamW; with
     delayed_from, from that step on the master before the previous
     step's update);
  2. for every micro-batch and row group (a "contribution", micro * ranks
     in all): g = round(S * grad), grad the fp32 gradient of the group's
     mean loss wrt w;
  3. acc = the contributions summed in fp32 (each group's over the
     micro-batches in order, then the groups in order), times the float32
     1 / (micro * ranks);
  4. grads = acc / S. Any non-finite: the step is skipped (no update; the
     learning rate of the next update is the one this step would have had)
     and the scaler sees an overflow. Else clip_grad_norm_(all, max_norm)
     when max_norm > 0, AdamW (matrices with weight decay, the rest
     without), and the scaler sees a clean step.
In fp32 with one group this is the global batch's mean loss, clipped, with
AdamW, bit for bit as with (loss_i / micro).backward() accumulated.

The dynamic scaler is DeepSpeed's DynamicLossScaler (update_scale of
deepspeed/runtime/fp16/loss_scaler.py, scale factor 2, raising at
min_scale as DeepSpeed does by default), as worker/engine/loss_scaler.h.

Writes
  losses.bin      float32 [steps]: mean of the step's contributions' losses
                  (unscaled, on w)
  params_out.bin  float32 parameters after the last step
  scales.bin      float64 [steps]: the loss scale each step's gradients
                  carried
  skipped.bin     uint8 [steps]: 1 where the step was skipped
The model is gpt2_reference.py's (imported from GPT2_REFERENCE_DIR).
"""

import os
import sys


class DynamicLossScaler:
    """DeepSpeed's DynamicLossScaler.update_scale: `delayed_shift` (the
    hysteresis) overflows in a row are needed to halve the scale (never
    below min_scale); the scale doubles on the scale_window-th clean step
    after the last overflow (or the start); the hysteresis budget is
    refilled when the scale grows, or on every clean step when
    consecutive_hysteresis."""

    def __init__(self, init_scale, scale_window, min_scale, delayed_shift,
                 consecutive_hysteresis):
        self.cur_scale = init_scale
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_factor = 2.0
        self.scale_window = scale_window
        self.min_scale = min_scale
        self.delayed_shift = delayed_shift
        self.cur_hysteresis = delayed_shift
        self.consecutive_hysteresis = consecutive_hysteresis

    def update_scale(self, overflow):
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                if self.cur_scale == self.min_scale:
                    raise Exception("Current loss scale already at minimum - "
                                    "cannot decrease scale anymore.")
                self.cur_scale = max(self.cur_scale / self.scale_factor,
                                     self.min_scale)
            else:
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.delayed_shift
            if (self.cur_iter - self.last_overflow_iter) % \
                    self.scale_window == 0:
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.delayed_shift
                self.cur_scale *= self.scale_factor
        self.cur_iter += 1


class StaticLossScaler:
    """DeepSpeed's LossScaler: a constant scale."""

    def __init__(self, scale):
        self.cur_scale = scale

    def update_scale(self, overflow):
        pass


def read_config(d):
    """gpt2_reference.read_config, with the string key `precision`."""
    cfg = {"precision": "fp32"}
    with open(os.path.join(d, "config.txt")) as f:
        for line in f:
            if line.strip():
                k, v = line.split()
                cfg[k] = (v if k == "precision" else
                          float.fromhex(v) if "0x" in v else int(v))
    return cfg


def make_scaler(cfg):
    if cfg["precision"] != "fp16":
        return StaticLossScaler(1.0)
    if cfg.get("loss_scale", 0.0) > 0:
        return StaticLossScaler(cfg["loss_scale"])
    return DynamicLossScaler(
        init_scale=cfg.get("initial_scale", 2.0 ** 16),
        scale_window=cfg.get("scale_window", 1000),
        min_scale=cfg.get("min_scale", 1.0),
        delayed_shift=cfg.get("hysteresis", 2),
        consecutive_hysteresis=bool(cfg.get("consecutive_hysteresis", 0)))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    sys.path.insert(0, sys.argv[1])
    import gpt2_reference as g
    import torch
    import torch.nn.functional as F
    d = sys.argv[2]
    cfg = read_config(d)
    torch.set_num_threads(cfg["threads"])
    B, T, steps, micro = cfg["B"], cfg["T"], cfg["steps"], cfg["micro"]
    ranks = cfg.get("ranks", 1)
    assert B % ranks == 0, (B, ranks)
    rows = B // ranks
    to_type = {"fp32": None, "fp16": torch.float16,
               "bf16": torch.bfloat16}[cfg["precision"]]

    def round_to(x):
        return x if to_type is None else x.to(to_type).float()

    flat = torch.tensor(g.load(os.path.join(d, "params.bin"), "f"))
    tokens = torch.tensor(g.load(os.path.join(d, "tokens.bin"), "i"),
                          dtype=torch.int64).reshape(steps, micro, 2, B, T)
    P, order = g.make_params(torch, flat, cfg)
    params = [P[n] for n, _ in order]
    opt = g.make_adamw(torch, P, order, lr=cfg["lr"],
                       betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                       weight_decay=cfg["weight_decay"])
    lrs_path = os.path.join(d, "lrs.bin")
    lrs = (list(g.load(lrs_path, "d")) if os.path.exists(lrs_path)
           else [cfg["lr"]] * steps)
    scaler = make_scaler(cfg)
    inv_count = torch.tensor(1.0 / (micro * ranks), dtype=torch.float32)
    losses, scales, skipped = [], [], []
    delayed_from = cfg.get("delayed_from", 0)
    before_last = None  # the master before the previous step's update
    for step in range(steps):
        scale = scaler.cur_scale
        src = (before_last if 0 < delayed_from <= step else
               {n: P[n].detach() for n, _ in order})
        before_last = {n: P[n].detach().clone() for n, _ in order}
        w = {n: round_to(src[n]).requires_grad_() for n, _ in order}
        acc = [torch.zeros_like(p) for p in params]
        total = 0.0
        for r in range(ranks):
            part = [torch.zeros_like(p) for p in params]
            for i in range(micro):
                x = tokens[step, i, :, r * rows:(r + 1) * rows]
                loss, _ = g.forward(torch, F, w, cfg, x[0], x[1])
                grads = torch.autograd.grad(loss, [w[n] for n, _ in order])
                for a, gr in zip(part, grads):
                    a += round_to(gr * scale)
                total += loss.item()
            for a, gr in zip(acc, part):
                a += gr
        losses.append(total / (micro * ranks))
        scales.append(scale)
        overflow = False
        for p, a in zip(params, acc):
            p.grad = a.mul_(inv_count).div_(scale)
            overflow = overflow or not bool(torch.isfinite(p.grad).all())
        skipped.append(overflow)
        info = "step %d loss %.6f scale %g" % (step, losses[-1], scale)
        if overflow:
            print(info + " skipped (overflow)")
        else:
            if cfg["max_norm"] > 0:
                norm = torch.nn.utils.clip_grad_norm_(params, cfg["max_norm"])
                info += " norm %.6f" % norm
            for group in opt.param_groups:
                group["lr"] = lrs[step - sum(skipped)]
            opt.step()
            print(info)
        scaler.update_scale(overflow)
    g.save(os.path.join(d, "losses.bin"), torch.tensor(losses))
    g.save(os.path.join(d, "params_out.bin"),
           torch.cat([P[n].detach().reshape(-1) for n, _ in order]))
    g.save(os.path.join(d, "scales.bin"),
           torch.tensor(scales, dtype=torch.float64))
    g.save(os.path.join(d, "skipped.bin"),
           torch.tensor(skipped, dtype=torch.uint8))
    return 0


if __name__ == "__main__":
    sys.exit(main())
