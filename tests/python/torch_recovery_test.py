"""zeroshard.initialize: recovery after a killed server, fp16's dynamic
loss scaling, checkpoints, and bad use — with real zeroshard-server
processes (LocalFleet) and one rank."""
import copy
import os
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402
import zeroshard  # noqa: E402
from torch_engine_test import config  # noqa: E402

STEPS = 10


def train(engine, steps, on_step=None, poison=()):
    """Trains to `steps`, following engine.global_steps (a roll back moves
    it back); returns the sequence of (step, loss scale, skipped)."""
    seen = []
    while engine.global_steps < steps:
        step = engine.global_steps
        x, y = tm.batch(step, 0, 0)
        loss = tm.loss_of(engine, x, y, step)
        if step in poison:
            loss = loss * float("inf")
        scale = engine.loss_scale()
        engine.backward(loss)
        engine.step()
        # DeepSpeed's was_step_applied() (and the optimizer's overflow).
        seen.append((step, scale, not engine.was_step_applied()))
        if on_step is not None:
            on_step(step)
    return seen


def weights(net):
    return {n: p.detach().clone() for n, p in net.named_parameters()}


class RecoveryTest(unittest.TestCase):
    def run_job(self, kill_after=None):
        cfg = config(2, zeroshard={"checkpoint_interval": 3})
        with tempfile.TemporaryDirectory() as ckpt, \
                zeroshard.LocalFleet(2, checkpoint_dir=ckpt) as fleet:
            net = tm.model()
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=cfg, servers=fleet.addresses)
            killed = []

            def on_step(step):
                if step == kill_after and not killed:
                    fleet.kill(1)
                    fleet.restart(1)
                    killed.append(step)

            seen = train(engine, STEPS, on_step)
            engine.close()
            return weights(net), seen, killed

    def test_killed_server_rolls_back_and_ends_bit_identical(self):
        plain, plain_seen, _ = self.run_job()
        got, seen, killed = self.run_job(kill_after=4)
        self.assertEqual(killed, [4])
        steps = [s for s, _, _ in seen]
        print("steps made with a server killed after step 4:", steps)
        self.assertLess(len(plain_seen), len(seen), "no step was redone")
        # Checkpoints at 0, 3, 6, ...: the step after the kill (5) fails
        # and every rank goes back to 3.
        self.assertIn((5, 3), list(zip(steps, steps[1:])))
        for name in plain:
            self.assertTrue(torch.equal(plain[name], got[name]), name)


class LossScaleTest(unittest.TestCase):
    def test_dynamic_loss_scale_follows_deepspeed(self):
        """Overflows planted at chosen steps: the scales and skipped steps
        equal DeepSpeed's DynamicLossScaler (written out below from its
        update_scale, independent of the library)."""
        fp16 = {"enabled": True, "initial_scale_power": 6,
                "loss_scale_window": 3, "hysteresis": 2, "min_loss_scale": 1}
        poison = {1, 2, 3, 7, 12}
        with zeroshard.LocalFleet(2) as fleet:
            net = tm.model()
            engine, zopt, _, _ = zeroshard.initialize(
                model=net, config=config(2, fp16=fp16),
                servers=fleet.addresses)
            seen = train(engine, 16, poison=poison)
            self.assertEqual(zopt.overflow, seen[-1][2])
            engine.close()
        # DeepSpeed (runtime/fp16/loss_scaler.py, DynamicLossScaler):
        scale, hyst, it, last_overflow = 2.0 ** 6, 2, 0, -1
        want, step = [], 0
        while step < 16:
            overflow = step in poison
            want.append((step, scale, overflow))
            if overflow:
                if hyst == 1:
                    scale = max(scale / 2, 1)
                else:
                    hyst -= 1
                last_overflow = it
            else:
                if (it - last_overflow) % 3 == 0:
                    scale *= 2
                    hyst = 2
            it += 1
            step += 1
        # A skipped step is not counted: the data of that step comes again.
        got_iter = [(i, s, k) for i, (_, s, k) in enumerate(seen)]
        print("fp16 (iteration, scale, skipped):", got_iter)
        self.assertEqual([(s, k) for _, s, k in got_iter][:len(want)],
                         [(s, k) for _, s, k in want][:len(got_iter)])
        self.assertEqual(engine.skipped_steps, len(poison))


