"""LocalFleet: real zeroshard-server processes on loopback, for tests and examples.

    from zeroshard.fleet import LocalFleet

    with LocalFleet(2, checkpoint_dir="/tmp/ckpt") as fleet:
        run_job(fleet.address_string)   # "127.0.0.1:41027,127.0.0.1:35313"
        fleet.kill(1)                   # SIGKILL shard 1
        fleet.restart(1)                # same port, shard index, checkpoint dir

The Python twin of fleet/local_fleet.{h,cc}: each server listens on
127.0.0.1 on a port below the kernel's ephemeral range (zeroshard._ports),
so that no other process's outgoing connection can take it while a
restarted server is down (a restart keeps the port: the clients know it);
a server that finds its port taken at start is started again on another,
up to 5 times. It writes the port to a file in `work_dir`; it runs with
--insecure (plaintext, no tokens: loopback only); its output goes to
work_dir/server-<k>.log (a restart writes server-<k>.restart-<n>.log;
`log_path(k)` names the current one).
A server is ready once it is alive and its port accepts a TCP connection.
Stopping sends SIGTERM, then SIGKILL after a grace period. The servers get
PR_SET_PDEATHSIG (SIGTERM), as local_fleet's do: they end if the thread that
started them ends, so start a fleet from a thread that outlives it.

Standard library only (no torch, no libzeroshard.so).
"""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref

from ._ports import quiet_port

__all__ = ["LocalFleet", "find_server_binary"]

_SERVER_NAME = "zeroshard-server"
_ENV_SERVER = "ZEROSHARD_SERVER"
_LOG_TAIL_BYTES = 4000
# Starts of a server whose chosen port was taken before it could bind it.
_PORT_TRIES = 5
_POLL_SECONDS = 0.02


def find_server_binary(server_binary=None):
    """The zeroshard-server to run: the argument, else $ZEROSHARD_SERVER,
    else zeroshard-server on PATH; FileNotFoundError naming what was tried."""
    tried = []
    if server_binary is not None:
        candidates = [("server_binary argument", os.fspath(server_binary))]
    else:
        candidates = []
        if os.environ.get(_ENV_SERVER):
            candidates.append(("$" + _ENV_SERVER, os.environ[_ENV_SERVER]))
        else:
            tried.append("$%s (not set)" % _ENV_SERVER)
        on_path = shutil.which(_SERVER_NAME)
        if on_path:
            candidates.append(("PATH", on_path))
        else:
            tried.append("%s on PATH (not found)" % _SERVER_NAME)
    for what, path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
        tried.append("%s = %s (not an executable file)" % (what, path))
    raise FileNotFoundError(
        "cannot find %s; tried: %s. Build it with `bazel build //server:%s` "
        "and pass server_binary= or set $%s"
        % (_SERVER_NAME, "; ".join(tried), _SERVER_NAME, _ENV_SERVER))


def _log_tail(path):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)


