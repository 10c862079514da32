"""examples/torch/train_transformer.py runs: one process, --local-fleet 2
(real servers), a tiny model for a few steps; exit 0, the loss goes down,
and the config file examples/torch/ds_config.json parses and trains.

Run by zs_py_test (tools/defs.bzl): $ZEROSHARD_LIB, $ZEROSHARD_SERVER and
PYTHONPATH name this build. The data is the example's own fallback
(/usr/share/common-licenses, read as bytes) unless the demo's token file
exists; a small text file made here keeps the test independent of both.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

EXAMPLE = os.path.join("examples", "torch", "train_transformer.py")
CONFIG = os.path.join("examples", "torch", "ds_config.json")
TIMEOUT = 240
STEP = re.compile(r"^step +(\d+)/(\d+) +loss ([0-9.]+)", re.M)


def run_example(*args):
    env = dict(os.environ)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run(
        [sys.executable, EXAMPLE, "--local-fleet", "2", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        timeout=TIMEOUT, check=False)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


class ExampleTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        fd, cls.data = tempfile.mkstemp(suffix=".txt")
        with os.fdopen(fd, "wb") as f:  # ~20 KB of text-like bytes
            words = [b"shard", b"server", b"gradient", b"the", b"of",
                     b"step", b"worker", b"optimizer", b"state", b"a"]
            for i in range(4000):
                f.write(words[(i * 7 + i // 3) % len(words)])
                f.write(b"\n" if i % 11 == 10 else b" ")

    @classmethod
    def tearDownClass(cls):
        os.remove(cls.data)

    def check_run(self, code, out, steps):
        self.assertEqual(code, 0, out)
        losses = [float(m.group(3)) for m in STEP.finditer(out)]
        self.assertEqual(len(losses), steps, out)
        self.assertLess(sum(losses[-3:]) / 3, sum(losses[:3]) / 3 - 0.3, out)
        self.assertRegex(out, r"done: %d steps, loss " % steps)

    def test_stage2_inline_config(self):
        code, out = run_example("--steps", "12", "--seq-len", "32",
                                "--d-model", "32", "--heads", "2",
                                "--layers", "1", "--data", self.data)
        self.check_run(code, out, 12)
        self.assertIn("stage 2", out)

    def test_stage3_config_file(self):
        code, out = run_example("--config", CONFIG, "--stage", "3",
                                "--steps", "12", "--seq-len", "32",
                                "--d-model", "32", "--heads", "2",
                                "--layers", "1", "--data", self.data)
        self.check_run(code, out, 12)
        self.assertIn("stage 3", out)
        self.assertIn("WarmupCosineLR", out)


if __name__ == "__main__":
    unittest.main()
