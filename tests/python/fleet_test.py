"""zeroshard.fleet.LocalFleet against real zeroshard-server processes.

Run by zs_py_test (tools/defs.bzl): $ZEROSHARD_SERVER names the server.
No timing assertions: every wait is LocalFleet's own (startup_timeout).
"""

import os
import shutil
import socket
import tempfile
import unittest
from unittest import mock

import zeroshard.fleet
from zeroshard._ports import ephemeral_range
from zeroshard.fleet import LocalFleet

# Generous, yet below a small test's 60 s, so that a stuck start fails with
# its log rather than a Bazel timeout.
TIMEOUT = 45.0


def port_of(address):
    host, port = address.rsplit(":", 1)
    return host, int(port)


def connects(address):
    try:
        with socket.create_connection(port_of(address), timeout=10):
            return True
    except ConnectionRefusedError:
        return False


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().decode().split("\0")


class LocalFleetTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fleet_test-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def test_kill_restart_close(self):
        ckpt = os.path.join(self.tmp, "ckpt")
        work = os.path.join(self.tmp, "work")
        with LocalFleet(2, checkpoint_dir=ckpt, work_dir=work,
                        startup_timeout=TIMEOUT) as fleet:
            addresses = fleet.addresses
            self.assertEqual(len(addresses), 2)
            self.assertEqual(fleet.address_string, ",".join(addresses))
            for a in addresses:
                host, port = port_of(a)
                self.assertEqual(host, "127.0.0.1")
                # Below the ephemeral range: no outgoing connection takes
                # it while a restarted server is down.
                self.assertGreaterEqual(port, 1024)
                self.assertLess(port, ephemeral_range()[0])
                self.assertTrue(connects(a), a)
            self.assertNotEqual(addresses[0], addresses[1])
            for k in range(2):
                self.assertTrue(fleet.alive(k))
                argv = cmdline(fleet.pid(k))
                self.assertIn("--shard_index=%d" % k, argv)
                self.assertIn("--num_shards=2", argv)
                self.assertIn("--checkpoint_dir=" + ckpt, argv)
                self.assertIn("--insecure", argv)
                self.assertEqual(os.path.dirname(fleet.log_path(k)), work)

            old_pid = fleet.pid(1)
            fleet.kill(1)
            self.assertFalse(fleet.alive(1))
            self.assertFalse(connects(addresses[1]),
                             "a killed server's port still accepts")
            self.assertTrue(connects(addresses[0]))

            fleet.restart(1)
            self.assertEqual(fleet.addresses, addresses)
            self.assertTrue(fleet.alive(1))
            self.assertNotEqual(fleet.pid(1), old_pid)
            self.assertTrue(connects(addresses[1]))
            argv = cmdline(fleet.pid(1))
            self.assertIn("--port=%d" % port_of(addresses[1])[1], argv)
            self.assertIn("--shard_index=1", argv)
            self.assertIn("--checkpoint_dir=" + ckpt, argv)
            self.assertIn("restart", os.path.basename(fleet.log_path(1)))
            with open(fleet.log_path(1)) as f:
                self.assertIn("shard 1/2 listening", f.read())

            # restart() of a running server kills it first.
            old_pid = fleet.pid(0)
            fleet.restart(0)
            self.assertNotEqual(fleet.pid(0), old_pid)
            self.assertEqual(fleet.addresses, addresses)
        # __exit__ closed it: every server stopped and was reaped.
        for k in range(2):
            self.assertFalse(fleet.alive(k))
        fleet.close()  # again: no error
        with self.assertRaises(RuntimeError):
            fleet.restart(0)

    def test_stop_is_clean_and_temporary_work_dir_goes(self):
        fleet = LocalFleet(1, startup_timeout=TIMEOUT)
        work = fleet.work_dir
        self.assertTrue(os.path.isdir(work))
        self.assertTrue(work.startswith(tempfile.gettempdir()))
        self.assertEqual(fleet.stop(), [0])  # SIGTERM: exit 0
        self.assertFalse(fleet.alive(0))
        self.assertFalse(os.path.exists(work))

    def test_garbage_collected_fleet_stops_its_servers(self):
        fleet = LocalFleet(1, work_dir=self.tmp, startup_timeout=TIMEOUT)
        proc = fleet._procs[0]
        del fleet
        self.assertIsNotNone(proc.poll())

    def test_server_that_cannot_start(self):
        with self.assertRaises(RuntimeError) as cm:
            LocalFleet(2, work_dir=self.tmp, extra_args=["--lease_ms=1"],
                       startup_timeout=TIMEOUT)
        message = str(cm.exception)
        self.assertIn("exited during start", message)
        self.assertIn("lease_ms", message)  # the tail of its log

    def held_port(self):
        """A port some other program listens on (for the test's life)."""
        s = socket.socket()
        self.addCleanup(s.close)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        return s.getsockname()[1]

    def test_port_taken_before_the_server_binds_it_is_replaced(self):
        taken = self.held_port()
        calls = []
        real = zeroshard.fleet.quiet_port

        def choose(host):
            calls.append(host)
            return taken if len(calls) == 1 else real(host)
        with mock.patch.object(zeroshard.fleet, "quiet_port", choose):
            with LocalFleet(1, work_dir=self.tmp,
                            startup_timeout=TIMEOUT) as fleet:
                self.assertEqual(len(calls), 2)
                self.assertNotEqual(port_of(fleet.addresses[0])[1], taken)
                self.assertTrue(connects(fleet.addresses[0]))
                with open(fleet.log_path(0)) as f:
                    self.assertIn("cannot listen on 127.0.0.1:%d" % taken,
                                  f.read())

    def test_port_always_taken_ends_the_start(self):
        taken = self.held_port()
        calls = []

        def choose(host):
            calls.append(host)
            return taken
        with mock.patch.object(zeroshard.fleet, "quiet_port", choose):
            with self.assertRaises(RuntimeError) as cm:
                LocalFleet(1, work_dir=self.tmp, startup_timeout=TIMEOUT)
        self.assertEqual(len(calls), 5)
        self.assertIn("cannot listen on 127.0.0.1:%d" % taken,
                      str(cm.exception))

    def test_bad_index(self):
        with LocalFleet(1, work_dir=self.tmp, startup_timeout=TIMEOUT) as f:
            with self.assertRaises(IndexError):
                f.kill(1)

    def test_missing_binary(self):
        missing = os.path.join(self.tmp, "no-such-server")
        with self.assertRaises(FileNotFoundError) as cm:
            LocalFleet(2, server_binary=missing)
        self.assertIn(missing, str(cm.exception))
        with mock.patch.dict(os.environ, {"PATH": self.tmp}):
            os.environ.pop("ZEROSHARD_SERVER", None)
            with self.assertRaises(FileNotFoundError) as cm:
                LocalFleet(2)
            message = str(cm.exception)
            self.assertIn("$ZEROSHARD_SERVER (not set)", message)
            self.assertIn("zeroshard-server on PATH (not found)", message)
        with mock.patch.dict(os.environ, {"ZEROSHARD_SERVER": missing}):
            with self.assertRaises(FileNotFoundError) as cm:
                LocalFleet(2)
            self.assertIn("$ZEROSHARD_SERVER = " + missing, str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
