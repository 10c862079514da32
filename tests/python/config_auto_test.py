"""zeroshard.Config resolves a Hugging Face-style config's "auto" values
through the library (zs_config_resolve): the same values, sources and
errors as `zeroshard config check`, no parsing in Python."""
import os
import tempfile
import unittest

import zeroshard

HF_ZERO3 = os.path.join("worker", "config", "testdata", "hf_zero3.json")
NVME = os.path.join("worker", "config", "testdata", "ds_nvme_aio.json")


class ConfigAutoTest(unittest.TestCase):
    def test_autos_come_from_the_inputs_and_the_model(self):
        cfg = zeroshard.Config(HF_ZERO3, 2, learning_rate=3e-4,
                               precision="bf16",
                               per_device_train_batch_size=4, steps=500,
                               hidden_size=64)
        self.assertEqual(cfg.base_lr, 3e-4)
        self.assertEqual(cfg.precision, "bf16")
        self.assertEqual(cfg.train_batch_size, 8)
        self.assertEqual(cfg.total_num_steps, 500)
        self.assertEqual(cfg.reduce_bucket_size, 64 * 64)
        self.assertEqual(cfg.stage3_param_persistence_threshold, 640)
        rows = {r["key"]: r for r in cfg.resolved}
        self.assertEqual(rows["optimizer.params.lr"]["source"],
                         "auto←--learning_rate")
        self.assertEqual(rows["zero_optimization.stage"]["source"], "file")
        self.assertIn("model (hidden size 64 from --hidden_size)",
                      rows["zero_optimization.reduce_bucket_size"]["source"])
        self.assertIn("optimizer.params.lr", cfg.table)

    def test_an_auto_nothing_fills_names_the_key(self):
        with self.assertRaises(zeroshard.Error) as e:
            zeroshard.Config(HF_ZERO3, 2, precision="bf16",
                             per_device_train_batch_size=4, steps=500,
                             hidden_size=64)
        # Named as a Python caller gives them, not as zeroshard train's
        # flags.
        self.assertIn("optimizer.params.lr", str(e.exception))
        self.assertIn("give learning_rate", str(e.exception))
        self.assertNotIn("--", str(e.exception))
        with self.assertRaises(zeroshard.Error) as e:
            zeroshard.Config(HF_ZERO3, 2, learning_rat=1e-3)
        self.assertIn("unknown input learning_rat (did you mean "
                      "learning_rate?)", str(e.exception))
        with self.assertRaises(zeroshard.Error) as e:
            zeroshard.Config(HF_ZERO3, 2, steps=100.0)
        self.assertIn("input steps", str(e.exception))
        self.assertIn("auto_values", str(e.exception))

    def test_nvme_offload_names_the_server_flags(self):
        cfg = zeroshard.Config(NVME, 2)
        self.assertEqual(cfg.server_flags[:2],
                         ["--storage=nvme", "--nvme_path=/local_nvme"])
        self.assertTrue(any("--storage=nvme" in w for w in cfg.warnings),
                        cfg.warnings)

    def test_plain_configs_still_parse(self):
        cfg = zeroshard.Config({"train_batch_size": 4,
                                "optimizer": {"type": "AdamW"}}, 2)
        self.assertEqual(cfg.micro_batch_per_worker, 2)
        self.assertEqual(cfg.warnings, [])
        # Without an optimizer section: the AdamW that runs is named, and
        # a learning rate given fills it (as Hugging Face's Trainer).
        cfg = zeroshard.Config({"train_batch_size": 4}, 2,
                               learning_rate=3e-4)
        self.assertIn("no optimizer section", cfg.warnings[0])
        self.assertEqual(cfg.base_lr, 3e-4)


class CommentsTest(unittest.TestCase):
    """Python reads a config file as the library does: comments, trailing
    commas and a byte-order mark (DeepSpeed's hjson.load), so the client
    optimizer's section and the monitors read what zs_config accepts."""

    TEXT = ('\ufeff{"train_batch_size": 4, # four\n'
            '  // an optimizer\n'
            '  "optimizer": {"type": "AdamW", "params": {"betas": [0.9, 0.95,],'
            ' "note": "a, # // /* kept"}}, /* end */\n}')

    def test_loads_and_the_library_agree(self):
        from zeroshard import client_optim
        got = client_optim.loads(self.TEXT)
        self.assertEqual(got["optimizer"]["params"]["betas"], [0.9, 0.95])
        self.assertEqual(got["optimizer"]["params"]["note"], "a, # // /* kept")
        with self.assertRaises(ValueError):
            client_optim.loads('{"a": 1 /* open')
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ds.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write(self.TEXT)
            self.assertEqual(client_optim.config_dict(path), got)
            cfg = zeroshard.Config(path, 1)
            self.assertEqual(cfg.beta2, 0.95)


class InitializeAutoTest(unittest.TestCase):
    """zeroshard.initialize fills "auto" through the same resolver: from
    auto_values, and the model's hidden size for the ZeRO sizes."""

    CONFIG = {"train_micro_batch_size_per_gpu": 2,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "scheduler": {"type": "WarmupDecayLR",
                            "params": {"warmup_num_steps": 5,
                                       "total_num_steps": "auto"}},
              "zero_optimization": {"stage": 2,
                                    "reduce_bucket_size": "auto"}}

    def model(self):
        import torch
        torch.manual_seed(0)
        # Four Linears read width 24, one reads 96: the hidden size is 24.
        return torch.nn.Sequential(
            torch.nn.Linear(24, 24), torch.nn.Linear(24, 24),
            torch.nn.Linear(24, 96), torch.nn.Linear(96, 24),
            torch.nn.Linear(24, 8))

    def test_hidden_size_is_the_commonest_linear_width(self):
        from zeroshard.engine import _hidden_size
        self.assertEqual(_hidden_size(self.model()), 24)

    def test_an_auto_without_its_input_names_the_key(self):
        with self.assertRaises(zeroshard.Error) as e:
            zeroshard.initialize(model=self.model(), config=self.CONFIG,
                                 servers="127.0.0.1:1")
        self.assertIn("total_num_steps", str(e.exception))
        self.assertIn("give steps", str(e.exception))
        with self.assertRaises(ValueError):
            zeroshard.initialize(model=self.model(), config=self.CONFIG,
                                 auto_values=[("steps", 7)])

    def test_auto_values_fill_the_config(self):
        with zeroshard.LocalFleet(2) as fleet:
            engine, _, _, _ = zeroshard.initialize(
                model=self.model(), config=self.CONFIG,
                servers=fleet.address_string, auto_values={"steps": 7})
            try:
                self.assertEqual(engine.config.total_num_steps, 7)
                self.assertEqual(engine.config.reduce_bucket_size, 24 * 24)
            finally:
                engine.close()


if __name__ == "__main__":
    unittest.main()
