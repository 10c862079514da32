"""DeepSpeed's tensorboard and csv_monitor sections in the Python engine
(python/zeroshard/monitor.py): a W = 1 run of 4 steps with gradient
accumulation 2 and a warmup schedule against a real server writes the
files the C++ worker writes; they are checked by
tests/metrics_monitor_check.py against the losses and learning rates this
test saw (the CSV with this Python; the event file with TensorBoard's own
reader from $ZEROSHARD_VENV, skipped with the reason when it is absent).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402
import zeroshard  # noqa: E402

RUNFILES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(RUNFILES, "metrics_monitor_check.py")
VENV_PY = os.path.join(os.environ.get("ZEROSHARD_VENV", "/opt/zeroshard/venv"),
                       "bin", "python3")
GAS = 2


def run_check(python, kind, directory, expected):
    out = subprocess.run([python, CHECK, kind, directory, expected,
                          str(tm.BATCH * GAS), "fp32"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=120)
    text = out.stdout.decode(errors="replace")
    print(text, end="")
    return out.returncode, text


class MonitorTest(unittest.TestCase):
    def test_files_hold_the_steps(self):
        tmp = tempfile.mkdtemp()
        config = {
            "train_micro_batch_size_per_gpu": tm.BATCH,
            "gradient_accumulation_steps": GAS,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "scheduler": {"type": "WarmupLR",
                          "params": {"warmup_num_steps": 3,
                                     "warmup_type": "linear"}},
            "zero_optimization": {"stage": 1},
            "tensorboard": {"enabled": True, "output_path": tmp + "/tb",
                            "job_name": "py"},
            "csv_monitor": {"enabled": True, "output_path": tmp + "/csv",
                            "job_name": "py"},
        }
        records = []
        with zeroshard.LocalFleet(1) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=tm.model(), config=config, servers=fleet.addresses)
            self.assertIsNotNone(engine.monitor)
            for step in range(5):
                lr = engine.get_lr()[0]
                losses = []
                for micro in range(GAS):
                    x, y = tm.batch(step, micro, 0)
                    loss = tm.loss_of(engine, x, y, step)
                    losses.append(loss.item())
                    engine.backward(loss)
                    engine.step()
                records.append({"event": "step", "step": step + 1,
                                "loss": sum(losses) / GAS, "lr": lr})
            engine.close()
        # Warming up as DeepSpeed's engine does: warmup_min_lr (0) for
        # updates 0 and 1 (iterations -1 and 0), then 1/3, 2/3, 1 of it.
        self.assertEqual(len({r["lr"] for r in records}), 4)
        expected = os.path.join(tmp, "expected.jsonl")
        with open(expected, "w") as f:
            for r in records:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
        rc, text = run_check(sys.executable, "csv", tmp + "/csv/py",
                             expected)
        self.assertEqual(rc, 0, text)
        if subprocess.run([VENV_PY, "-c", "import tensorboard"],
                          stderr=subprocess.DEVNULL).returncode != 0:
            print(f"SKIP tensorboard read-back: no tensorboard in {VENV_PY} "
                  "(run tools/bootstrap_pypi.sh)")
            return
        rc, text = run_check(VENV_PY, "tensorboard", tmp + "/tb/py",
                             expected)
        self.assertEqual(rc, 0, text)


if __name__ == "__main__":
    unittest.main()
