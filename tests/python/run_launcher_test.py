"""`zeroshard run`: a user's PyTorch script on W ranks with shard servers
started for it (launcher/run_script.h), as a DeepSpeed user runs
`deepspeed train.py`.

Real processes: the launcher, 2 zeroshard-server processes, 2 ranks of a
script that calls zeroshard.initialize with no servers argument (it gets
ZEROSHARD_SERVERS) and torch.distributed from torchrun's environment.
"""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

RUNFILES = os.environ.get("TEST_SRCDIR", ".")
LAUNCHER = os.path.join(RUNFILES, "zeroshard", "launcher", "zeroshard")

SCRIPT = textwrap.dedent('''
    import hashlib, os, sys, time
    import torch
    import zeroshard
    print("env", os.environ["RANK"], os.environ["WORLD_SIZE"],
          os.environ["LOCAL_RANK"], os.environ["MASTER_PORT"],
          "args", " ".join(sys.argv[1:]), flush=True)
    if os.environ["RANK"] == sys.argv[1]:
        sys.exit(3)
    if sys.argv[1].startswith("once:") and os.environ["RANK"] == "1":
        marker = sys.argv[1][5:]
        if not os.path.exists(marker):  # the first attempt only
            open(marker, "w").close()
            sys.exit(3)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                              torch.nn.Linear(16, 4))
    cfg = {"train_micro_batch_size_per_gpu": 4,
           "zero_optimization": {"stage": 2},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    engine, _, _, _ = zeroshard.initialize(model=net, config=cfg)
    g = torch.Generator().manual_seed(engine.rank)
    for _ in range(4):
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
    engine.wait_parameters()
    digest = hashlib.sha256(b"".join(
        p.detach().numpy().tobytes() for p in net.parameters())).hexdigest()
    print("done", engine.global_steps, engine.world, digest[:16], flush=True)
    engine.close()
    if len(sys.argv) > 2 and sys.argv[2] == "sleep":
        time.sleep(600)
    print("last words", end="")  # no newline: echoed all the same
''')


def read(path):
    with open(path) as f:
        return f.read()


class RunLauncherTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.script = os.path.join(self.dir, "train.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def run_launcher(self, *args, timeout=240):
        return subprocess.run(
            [LAUNCHER, "run", f"--python={sys.executable}", *args],
            capture_output=True, text=True, timeout=timeout)

    def left(self, work):
        """Processes still running of this run: its servers (their port
        files are in `work`) and its ranks (they run self.script)."""
        out = []
        for pattern in (work, self.script):
            out += subprocess.run(["pgrep", "-f", pattern],
                                  capture_output=True, text=True).stdout.split()
        return [p for p in out if int(p) != os.getpid()]

    def test_two_ranks_train_against_the_servers_it_started(self):
        work = os.path.join(self.dir, "ok")
        p = self.run_launcher("--workers=2", f"--work_dir={work}", "--",
                              self.script, "none", "--workers", "5")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("servers started", p.stdout)
        for r in (0, 1):
            # torchrun's environment, and the script's own arguments
            # untouched (its --workers is not the launcher's).
            self.assertRegex(p.stdout, rf"\[rank {r}\] env {r} 2 {r} \d+ "
                             r"args none --workers 5")
            self.assertTrue(os.path.exists(f"{work}/rank-{r}.log"))
        done = [line.split()[-1] for line in p.stdout.splitlines()
                if " done 4 2 " in line]
        self.assertEqual(len(done), 2, p.stdout)
        self.assertEqual(done[0], done[1])  # the ranks hold the same weights
        for r in (0, 1):
            self.assertIn(f"[rank {r}] last words\n", p.stdout)
        self.assertEqual(self.left(work), [])

    def test_a_failing_rank_stops_the_job(self):
        work = os.path.join(self.dir, "fail")
        p = self.run_launcher("--workers=2", f"--work_dir={work}",
                              self.script, "1")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertRegex(p.stderr, r"rank 1 \(pid \d+\) failed with exit "
                         r"code 3; stopped the job")
        time.sleep(0.2)
        self.assertEqual(self.left(work), [])

    def test_max_restarts_starts_every_rank_again(self):
        work = os.path.join(self.dir, "again")
        marker = os.path.join(self.dir, "failed-once")
        p = self.run_launcher("--workers=2", "--max_restarts=1",
                              f"--work_dir={work}", self.script,
                              f"once:{marker}")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"rank 1 \(pid \d+\) failed with exit "
                         r"code 3; starting every rank again \(1 of 1\)")
        done = [line for line in p.stdout.splitlines() if " done 4 2 " in line]
        self.assertEqual(len(done), 2, p.stdout)
        self.assertTrue(os.path.exists(f"{work}/rank-1.attempt-1.log"))
        self.assertEqual(self.left(work), [])

    def test_sigterm_stops_every_process(self):
        work = os.path.join(self.dir, "sig")
        proc = subprocess.Popen(
            [LAUNCHER, "run", f"--python={sys.executable}", "--workers=2",
             f"--work_dir={work}", self.script, "none", "sleep"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            logs = [os.path.join(work, f"rank-{r}.log") for r in (0, 1)]
            if all(os.path.exists(f) and "done" in read(f) for f in logs):
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM, out + err)
        self.assertIn("stopping the job", err)
        self.assertEqual(self.left(work), [])

    def test_bad_command_lines_start_nothing(self):
        work = os.path.join(self.dir, "bad")
        cases = [
            ((), "no program to run"),
            (("--servers=2", "--server_addrs=127.0.0.1:7000", self.script),
             "not both"),
            (("--workers=0", self.script), "--workers must be in [1, 1024]"),
            ((os.path.join(self.dir, "missing.py"),), "cannot be read"),
            (("--server_addrs=127.0.0.1:70000", self.script), "70000"),
            (("no-such-program-zs",), "not an executable in PATH"),
            (("--nproc_per_node", "2", self.script), "here --workers=N"),
            (("--nnodes=2", self.script), "torchrun on each"),
        ]
        for args, words in cases:
            p = self.run_launcher(f"--work_dir={work}", *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(words, p.stderr, args)
        self.assertFalse(os.path.exists(work))


if __name__ == "__main__":
    unittest.main()
