"""zeroshard.initialize at its edges, with real zeroshard-server processes
(LocalFleet) and one rank, against torch.optim.AdamW: a stage 3 first
forward that raises, stage 3 modules returning namedtuples, dataclasses
and other objects with their units released after forward, and the
module's buffers (BatchNorm's running stats) in save/load_checkpoint."""
import argparse
import collections
import copy
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import unittest
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402
import zeroshard  # noqa: E402
import zeroshard.zero  # noqa: E402
from zeroshard._ports import quiet_port  # noqa: E402
from torch_engine_test import LR, WD, config, step_both  # noqa: E402


def data(step, width=6, batch=4):
    g = torch.Generator().manual_seed(7919 * step + 1)
    return torch.randn(batch, width, generator=g)


def materialised(engine, net):
    """The module's parameters (stage 3: every unit gathered first)."""
    engine.wait_parameters()
    if engine.stage == 3:
        for u in engine._params.units:
            engine._params._materialise(u)
    return {n: p.detach().clone() for n, p in net.named_parameters()}


def attn_pair():
    """(ref, net, opt): an Attn, its copy for the engine, and torch's
    AdamW over the first."""
    torch.manual_seed(0)
    ref = Attn()
    return ref, copy.deepcopy(ref), torch.optim.AdamW(
        tm.torch_groups(ref, WD), lr=LR)


def trains_as_torch(test, engine, net, ref, opt, steps):
    """`steps` steps of the engine over `net` and of torch's `opt` over
    `ref` on data(step): the same losses and parameters."""
    for step in range(steps):
        loss, ref_loss = tm.step_mean_square(engine, ref, opt, data(step))
        test.assertAlmostEqual(loss, ref_loss, delta=1e-6, msg=step)
    got = materialised(engine, net)
    for name, p in ref.named_parameters():
        test.assertLess((got[name] - p).abs().max().item(), 1e-6, name)


def hooks(net):
    return [(len(m._forward_pre_hooks), len(m._forward_hooks),
             type(m._parameters).__name__) for m in net.modules()]


class Attn(torch.nn.Module):
    """nn.MultiheadAttention reads out_proj.weight without calling
    out_proj: what the first forward's tracking exists for."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(6, 8)
        self.mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, x):
        h = self.inp(x).unsqueeze(1)
        return self.out(self.mha(h, h, h)[0].squeeze(1))


class FirstForwardTest(unittest.TestCase):
    def test_stage3_first_forward_that_raises(self):
        """A first forward that raises (a wrong input shape) leaves the
        engine as before it; the training that follows is torch's."""
        ref, net, opt = attn_pair()
        with zeroshard.LocalFleet(2) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(3), servers=fleet.addresses)
            before = hooks(net)
            with self.assertRaisesRegex(RuntimeError, "shapes"):
                engine(torch.ones(4, 7))
            self.assertEqual(hooks(net), before)
            self.assertEqual(engine._params.trace, [])
            held = [p.numel() for p in net.parameters()]
            self.assertEqual(held, [0] * len(held), "units left gathered")
            trains_as_torch(self, engine, net, ref, opt, 4)
            self.assertEqual(hooks(net), before)
            self.assertNotIn("forward", vars(net))
            engine.close()


NT = collections.namedtuple("NT", "y aux")


@dataclasses.dataclass
class DC:
    y: torch.Tensor
    aux: int = 0


@dataclasses.dataclass(frozen=True)
class FrozenDC:
    y: torch.Tensor


class Obj:
    def __init__(self, y):
        self.y = y


class Inner(torch.nn.Module):
    """Owns its parameters (its own unit) and returns `kind`."""

    def __init__(self, kind):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 6) * 0.4)
        self.b = torch.nn.Parameter(torch.zeros(6))
        self.kind = kind

    def forward(self, x):
        y = torch.tanh(torch.nn.functional.linear(x, self.w, self.b))
        return {"nt": lambda: NT(y, 1), "dc": lambda: DC(y, 1),
                "frozen": lambda: FrozenDC(y), "obj": lambda: Obj(y)}[
                    self.kind]()


