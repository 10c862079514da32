"""The flat layout of a torch module's trainable parameters, its AdamW
parameter groups, and the gradient buckets over it.

Parameters are registered in `module.named_parameters()` order (a tied
weight once, under its first name), concatenated without padding; frozen
ones (requires_grad False) stay out and train nowhere. Pure functions (build warns when DeepSpeed's schedule overrides the
groups' lr).
"""
import warnings

# The config's WarmupLR and WarmupDecayLR (zeroshard.h's ZS_LR_*).
_SAME_RATE_SCHEDULES = {1: "WarmupLR", 2: "WarmupDecayLR"}


class Entry:
    """One parameter in the flat space: [offset, offset + numel)."""
    __slots__ = ("name", "param", "offset", "numel", "group", "shape")

    def __init__(self, name, param, offset, group):
        self.name, self.param, self.offset = name, param, offset
        self.numel, self.shape = param.numel(), tuple(param.shape)
        self.group = group

    @property
    def end(self):
        return self.offset + self.numel


def build(module, model_parameters, cfg):
    """(entries, groups): groups are dicts for Client.register.

    model_parameters: None (every trainable parameter) or an iterable of
    parameters, in one group with the config's hyperparameters (weight
    decay on every parameter, as DeepSpeed's config optimizer and
    torch.optim.AdamW(model.parameters()) have it), or torch-style group
    dicts {"params": [...], "weight_decay": ..., "lr": ...,
    "betas": (b1, b2), "eps": ..., "bias_correction": bool} (the last
    as DeepSpeed's FusedAdam groups take it; default: the config's)."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("initialize: the model has no trainable parameters")
    base = {"beta1": cfg.beta1, "beta2": cfg.beta2, "eps": cfg.eps,
            "weight_decay": cfg.weight_decay, "lr_scale": 1.0,
            "no_bias_correction": cfg.no_bias_correction}
    group_of = {}
    groups = []
    plist = list(model_parameters) if model_parameters is not None else None
    if plist and isinstance(plist[0], dict):
        known = {id(p) for _, p in named}
        for i, g in enumerate(plist):
            if "params" not in g:
                raise ValueError(f"model_parameters[{i}]: no 'params' key")
            extra = set(g) - {"params", "weight_decay", "lr", "betas", "eps",
                              "bias_correction", "name"}
            if extra:
                raise ValueError(f"model_parameters[{i}]: unsupported keys "
                                 f"{sorted(extra)} (zeroshard's servers run "
                                 "AdamW: params, lr, betas, eps, "
                                 "weight_decay, bias_correction)")
            spec = dict(base)
            if "weight_decay" in g:
                spec["weight_decay"] = float(g["weight_decay"])
            if "eps" in g:
                spec["eps"] = float(g["eps"])
                if not spec["eps"] > 0:
                    raise ValueError(f"model_parameters[{i}]: eps must be > "
                                     f"0, got {g['eps']!r}")
            if "bias_correction" in g:
                if not isinstance(g["bias_correction"], bool):
                    raise ValueError(f"model_parameters[{i}]: bias_correction "
                                     "must be True or False, got "
                                     f"{g['bias_correction']!r}")
                spec["no_bias_correction"] = int(not g["bias_correction"])
            if "betas" in g:
                spec["beta1"], spec["beta2"] = (float(b) for b in g["betas"])
            if "lr" in g:
                if cfg.base_lr <= 0:
                    raise ValueError("model_parameters: a group lr needs a "
                                     "positive optimizer.params.lr")
                spec["lr_scale"] = float(g["lr"]) / cfg.base_lr
            groups.append(spec)
            params = g["params"]
            params = [params] if hasattr(params, "requires_grad") else params
            for p in params:
                if id(p) not in known:
                    raise ValueError(f"model_parameters[{i}]: a parameter "
                                     "that is not a trainable parameter of "
                                     "the model")
                if id(p) in group_of:
                    raise ValueError(f"model_parameters[{i}]: a parameter "
                                     "is in two groups")
                group_of[id(p)] = i
        missing = [n for n, p in named if id(p) not in group_of]
        if missing:
            raise ValueError("model_parameters: no group holds "
                             + ", ".join(missing[:5]))
    else:
        if plist is not None:
            wanted = {id(p) for p in plist}
            named = [(n, p) for n, p in named if id(p) in wanted]
            if not named:
                raise ValueError("model_parameters: none is a trainable "
                                 "parameter of the model")
        groups = [dict(base)]
        for _, p in named:
            group_of[id(p)] = 0
    schedule = _SAME_RATE_SCHEDULES.get(int(cfg._c.lr_schedule))
    if schedule is not None:
        # DeepSpeed's WarmupLR (and WarmupDecayLR) set every group's lr to
        # the scheduled value: a group's own lr is not used.
        own = [i for i, g in enumerate(groups) if g["lr_scale"] != 1.0]
        if own:
            warnings.warn(
                f"zeroshard: scheduler {schedule} gives every parameter "
                "group the same rate, as DeepSpeed's does: the lr of "
                f"model_parameters group(s) {own} is not used (give the "
                "groups no lr, or use WarmupCosineLR, which scales each "
                "group's lr)", stacklevel=4)
        for g in groups:
            g["lr_scale"] = 1.0
    entries, offset = [], 0
    for n, p in named:
        entries.append(Entry(n, p, offset, group_of[id(p)]))
        offset += p.numel()
    return entries, groups


def buckets(total, bucket_size, alignment):
    """Bucket ranges [begin, end) over [0, total), cut at multiples of the
    alignment, each about bucket_size elements; the last range first (the
    order backward produces gradients in)."""
    size = max(int(bucket_size), 1)
    size = max(alignment, (size + alignment - 1) // alignment * alignment)
    out, begin = [], 0
    while begin < total:
        end = min(total, begin + size)
        out.append((begin, end))
        begin = end
    out.reverse()
    return out


def intersect(a, b):
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo < hi else None
