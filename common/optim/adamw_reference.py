"""torch.optim.AdamW reference for adamw_test (TorchParityTest).

Usage: /usr/bin/python3 adamw_reference.py DIR

DIR (written by the C++ test) holds:
  config.txt   lines "key value"; floats are C99 hex floats of float32 values
               (beta1, beta2, eps, steps, groups, and per group i:
               n<i>, weight_decay<i>, grad_scale<i>)
  p<i>.bin     initial parameters of group i, float32 [n_i]
  g<i>.bin     raw gradients of group i, float32 [steps][n_i]
  lr.bin       learning rate per step and group, float32 [steps][groups]
The script runs torch.optim.AdamW (one param group per group, foreach=False,
i.e. torch 1.13's _single_tensor_adamw) for `steps` steps, feeding
grad = g * grad_scale and setting each group's lr before every step, and
writes out_p<i>.bin, out_m<i>.bin, out_v<i>.bin (float32).

Needs Debian's python3-torch (run with /usr/bin/python3).
"""

import array
import os
import sys


def load_f32(path, count=None):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if count is not None and len(a) != count:
        raise ValueError("%s: %d floats, expected %d" % (path, len(a), count))
    return a


def save_f32(path, tensor):
    with open(path, "wb") as f:
        f.write(array.array("f", tensor.detach().reshape(-1).tolist()).tobytes())


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    d = sys.argv[1]
    try:
        import torch
    except ImportError as e:
        print("ERROR: cannot import torch in %s (%s); install Debian package "
              "python3-torch" % (sys.executable, e))
        return 3

    cfg = {}
    with open(os.path.join(d, "config.txt")) as f:
        for line in f:
            if line.strip():
                k, v = line.split()
                cfg[k] = v

    def fl(key):  # exact float32 value as a Python float
        return float.fromhex(cfg[key])

    steps = int(cfg["steps"])
    groups = int(cfg["groups"])
    lrs = load_f32(os.path.join(d, "lr.bin"), steps * groups)
    params, grads, scales, param_groups = [], [], [], []
    for i in range(groups):
        n = int(cfg["n%d" % i])
        p = torch.nn.Parameter(
            torch.tensor(load_f32(os.path.join(d, "p%d.bin" % i), n),
                         dtype=torch.float32))
        g = torch.tensor(load_f32(os.path.join(d, "g%d.bin" % i), steps * n),
                         dtype=torch.float32).reshape(steps, n)
        params.append(p)
        grads.append(g)
        scales.append(fl("grad_scale%d" % i))
        param_groups.append({"params": [p], "lr": lrs[i],
                             "weight_decay": fl("weight_decay%d" % i)})

    opt = torch.optim.AdamW(param_groups, betas=(fl("beta1"), fl("beta2")),
                            eps=fl("eps"), amsgrad=False, foreach=False)
    for t in range(steps):
        for i in range(groups):
            params[i].grad = grads[i][t] * scales[i]
            opt.param_groups[i]["lr"] = lrs[t * groups + i]
        opt.step()

    for i, p in enumerate(params):
        st = opt.state[p]
        save_f32(os.path.join(d, "out_p%d.bin" % i), p)
        save_f32(os.path.join(d, "out_m%d.bin" % i), st["exp_avg"])
        save_f32(os.path.join(d, "out_v%d.bin" % i), st["exp_avg_sq"])
    print("torch %s: %d steps, %d groups done" % (torch.__version__, steps,
                                                  groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