class Outer(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.pre = torch.nn.Linear(6, 6)  # backward needs inner's weight
        self.inner = Inner(kind)
        self.head = torch.nn.Linear(6, 1)

    def forward(self, x):
        out = self.inner(self.pre(x))
        assert type(out).__name__ in ("NT", "DC", "FrozenDC", "Obj")
        return self.head(out.y)


class OutputsTest(unittest.TestCase):
    """stage3_max_reuse_distance 0: every unit is released after its
    forward and gathered again for its backward, found through the
    module's outputs."""

    def test_stage3_namedtuple_and_dataclass_outputs(self):
        cfg = config(3, zero={"stage3_max_reuse_distance": 0})
        for kind in ("nt", "dc", "frozen"):
            with zeroshard.LocalFleet(2) as fleet:
                torch.manual_seed(0)
                ref = Outer(kind)
                net = copy.deepcopy(ref)
                opt = torch.optim.AdamW(tm.torch_groups(ref, WD), lr=LR)
                engine, _, _, _ = zeroshard.initialize(
                    model=net, config=cfg, servers=fleet.addresses)
                for step in range(3):
                    x = data(step)
                    loss = ((engine(x) - 1) ** 2).mean()
                    engine.backward(loss)
                    engine.step()
                    opt.zero_grad()
                    ref_loss = ((ref(x) - 1) ** 2).mean()
                    ref_loss.backward()
                    opt.step()
                    self.assertAlmostEqual(loss.item(), ref_loss.item(),
                                           delta=1e-6, msg=(kind, step))
                got = materialised(engine, net)
                for name, p in ref.named_parameters():
                    self.assertLess((got[name] - p).abs().max().item(),
                                    1e-6, (kind, name))
                engine.close()

    def test_stage3_other_output_object_is_a_clear_error(self):
        cfg = config(3, zero={"stage3_max_reuse_distance": 0})
        with zeroshard.LocalFleet(1) as fleet:
            torch.manual_seed(0)
            engine, _, _, _ = zeroshard.initialize(
                model=Outer("obj"), config=cfg, servers=fleet.addresses)
            x = data(0)
            # The first forward keeps every unit: it trains.
            engine.backward(((engine(x) - 1) ** 2).mean())
            engine.step()
            with self.assertRaisesRegex(
                    TypeError, r"module 'inner' \(Inner\) returned a "
                    r"\S*Obj holding tensors.*namedtuples and dataclasses"):
                engine(x)
            with torch.no_grad():  # nothing to gather for a backward
                engine(x)
            engine.close()


class BNNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(6, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.out = torch.nn.Linear(16, 1)
        # Not in state_dict: not saved.
        self.register_buffer("scratch", torch.zeros(3), persistent=False)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.inp(x))))


def buffers(net):
    return {n: b.clone() for n, b in net.named_buffers()}


class CheckpointBuffersTest(unittest.TestCase):
    def check_stage(self, stage):
        def batch(step):
            x = data(step, batch=8)
            return x, x.sum(1, keepdim=True)

        def train(model, steps, opt=None):
            for step in steps:
                x, y = batch(step)
                loss = ((model(x) - y) ** 2).mean()
                if opt is None:
                    model.backward(loss)
                    model.step()
                else:
                    opt.zero_grad()
                    loss.backward()
                    opt.step()

        def evaluate(model):
            model.eval()
            with torch.no_grad():
                x, y = batch(999)
                loss = ((model(x) - y) ** 2).mean().item()
            model.train()
            return loss

        torch.manual_seed(0)
        ref = BNNet()
        net = copy.deepcopy(ref)
        opt = torch.optim.AdamW(tm.torch_groups(ref, WD), lr=LR)
        with tempfile.TemporaryDirectory() as ckpt, \
                tempfile.TemporaryDirectory() as save, \
                zeroshard.LocalFleet(1, checkpoint_dir=ckpt) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(stage), servers=fleet.addresses)
            train(engine, range(3))
            # (Hugging Face's Trainer passes exclude_frozen_parameters.)
            engine.save_checkpoint(save, "three",
                                   exclude_frozen_parameters=True)
            at_three = buffers(net)
            train(engine, range(3, 6))
            net.scratch.fill_(5.0)
            engine.load_checkpoint(save)
            self.assertEqual(engine.global_steps, 3)
            for name in ("bn.running_mean", "bn.running_var",
                         "bn.num_batches_tracked"):
                self.assertTrue(torch.equal(at_three[name],
                                            buffers(net)[name]), name)
            self.assertEqual(net.scratch.tolist(), [5.0] * 3)
            # Resumed at 3, trained to 6: torch's 6 steps, eval included.
            train(engine, range(3, 6))
            train(ref, range(6), opt)
            self.assertAlmostEqual(evaluate(engine), evaluate(ref),
                                   delta=1e-6)
            for name, value in buffers(ref).items():
                if name != "scratch":
                    self.assertLess((buffers(net)[name] - value).abs().max()
                                    .item(), 1e-5, name)
            self.assertEqual(sorted(os.listdir(os.path.join(save, "three"))),
                             ["buffers.pt", "client_state.pt",
                              "zeroshard.json"])
            # A checkpoint written before buffers were saved: it loads,
            # with a warning, and leaves the buffers as they are.
            os.remove(os.path.join(save, "three", "buffers.pt"))
            now = buffers(net)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                engine.load_checkpoint(save)
            self.assertTrue(any("were not restored" in str(w.message)
                                for w in caught), [str(w.message)
                                                   for w in caught])
            self.assertEqual(engine.global_steps, 3)
            for name, value in now.items():
                self.assertTrue(torch.equal(value, buffers(net)[name]), name)
            engine.close()

    def test_buffers_saved_and_restored_stage_2(self):
        self.check_stage(2)

    def test_buffers_saved_and_restored_stage_3(self):
        self.check_stage(3)


