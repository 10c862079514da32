"""zeroshard.initialize and the engine: DeepSpeed's training API for any
torch.nn.Module, with the fp32 master weights, AdamW moments and reduced
gradients on zeroshard's shard servers.

One step (stages 1 and 2; stage 3 in stage3.py adds the parameter window):

  backward(loss)  (loss x loss scale).backward(); the gradient path
                  (gradients.py) reduce-scatters each finished bucket
                  among the ranks while backward goes on and pushes this
                  rank's part to the servers that own it; with server
                  aggregation every micro-batch's buckets are pushed and
                  the servers sum them.
  step()          the library's step protocol (client/step_protocol.h):
                  the decision (global norm, clip, skip on overflow), the
                  leader's commit with this update's lr, checkpoints, a
                  roll back when a server failed; then the updated
                  parameters are gathered into the module's tensors:
                  without recovery behind the next forward (behind.py),
                  which waits for each parameter as it reads it; with
                  recovery before step() returns.

Threading: one thread drives the engine; pushes and the bucket pipeline run
on the engine's own threads. Errors: zeroshard.Error (the servers', the
library's), ValueError (bad use, bad config).
"""
import concurrent.futures
import contextlib
import os
import threading
import time
import warnings

import torch

from . import _lib, client_optim, gathered, layout
from .behind import BehindFetch, owners as param_owners, pre_hooks
from .client import Client
from .config import Config
from .dist import TorchGroup, init_distributed
from .errors import Error
from .gradients import GradientPipeline
from .monitor import Monitors
from .trainer import Trainer

_FAILED_PRECONDITION = _lib.CODES["FAILED_PRECONDITION"]
# The step protocol's refusal to start a job the servers hold at a later
# step (client/step_protocol.cc, CheckStartsFresh).
_HELD_BY_SERVERS = "the servers already hold job"
_TRANSIENT = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED",
              "UNKNOWN")
_16BIT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _loopback(address):
    host = address.rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def _hidden_size(model):
    """The model's hidden size, as Hugging Face fills the ZeRO "auto"
    sizes: model.config.hidden_size, else the input width most of its
    Linear layers share (None without Linears)."""
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    if isinstance(hidden, int) and hidden > 0:
        return hidden
    widths = [m.in_features for m in model.modules()
              if isinstance(m, torch.nn.Linear)]
    if not widths:
        return None
    return max(set(widths), key=lambda w: (widths.count(w), w))


def initialize(args=None, model=None, optimizer=None, model_parameters=None,
               training_data=None, lr_scheduler=None, mpu=None,
               dist_init_required=None, collate_fn=None, config=None,
               config_params=None, servers=None, job_id=None,
               client_options=None, elastic=None, auto_values=None):
    """DeepSpeed's initialize: (engine, optimizer, dataloader, lr_scheduler).

    config: a dict, a JSON string or a file (or args.deepspeed_config);
    servers: "host:port,..." or a list (default: the config's
    zeroshard.servers, else $ZEROSHARD_SERVERS); job_id (default
    $ZEROSHARD_JOB_ID, else "torch"); client_options: Client keyword
    arguments (TLS, token; loopback servers default to insecure).
    optimizer: None (the config's optimizer section), or a
    torch.optim.AdamW (or Adam without weight decay; or a callable making
    one from the parameters), whose groups' lr, betas, eps and weight
    decay the servers' AdamW takes (DeepSpeed's client optimizer; the
    config must then have no optimizer section). lr_scheduler: a torch
    scheduler of that optimizer (or a callable making one), stepped with
    every applied update instead of the config's scheduler section
    (client_optim.py).

    elastic: None (the world is torchrun's), or a dict for workers that
    join and leave a running job (elastic.py): min_workers (1),
    worker_name, host (the address peers reach this worker's group store
    at; 127.0.0.1), timeout (600 s to form a group), op_timeout (60 s for a
    silent peer). Stages 0-2 without server aggregation; the servers need
    --checkpoint_dir.

    auto_values: what fills the config's "auto" values, as zeroshard
    train's flags name them (zeroshard.Config): e.g. {"steps": 1000,
    "learning_rate": 3e-4, "per_device_train_batch_size": 8}; the hidden
    size for the ZeRO bucket sizes defaults to model.config.hidden_size (a
    Hugging Face model), else the commonest input width of its Linears."""
    if model is None:
        raise ValueError("initialize: model is required")
    if not isinstance(model, torch.nn.Module):
        raise ValueError("initialize: model must be a torch.nn.Module, got "
                         f"{type(model).__name__}")
    if mpu is not None:
        raise ValueError("initialize: model parallelism (mpu) is not "
                         "supported: zeroshard is data-parallel")
    config = config if config is not None else config_params
    from_args = None
    if args is not None:
        # --deepspeed_config, or DeepSpeed's deprecated --deepscale_config.
        from_args = getattr(args, "deepspeed_config", None)
        old = getattr(args, "deepscale_config", None)
        if old is not None and from_args is not None and old != from_args:
            raise ValueError("initialize: args has both deepspeed_config and "
                             "the deprecated deepscale_config: give one")
        from_args = from_args if from_args is not None else old
    if from_args is not None and config is not None:
        raise ValueError("initialize: a config both in args.deepspeed_config "
                         "and in config= (or config_params=): give one, as "
                         "DeepSpeed requires")
    config = config if config is not None else from_args
    if config is None:
        raise ValueError("initialize: no config (pass config=dict or a JSON "
                         "file, or args with --deepspeed_config)")
    if callable(optimizer) and not isinstance(optimizer,
                                              torch.optim.Optimizer):
        # DeepSpeed's callable: it makes the optimizer from the groups.
        optimizer = optimizer(model_parameters if model_parameters
                              is not None else model.parameters())
    config, groups, schedule = client_optim.adopt(optimizer, lr_scheduler,
                                                  config)
    # A config without an optimizer section (and no optimizer passed) draws
    # the parser's warning naming the AdamW that runs.
    if groups is not None:
        model_parameters = groups
    first = next(model.parameters(), None)
    if first is None:
        raise ValueError("initialize: the model has no parameters")
    device = first.device.type
    if elastic is not None:
        if not isinstance(elastic, dict):
            raise ValueError("initialize: elastic must be a dict of options")
        if device != "cpu":
            raise ValueError("initialize: elastic workers are CPU (gloo) "
                             "only so far")
        # Per worker: micro-batch and accumulation as resolved for the
        # smallest group; the rank and the world come from the membership.
        rank, world = 0, int(elastic.get("min_workers", 1))
        local_rank, local_world = 0, 1
    else:
        rank, world, local_rank, local_world = init_distributed(device)
        _check_backend(device, world)
    if args is not None and hasattr(args, "local_rank"):
        args.local_rank = local_rank  # as DeepSpeed aligns it to LOCAL_RANK
    if auto_values is not None and not isinstance(auto_values, dict):
        raise ValueError("initialize: auto_values must be a dict of "
                         "inputs (e.g. {'steps': 1000})")
    inputs = dict(auto_values or {})
    if "hidden_size" not in inputs:
        hidden = _hidden_size(model)
        if hidden is not None:
            inputs["hidden_size"] = hidden
    cfg = Config(config, world, **inputs)
    if rank == 0:
        for line in cfg.warnings:
            warnings.warn(f"zeroshard config: {line}", stacklevel=2)
    _cast_module(model, cfg.precision, device)
    engine = ZeroShardEngine(model, cfg, model_parameters=model_parameters,
                             servers=servers, job_id=job_id,
                             client_options=client_options, rank=rank,
                             world=world, local_rank=local_rank,
                             local_world=local_world, elastic=elastic,
                             client_schedule=schedule)
    # The config as JSON (read once; the library has checked it): the keys
    # the engine acts on in Python.
    raw = client_optim.config_dict(config) or {}
    if engine.rank == 0:  # DeepSpeed's tensorboard / csv_monitor files
        engine.monitor = Monitors.open(raw, cfg.precision == "fp16")
    gathered.ENGINES.add(engine)  # for GatheredParameters
    engine.collate_fn = collate_fn
    engine.dataloader_drop_last = bool(raw.get("dataloader_drop_last"))
    fp16 = raw.get("fp16") if isinstance(raw.get("fp16"), dict) else {}
    engine._auto_cast = cfg.precision == "fp16" and bool(fp16.get("auto_cast"))
    autocast = raw.get("torch_autocast")
    engine._torch_autocast = isinstance(autocast, dict) and bool(
        autocast.get("enabled"))  # (bfloat16: the reader allows no other)
    loader = None
    if training_data is not None:
        loader = engine.deepspeed_io(training_data)
    return engine, engine.optimizer, loader, engine.lr_scheduler