class CheckpointTest(unittest.TestCase):
    def test_save_and_load_checkpoint(self):
        with tempfile.TemporaryDirectory() as ckpt, \
                tempfile.TemporaryDirectory() as save, \
                zeroshard.LocalFleet(2, checkpoint_dir=ckpt) as fleet:
            net = tm.model()
            engine, _, _, _ = zeroshard.initialize(
                model=net, config=config(3), servers=fleet.addresses)
            train(engine, 4)
            # What DeepSpeed's pickled client_state carries: tensors,
            # tuples, keys that are not strings.
            state = {"k": 4, 7: (1, 2), "t": torch.arange(3.0)}
            with self.assertRaisesRegex(ValueError, "client_state cannot be "
                                        "saved with torch.save"):
                engine.save_checkpoint(save, "bad",
                                       client_state={"f": lambda: 0})
            self.assertFalse(os.path.exists(os.path.join(save, "bad")))
            engine.save_checkpoint(save, "four", client_state=state)
            engine._params.fetch()
            for u in engine._params.units:
                engine._params._materialise(u)
            at_four = weights(net)
            train(engine, 7)
            for kwargs in ({"load_optimizer_states": False},
                           {"load_lr_scheduler_states": False},
                           {"load_module_only": True}):
                with self.assertRaisesRegex(ValueError, "not supported"):
                    engine.load_checkpoint(save, **kwargs)
            self.assertEqual(engine.global_steps, 7)  # nothing changed
            path, client_state = engine.load_checkpoint(
                save, load_module_strict=False)
            self.assertEqual(engine.global_steps, 4)
            self.assertEqual(set(client_state), {"k", 7, "t"})
            self.assertEqual(client_state[7], (1, 2))
            self.assertTrue(torch.equal(client_state["t"], state["t"]))
            for u in engine._params.units:
                engine._params._materialise(u)
            for name, value in at_four.items():
                self.assertTrue(torch.equal(value, weights(net)[name]), name)
            with self.assertRaisesRegex(ValueError, "does not exist"):
                engine.load_checkpoint(save, "nope")
            engine.close()