class DataAndConfigsTest(unittest.TestCase):
    """deepspeed_io as DeepSpeed's loader draws (checked against torch's
    own DistributedSampler order), and a ZeRO-3 config written with
    DeepSpeed's field names (axolotl's max_live_parameters /
    max_reuse_distance) training as torch does."""

    def test_deepspeed_io_draws_as_deepspeed(self):
        data = torch.utils.data.TensorDataset(torch.arange(10.0))
        cfg = config(2, dataloader_drop_last=True)
        with zeroshard.LocalFleet(1) as fleet:
            engine, _, loader, _ = zeroshard.initialize(
                model=tm.model(), config=cfg, servers=fleet.addresses,
                training_data=data,
                collate_fn=lambda items: [int(i[0]) for i in items])
            # A DistributedSampler's train order: torch's randperm of
            # seed 0 (epoch 0); the last short batch dropped.
            perm = torch.randperm(
                10, generator=torch.Generator().manual_seed(0)).tolist()
            b = tm.BATCH
            want = [perm[i:i + b] for i in range(0, 10 - b + 1, b)
                    if len(perm[i:i + b]) == b]
            self.assertEqual(list(loader), want)
            self.assertEqual(list(loader), want)  # DeepSpeed's: every epoch
            evals = engine.deepspeed_io(data, batch_size=4, route="eval")
            # In order; initialize()'s collate_fn; drop_last.
            self.assertEqual(list(evals), [[0, 1, 2, 3], [4, 5, 6, 7]])
            self.assertEqual(evals.sampler.num_replicas, engine.world)

            class Stream(torch.utils.data.IterableDataset):
                def __iter__(self):
                    return iter(range(5))

            got = engine.deepspeed_io(Stream(), batch_size=2,
                                      collate_fn=list)
            self.assertEqual(list(got), [[0, 1], [2, 3]])
            with self.assertRaisesRegex(ValueError, "must be a torch Dataset"):
                engine.deepspeed_io([1, 2, 3])
            with self.assertRaisesRegex(ValueError, "route must be"):
                engine.deepspeed_io(data, route="test")
            engine.close()

    def test_stage3_under_deepspeed_field_names(self):
        ref, net, opt = attn_pair()
        cfg = config(3, zero={"max_live_parameters": 0,
                              "max_reuse_distance": 0})
        with zeroshard.LocalFleet(2) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=cfg, servers=fleet.addresses)
            self.assertEqual(engine._params.reuse, 0)
            self.assertNotIn("unknown key", " ".join(engine.config.warnings))
            trains_as_torch(self, engine, net, ref, opt, 3)
            engine.close()


class GatheredParametersTest(unittest.TestCase):
    """zeroshard.GatheredParameters (DeepSpeed's zero.GatheredParameters):
    whole parameters inside the block at stage 3, and an edit with
    modifier_rank written to the servers, after which training goes on as
    torch's does after the same edit (AdamW's moments kept)."""

    def edit_and_train(self, stage):
        ref, net, opt = attn_pair()
        with zeroshard.LocalFleet(2) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(stage), servers=fleet.addresses)
            for step in range(2):  # (trains_as_torch leaves units live)
                tm.step_mean_square(engine, ref, opt, data(step))
            w = net.inp.weight
            with zeroshard.GatheredParameters([w, net.inp.bias]):
                self.assertEqual(tuple(w.shape), (8, 6))
                whole = engine.consolidated_state_dict()["inp.weight"]
                self.assertTrue(torch.equal(w.detach(), whole))
            if stage == 3:  # released again
                self.assertEqual(w.numel(), 0)
            with zeroshard.zero.GatheredParameters(w, modifier_rank=0):
                with torch.no_grad():
                    w[1].fill_(0.25)
            with torch.no_grad():
                ref.inp.weight[1].fill_(0.25)
            got = engine.consolidated_state_dict()["inp.weight"]
            self.assertTrue(torch.equal(got[1], torch.full((6,), 0.25)))
            trains_as_torch(self, engine, net, ref, opt, 2)
            engine.close()

    def test_stage_2(self):
        self.edit_and_train(2)

    def test_stage_3(self):
        self.edit_and_train(3)

    def test_16bit_keeps_the_masters_of_unchanged_elements(self):
        torch.manual_seed(0)
        net = Attn()
        with zeroshard.LocalFleet(1) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(3, bf16={"enabled": True}),
                servers=fleet.addresses)
            x = torch.ones(4, 6, dtype=torch.bfloat16)
            engine.backward((engine(x).float() ** 2).mean())
            engine.step()
            e = [e for e in engine.entries if e.param is net.out.weight][0]
            before = torch.empty(e.numel)
            engine._client.gather(e.offset, before)
            # Masters a bf16 copy does not hold.
            self.assertFalse(torch.equal(before, before.bfloat16().float()))
            with zeroshard.GatheredParameters(net.out.weight,
                                              modifier_rank=0):
                with torch.no_grad():
                    net.out.weight[0, 3] = 2.0
            after = torch.empty(e.numel)
            engine._client.gather(e.offset, after)
            self.assertEqual(after[3].item(), 2.0)
            keep = torch.arange(e.numel) != 3
            self.assertTrue(torch.equal(after[keep], before[keep]))
            engine.close()

    def test_what_it_refuses_and_leaves_alone(self):
        free = torch.nn.Linear(2, 2)  # no engine's: nothing to do
        with zeroshard.GatheredParameters(free.weight, modifier_rank=0):
            pass
        net = tm.model()
        with zeroshard.LocalFleet(1) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(2), servers=fleet.addresses)
            with self.assertRaisesRegex(ValueError, "not a rank of this job"):
                with zeroshard.GatheredParameters(net.mix.weight,
                                                  modifier_rank=1):
                    pass
            x, y = tm.batch(0, 0, 0)
            engine.backward(tm.loss_of(engine, x, y, 0))
            before = engine.consolidated_state_dict()["mix.weight"]
            with self.assertRaisesRegex(zeroshard.Error, "gradients are "
                                        "pending"):
                with zeroshard.GatheredParameters(net.mix.weight,
                                                  modifier_rank=0):
                    with torch.no_grad():
                        net.mix.weight.zero_()
            self.assertTrue(torch.equal(
                engine.consolidated_state_dict()["mix.weight"], before))
            self.assertTrue(torch.equal(net.mix.weight.detach(), before))
            engine.step()
            # A block that raises: nothing written, the edit undone.
            kept = engine.consolidated_state_dict()["mix.weight"]
            with self.assertRaisesRegex(RuntimeError, "changed my mind"):
                with zeroshard.GatheredParameters(net.mix.weight,
                                                  modifier_rank=0):
                    with torch.no_grad():
                        net.mix.weight.zero_()
                    raise RuntimeError("changed my mind")
            self.assertTrue(torch.equal(
                engine.consolidated_state_dict()["mix.weight"], kept))
            engine.wait_parameters()
            self.assertTrue(torch.equal(net.mix.weight.detach(), kept))
            engine.close()


