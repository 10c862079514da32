"""Independent PyTorch GPT-2 (torch.nn.functional + autograd) for the parity
test (parity_test.cc) and the benchmark (train_step_bench.cc).

Usage: /usr/bin/python3 gpt2_reference.py DIR

DIR (written by the C++ side) holds:
  config.txt  lines "key value": max_seq_len vocab_size padded_vocab_size
              num_layers num_heads channels B T steps threads, and the AdamW
              hyper-parameters lr beta1 beta2 eps weight_decay as C99 hex
              floats of float32 values
  params.bin  float32, all parameters in the memory order of
              worker/gpt2/config.h (wte, wpe, block 0 ... block L-1, lnfw,
              lnfb)
  tokens.bin  int32 [steps][2][B][T]: inputs then targets of each step

It runs `steps` training steps (zero grad, forward, backward,
torch.optim.AdamW: matrices with weight decay, the rest without) and writes
  logits.bin  float32 (B,T,Vp): logits of step 0 (before any update)
  grads.bin   float32, gradients of step 0 in memory order
  losses.bin  float32 [steps]: each step's loss (before its update)
  params_out.bin  float32, parameters after the last step
With steps = 0 it writes the logits, loss and gradients of one forward and
backward without updating anything.

Needs Debian's python3-torch (run with /usr/bin/python3).
"""

import array
import math
import os
import sys

BLOCK_KINDS = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"]
MATRICES = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def read_config(d):
    cfg = {}
    with open(os.path.join(d, "config.txt")) as f:
        for line in f:
            if line.strip():
                k, v = line.split()
                cfg[k] = float.fromhex(v) if "0x" in v else int(v)
    return cfg


def shapes(cfg):
    """(name, kind, shape) of every tensor, in memory order."""
    C, Vp, T = cfg["channels"], cfg["padded_vocab_size"], cfg["max_seq_len"]
    kind_shape = {"ln1w": (C,), "ln1b": (C,), "qkvw": (3 * C, C),
                  "qkvb": (3 * C,), "attprojw": (C, C), "attprojb": (C,),
                  "ln2w": (C,), "ln2b": (C,), "fcw": (4 * C, C),
                  "fcb": (4 * C,), "fcprojw": (C, 4 * C), "fcprojb": (C,)}
    out = [("wte", "wte", (Vp, C)), ("wpe", "wpe", (T, C))]
    for l in range(cfg["num_layers"]):
        out += [("h.%d.%s" % (l, k), k, kind_shape[k]) for k in BLOCK_KINDS]
    out += [("lnfw", "lnfw", (C,)), ("lnfb", "lnfb", (C,))]
    return out


def load(path, typecode):
    a = array.array(typecode)
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def save(path, tensor):
    with open(path, "wb") as f:
        f.write(tensor.detach().contiguous().reshape(-1).numpy().tobytes())


def forward(torch, F, P, cfg, idx, targets):
    """Mean cross-entropy loss and logits (B,T,Vp) of GPT-2."""
    B, T = idx.shape
    C, NH, V = cfg["channels"], cfg["num_heads"], cfg["vocab_size"]
    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = P["wte"][idx] + P["wpe"][:T]
    for l in range(cfg["num_layers"]):
        p = lambda k: P["h.%d.%s" % (l, k)]
        h = F.layer_norm(x, (C,), p("ln1w"), p("ln1b"), eps=1e-5)
        q, k, v = F.linear(h, p("qkvw"), p("qkvb")).split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p("attprojw"), p("attprojb"))
        h = F.layer_norm(x, (C,), p("ln2w"), p("ln2b"), eps=1e-5)
        h = F.gelu(F.linear(h, p("fcw"), p("fcb")), approximate="tanh")
        x = x + F.linear(h, p("fcprojw"), p("fcprojb"))
    x = F.layer_norm(x, (C,), P["lnfw"], P["lnfb"], eps=1e-5)
    logits = F.linear(x, P["wte"])
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return loss, logits


def make_params(torch, flat, cfg):
    """Named leaf parameters cut from the flat float32 buffer (memory order),
    and their (name, kind) order."""
    P, order, offset = {}, [], 0
    for name, kind, shape in shapes(cfg):
        n = math.prod(shape)
        P[name] = torch.nn.Parameter(flat[offset:offset + n].clone()
                                     .reshape(shape))
        order.append((name, kind))
        offset += n
    assert offset == flat.numel(), (offset, flat.numel())
    return P, order


def make_adamw(torch, P, order, lr, betas, eps, weight_decay):
    """torch.optim.AdamW (single-tensor path) with weight decay on the
    matrices only, as the project's parameter groups."""
    return torch.optim.AdamW(
        [{"params": [P[n] for n, k in order if k in MATRICES],
          "weight_decay": weight_decay},
         {"params": [P[n] for n, k in order if k not in MATRICES],
          "weight_decay": 0.0}],
        lr=lr, betas=betas, eps=eps, foreach=False)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    import torch  # Debian's python3-torch: run with /usr/bin/python3
    import torch.nn.functional as F
    d = sys.argv[1]
    cfg = read_config(d)
    torch.set_num_threads(cfg["threads"])
    B, T, steps = cfg["B"], cfg["T"], cfg["steps"]
    flat = torch.tensor(load(os.path.join(d, "params.bin"), "f"))
    tokens = torch.tensor(load(os.path.join(d, "tokens.bin"), "i"),
                          dtype=torch.int64).reshape(max(steps, 1), 2, B, T)
    P, order = make_params(torch, flat, cfg)
    opt = make_adamw(torch, P, order, lr=cfg.get("lr", 0.0),
                     betas=(cfg.get("beta1", 0.9), cfg.get("beta2", 0.999)),
                     eps=cfg.get("eps", 1e-8),
                     weight_decay=cfg.get("weight_decay", 0.0))
    losses = []
    for step in range(max(steps, 1)):
        opt.zero_grad(set_to_none=False)
        loss, logits = forward(torch, F, P, cfg, tokens[step, 0],
                               tokens[step, 1])
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            save(os.path.join(d, "logits.bin"), logits)
            save(os.path.join(d, "grads.bin"),
                 torch.cat([P[n].grad.reshape(-1) for n, _ in order]))
        if steps > 0:
            opt.step()
    save(os.path.join(d, "losses.bin"), torch.tensor(losses))
    save(os.path.join(d, "params_out.bin"),
         torch.cat([P[n].reshape(-1) for n, _ in order]))
    print("torch reference: %d step(s), first loss %.6f" % (len(losses),
                                                           losses[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
