"""PyTorch reference of a ZeRO engine run (reference_test.cc): the same
training on one process with torch.optim.AdamW.

Usage: /usr/bin/python3 zero_reference.py GPT2_REFERENCE_DIR DIR

DIR (written by the C++ side) holds
  config.txt  "key value" lines: max_seq_len vocab_size padded_vocab_size
              num_layers num_heads channels B T steps micro (micro-batches
              per step = W * gradient_accumulation_steps) threads, and
              lr beta1 beta2 eps weight_decay max_norm as C99 hex floats
  params.bin  float32 initial parameters in memory order
  tokens.bin  int32 [steps][micro][2][B][T]
  lrs.bin     float64 [steps], optional: the learning rate of each step
              (else config lr throughout)
Each step: zero grads; for every micro-batch, loss_i / micro backward (the
global batch's mean loss); clip_grad_norm_(all, max_norm) when max_norm > 0;
AdamW (matrices with weight decay, the rest without). Writes
  losses.bin      float32 [steps]: mean of the step's micro-batch losses
  params_out.bin  float32 parameters after the last step
The model is gpt2_reference.py's (imported from GPT2_REFERENCE_DIR).
"""

import os
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    sys.path.insert(0, sys.argv[1])
    import gpt2_reference as g
    import torch
    import torch.nn.functional as F
    d = sys.argv[2]
    cfg = g.read_config(d)
    torch.set_num_threads(cfg["threads"])
    B, T, steps, micro = cfg["B"], cfg["T"], cfg["steps"], cfg["micro"]
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
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lrs[step]
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for i in range(micro):
            loss, _ = g.forward(torch, F, P, cfg, tokens[step, i, 0],
                                tokens[step, i, 1])
            (loss / micro).backward()
            total += loss.item()
        losses.append(total / micro)
        if cfg["max_norm"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, cfg["max_norm"])
            print("step %d loss %.6f norm %.6f" % (step, losses[-1], norm))
        opt.step()
    g.save(os.path.join(d, "losses.bin"), torch.tensor(losses))
    g.save(os.path.join(d, "params_out.bin"),
           torch.cat([P[n].detach().reshape(-1) for n, _ in order]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