# A script written for DeepSpeed, with zeroshard's names: its flags from
# add_config_arguments, init_distributed under torchrun's environment (a
# group of one, as DeepSpeed starts), initialize(args=...).
DS_SCRIPT = """
import argparse, sys
import torch.distributed as dist
import torch_models as tm
import zeroshard
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser = zeroshard.add_config_arguments(parser)
args = parser.parse_args()
assert args.deepspeed and args.deepspeed_config
zeroshard.init_distributed()
assert dist.is_initialized() and dist.get_world_size() == 1
with zeroshard.LocalFleet(1) as fleet:
    engine, _, _, _ = zeroshard.initialize(args=args, model=tm.model(),
                                           servers=fleet.addresses)
    assert args.local_rank == 0, args.local_rank
    x, y = tm.batch(0, 0, 0)
    engine.backward(tm.loss_of(engine, x, y, 0))
    engine.step()
    print("steps", engine.global_steps, "rank", dist.get_rank())
    engine.close()
"""


class DeepSpeedScriptTest(unittest.TestCase):
    def test_a_deepspeed_script_under_torchrun(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ds.json")
            with open(path, "w") as f:
                json.dump(config(2), f)
            env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                       LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(quiet_port()))
            env["PYTHONPATH"] = os.pathsep.join(
                [os.path.dirname(os.path.abspath(__file__)),
                 env.get("PYTHONPATH", "")])
            run = subprocess.run(
                [sys.executable, "-c", DS_SCRIPT, "--deepspeed",
                 "--deepspeed_config", path, "--local_rank", "-1"],
                env=env, capture_output=True, text=True, timeout=300)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn("steps 1 rank 0", run.stdout)

    def test_zero_init_builds_the_model_as_it_is(self):
        with self.assertWarnsRegex(UserWarning, "built whole on every rank"):
            with zeroshard.zero.Init(config_dict_or_path=config(3),
                                     remote_device="cpu"):
                net = tm.model()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with zeroshard.zero.Init(enabled=False):
                pass
        with zeroshard.LocalFleet(1) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(3), servers=fleet.addresses)
            x, y = tm.batch(0, 0, 0)
            engine.backward(tm.loss_of(engine, x, y, 0))
            engine.step()
            self.assertEqual(engine.global_steps, 1)
            engine.close()

    def test_fp16_auto_cast_rounds_positional_inputs(self):
        class Seen(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(3))

            def forward(self, x, pair, extra=None):
                self.seen = (x, pair[0], pair[1], extra)
                return (x * self.w).sum()

        for auto_cast in (True, False):
            net = Seen()
            cfg = config(2, fp16={"enabled": True, "auto_cast": auto_cast})
            with zeroshard.LocalFleet(1) as fleet:
                engine, _, _, _ = zeroshard.initialize(
                    model=net, config=cfg, servers=fleet.addresses)
                self.assertEqual(engine.fp16_auto_cast(), auto_cast)
                third = torch.full((3,), 1 / 3)
                engine(third, (third[:1], torch.ones(1).long()),
                       extra=third[:1])
                # Positional floating tensors only, as DeepSpeed's; on the
                # CPU (the module computes in fp32) rounded to fp16 values.
                rounded = third.half().float() if auto_cast else third
                x, first, ints, extra = net.seen
                self.assertEqual(x.dtype, torch.float32)
                self.assertTrue(torch.equal(x, rounded))
                self.assertTrue(torch.equal(first, rounded[:1]))
                self.assertEqual(ints.dtype, torch.int64)
                self.assertTrue(torch.equal(extra, third[:1]))
                engine.close()
        # Where the module computes in fp16 (a GPU): fp16 tensors, through
        # namedtuples and dicts.
        from zeroshard.engine import _half
        got = _half((NT(third, 1), {"k": [third]}), True)
        self.assertEqual(type(got[0]), NT)
        self.assertEqual(got[0].y.dtype, torch.float16)
        self.assertEqual(got[0].aux, 1)
        self.assertEqual(got[1]["k"][0].dtype, torch.float16)

    def test_torch_autocast_as_torch_runs_it(self):
        """"torch_autocast": the forward under torch.autocast(bfloat16)
        with fp32 parameters, as torch runs the same model and AdamW."""
        ref, net, opt = attn_pair()
        cfg = config(2, torch_autocast={"enabled": True,
                                        "dtype": "bfloat16"})
        with zeroshard.LocalFleet(1) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=cfg, servers=fleet.addresses)
            self.assertTrue(engine.torch_autocast_enabled())
            self.assertEqual(net.inp.weight.dtype, torch.float32)
            for step in range(3):
                x = data(step)
                out = engine(x)
                self.assertEqual(out.dtype, torch.bfloat16)
                engine.backward((out.float() ** 2).mean())
                engine.step()
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    ref_out = ref(x)
                (ref_out.float() ** 2).mean().backward()
                opt.step()
            got = engine.consolidated_state_dict()
            for name, p in ref.named_parameters():
                self.assertLess((got[name] - p).abs().max().item(), 1e-6,
                                name)
            engine.close()

    def test_an_nccl_group_for_a_cpu_model_is_named(self):
        from zeroshard import engine as zengine
        real = torch.distributed.get_backend
        torch.distributed.get_backend = lambda *a: "nccl"
        try:
            with self.assertRaisesRegex(ValueError, "NCCL but the model is "
                                        "on the CPU"):
                zengine._check_backend("cpu", 2)
            zengine._check_backend("cuda", 2)
            zengine._check_backend("cpu", 1)
        finally:
            torch.distributed.get_backend = real

    def test_config_from_args_and_from_initialize(self):
        args = zeroshard.add_config_arguments(argparse.ArgumentParser())
        both = args.parse_args(["--deepspeed_config", "x.json"])
        with self.assertRaisesRegex(ValueError, "give one, as DeepSpeed"):
            zeroshard.initialize(args=both, model=tm.model(),
                                 config=config(2))
        old = args.parse_args(["--deepscale_config", "x.json",
                               "--deepspeed_config", "y.json"])
        with self.assertRaisesRegex(ValueError, "deprecated deepscale"):
            zeroshard.initialize(args=old, model=tm.model())
        with self.assertRaisesRegex(ValueError, "init_method=.* torchrun"):
            zeroshard.init_distributed(init_method="tcp://1.2.3.4:5")
        with self.assertRaisesRegex(ValueError, "dist_backend must be"):
            zeroshard.init_distributed(dist_backend="mpi")


