#!/usr/bin/python3
"""Loss of an llm.c model file on the first B*T+1 tokens of a token file,
computed by the independent readers and model of the project's tests
(worker/io/llmc_files.py, worker/gpt2/gpt2_reference.py).

Usage: /usr/bin/python3 launcher_eval.py MODEL TOKENS B T
Prints "loss X". Needs Debian's python3-torch and python3-numpy.
"""
import os
import sys


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    sys.path += [os.path.join(root, "worker", "io"),
                 os.path.join(root, "worker", "gpt2")]
    import torch
    import torch.nn.functional as F
    import gpt2_reference
    import llmc_files
    model, tokens_path = sys.argv[1], sys.argv[2]
    B, T = int(sys.argv[3]), int(sys.argv[4])
    cfg, _, params = llmc_files.read_model(model)
    P = {name: torch.tensor(p) for name, p in params.items()}
    tokens = torch.tensor(llmc_files.read_tokens(tokens_path)[:B * T + 1]
                          .astype("int64"))
    with torch.no_grad():
        loss, _ = gpt2_reference.forward(torch, F, P, cfg,
                                         tokens[:-1].reshape(B, T),
                                         tokens[1:].reshape(B, T))
    print("loss %.6f" % loss.item())
    return 0


if __name__ == "__main__":
    sys.exit(main())