class BadUseTest(unittest.TestCase):
    def test_library_missing(self):
        env = dict(os.environ, ZEROSHARD_LIB="/nonexistent/libzeroshard.so")
        out = subprocess.run(
            [sys.executable, "-c",
             "import zeroshard\n"
             "try:\n zeroshard.Client('127.0.0.1:1', insecure=True)\n"
             "except zeroshard.Error as e:\n print(e.code_name, e.message)"],
            env=env, capture_output=True, text=True, check=True).stdout
        self.assertIn("NOT_FOUND", out)
        self.assertIn("/nonexistent/libzeroshard.so", out)
        self.assertIn("ZEROSHARD_LIB", out)

    def test_servers_unreachable(self):
        with self.assertRaises(zeroshard.Error) as e:
            zeroshard.initialize(model=tm.model(), config=config(1),
                                 servers="127.0.0.1:1",
                                 client_options={"insecure": True,
                                                 "deadline_seconds": 5,
                                                 "max_attempts": 1})
        self.assertIn(e.exception.code_name, ("UNAVAILABLE",
                                              "DEADLINE_EXCEEDED"))

    def test_model_differs_from_the_servers(self):
        with zeroshard.LocalFleet(1) as fleet:
            a, _, _, _ = zeroshard.initialize(model=tm.model(),
                                              config=config(1),
                                              servers=fleet.addresses)
            a.close()
            other = torch.nn.Sequential(torch.nn.Linear(3, 5))
            with self.assertRaises(zeroshard.Error) as e:
                zeroshard.initialize(model=other, config=config(1),
                                     servers=fleet.addresses)
            print("a different model:", e.exception)
            self.assertIn(e.exception.code_name,
                          ("FAILED_PRECONDITION", "ALREADY_EXISTS"))

    def test_a_second_run_against_servers_holding_the_job(self):
        """The servers are kept up and the script is run again. Without
        recovery, initialize() writes nothing and warns, naming the job and
        its step; a forward then raises that, and the servers' parameters
        are as they were; DeepSpeed's initialize() then load_checkpoint()
        restores one of the earlier run's checkpoints and trains on from
        it as that run did. With a checkpoint interval the run continues
        the job from the servers' step, and says so."""
        for interval in (0, 2):
            with zeroshard.LocalFleet(2, checkpoint_dir=tempfile.mkdtemp(
                    prefix="rerun")) as fleet, \
                    tempfile.TemporaryDirectory() as save:
                cfg = config(1, zeroshard={"checkpoint_interval": interval}) \
                    if interval else config(1)
                first, _, _, _ = zeroshard.initialize(
                    model=tm.model(), config=cfg, servers=fleet.addresses)
                train(first, 2)
                first.save_checkpoint(save, "two")
                train(first, 3)
                held = torch.empty(first.numel)
                first._client.gather(0, held)
                train(first, 4)
                at_four = torch.empty(first.numel)
                first._client.gather(0, at_four)
                first.close()
                net = tm.model(seed=5)  # other initial weights
                if not interval:
                    with self.assertWarnsRegex(
                            UserWarning, 'already hold job "torch" at step 4'):
                        again, _, _, _ = zeroshard.initialize(
                            model=net, config=cfg, servers=fleet.addresses)
                    x, y = tm.batch(0, 0, 0)
                    with self.assertRaises(zeroshard.Error) as e:
                        tm.loss_of(again, x, y, 0)
                    self.assertEqual(e.exception.code_name,
                                     "FAILED_PRECONDITION")
                    self.assertIn("already hold job", e.exception.message)
                    now = torch.empty(at_four.numel())
                    again._client.gather(0, now)
                    self.assertTrue(torch.equal(now, at_four))
                    again.load_checkpoint(save, "two")
                    self.assertEqual(again.global_steps, 2)
                    train(again, 3)
                    again._client.gather(0, now)
                    self.assertTrue(torch.equal(now, held))
                    again.close()
                    continue
                with self.assertWarnsRegex(UserWarning,
                                           "hold job 'torch' at step 4"):
                    again, _, _, _ = zeroshard.initialize(
                        model=net, config=cfg, servers=fleet.addresses)
                self.assertEqual(again.global_steps, 4)
                again.wait_parameters()
                mine = torch.cat([p.detach().reshape(-1)
                                  for p in net.parameters()])
                self.assertTrue(torch.equal(mine, at_four))
                again.close()

    def test_unsupported_optimizer(self):
        cfg = config(1)
        cfg["optimizer"] = {"type": "SGD", "params": {"lr": 0.1}}
        with self.assertRaises(zeroshard.Error) as e:
            zeroshard.initialize(model=tm.model(), config=cfg,
                                 servers="127.0.0.1:1")
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn("SGD", e.exception.message)

    def test_delayed_update_is_refused(self):
        # The C++ engine's opt-in delayed update; the Python engine does
        # not delay, so it says so instead of training differently.
        cfg = config(2, zeroshard={"delayed_parameter_update": True})
        with self.assertRaisesRegex(ValueError, "delayed_parameter_update"):
            zeroshard.initialize(model=tm.model(), config=cfg,
                                 servers="127.0.0.1:1")

    def test_step_before_backward_and_bad_arguments(self):
        with zeroshard.LocalFleet(1) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=tm.model(), config=config(2), servers=fleet.addresses)
            with self.assertRaisesRegex(zeroshard.Error, "before backward"):
                engine.step()
            with self.assertRaisesRegex(ValueError, "one-element"):
                engine.backward(torch.ones(3))
            x, y = tm.batch(0, 0, 0)
            loss = tm.loss_of(engine, x, y, 0)
            engine.close()
            engine.close()  # a second close does nothing
            for late in (lambda: engine.backward(loss), engine.step,
                         lambda: tm.loss_of(engine, x, y, 0),
                         lambda: engine.save_checkpoint("/tmp/nowhere")):
                with self.assertRaisesRegex(zeroshard.Error,
                                            "the engine is closed"):
                    late()
        with self.assertRaisesRegex(ValueError, "has no parameters"):
            zeroshard.initialize(model=torch.nn.ReLU(), config=config(1),
                                 servers="127.0.0.1:1")
        with self.assertRaisesRegex(ValueError, "optimizer"):
            zeroshard.initialize(model=tm.model(), config=config(1),
                                 optimizer=torch.optim.SGD(
                                     tm.model().parameters(), lr=0.1))
        client = zeroshard.Client("127.0.0.1:1", insecure=True)
        with self.assertRaisesRegex(ValueError, "contiguous"):
            client.push(0, torch.zeros(4, 4).t(), epoch=1, step=0)
        with self.assertRaisesRegex(ValueError, "dtype"):
            client.gather(0, torch.zeros(4, dtype=torch.float64))


if __name__ == "__main__":
    unittest.main(verbosity=2)