class ClientOptimizerTest(unittest.TestCase):
    """DeepSpeed's client optimizer and scheduler (Hugging Face's Trainer
    passes them when the config has no optimizer section): a
    torch.optim.AdamW with two groups and a LambdaLR warmup, bit-identical
    to torch stepping the same optimizer and scheduler; load_checkpoint
    moves the scheduler back with the servers."""

    def groups(self, m):
        conv = [m.conv.weight, m.conv.bias]
        rest = [p for n, p in m.named_parameters() if not n.startswith("conv.")]
        return [{"params": rest, "weight_decay": WD},
                {"params": conv, "lr": 2 * LR, "betas": (0.8, 0.99),
                 "weight_decay": 0.0}]

    def test_adamw_and_a_lambda_schedule_against_torch(self):
        ref = tm.model()
        net = copy.deepcopy(ref)

        def warmup(step):
            return min(1.0, (step + 1) / 4) * 0.5 ** (step // 5)

        def make(m):
            opt = torch.optim.AdamW(self.groups(m), lr=LR)
            return opt, torch.optim.lr_scheduler.LambdaLR(opt, warmup)

        cfg = config(2)
        del cfg["optimizer"]
        opt, sched = make(net)
        ref_opt, ref_sched = make(ref)
        with zeroshard.LocalFleet(2) as fleet:
            engine, zopt, _, ours = zeroshard.initialize(
                model=net, optimizer=opt, lr_scheduler=sched, config=cfg,
                servers=fleet.addresses)
            lrs = []
            for step in range(8):
                self.assertEqual(engine.get_lr(), ref_sched.get_last_lr(),
                                 f"step {step}")
                lrs.append(engine.get_lr())
                step_both(engine, ref, ref_opt, step)
                ref_sched.step()
                for (n, p), q in zip(net.named_parameters(),
                                     ref.parameters()):
                    self.assertTrue(torch.equal(p, q), f"{n}, step {step}")
            self.assertEqual(ours.get_lr(), engine.get_lr())
            # What trainers save beside the checkpoint (and load back).
            self.assertEqual(ours.state_dict(), {"last_epoch": 8})
            ours.load_state_dict(ours.state_dict())
            zopt.load_state_dict(zopt.state_dict())
            engine.close()
        self.assertNotEqual(lrs[0], lrs[4])  # the schedule moved

    def test_the_schedule_follows_the_servers_back(self):
        net = tm.model()
        opt = torch.optim.AdamW(net.parameters(), lr=LR)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
        cfg = config(1)
        del cfg["optimizer"]
        with tempfile.TemporaryDirectory() as d, \
                zeroshard.LocalFleet(2, checkpoint_dir=d + "/srv") as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, optimizer=opt, lr_scheduler=sched, config=cfg,
                servers=fleet.addresses)
            seen = []
            for step in range(6):
                seen.append(engine.get_lr())
                if step == 3:
                    engine.save_checkpoint(d + "/ck")
                x, y = tm.batch(step, 0, 0)
                engine.backward(tm.loss_of(engine, x, y, step))
                engine.step()
            self.assertNotEqual(engine.get_lr(), seen[3])
            self.assertNotEqual(seen[0], seen[3])  # cosine: it moves
            engine.load_checkpoint(d + "/ck")
            self.assertEqual(engine.get_lr(), seen[3])
            engine.close()

    def test_a_config_schedule_drives_a_client_optimizer(self):
        """An AdamW object with the config's WarmupLR (no scheduler object):
        the config's schedule sets the rates, as DeepSpeed builds its
        scheduler over the client optimizer."""
        net = tm.model()
        cfg = config(2, scheduler={"type": "WarmupLR", "params": {
            "warmup_min_lr": 0, "warmup_max_lr": LR, "warmup_num_steps": 4}})
        del cfg["optimizer"]
        with zeroshard.LocalFleet(2) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, optimizer=torch.optim.AdamW(net.parameters(),
                                                       lr=LR),
                config=cfg, servers=fleet.addresses)
            seen = []
            for step in range(3):
                seen.append(engine.get_lr()[0])
                self.assertEqual(seen[-1], engine.config.lr(step))
                x, y = tm.batch(step, 0, 0)
                engine.backward(tm.loss_of(engine, x, y, step))
                engine.step()
            self.assertEqual(seen[0], 0.0)
            self.assertLess(seen[1], seen[2])
            engine.close()

    def test_what_cannot_run_is_refused_by_name(self):
        net = tm.model()
        cfg = config(2)
        bare = {k: v for k, v in cfg.items() if k != "optimizer"}
        sgd = torch.optim.SGD(net.parameters(), lr=0.1)
        adam_l2 = torch.optim.Adam(net.parameters(), lr=LR, weight_decay=0.1)
        adamw = torch.optim.AdamW(net.parameters(), lr=LR)
        sched = torch.optim.lr_scheduler.StepLR(adamw, 2)
        one_cycle = torch.optim.lr_scheduler.OneCycleLR(adamw, 0.1,
                                                        total_steps=10)
        one_cycle_fixed = torch.optim.lr_scheduler.OneCycleLR(
            adamw, 0.1, total_steps=10, cycle_momentum=False)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(adamw)
        no_eps = torch.optim.AdamW(net.parameters(), lr=LR, eps=0.0)
        cases = [
            (dict(optimizer=sgd, config=bare), "of type SGD"),
            (dict(optimizer=adam_l2, config=bare), "L2 regularization"),
            (dict(optimizer=adamw, config=cfg), "not both"),
            (dict(optimizer=adamw, config="/nonexistent/ds.json"),
             "must be a dict, JSON text or a JSON file"),
            (dict(lr_scheduler=sched, config=bare), "pass that optimizer"),
            (dict(optimizer=adamw, config=dict(bare, scheduler={
                "type": "WarmupLR", "params": {}}), lr_scheduler=sched),
             "not both"),
            (dict(optimizer=adamw, config=bare, lr_scheduler=one_cycle),
             "OneCycleLR cycles the optimizer's betas"),
            (dict(optimizer=adamw, config=bare, lr_scheduler=plateau),
             "ReduceLROnPlateau steps on a metric"),
            (dict(optimizer=no_eps, config=bare), "needs eps > 0"),
            (dict(config=cfg, model_parameters=[
                {"params": list(net.parameters()), "eps": 0}]),
             "model_parameters[0]: eps must be > 0"),
        ]
        # The same scheduler without momentum cycling is taken.
        zeroshard.client_optim.adopt(adamw, one_cycle_fixed, bare)
        for kwargs, words in cases:
            with self.assertRaises(ValueError) as e:
                zeroshard.initialize(model=net, servers="127.0.0.1:1",
                                     **kwargs)
            self.assertIn(words, str(e.exception))


