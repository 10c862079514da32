"""Elastic workers through zeroshard.initialize(..., elastic={...}):
two real worker processes start a job on two real servers, a third joins
while it runs, one leaves; the job goes on at every step boundary without
restarting or resharding, and every step is committed once."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import zeroshard

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 14


def server_step(client):
    return min(s["step"] for s in client.stats())


class ElasticTest(unittest.TestCase):
    def test_a_worker_joins_and_one_leaves(self):
        with tempfile.TemporaryDirectory() as ckpt, \
                tempfile.TemporaryDirectory() as out, \
                zeroshard.LocalFleet(2, checkpoint_dir=ckpt) as fleet:
            def start(name, leave_at=-1, wait_at=-1):
                return subprocess.Popen(
                    [sys.executable,
                     os.path.join(HERE, "torch_elastic_worker.py"), name,
                     fleet.address_string, str(STEPS), str(leave_at),
                     str(wait_at), os.path.join(out, name + ".json")],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

            # a and b wait before step 5 until c is a member: c joins the
            # group at that step boundary; b leaves before step 9.
            workers = {"a": start("a", wait_at=5),
                       "b": start("b", leave_at=9, wait_at=5)}
            client = zeroshard.Client(fleet.addresses, "elastic",
                                      insecure=True)
            deadline = time.monotonic() + 120
            while server_step(client) < 4:
                self.assertLess(time.monotonic(), deadline,
                                "the first group made no progress")
                self.assertIsNone(workers["a"].poll())
                time.sleep(0.05)
            workers["c"] = start("c")
            logs = {}
            for name, p in workers.items():
                logs[name] = p.communicate(timeout=300)[0].decode(
                    errors="replace")
            for name, p in workers.items():
                self.assertEqual(p.returncode, 0, f"{name}:\n{logs[name]}")
            made = {}
            for name in workers:
                with open(os.path.join(out, name + ".json")) as f:
                    made[name] = json.load(f)
            for name, r in made.items():
                print(name, "left" if r["left"] else "stayed",
                      [(s, w) for s, w, _ in r["made"]])
            self.assertEqual(server_step(client), STEPS)
            sizes_a = [w for _, w, _ in made["a"]["made"]]
            # a: with b, then with b and c, then with c after b left.
            self.assertEqual(sizes_a[0], 2)
            self.assertIn(3, sizes_a)
            self.assertEqual(sizes_a[-1], 2)
            self.assertTrue(made["b"]["left"])
            self.assertLess(made["b"]["final_step"], STEPS)
            # The leader sees c in the membership before step 5's commit
            # and reports it in that step's outcome: the group of three
            # makes step 6. b announces its leave before step 9 and trains
            # it; the leader reports the leave in the outcome of the first
            # step whose membership read came after it: step 9's, or step
            # 10's when its read of step 9 came first (seen under load).
            # From the next step a and c go on as two, and no step is lost.
            self.assertEqual(made["c"]["made"][0][:2], [6, 3])
            b_last, b_world, _ = made["b"]["made"][-1]
            self.assertIn(b_last, (9, 10))
            self.assertEqual(b_world, 3)
            for s, w, _ in made["a"]["made"]:
                if 6 <= s <= b_last:
                    self.assertEqual(w, 3, f"a at step {s}")
                elif s > b_last:
                    self.assertEqual(w, 2, f"a at step {s}")
            self.assertEqual([s for s, _, _ in made["a"]["made"]],
                             list(range(STEPS)))
            self.assertEqual(made["c"]["final_step"], STEPS)
            for name in ("a", "c"):
                self.assertIn("zeroshard elastic:", logs[name])
            stats = client.stats()
            self.assertTrue(all(s["step"] == STEPS for s in stats))
            client.close()

    def test_group_destroyed_at_exit_without_close(self):
        """Workers that end without engine.close(): the process group each
        made is destroyed by zeroshard's atexit handler (a gloo group alive
        while the interpreter finalises can abort the process)."""
        with tempfile.TemporaryDirectory() as ckpt, \
                tempfile.TemporaryDirectory() as out, \
                zeroshard.LocalFleet(2, checkpoint_dir=ckpt) as fleet:
            workers = {name: subprocess.Popen(
                [sys.executable,
                 os.path.join(HERE, "torch_elastic_worker.py"), name,
                 fleet.address_string, "3", "-1", "-1",
                 os.path.join(out, name + ".json"), "noclose"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for name in ("a", "b")}
            for name, p in workers.items():
                log = p.communicate(timeout=300)[0].decode(errors="replace")
                self.assertEqual(p.returncode, 0, f"{name}:\n{log}")
                with open(os.path.join(out, name + ".json.exit")) as f:
                    self.assertEqual(f.read(), "destroyed", name)

    def test_a_killed_worker_leaves_the_others_going(self):
        """c is SIGKILLed mid-run: a and b's step fails, and once c's lease
        expires (2 s here) they form a group of two and continue from the
        servers' last commit."""
        with tempfile.TemporaryDirectory() as ckpt, \
                tempfile.TemporaryDirectory() as out, \
                zeroshard.LocalFleet(2, checkpoint_dir=ckpt,
                                     extra_args=["--lease_ms=2000"]) as fleet:
            def start(name, wait_at=-1):
                return subprocess.Popen(
                    [sys.executable,
                     os.path.join(HERE, "torch_elastic_worker.py"), name,
                     fleet.address_string, str(STEPS), "-1", str(wait_at),
                     os.path.join(out, name + ".json")],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

            workers = {"a": start("a", wait_at=3), "b": start("b", wait_at=3),
                       "c": start("c")}
            client = zeroshard.Client(fleet.addresses, "elastic",
                                      insecure=True)
            deadline = time.monotonic() + 120
            while server_step(client) < 6:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.02)
            workers["c"].kill()
            logs = {}
            for name in ("a", "b"):
                logs[name] = workers[name].communicate(timeout=300)[0] \
                    .decode(errors="replace")
                self.assertEqual(workers[name].returncode, 0,
                                 f"{name}:\n{logs[name]}")
            workers["c"].communicate()
            with open(os.path.join(out, "a.json")) as f:
                made = json.load(f)["made"]
            print("a:", [(s, w) for s, w, _ in made])
            sizes = [w for _, w, _ in made]
            self.assertIn(3, sizes)
            self.assertEqual(sizes[-1], 2)
            self.assertIn("forming a new group", logs["a"])
            self.assertEqual(server_step(client), STEPS)
            client.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
