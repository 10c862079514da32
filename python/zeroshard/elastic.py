"""Elastic workers: torch.distributed groups formed from the job's
membership (the MembershipService on shard 0), re-formed at step
boundaries when workers join or leave, without resharding anything — the
servers own the optimizer state.

Each worker joins the membership with the address of a TCPStore it would
host as leader. A group is the members of one membership epoch (at least
min_workers, this worker among them); ranks are the members' order (member
ids: workers that stay keep their order, newcomers come last); rank 0
hosts the store and every member initialises the default process group
(gloo) over it under the epoch's prefix. The engine asks for a new group
when the step leader reports a newer membership epoch (it refreshes its
view every step boundary), or when a step failed because a peer died (the
next group is formed once its lease has expired, from a newer epoch).

The group a worker joined last is destroyed at interpreter exit if close()
did not (an atexit handler; dist.py says why).

Threading: one thread; the membership's lease keeper runs in the library.
"""
import atexit
import datetime
import os
import socket
import time

import torch.distributed as dist

from ._lib import CODES
from .dist import destroy_if_default
from .errors import Error
from ._ports import quiet_port


SETTLE_SECONDS = 0.5


class ElasticWorld:
    def __init__(self, client, *, worker_name=None, min_workers=1,
                 host="127.0.0.1", timeout=600.0, op_timeout=60.0,
                 log=None):
        if min_workers < 1:
            raise ValueError("elastic: min_workers must be >= 1")
        self.host = host
        self.port = quiet_port(host)
        self.address = f"{host}:{self.port}"
        self.min_workers = int(min_workers)
        self.timeout = float(timeout)
        self.op_timeout = float(op_timeout)
        self.log = log or (lambda line: None)
        name = worker_name or f"{socket.gethostname()}:{os.getpid()}"
        self.member = client.member(name, address=self.address)
        self.member_id = self.member.join()
        self._store = None  # hosted while this worker is a leader
        self.epoch = 0
        self.left = False
        self._group = None  # the default process group this worker made
        atexit.register(self._destroy_group)

    def form(self, min_epoch=0):
        """Waits for an epoch >= min_epoch with at least min_workers members,
        this one among them, stable for a moment, and joins its process
        group. Returns (epoch, rank, size). Error(DEADLINE_EXCEEDED) past
        the timeout."""
        deadline = time.monotonic() + self.timeout
        waited, last = None, None
        while True:
            if time.monotonic() > deadline:
                raise Error(CODES["DEADLINE_EXCEEDED"],
                            f"elastic: no group of {self.min_workers} "
                            f"workers formed in {self.timeout:.0f} s "
                            f"(last view: epoch, members = {waited})")
            w = self.member.world()
            if w["expired"]:
                self.member_id = self.member.join()
                continue
            ids = [m["member_id"] for m in w["members"]]
            view = (w["epoch"], len(ids))
            if (w["epoch"] < min_epoch or len(ids) < self.min_workers or
                    self.member_id not in ids):
                if view != waited:
                    self.log(f"waiting for {self.min_workers} workers "
                             f"(epoch {w['epoch']}, {len(ids)} members)")
                    waited = view
                time.sleep(0.1)
                continue
            # Workers joining at once move the epoch several times: form
            # only a view that stayed the same for a moment.
            if last != w["epoch"]:
                last = w["epoch"]
                time.sleep(SETTLE_SECONDS)
                continue
            rank = ids.index(self.member_id)
            leader = w["members"][0]["address"]
            try:
                self._join_group(w["epoch"], rank, len(ids), leader)
            except (RuntimeError, OSError) as e:
                # A member went away, or the members tried different
                # attempts: try again, from the view as it is then.
                self.log(f"epoch {w['epoch']}: group not formed ({e}); "
                         "trying again")
                last = None
                continue
            self.epoch = w["epoch"]
            self.log(f"epoch {self.epoch}: rank {rank} of {len(ids)}")
            return self.epoch, rank, len(ids)

    def _join_group(self, epoch, rank, size, leader):
        """The default process group of the epoch's members, over the
        leader's store under "epoch-<e>/<attempt>": a failed attempt moves
        the leader's attempt counter, so a retry never meets the keys of an
        abandoned one."""
        if dist.is_initialized():
            dist.destroy_process_group()
        self._group = None
        timeout = datetime.timedelta(seconds=self.op_timeout)
        if rank == 0:
            if self._store is None:
                self._store = dist.TCPStore(self.host, self.port,
                                            is_master=True, timeout=timeout,
                                            wait_for_workers=False)
            store = self._store
        else:
            host, port = leader.rsplit(":", 1)
            store = dist.TCPStore(host, int(port), is_master=False,
                                  timeout=timeout)
        key = f"epoch-{epoch}/attempt"
        attempt = store.add(key, 0)
        prefixed = dist.PrefixStore(f"epoch-{epoch}/{attempt}", store)
        try:
            dist.init_process_group("gloo", store=prefixed, rank=rank,
                                    world_size=size, timeout=timeout)
        except (RuntimeError, OSError):
            if rank == 0:
                store.add(key, 1)
            raise
        self._group = dist.group.WORLD

    def _destroy_group(self):
        """At exit: the group this worker made last, unless close() or a
        re-formation destroyed it first."""
        destroy_if_default(self._group)
        self._group = None

    def refresh(self):
        """The leader's view at a step boundary (one heartbeat), so that
        the outcome reports a join or a leave at the next boundary."""
        try:
            self.member.heartbeat()
        except Error:
            pass  # the lease keeper rejoins; the view stays as it was

    def leave(self):
        if not self.left:
            self.left = True
            self.member.leave()

    def close(self):
        if dist.is_initialized():
            dist.destroy_process_group()
        self._group = None
        atexit.unregister(self._destroy_group)
        self.member.close()