class AccumulationBoundaryTest(unittest.TestCase):
    """set_gradient_accumulation_boundary (accelerate sets it before every
    backward): overriding with the boundaries the engine would count gives
    the same bits; a boundary on every micro-batch makes each a step whose
    gradient is still averaged over gradient_accumulation_steps (2), as
    DeepSpeed does: torch's AdamW on loss / 2."""

    def run_engine(self, boundaries, micro_batches, step_at_boundary_only=False):
        net = tm.model()
        with zeroshard.LocalFleet(2) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(2, gas=2), servers=fleet.addresses)
            self.assertEqual(engine.zero_optimization_stage(), 2)
            for i in range(micro_batches):
                if boundaries is not None:
                    engine.set_gradient_accumulation_boundary(boundaries(i))
                    self.assertEqual(engine.is_gradient_accumulation_boundary(),
                                     boundaries(i))
                x, y = tm.batch(i, 0, 0)
                engine.backward(tm.loss_of(engine, x, y, i))
                # accelerate >= 1.8 (DeepSpeed's docstring pattern): step()
                # after the step's last backward only.
                if not step_at_boundary_only or boundaries(i):
                    engine.step()
            steps = engine.global_steps
            engine.wait_parameters()
            engine.close()
        return {n: p.detach().clone() for n, p in net.named_parameters()}, \
            steps

    def test_overridden_boundaries(self):
        counted, steps = self.run_engine(None, 6)
        self.assertEqual(steps, 3)
        same, steps = self.run_engine(lambda i: i % 2 == 1, 6)
        self.assertEqual(steps, 3)
        for n in counted:
            self.assertTrue(torch.equal(counted[n], same[n]), n)
        once, steps = self.run_engine(lambda i: i % 2 == 1, 6, True)
        self.assertEqual(steps, 3)
        for n in counted:
            self.assertTrue(torch.equal(counted[n], once[n]), n)
        every, steps = self.run_engine(lambda i: True, 3)
        self.assertEqual(steps, 3)
        ref = tm.model()
        opt = torch.optim.AdamW(tm.torch_groups(ref, WD), lr=LR)
        for i in range(3):
            opt.zero_grad(set_to_none=False)
            x, y = tm.batch(i, 0, 0)
            (tm.loss_of(ref, x, y, i) / 2).backward()
            opt.step()
        for n, q in ref.named_parameters():
            self.assertTrue(torch.equal(every[n], q), n)


