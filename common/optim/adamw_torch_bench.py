"""Times torch.optim.AdamW(foreach=True) on CPU for adamw_bench.

Run with Debian's /usr/bin/python3 (python3-torch 1.13). Prints one line:
  TORCH best_elem_s=<float> median_elem_s=<float> threads=<int> n=<int>
"""

import argparse
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()

    try:
        import torch
    except ImportError as e:
        print("TORCH_ERROR cannot import torch (install Debian package "
              "python3-torch): %s" % e)
        return 1

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(args.n) * 0.02)
    p.grad = torch.randn(args.n) * 1e-3
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.1, foreach=True)
    for _ in range(args.warmup):
        opt.step()
    times = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    best = args.n / min(times)
    median = args.n / statistics.median(times)
    print("TORCH best_elem_s=%.6g median_elem_s=%.6g threads=%d n=%d "
          "version=%s" % (best, median, torch.get_num_threads(), args.n,
                          torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