def _accepts(port, timeout=1.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _die_with_parent():
    """preexec_fn for Linux: SIGTERM the server when its parent thread ends."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    sigterm = int(signal.SIGTERM)
    return lambda: prctl(pr_set_pdeathsig, sigterm)


def _stop_processes(procs, grace):
    """SIGTERM every running process, SIGKILL whatever is left after `grace`
    seconds; reaps all. Returns their exit codes."""
    for p in procs:
        if p is not None and p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + grace
    codes = []
    for p in procs:
        if p is None:
            codes.append(None)
            continue
        try:
            codes.append(p.wait(timeout=max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes


def _cleanup(procs, remove_dir):
    _stop_processes(procs, 3.0)
    if remove_dir:
        shutil.rmtree(remove_dir, ignore_errors=True)


class LocalFleet:
    """K real zeroshard-server processes on 127.0.0.1 (shards 0..K-1 of K).

    num_servers: K. server_binary: see find_server_binary. checkpoint_dir:
    passed to every server as --checkpoint_dir (None: not passed).
    work_dir: port files and logs (None: a temporary directory, removed by
    close()). extra_args: more flags for every server. startup_timeout:
    seconds each start or restart may take before RuntimeError.
    """

    def __init__(self, num_servers=2, *, server_binary=None,
                 checkpoint_dir=None, work_dir=None, extra_args=(),
                 startup_timeout=30.0):
        # Set first: __del__/close() must work whatever fails below.
        self._procs = []
        self._closed = False
        num_servers = int(num_servers)
        if num_servers < 1:
            raise ValueError("a fleet needs at least one server, got %d"
                             % num_servers)
        self._binary = find_server_binary(server_binary)
        self._num = num_servers
        self._checkpoint_dir = (None if checkpoint_dir is None
                                else os.path.abspath(checkpoint_dir))
        self._extra_args = [str(a) for a in extra_args]
        self._timeout = float(startup_timeout)
        own_dir = None
        if work_dir is None:
            own_dir = tempfile.mkdtemp(prefix="zeroshard-fleet-")
            work_dir = own_dir
        os.makedirs(work_dir, exist_ok=True)
        self._work_dir = os.path.abspath(work_dir)
        self._restarts = 0
        self._ports = [0] * num_servers
        self._logs = [os.path.join(self._work_dir, "server-%d.log" % k)
                      for k in range(num_servers)]
        self._finalizer = weakref.finalize(self, _cleanup, self._procs,
                                           own_dir)
        try:
            port_files = []
            for k in range(num_servers):
                port_file = os.path.join(self._work_dir, "server-%d.port" % k)
                if os.path.exists(port_file):  # a previous run's
                    os.remove(port_file)
                port_files.append(port_file)
                self._procs.append(self._spawn_on_new_port(k, port_file))
            until = time.monotonic() + self._timeout
            for k in range(num_servers):
                self._ports[k] = self._read_port(k, port_files[k], until)
                self._wait_ready(k, until, "start")
        except BaseException:
            self._finalizer()
            self._closed = True
            raise

    # -- what the fleet is -------------------------------------------------

    @property
    def addresses(self):
        """["127.0.0.1:port", ...], one per shard, in shard order."""
        return ["127.0.0.1:%d" % p for p in self._ports]

    @property
    def address_string(self):
        """The addresses joined by commas (what the client and CLI take)."""
        return ",".join(self.addresses)

    @property
    def num_servers(self):
        return self._num

    @property
    def work_dir(self):
        return self._work_dir

    @property
    def checkpoint_dir(self):
        return self._checkpoint_dir

    @property
    def server_binary(self):
        return self._binary

    def log_path(self, i):
        """The log of server i's current process."""
        return self._logs[self._index(i)]

    def pid(self, i):
        return self._procs[self._index(i)].pid

    def alive(self, i):
        """Whether server i's process is running."""
        return self._procs[self._index(i)].poll() is None

    # -- faults and life cycle ---------------------------------------------

    def kill(self, i):
        """SIGKILLs server i wherever it is in its work and reaps it."""
        p = self._procs[self._index(i)]
        if p.poll() is None:
            p.kill()
        p.wait()

    def restart(self, i):
        """Kills server i if it runs (SIGKILL), then starts it again on the
        same port with the same shard index, checkpoint dir and flags; returns
        once it is ready (RuntimeError if it exits or is not ready in time)."""
        i = self._index(i)
        self._check_open()
        self.kill(i)
        self._restarts += 1
        self._logs[i] = os.path.join(
            self._work_dir, "server-%d.restart-%d.log" % (i, self._restarts))
        self._procs[i] = self._spawn(i, self._ports[i], None)
        self._wait_ready(i, time.monotonic() + self._timeout, "restart")

    def stop(self, grace=10.0):
        """SIGTERM to every server, SIGKILL to those still running after
        `grace` seconds. Returns the exit codes (0: a clean stop; -9: killed)."""
        codes = _stop_processes(self._procs, grace)
        self._closed = True
        self._finalizer()  # removes a temporary work_dir
        return codes

    def close(self):
        """Stops every server (see stop()); safe to call more than once."""
        if not self._closed:
            self.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            if not self._closed and self._procs:
                self._finalizer()
        except Exception:  # interpreter shutdown: never raise from __del__
            pass

    def __repr__(self):
        return "LocalFleet(%s%s)" % (self.address_string,
                                     ", closed" if self._closed else "")

    # -- internals ---------------------------------------------------------

    def _index(self, i):
        i = int(i)
        if not 0 <= i < self._num:
            raise IndexError("no shard server %d (the fleet has %d)"
                             % (i, self._num))
        return i

    def _check_open(self):
        if self._closed:
            raise RuntimeError("the fleet is closed")

    def _spawn_on_new_port(self, k, port_file):
        if os.path.exists(port_file):  # a previous try's
            os.remove(port_file)
        return self._spawn(k, quiet_port("127.0.0.1"), port_file)

    def _spawn(self, k, port, port_file):
        argv = [self._binary, "--host=127.0.0.1", "--port=%d" % port,
                "--shard_index=%d" % k, "--num_shards=%d" % self._num]
        if port_file is not None:
            argv.append("--port_file=" + port_file)
        if self._checkpoint_dir is not None:
            argv.append("--checkpoint_dir=" + self._checkpoint_dir)
        argv += self._extra_args
        argv.append("--insecure")
        with open(self._logs[k], "ab") as log:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, close_fds=True,
                                    preexec_fn=_die_with_parent())

    def _failure(self, k, why):
        log = self._logs[k]
        return RuntimeError("shard server %d %s; tail of %s:\n%s"
                            % (k, why, log, _log_tail(log)))

    def _died(self, k, what):
        code = self._procs[k].poll()
        how = "killed by signal %d" % -code if code < 0 else "exit %d" % code
        return self._failure(k, "exited during %s (%s)" % (what, how))

    def _not_ready(self, k, what):
        return self._failure(k, "was not ready within %.0f s of its %s"
                             % (self._timeout, what))

    def _read_port(self, k, port_file, until):
        """The port server k wrote (atomically) to `port_file`; a server
        whose chosen port was taken is started again on another."""
        tries = 1
        while True:
            if self._procs[k].poll() is not None:
                last = _log_tail(self._logs[k]).rstrip().splitlines()[-1:]
                if tries < _PORT_TRIES and "cannot listen on" in "".join(last):
                    tries += 1
                    self._procs[k] = self._spawn_on_new_port(k, port_file)
                    continue
                raise self._died(k, "start")
            try:
                with open(port_file) as f:
                    return int(f.read().strip())
            except (OSError, ValueError):
                pass
            if time.monotonic() > until:
                raise self._not_ready(k, "start")
            time.sleep(_POLL_SECONDS)

    def _wait_ready(self, k, until, what):
        """Until server k is alive and accepts TCP connections."""
        while True:
            if self._procs[k].poll() is not None:
                raise self._died(k, what)
            if _accepts(self._ports[k]):
                if self._procs[k].poll() is not None:
                    raise self._died(k, what)
                return
            if time.monotonic() > until:
                raise self._not_ready(k, what)
            time.sleep(_POLL_SECONDS)