class DeepSpeedSurfaceTest(unittest.TestCase):
    """Calls trainers make on DeepSpeed's engine and optimizer."""

    def test_groups_moments_state_and_the_default_optimizer(self):
        net = tm.model()
        cfg = config(2)
        del cfg["optimizer"]
        with zeroshard.LocalFleet(2) as fleet, \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine, opt, _, _ = zeroshard.initialize(
                model=net, config=cfg, servers=fleet.addresses)
            self.assertTrue(any("no optimizer section" in str(w.message)
                                for w in caught))
            self.assertEqual(opt.param_groups[0]["betas"], (0.9, 0.999))
            self.assertEqual(engine.get_mom(), [(0.9, 0.999)])
            self.assertFalse(engine.fp16_enabled() or
                             engine.bfloat16_enabled())
            whole = engine.module_state_dict()
            self.assertEqual(set(whole), set(net.state_dict()))
            engine.close()

    def test_calls_scripts_make(self):
        """backward's DeepSpeed signature and return value, step(lr_kwargs),
        micro_steps, gradient_clipping(), no_sync() refused at stage 2, the
        .grad set to None by the step, and load_checkpoint without a
        `latest` (DeepSpeed: (None, None))."""
        net = tm.model()
        with tempfile.TemporaryDirectory() as d, \
                zeroshard.LocalFleet(2, checkpoint_dir=d + "/srv") as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(2, gas=2, gradient_clipping=0.5),
                servers=fleet.addresses)
            self.assertEqual(engine.gradient_clipping(), 0.5)
            # The module's own attributes pass through, as DeepSpeed's.
            self.assertIs(engine.conv, net.conv)
            self.assertEqual(engine.get_data_parallel_world_size(), 1)
            self.assertEqual(engine.optimizer.defaults["lr"], LR)
            self.assertEqual(engine.optimizer.state, {})
            with self.assertRaises(AttributeError):
                engine.no_such_attribute  # noqa: B018
            # accelerate's get_state_dict at ZeRO-3 calls these.
            self.assertTrue(engine.zero_gather_16bit_weights_on_model_save())
            self.assertEqual(
                set(engine._zero3_consolidated_16bit_state_dict()),
                set(net.state_dict()))
            x, y = tm.batch(0, 0, 0)
            loss = tm.loss_of(engine, x, y, 0)
            out = engine.backward(loss, retain_graph=False, scale_wrt_gas=True)
            self.assertEqual(float(out), float(loss) / 2)
            engine.step(lr_kwargs={})
            self.assertEqual(engine.micro_steps, 1)
            self.assertTrue(all(p.grad is not None for p in net.parameters()))
            with self.assertRaises(zeroshard.Error) as e:
                with engine.no_sync():
                    pass
            self.assertIn("stage 2", e.exception.message)
            x, y = tm.batch(1, 0, 0)
            engine.backward(tm.loss_of(engine, x, y, 1))
            engine.step()  # the accumulation boundary
            # As DeepSpeed's step: no stale gradients after it.
            self.assertTrue(all(p.grad is None for p in net.parameters()))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.assertEqual(engine.load_checkpoint(d + "/none"),
                                 (None, None))
            self.assertTrue(any("no checkpoint loaded" in str(w.message)
                                for w in caught))
            engine.close()

    def test_no_sync_and_scale_wrt_gas_as_deepspeed(self):
        """Stage 1, 2 micro-batches a step: the first inside no_sync() (its
        loss not divided by the accumulation steps, as DeepSpeed's backward
        does there), the second with scale_wrt_gas=False in the second
        step; torch's AdamW on the same sums of losses."""
        net, ref = tm.model(), tm.model()
        opt = torch.optim.AdamW(tm.torch_groups(ref, WD), lr=LR)
        with zeroshard.LocalFleet(2) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(1, gas=2), servers=fleet.addresses)
            for step in range(2):
                opt.zero_grad(set_to_none=False)
                for micro in range(2):
                    i = 2 * step + micro
                    x, y = tm.batch(i, 0, 0)
                    unscaled = (step, micro) in ((0, 0), (1, 1))
                    loss = tm.loss_of(engine, x, y, i)
                    if (step, micro) == (0, 0):
                        # DeepSpeed's pattern: no step() for it (step()
                        # inside no_sync() is an error there and here).
                        with engine.no_sync():
                            engine.backward(loss)
                            with self.assertRaises(zeroshard.Error):
                                engine.step()
                    else:
                        engine.backward(loss, scale_wrt_gas=not unscaled)
                        engine.step()
                    ref_loss = tm.loss_of(ref, x, y, i)
                    (ref_loss if unscaled else ref_loss / 2).backward()
                opt.step()
            engine.wait_parameters()
            for (n, p), q in zip(net.named_parameters(), ref.parameters()):
                self.assertTrue(torch.allclose(p, q, rtol=0, atol=1e-6), n)
            engine.close()


