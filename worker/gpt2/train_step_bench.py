"""PyTorch eager side of train_step_bench: times GPT-2 training steps
(zero grads, forward, backward) of gpt2_reference.py's model.

Usage: /usr/bin/python3 train_step_bench.py DIR ITERS WARMUP

DIR is gpt2_reference.py's input directory (config.txt with `threads`,
params.bin, tokens.bin; step 0's tokens are used every iteration). Prints
  TORCH best_tok_s=<f> median_tok_s=<f> loss=<f>
and writes DIR/grads.bin (the last iteration's gradients, memory order) for
the C++ side's correctness check.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as ref  # noqa: E402


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    d, iters, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import torch
    import torch.nn.functional as F
    cfg = ref.read_config(d)
    torch.set_num_threads(cfg["threads"])
    B, T = cfg["B"], cfg["T"]
    flat = torch.tensor(ref.load(os.path.join(d, "params.bin"), "f"))
    tokens = torch.tensor(ref.load(os.path.join(d, "tokens.bin"), "i"),
                          dtype=torch.int64).reshape(-1, 2, B, T)
    P, names, offset = {}, [], 0
    for name, _, shape in ref.shapes(cfg):
        n = 1
        for s in shape:
            n *= s
        P[name] = torch.nn.Parameter(flat[offset:offset + n].clone()
                                     .reshape(shape))
        P[name].grad = torch.zeros_like(P[name])
        names.append(name)
        offset += n
    times, loss = [], None
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        for p in P.values():
            p.grad.zero_()
        loss, _ = ref.forward(torch, F, P, cfg, tokens[0, 0], tokens[0, 1])
        loss.backward()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    tok = B * T
    print("TORCH best_tok_s=%.1f median_tok_s=%.1f loss=%.7f" %
          (tok / times[0], tok / times[len(times) // 2], loss.item()))
    ref.save(os.path.join(d, "grads.bin"),
             torch.cat([P[n].grad.reshape(-1) for n in names]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
