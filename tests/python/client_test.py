"""zeroshard.Client, Trainer and Member against real servers, with numpy
arrays and torch tensors passed zero-copy."""
import tempfile
import unittest

import numpy as np
import torch

import zeroshard

N = 300  # two tensors: 20 x 10 and 100


class ClientTest(unittest.TestCase):
    def test_the_whole_door(self):
        with tempfile.TemporaryDirectory() as ckpt, \
                zeroshard.LocalFleet(2, checkpoint_dir=ckpt) as fleet:
            c = zeroshard.Client(fleet.addresses, "client-test",
                                 insecure=True)
            c.register([("w", (20, 10), 0), ("b", (100,), 1)],
                       [{"weight_decay": 0.1}, {"weight_decay": 0.0}])
            self.assertEqual(c.num_servers(), 2)
            self.assertEqual(c.model_size(), N)
            self.assertEqual(c.tensor_range("b"), (200, 100))
            ranges = [c.server_range(k) for k in range(2)]
            self.assertEqual(sum(n for _, n in ranges), N)

            start = np.linspace(-1, 1, N, dtype=np.float32)
            c.write_parameters(0, start)
            back = np.zeros(N, dtype=np.float32)
            c.gather(0, back)  # numpy
            np.testing.assert_array_equal(back, start)
            half = torch.zeros(N, dtype=torch.bfloat16)
            c.gather(0, half)  # the serving copy, into a torch tensor
            self.assertTrue(torch.equal(
                half, torch.from_numpy(start).bfloat16()))

            t = zeroshard.Trainer(c)
            o = t.start()
            self.assertEqual(o.kind, "ok")
            o = t.after_fetch(0)
            grad = torch.full((N,), 0.5)
            c.push(0, grad, epoch=o.epoch, step=o.state["step"],
                   key_prefix="t")
            d, o = t.step({"step": 0, "push_status": 0, "sum_squares":
                           float((grad.double() ** 2).sum()),
                           "loss_scale": 1.0, "lr": 0.01})
            self.assertEqual(o.kind, "ok")
            self.assertFalse(d.skipped)
            self.assertAlmostEqual(d.grad_norm, 0.5 * N ** 0.5, places=5)
            self.assertEqual(o.state["step"], 1)
            after = torch.zeros(N)
            self.assertEqual(c.gather(0, after), 1)
            # One AdamW step of lr 0.01 moves every element by ~0.01.
            moved = (after - torch.from_numpy(start)).abs()
            self.assertTrue(bool(((moved > 0.005) & (moved < 0.02)).all()))
            t.after_fetch(0)

            stats = c.stats()
            self.assertEqual([s["shard_index"] for s in stats], [0, 1])
            self.assertTrue(all(s["step"] == 1 for s in stats))
            c.checkpoint(1)
            c.write_parameters(0, np.zeros(N, dtype=np.float32))
            state = c.restore(1, epoch=o.epoch + 1)
            self.assertEqual(state["step"], 1)
            c.gather(0, back)
            np.testing.assert_array_equal(back, after.numpy())

            m = c.member("w0", address="127.0.0.1:1")
            m.join()
            world = m.world()
            self.assertEqual([x["worker_name"] for x in world["members"]],
                             ["w0"])
            m.leave()
            m.close()
            t.close()
            c.close()

    def test_errors_carry_the_code_and_the_message(self):
        with zeroshard.LocalFleet(1) as fleet:
            c = zeroshard.Client(fleet.addresses, "errors", insecure=True)
            with self.assertRaises(zeroshard.Error) as e:
                c.model_size()  # nothing registered yet
            self.assertEqual(e.exception.code_name, "FAILED_PRECONDITION")
            c.register([("w", (4,), 0)])
            with self.assertRaises(zeroshard.Error) as e:
                c.gather(2, np.zeros(8, dtype=np.float32))
            self.assertEqual(e.exception.code_name, "OUT_OF_RANGE")
            self.assertTrue(e.exception.message)
            with self.assertRaisesRegex(ValueError, "float64"):
                c.gather(0, np.zeros(4))
            with self.assertRaisesRegex(ValueError, "contiguous"):
                c.gather(0, np.zeros((4, 2), dtype=np.float32)[:, 0])
            with self.assertRaisesRegex(ValueError, "read-only"):
                ro = np.zeros(4, dtype=np.float32)
                ro.flags.writeable = False
                c.gather(0, ro)
            c.close()
            with self.assertRaises(zeroshard.Error):
                c.model_size()


if __name__ == "__main__":
    unittest.main(verbosity=2)