class LrEditTest(unittest.TestCase):
    """`for g in optimizer.param_groups: g["lr"] = x`, as scripts do with
    DeepSpeed's optimizer: without a schedule the rate holds (torch's AdamW
    with the same edit, bit for bit); with one, the next update takes the
    edit and the schedule's rate comes back after it; betas edited are an
    error at step() that changes nothing."""

    def test_without_a_schedule_the_rate_holds(self):
        for client in (False, True):
            net, ref = tm.model(), tm.model()
            ref_opt = torch.optim.AdamW(tm.torch_groups(ref, WD), lr=LR)
            cfg = config(2)
            kwargs = {}
            if client:  # the script edits its own torch optimizer
                del cfg["optimizer"]
                kwargs["optimizer"] = torch.optim.AdamW(
                    tm.torch_groups(net, WD), lr=LR)
            with zeroshard.LocalFleet(2) as fleet:
                engine, opt, _, _ = zeroshard.initialize(
                    model=net, config=cfg, servers=fleet.addresses, **kwargs)
                edited = kwargs.get("optimizer", opt)
                for step in range(5):
                    if step == 2:
                        for g in edited.param_groups + ref_opt.param_groups:
                            g["lr"] = LR / 4
                        self.assertEqual(engine.get_lr(), [LR / 4])
                    step_both(engine, ref, ref_opt, step)
                engine.wait_parameters()
                self.assertEqual(engine.get_lr(), [LR / 4])
                for (n, p), q in zip(net.named_parameters(), ref.parameters()):
                    self.assertTrue(torch.equal(p, q), f"{n}, client {client}")
                if not client:
                    opt.param_groups[0]["betas"] = (0.5, 0.999)
                    x, y = tm.batch(5, 0, 0)
                    engine.backward(tm.loss_of(engine, x, y, 5))
                    with self.assertRaises(zeroshard.Error) as e:
                        engine.step()
                    self.assertIn("betas, eps or weight_decay changed",
                                  e.exception.message)
                    opt.param_groups[0]["betas"] = (0.9, 0.999)
                    engine.step()  # the same step, now taken
                    self.assertEqual(engine.global_steps, 6)
                engine.close()

    def test_a_kept_reference_and_a_checkpoint(self):
        """A script that keeps param_groups' list and sets the same lr before
        every step gets it every step under a schedule (the schedule writes
        its rate there after each step, as DeepSpeed's does); a rate set
        without a schedule comes back with load_checkpoint, as DeepSpeed's
        optimizer state_dict keeps it."""
        net = tm.model()
        cfg = config(2, scheduler={"type": "WarmupLR", "params": {
            "warmup_min_lr": 0, "warmup_max_lr": LR, "warmup_num_steps": 4}})
        with zeroshard.LocalFleet(2) as fleet:
            engine, opt, _, _ = zeroshard.initialize(
                model=net, config=cfg, servers=fleet.addresses)
            groups = opt.param_groups
            for step in range(3):
                groups[0]["lr"] = LR / 2
                self.assertEqual(engine.get_lr(), [LR / 2], f"step {step}")
                x, y = tm.batch(step, 0, 0)
                engine.backward(tm.loss_of(engine, x, y, step))
                engine.step()
                self.assertEqual(groups[0]["lr"], engine.config.lr(step + 1))
            engine.close()
        net = tm.model()
        with tempfile.TemporaryDirectory() as d, \
                zeroshard.LocalFleet(2, checkpoint_dir=d + "/srv") as fleet:
            engine, opt, _, _ = zeroshard.initialize(
                model=net, config=config(2), servers=fleet.addresses)
            opt.param_groups[0]["lr"] = LR / 8
            x, y = tm.batch(0, 0, 0)
            engine.backward(tm.loss_of(engine, x, y, 0))
            engine.step()
            engine.save_checkpoint(d + "/ck")
            engine.close()
            engine, opt, _, _ = zeroshard.initialize(
                model=tm.model(), config=config(2), servers=fleet.addresses)
            engine.load_checkpoint(d + "/ck")
            self.assertEqual(engine.get_lr(), [LR / 8])
            self.assertEqual(opt.param_groups[0]["lr"], LR / 8)
            engine.close()

    def test_a_schedule_takes_over_after_the_edited_update(self):
        net = tm.model()
        cfg = config(2, scheduler={"type": "WarmupLR", "params": {
            "warmup_min_lr": 0, "warmup_max_lr": LR, "warmup_num_steps": 4,
            "warmup_type": "linear"}})
        with zeroshard.LocalFleet(2) as fleet:
            engine, opt, _, _ = zeroshard.initialize(
                model=net, config=cfg, servers=fleet.addresses)
            scheduled = [engine.config.lr(k) for k in range(4)]
            for step in range(4):
                if step == 1:
                    opt.param_groups[0]["lr"] = 0.0
                    self.assertEqual(engine.get_lr(), [0.0])
                    params = [p.detach().clone() for p in net.parameters()]
                else:
                    self.assertEqual(engine.get_lr(), [scheduled[step]])
                x, y = tm.batch(step, 0, 0)
                engine.backward(tm.loss_of(engine, x, y, step))
                engine.step()
                if step == 1:  # lr 0: nothing moved
                    engine.wait_parameters()
                    for p, q in zip(net.parameters(), params):
                        self.assertTrue(torch.equal(p, q))
            self.assertEqual(opt.param_groups[0]["lr"], engine.config.lr(4))
            engine.close()


if __name__ == "__main__":
    unittest.main()