def _check_backend(device, world):
    """An NCCL group cannot carry the gradients of a model on the CPU (a
    group a script started with zeroshard.init_distributed() on a machine
    with a GPU, as DeepSpeed's picks NCCL there)."""
    if world > 1 and device == "cpu" and \
            torch.distributed.get_backend() == "nccl":
        raise ValueError(
            "initialize: the process group is NCCL but the model is on the "
            "CPU: move the model to its GPU first, or start the group with "
            "gloo (zeroshard.init_distributed(dist_backend='gloo'))")


def _half(value, to_half):
    """fp16.auto_cast (DeepSpeed's _cast_inputs_half): floating tensors in
    positional inputs, lists, tuples and dicts to fp16 (to_half: the
    module computes in fp16, on a GPU), or to fp32 holding fp16-rounded
    values (on the CPU, where an fp16 module computes in fp32 with rounded
    parameters: _cast_module); the rest as is."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return value.__class__(*[_half(v, to_half) for v in value])
    if isinstance(value, (list, tuple)):
        return value.__class__([_half(v, to_half) for v in value])
    if isinstance(value, dict):
        return {k: _half(v, to_half) for k, v in value.items()}
    if torch.is_tensor(value) and value.is_floating_point():
        return value.half() if to_half else value.half().float()
    return value


def _cast_module(model, precision, device):
    """As DeepSpeed does: the module computes in bf16 under "bf16", in
    fp16 under "fp16" on a GPU. On the CPU an fp16 module stays fp32 (torch
    1.13 lacks CPU kernels for half), holding the fp16-rounded values of
    the serving copy."""
    if precision == "bf16":
        model.to(torch.bfloat16)
    elif precision == "fp16":
        if device == "cuda":
            model.half()
        else:
            warnings.warn("zeroshard: fp16 on the CPU: the module computes "
                          "in fp32 with fp16-rounded parameters", stacklevel=3)


class _Optimizer:
    """What initialize returns as the optimizer: the servers' AdamW seen
    from the worker (param_groups with the current lr; zero_grad)."""

    def __init__(self, engine):
        self._engine = engine

    @property
    def param_groups(self):
        return self._engine.param_groups()

    @property
    def defaults(self):
        """torch.optim.Optimizer's: the config's hyperparameters."""
        c = self._engine.config
        return {"lr": c.base_lr, "betas": (c.beta1, c.beta2), "eps": c.eps,
                "weight_decay": c.weight_decay}

    @property
    def state(self):
        """Empty: the servers hold the moments (checkpoints save them)."""
        return {}

    def zero_grad(self, set_to_none=True):  # noqa: ARG002 - torch's signature
        self._engine.zero_grad()

    def step(self):
        raise Error(_FAILED_PRECONDITION, "call engine.step(), not "
                    "optimizer.step(): the step is collective")

    @property
    def overflow(self):
        """The last step was skipped (fp16 overflow), as DeepSpeed's fp16
        optimizers say (accelerate's step_was_skipped reads it)."""
        return not self._engine.was_step_applied()

    # Trainers save and load these beside the engine's checkpoint; the
    # state itself is the servers' (save_checkpoint / load_checkpoint).
    def state_dict(self):
        return {"zeroshard": "the servers hold the optimizer state"}

    def load_state_dict(self, state_dict):  # noqa: ARG002 - torch's signature
        pass


class _LrScheduler:
    """The config's schedule, read-only: get_lr() / get_last_lr()."""

    def __init__(self, engine):
        self._engine = engine

    def get_lr(self):
        return self._engine.get_lr()

    get_last_lr = get_lr

    @property
    def last_epoch(self):
        """Updates applied, as torch's schedulers count their steps."""
        return int(self._engine._state["updates"])

    # The schedule follows the servers' applied updates; load_checkpoint
    # restores those.
    def state_dict(self):
        return {"last_epoch": self.last_epoch}

    def load_state_dict(self, state_dict):  # noqa: ARG002 - torch's signature
        pass

    def step(self, *args, **kwargs):  # noqa: ARG002 - DeepSpeed's signature
        pass  # the engine moves the schedule with every applied update


class ZeroShardEngine(GradientPipeline, torch.nn.Module):
    monitor = None  # rank 0's Monitors (monitor.py), when the config has any
    _monitor_loss = 0.0  # this step's micro-batch losses, summed

    def __init__(self, model, cfg, *, model_parameters=None, servers=None,
                 job_id=None, client_options=None, rank=0, world=1,
                 local_rank=0, local_world=1, elastic=None,
                 client_schedule=None):
        super().__init__()
        self.module = model
        self.config = cfg
        self._client_schedule = client_schedule
        # optimizer.param_groups as the script sees and edits it (built on
        # first use), the lrs last written into it, and a rate the script
        # set that holds until it sets another (no schedule to overwrite it).
        self._view, self._written, self._lr_override = None, None, None
        self._scheduled = cfg._c.lr_schedule != 0 or (  # ZS_LR_CONSTANT
            client_schedule is not None and
            client_schedule.scheduler is not None)
        self.rank, self.world = rank, world
        # deepspeed_io's defaults and fp16.auto_cast (initialize() sets
        # them from its collate_fn and the config).
        self.collate_fn, self.dataloader_drop_last = None, False
        self._auto_cast = self._torch_autocast = False
        self.local_rank, self.local_world = local_rank, local_world
        self.stage = cfg.stage
        self.gas = int(cfg.gradient_accumulation_steps)
        self.aggregation = bool(cfg.server_aggregation)
        if cfg.delayed_parameter_update:
            raise ValueError(
                "initialize: zeroshard.delayed_parameter_update is honoured "
                "by zeroshard-worker's engine only, not by "
                "zeroshard.initialize (turn it off)")
        self.overlap = bool(cfg.overlap_comm)
        self.precision = cfg.precision
        self.clipping = float(cfg.gradient_clipping)
        self.optimizer = _Optimizer(self)
        self.lr_scheduler = _LrScheduler(self)
        self.timings = {"backward": 0.0, "reduce_wait": 0.0, "push_wait": 0.0,
                        "step": 0.0, "fetch": 0.0}
        entries, groups = layout.build(model, model_parameters, cfg)
        self.entries, self.groups = entries, groups
        self.numel = entries[-1].end
        dtypes = {e.param.dtype for e in entries}
        if len(dtypes) != 1:
            raise ValueError("initialize: the trainable parameters have "
                             f"several dtypes {sorted(map(str, dtypes))}; "
                             "zeroshard needs one")
        self.dtype = dtypes.pop()
        if self.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"initialize: parameters of dtype {self.dtype} "
                             "(float32, float16 or bfloat16 are supported)")
        self.device = entries[0].param.device
        self._client = self._connect(servers, job_id, client_options)
        self._elastic = None
        self._failed = None  # elastic: a collective failed in backward
        self.left = False  # an elastic worker that left the job
        if elastic is not None:
            if self.aggregation or self.stage == 3:
                raise ValueError("initialize: elastic workers need stage 0-2 "
                                 "without zeroshard.server_aggregation")
            from .elastic import ElasticWorld
            opts = dict(elastic)
            opts.setdefault("log", lambda line: print(
                f"zeroshard elastic: {line}", flush=True))
            self._elastic = ElasticWorld(self._client, **opts)
            _, self.rank, self.world = self._elastic.form()
        self._register()
        self._join_world()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="zeroshard-push")
        self._pipe = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="zeroshard-reduce")
        self._post = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="zeroshard-post")
        self._pending = []  # futures of this step's reduce/push work
        self._lock = threading.Lock()
        self._micro = 0           # micro-batches done in this step
        self._backward_done = False
        self._micro_steps = 0     # DeepSpeed's micro_steps
        self._backward_boundary = False  # the last backward's: pushed?
        self._no_sync = False     # inside no_sync()
        self._boundary = None     # set_gradient_accumulation_boundary's
        self._skipped = 0
        self._params = self._make_params()
        self._behind = None  # a fetch in flight behind the forward
        self._owners = param_owners(model, entries) \
            if self.stage != 3 else None
        # Forwards that read parameters elsewhere than `_parameters` (RNNs,
        # TorchScript) wait in pre-hooks (behind.py).
        self._hook_handles, self._script_ranges = [], []
        if self._owners is not None:
            hooked, self._script_ranges = pre_hooks(model, entries)
            for m, ranges in hooked.items():
                self._hook_handles.append(m.register_forward_pre_hook(
                    self._behind_pre_hook(ranges)))
        self._setup_grads()
        self._params.after_hooks()  # stage 3: now the parameters go
        self._trainer = None
        self._start()

    # ------------------------------------------------------------- set up
    def _connect(self, servers, job_id, client_options):
        servers = servers or self.config.server_list or \
            os.environ.get("ZEROSHARD_SERVERS", "")
        if isinstance(servers, str):
            servers = [s.strip() for s in servers.split(",") if s.strip()]
        if not servers:
            raise ValueError("initialize: no servers (pass servers=, set "
                             "the config's zeroshard.servers or "
                             "$ZEROSHARD_SERVERS). To try it on one "
                             "machine: `with zeroshard.LocalFleet(2) as "
                             "fleet:` and servers=fleet.addresses "
                             "(docs/python.md)")
        opts = dict(client_options or {})
        if "insecure" not in opts and "tls_ca_file" not in opts:
            ca = os.environ.get("ZEROSHARD_TLS_CA")
            if ca:
                opts["tls_ca_file"] = ca
            elif all(_loopback(s) for s in servers):
                opts["insecure"] = True
            else:
                raise ValueError("initialize: servers off this machine need "
                                 "TLS: client_options={'tls_ca_file': ...} "
                                 "or $ZEROSHARD_TLS_CA (or 'insecure': True)")
        job = job_id or os.environ.get("ZEROSHARD_JOB_ID") or "torch"
        return Client(servers, job, **opts)

    def _join_world(self):
        """The ranks' slices and the trainer's group for self.world."""
        self._group = TorchGroup() if self.world > 1 else None
        self._slices = []  # every rank's [begin, end) of the flat space
        for r in range(self.world):
            off, cnt = self._client.slice(self.world, r)
            self._slices.append((off, off + cnt))
        self._slice = self._slices[self.rank]

    def _register(self):
        contributions = self.world * self.gas if self.aggregation else 1
        serving = "fp16" if self.precision == "fp16" else "bf16"
        tensors = [(e.name, e.shape or (1,), e.group) for e in self.entries]
        self._client.register(tensors, self.groups,
                              alignment=self.config.alignment,
                              contributions_per_step=contributions,
                              serving_dtype=serving)
        if self._client.model_size() != self.numel:
            raise Error(_FAILED_PRECONDITION, "the servers' model has "
                        f"{self._client.model_size()} elements, this module "
                        f"{self.numel}")

    def _make_params(self):
        from .stage3 import FlatParams, PartitionedParams, server_ranges
        self._server_ranges = server_ranges(self._client)
        if self.stage == 3:
            return PartitionedParams(self)
        return FlatParams(self)

    def _start(self, resume=False):
        """Starts (or, after a restore, resumes) the step protocol. A
        resume needs recovery on, so that the start finds the servers'
        step instead of writing the module's parameters."""
        if self._trainer is not None:
            self._trainer.close()
        interval = self.config.checkpoint_interval
        recover = resume or self._elastic is not None
        self._recovery = bool(interval) or recover
        self._trainer = Trainer(
            self._client, self._group,
            checkpoint_interval=interval or (1 << 30 if recover else 0),
            min_epoch=getattr(self, "_epoch", 0),
            elastic=self._elastic is not None,
            member=self._elastic.member if self._elastic else None)
        now = self.config.initial_scaler_state(
            {"step": 0, "updates": 0, "data_epoch": 0, "data_shard": 0,
             "data_offset": 0, "seed": 0})
        initial = None
        if self.rank == 0 and not resume:
            initial = self._params.initial()
        self._held = None
        self._closed = False
        try:
            outcome = self._trainer.start(initial, now)
        except Error as e:
            if resume or e.code != _FAILED_PRECONDITION or \
                    _HELD_BY_SERVERS not in e.message:
                raise
            # DeepSpeed's initialize() then load_checkpoint() against
            # servers that still hold the job: nothing was written; the
            # load restores, and anything else raises this.
            self._held = e
            self._epoch = getattr(self, "_epoch", 0)
            self._world_epoch = getattr(self, "_world_epoch", 0)
            self._state = dict(now)
            warnings.warn(f"zeroshard: {e.message}; or load_checkpoint() "
                          "one of its checkpoints", stacklevel=3)
            return
        if outcome.moved and not resume and self.rank == 0 and \
                self._elastic is None:
            warnings.warn(
                f"zeroshard: the servers hold job {self._client.job_id!r} at "
                f"step {outcome.state['step']}: it continues from there "
                "(the servers' parameters and optimizer state replace the "
                "module's); for a new run, restart the servers (a server "
                "holds one model at a time)", stacklevel=3)
        self._apply(outcome)
        self._fetch()

    # ----------------------------------------------------- DeepSpeed's API
    def _check_open(self):
        if self._closed:
            raise Error(_FAILED_PRECONDITION, "the engine is closed "
                        "(engine.close() was called)")

    def _check_not_held(self):
        self._check_open()
        if self._held is not None:
            raise Error(self._held.code, self._held.message)

    def forward(self, *inputs, **kwargs):
        self._check_not_held()
        if self._script_ranges and self._behind is not None:
            self._behind.wait_ranges(self._script_ranges)
        if self._auto_cast:  # fp16.auto_cast, as DeepSpeed's forward
            inputs = _half(inputs, self.device.type == "cuda")
        if self._torch_autocast:  # the config's torch_autocast
            with torch.autocast(device_type=self.device.type,
                                dtype=torch.bfloat16):
                return self.module(*inputs, **kwargs)
        return self.module(*inputs, **kwargs)

    def _behind_pre_hook(self, ranges):
        def hook(module, inputs):
            fetch = self._behind
            if fetch is not None:
                fetch.wait_ranges(ranges)
        return hook

    @property
    def global_steps(self):
        return int(self._state["step"])

    @property
    def global_samples(self):
        return self.global_steps * self.train_batch_size()

    @property
    def skipped_steps(self):
        return self._skipped

    @property
    def global_rank(self):
        return self.rank

    @property
    def world_size(self):
        return self.world

    def get_global_grad_norm(self):
        """The last step's global gradient norm (unscaled), as the step
        leader computed it; None before the first step."""
        d = getattr(self, "last_decision", None)
        return None if d is None else d.grad_norm

    def was_step_applied(self):
        """DeepSpeed's: whether the last step updated the parameters (false
        after an fp16 overflow skipped it; true before the first step)."""
        d = getattr(self, "last_decision", None)
        return d is None or not d.skipped

    def train_batch_size(self):
        return int(self.config.train_batch_size)

    def train_micro_batch_size_per_gpu(self):
        return int(self.config.micro_batch_per_worker)

    def gradient_accumulation_steps(self):
        return self.gas

    def is_gradient_accumulation_boundary(self):
        """Whether the coming micro-batch ends the step: the override of
        set_gradient_accumulation_boundary, else every
        gradient_accumulation_steps-th micro-batch."""
        if self._boundary is not None:
            return self._boundary
        return self._micro_steps % self.gas == self.gas - 1

    def set_gradient_accumulation_boundary(self, is_boundary):
        """DeepSpeed's: overrides whether the coming micro-batch ends the
        step (accelerate sets it from its sync_gradients before every
        backward); every rank must set the same. The gradients are still
        averaged over gradient_accumulation_steps micro-batches, as in
        DeepSpeed. None: back to counting micro-batches."""
        self._boundary = None if is_boundary is None else bool(is_boundary)

    def zero_optimization_stage(self):
        return self.stage

    def zero_optimization_partition_gradients(self):
        return self.stage >= 2

    def zero_optimization_partition_weights(self):
        return self.stage == 3

    def fp16_enabled(self):
        return self.precision == "fp16"

    def fp16_auto_cast(self):
        return self._auto_cast

    def torch_autocast_enabled(self):
        return self._torch_autocast

    def torch_autocast_dtype(self):
        return torch.bfloat16 if self._torch_autocast else None

    def bfloat16_enabled(self):
        return self.precision == "bf16"

    def loss_scale(self):
        return float(self._state["loss_scale"])

    def get_lr(self):
        view = self._view
        if view is not None and any(
                g.get("lr") != w for g, w in zip(view, self._written)):
            return [float(g["lr"]) for g in view]  # an edit for the next
        lr = self._base_lr(self._state["updates"])
        return [lr * g["lr_scale"] for g in self.groups]

    def _base_lr(self, updates):
        """The rate of the update after `updates` applied ones, for group
        scale 1: a rate the script set in param_groups, else the config's
        schedule, or the client optimizer's (client_optim.py)."""
        if self._lr_override is not None:
            return self._lr_override
        if self._client_schedule is None:
            return self.config.lr(updates)
        return self._client_schedule.base_lr(
            updates, [g["lr_scale"] for g in self.groups])

    def _edited_rate(self):
        """The rate for group scale 1 a script's edit of
        optimizer.param_groups' lr asks for, or None without an edit. Error,
        changing nothing, for betas, eps or weight decay edited, or rates
        out of the groups' ratios."""
        view, written = self._view, self._written
        if view is None:
            return None
        for i, (g, held) in enumerate(zip(view, self.groups)):
            now = (tuple(g["betas"]), g["eps"], g["weight_decay"])
            was = ((held["beta1"], held["beta2"]), held["eps"],
                   held["weight_decay"])
            if now != was:
                raise Error(_FAILED_PRECONDITION,
                            f"optimizer.param_groups[{i}]: betas, eps or "
                            f"weight_decay changed ({was} at initialize, now "
                            f"{now}); the servers hold them fixed: only lr "
                            "may change")
        if all(g["lr"] == w for g, w in zip(view, written)):
            return None
        return client_optim.common_rate([float(g["lr"]) for g in view],
                                        [g["lr_scale"] for g in self.groups])

    def _step_lr(self, updates):
        """This update's rate for group scale 1. A script's edit of
        optimizer.param_groups' lr (as DeepSpeed's optimizer takes it) is
        this update's rate; a schedule overwrites it for the next (as
        DeepSpeed's scheduler.step() does), else it holds."""
        base = self._edited_rate()
        if base is None:
            return self._base_lr(updates)
        self._written = [g["lr"] for g in self._view]
        if not self._scheduled:
            self._lr_override = base
        return base

    def param_groups(self):
        """torch's keys (lr, betas, eps, weight_decay, params) and the
        servers' (beta1, beta2, lr_scale); the same dicts each time, so a
        script's `g["lr"] = ...` takes effect at the next update."""
        if self._view is None:
            self._view = [
                dict(g, betas=(g["beta1"], g["beta2"]),
                     params=[e.param for e in self.entries if e.group == i])
                for i, g in enumerate(self.groups)]
            self._written = [None] * len(self._view)
        if all(g.get("lr") == w for g, w in zip(self._view, self._written)):
            self._refresh_view()  # no edit waiting
        return self._view

    def _refresh_view(self):
        """The next update's rates into param_groups' dicts (after a step,
        as DeepSpeed's scheduler.step() writes them), so that a script
        holding the dicts sees them and its next edit, even of the same
        value as before, counts."""
        if self._view is None:
            return
        self._written = self.get_lr()
        for g, lr in zip(self._view, self._written):
            g["lr"] = lr

    def get_mom(self):
        """DeepSpeed's: each group's betas."""
        return [(g["beta1"], g["beta2"]) for g in self.groups]

    def module_state_dict(self, exclude_frozen_parameters=False):
        """DeepSpeed's: the module's state_dict, whole at every stage
        (consolidated_state_dict)."""
        return self.consolidated_state_dict(exclude_frozen_parameters)

    def zero_grad(self, set_to_none=True):  # noqa: ARG002
        """DeepSpeed's: the parameters' .grad to None. (The engine keeps the
        step's gradients in its own buffer, which it zeroes at the start of
        each step: this loses no accumulated gradient.)"""
        if self._params.grads_in_views:
            for e in self.entries:
                e.param.grad = None

    @property
    def micro_steps(self):
        """DeepSpeed's: micro-batches stepped (step() calls) so far."""
        return self._micro_steps

    def gradient_clipping(self):
        return self.clipping

    @contextlib.contextmanager
    def no_sync(self):
        """DeepSpeed's: a backward inside reduces nothing and leaves its loss
        undivided by the accumulation steps; the gradients go out with the
        next backward outside it, after which step() (not allowed inside)
        takes the step. Stages 0-1, as in DeepSpeed."""
        if self.stage >= 2:
            raise Error(_FAILED_PRECONDITION, "no_sync() is incompatible "
                        f"with ZeRO stage {self.stage}'s gradient "
                        "partitioning (stages 0 and 1 only, as DeepSpeed's)")
        if self.aggregation:
            raise Error(_FAILED_PRECONDITION, "no_sync() with "
                        "zeroshard.server_aggregation, which pushes every "
                        "micro-batch")
        if self._no_sync:
            raise Error(_FAILED_PRECONDITION, "no_sync() entered twice")
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = False

    def backward(self, loss, release_loss=False, retain_graph=False,
                 scale_wrt_gas=True):  # noqa: ARG002 - DeepSpeed's signature
        """(loss x loss scale).backward() for this micro-batch, reducing and
        pushing the gradients on the step's last one. The step's gradient is
        the mean over its micro-batches (DeepSpeed's loss / gas); with
        scale_wrt_gas=False (or inside no_sync()) this micro-batch's is not
        divided by the accumulation steps. Returns the loss as DeepSpeed
        does: divided by the accumulation steps when it scaled it."""
        self._check_not_held()
        if not torch.is_tensor(loss) or loss.numel() != 1:
            raise ValueError("backward: loss must be a one-element tensor")
        if self._backward_done:
            if self._backward_boundary:
                raise Error(_FAILED_PRECONDITION, "backward called twice at "
                            "the gradient accumulation boundary: call step() "
                            "after the step's last backward()")
            # DeepSpeed's set_gradient_accumulation_boundary and no_sync
            # patterns (accelerate >= 1.8): a backward per micro-batch and
            # one step() after the last; the earlier step() calls, which
            # would only count the micro-batch, are implied.
            self._backward_done = False
            self._micro_steps += 1
        self.wait_parameters()
        start = time.perf_counter()
        # Inside no_sync() nothing is reduced (as DeepSpeed's): the step's
        # gradients go out with a later backward outside it.
        last = self.is_gradient_accumulation_boundary() and not self._no_sync
        self._backward_boundary = last
        if self._micro == 0 or self.aggregation:
            self._wait_pending()  # the previous pushes read the buffer
            self._gflat.zero_()
        if self._params.grads_in_views:
            self._attach_grads()
        self._ready = [0] * len(self._buckets)
        self._issued = 0
        self._acting = self.overlap and (last or self.aggregation)
        self._sumsq, self._nonfinite = 0.0, False
        self._params.before_backward()
        scale = self.loss_scale()
        by_gas = scale_wrt_gas and not self._no_sync
        if not by_gas and self.gas > 1:
            scale *= self.gas  # the gradients are divided by gas at the push
        try:
            (loss * scale if scale != 1 else loss).backward(
                retain_graph=retain_graph)
            self._params.after_backward()
            self._acting = False
            if last or self.aggregation:
                while self._issued < len(self._buckets):
                    self._issue(self._issued)
                    self._issued += 1
        except RuntimeError as e:
            if self._elastic is None:
                raise
            self._failed = e  # a peer died: step() forms a new group
            self._acting = False
        if self.monitor is not None:
            self._monitor_loss += float(loss.detach())
        self._micro += 1
        self._backward_done = True
        self.timings["backward"] += time.perf_counter() - start
        return loss.float() / self.gas if by_gas and self.gas > 1 else loss

    def step(self, lr_kwargs=None):  # noqa: ARG002 - DeepSpeed's signature
        """At the gradient accumulation boundary: the optimizer step on the
        servers and the parameter fetch; otherwise the next micro-batch.
        lr_kwargs (DeepSpeed's, for its scheduler's step) is ignored: the
        schedule follows the servers' applied updates."""
        self._check_open()
        if self._no_sync:
            raise Error(_FAILED_PRECONDITION, "step() inside no_sync(): the "
                        "step's gradients are reduced by a backward outside "
                        "it (as DeepSpeed has it)")
        if not self._backward_done:
            raise Error(_FAILED_PRECONDITION, "step() before backward(): "
                        "call engine.backward(loss) first")
        boundary = self._backward_boundary  # what that backward pushed for
        if boundary:  # refused edits change nothing
            self._edited_rate()
            self._base_lr(self._state["updates"])
        self._backward_done = False
        self._micro_steps += 1
        if not boundary:
            return
        start = time.perf_counter()
        self._micro = 0
        self.zero_grad()  # as DeepSpeed's step: no stale .grad after it
        if self._elastic is None:
            self._optimizer_step(start)
            return
        try:
            failed, self._failed = self._failed, None
            if failed is not None:
                raise failed
            if self.rank == 0:
                self._elastic.refresh()
            self._optimizer_step(start)
        except (Error, RuntimeError) as e:
            # A peer died or left mid-step (a collective failed, or the
            # group's callbacks did: UNAVAILABLE ...) forms a new group; a
            # permanent error (bad data or config, a model the servers do
            # not hold) ends this worker as it would any job.
            if isinstance(e, Error) and e.code_name not in _TRANSIENT:
                raise
            if self._elastic.left:
                self._leave_group()
                return
            self._elastic.log(f"step {self.global_steps} failed ({e}); "
                              "forming a new group")
            self._reform(self._elastic.epoch + 1)
            return
        if self._world_epoch > self._elastic.epoch:
            if self._elastic.left:
                self._leave_group()
            else:
                self._elastic.log("the membership changed at step "
                                  f"{self.global_steps}")
                self._reform(self._world_epoch)

    def _optimizer_step(self, start):
        self.wait_parameters()
        push_status = self._wait_pending()
        state = dict(self._state)
        args = {"step": state["step"], "push_status": push_status,
                "norm_from_servers": 1 if self.aggregation else 0,
                "sum_squares": self._sumsq, "nonfinite": int(self._nonfinite),
                "loss_scale": state["loss_scale"], "max_norm": self.clipping,
                "lr": self._step_lr(state["updates"])}
        try:
            if self.precision == "fp16" and self.config.loss_scale_dynamic:
                decision, outcome = self._trainer.decide(args)
                if outcome.kind == "ok":
                    after = self.config.update_scaler(state, decision.skipped)
                    outcome = self._trainer.commit(after)
            else:
                decision, outcome = self._trainer.step(args, state)
        except Error as e:
            message = e.message.replace(
                "close it: a new trainer's zs_trainer_start resumes or rolls "
                "back", "engine.load_checkpoint() restores one of the job's "
                "checkpoints, or start the job again")
            cause = getattr(self, "_push_error", None)
            if cause is not None and cause.message not in message:
                message = f"{message}: {cause.message}"
            if message == e.message:
                raise
            raise Error(e.code, message) from e
        if outcome.kind == "ok" and decision.skipped:
            self._skipped += 1
        self.last_decision = decision
        self._apply(outcome)
        self._refresh_view()
        if self.monitor is not None:
            self.monitor.write(self.global_samples,
                               self._monitor_loss / self.gas, args["lr"],
                               state["loss_scale"])
            self._monitor_loss = 0.0
        self.timings["step"] += time.perf_counter() - start
        self._fetch(behind=True)

    # ------------------------------------------------- parameters back
    def _apply(self, outcome):
        self._epoch = outcome.epoch
        self._world_epoch = outcome.world_epoch
        self._state = dict(outcome.state)

    # ------------------------------------------------------------ elastic
    def leave(self):
        """Elastic: leaves the job. The membership moves on at once; this
        worker keeps stepping with its group until the step whose outcome
        reports it (engine.left turns true), then leaves the group."""
        if self._elastic is None:
            raise Error(_FAILED_PRECONDITION, "leave(): not an elastic "
                        "worker (initialize(..., elastic={...}))")
        self._elastic.leave()
        if self.world == 1:
            self._leave_group()

    def _leave_group(self):
        self._drain()
        self.left = True
        self._elastic.log(f"left the job at step {self.global_steps}")

    def _drain(self):
        try:
            self._wait_pending()
        except Exception:  # noqa: BLE001 - the group is being dropped
            pass
        if self._trainer is not None:
            self._trainer.close()
            self._trainer = None

    def _reform(self, min_epoch):
        """A new group from a membership epoch >= min_epoch; it continues
        from the servers' last commit."""
        self._drain()
        _, self.rank, self.world = self._elastic.form(min_epoch)
        self._join_world()
        self._micro = self._micro_steps = 0
        self._backward_done = False
        self._start()

    def wait_parameters(self):
        """Waits for the parameters the last step() started gathering
        (the next forward, backward() and step() do it themselves; a
        caller reading the module's tensors between step() and the next
        forward through references it kept needs this)."""
        if self._behind is not None:
            self._behind.wait_all()
        self._params.wait_part()

    def _can_fetch_behind(self):
        flat = getattr(self._params, "flat", None)
        want = torch.float32 if self.precision == "fp32" else \
            _16BIT[self.precision]
        return (self._owners is not None and not self._recovery and
                flat is not None and flat.device.type == "cpu" and
                flat.dtype == want)

    def _end_behind(self, status, waited):
        self._behind = None
        self.timings["fetch"] += waited
        outcome = self._trainer.after_fetch(status)  # local: no recovery
        if outcome.moved:
            self._apply(outcome)
        if outcome.kind != "ok":
            self._fetch()

    def _fetch(self, behind=False):
        """Gathers the parameters until every rank's fetch went well,
        following roll backs (the state moves); behind: starts the gather
        behind the next forward where that is possible (behind.py)."""
        if behind and self._can_fetch_behind():
            self._behind = BehindFetch(self, self._params.flat,
                                       self._owners, self._end_behind)
            return
        start = time.perf_counter()
        while True:
            status = 0
            try:
                self._params.fetch(behind=behind and not self._recovery)
            except Error as e:
                status = e.code
            outcome = self._trainer.after_fetch(status)
            if outcome.moved:
                self._apply(outcome)
            if outcome.kind == "ok":
                break
        self.timings["fetch"] += time.perf_counter() - start

    # ------------------------------------------------------- checkpoints
    def save_checkpoint(self, save_dir, tag=None, client_state=None,
                        save_latest=True, exclude_frozen_parameters=False):
        """Checkpoints the servers' state at this step (they write it under
        their --checkpoint_dir) and records in save_dir/tag which step it
        is, with client_state. Collective. Frozen parameters are never in
        it (the servers hold the trained ones; a frozen one is the module's
        own, as the script loads it), so exclude_frozen_parameters, which
        Hugging Face's Trainer passes for PEFT models, changes nothing."""
        del exclude_frozen_parameters
        from . import checkpoint
        self._check_not_held()
        self.wait_parameters()
        return checkpoint.save(self, save_dir, tag, client_state, save_latest)

    def consolidated_state_dict(self, exclude_frozen_parameters=False):
        """The module's state_dict with whole parameters at any stage, from
        the servers' fp32 masters (in the module's dtypes); stage 3's
        module.state_dict() holds only this rank's released stand-ins.
        Not collective."""
        from . import checkpoint
        self._check_not_held()
        self.wait_parameters()
        return checkpoint.consolidated_state_dict(
            self, exclude_frozen_parameters)

    # What accelerate's get_state_dict / save_model and Hugging Face's
    # Trainer call at ZeRO-3: the whole weights always come from the
    # servers' masters, whatever stage3_gather_16bit_weights_on_model_save.
    def zero_gather_16bit_weights_on_model_save(self):
        return True

    def _zero3_consolidated_16bit_state_dict(self,
                                             exclude_frozen_parameters=False):
        return self.consolidated_state_dict(exclude_frozen_parameters)

    def get_data_parallel_world_size(self):
        return self.world

    def get_data_parallel_rank(self):
        return self.rank

    def __getattr__(self, name):
        """torch.nn.Module's lookup, then the wrapped module's attributes
        (engine.generate(...), a model's own methods), as DeepSpeed's
        engine passes them through."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules", {})
            module = modules.get("module")
            if module is None or name.startswith("__"):
                raise
            return getattr(module, name)

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin",
                         exclude_frozen_parameters=False):
        """DeepSpeed's: rank 0 saves consolidated_state_dict() with
        torch.save as save_dir/save_filename (the module's dtypes: fp32,
        or fp16/bf16 under mixed precision). Returns True. Collective."""
        from . import checkpoint
        self._check_not_held()
        self.wait_parameters()
        return checkpoint.save_16bit_model(self, save_dir, save_filename,
                                           exclude_frozen_parameters)

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True,
                        load_optimizer_states=True,
                        load_lr_scheduler_states=True, load_module_only=False,
                        custom_load_fn=None):
        """Restores the servers to the step recorded in load_dir/tag and
        reloads the module's parameters. Returns (load_dir/tag,
        client_state). Collective.

        DeepSpeed's options: the servers restore the weights, the AdamW
        moments and the step (which sets the schedule) together, so
        load_optimizer_states=False, load_lr_scheduler_states=False,
        load_module_only=True and a custom_load_fn are refused (ValueError)
        rather than ignored; load_module_strict has nothing to relax (every
        parameter is restored)."""
        from . import checkpoint
        del load_module_strict
        for name, value, default in (
                ("load_optimizer_states", load_optimizer_states, True),
                ("load_lr_scheduler_states", load_lr_scheduler_states, True),
                ("load_module_only", load_module_only, False)):
            if bool(value) != default:
                raise ValueError(
                    f"load_checkpoint: {name}={value} is not supported: the "
                    "servers restore the weights, the optimizer state and "
                    "the step together (for the weights alone: "
                    "consolidated_state_dict() of an engine at that step, or "
                    "the file save_16bit_model() wrote)")
        if custom_load_fn is not None:
            raise ValueError("load_checkpoint: custom_load_fn is not "
                             "supported (the servers load their own state)")
        self._check_open()
        self.wait_parameters()
        return checkpoint.load(self, load_dir, tag)

    def close(self):
        if self._closed:
            return
        try:
            self.wait_parameters()
        finally:
            self._closed = True
            self._close()

    def _close(self):
        for handle in self._hook_handles:
            handle.remove()
        self._hook_handles = []
        self._drain() if self.left else self._wait_pending()
        if self._trainer is not None:
            self._trainer.close()
            self._trainer = None
        if self._elastic is not None:
            self._elastic.close()
        self._pool.shutdown()
        self._pipe.shutdown()
        self._post.shutdown()
        self._client.close()
        if self.monitor is not None:
            self.monitor.close()

    def deepspeed_io(self, dataset, batch_size=None, route="train",
                     pin_memory=True, data_sampler=None, collate_fn=None,
                     num_local_io_workers=None):
        """DeepSpeed's: a DataLoader of this rank's share of `dataset` in
        micro-batches (batch_size: train_micro_batch_size_per_gpu). A
        map-style dataset is drawn by a DistributedSampler over the data-
        parallel ranks, shuffled (seed 0) on the "train" route and in order
        on "eval" and "predict", as DeepSpeed's loader draws it; an
        iterable dataset gives each rank what it yields. The config's
        dataloader_drop_last drops a last short batch. collate_fn defaults
        to initialize()'s; num_local_io_workers to 0 (in-process loading);
        pin_memory only where the model is on a GPU."""
        if not isinstance(dataset, torch.utils.data.Dataset):
            raise ValueError("deepspeed_io: the data must be a torch Dataset "
                             f"(map-style or iterable), got "
                             f"{type(dataset).__name__}")
        if route not in ("train", "eval", "predict"):
            raise ValueError('deepspeed_io: route must be "train", "eval" or '
                             f'"predict", got {route!r}')
        if batch_size is None:
            batch_size = self.train_micro_batch_size_per_gpu()
        if collate_fn is None:
            collate_fn = self.collate_fn
        iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        if data_sampler is None and not iterable:
            data_sampler = torch.utils.data.distributed.DistributedSampler(
                dataset, num_replicas=self.world, rank=self.rank,
                shuffle=route == "train")
        on_gpu = self.device.type == "cuda"
        return torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, sampler=data_sampler,
            collate_fn=collate_fn, num_workers=num_local_io_workers or 0,
            pin_memory=bool(pin_memory) and on_gpu,
            drop_last=self.dataloader_drop_last)
