"""Models and data the Python engine tests share. Not GPT-2: a
convolution, an embedding, LayerNorm, a tied weight (the head is the
embedding), and a branch that runs only on some steps, so that its
parameters get no gradient then. Also the exit reporter the rank
scripts share."""
import atexit

import torch
import torch.distributed as dist

VOCAB, WIDTH, SEQ, BATCH = 48, 16, 12, 4


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, WIDTH)
        self.conv = torch.nn.Conv1d(WIDTH, WIDTH, 3, padding=1)
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.sometimes = torch.nn.Linear(WIDTH, WIDTH)
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, x, step):
        h = self.emb(x)
        h = self.conv(h.transpose(1, 2)).transpose(1, 2)
        if step % 3 == 0:
            h = h + self.sometimes(h)
        h = self.norm(torch.relu(self.mix(h)) + h)
        return self.head(h)


class DeepNet(torch.nn.Module):
    """Many equal units: what stage 3's memory check needs."""

    def __init__(self, width=32, depth=8):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, width)
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(width, width) for _ in range(depth))
        self.out = torch.nn.Linear(width, VOCAB)

    def forward(self, x, step):
        h = self.emb(x)
        for layer in self.layers:
            h = h + torch.tanh(layer(h))
        return self.out(h)


def model(seed=0, name="convnet"):
    torch.manual_seed(seed)
    return {"convnet": ConvNet, "deep": DeepNet}[name]()


def batch(step, micro, rank):
    """The same data for a (step, micro-batch, rank) in every run."""
    g = torch.Generator().manual_seed(1000003 * step + 1009 * micro + rank)
    x = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    y = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return x, y


def loss_of(net, x, y, step):
    out = net(x, step)
    return torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB),
                                             y.reshape(-1))


def torch_groups(net, weight_decay):
    """The engine's default group, as DeepSpeed's: every parameter, with
    the config's weight decay."""
    return [{"params": list(net.parameters()), "weight_decay": weight_decay}]


def step_mean_square(engine, ref, opt, x):
    """One step of the engine and one of torch's optimizer `opt` over `ref`,
    each on the mean square of its model's output for `x`; the two losses
    (floats)."""
    loss = (engine(x) ** 2).mean()
    engine.backward(loss)
    engine.step()
    opt.zero_grad()
    ref_loss = (ref(x) ** 2).mean()
    ref_loss.backward()
    opt.step()
    return loss.item(), ref_loss.item()


def snapshot(net):
    return {n: p.detach().clone().float() for n, p in net.named_parameters()}


def report_group_at_exit(path):
    """Registers an atexit handler (registered before zeroshard's, it runs
    after them) that writes to `path` whether a process group is still
    alive ("alive" / "destroyed"), then destroys one that is, so that the
    reporting process itself ends cleanly."""
    def report():
        with open(path, "w") as f:
            f.write("alive" if dist.is_initialized() else "destroyed")
        if dist.is_initialized():
            dist.destroy_process_group()

    atexit.register(report)
