"""The gradient path of the engine (engine.py): from autograd to the
shard servers.

Every parameter's gradient accumulates into a view of one flat buffer (at
stage 3 the parameters' own gradients are taken into it as they come). On
a step's last micro-batch an AccumulateGrad hook counts the parameters of
each bucket (`reduce_bucket_size` elements over the flat space, the last
range first); a bucket whose parameters are all done is reduce-scattered
among the ranks while backward goes on (overlap_comm; gloo in torch 1.13
has no reduce_scatter: each rank sends every other rank that rank's part
and adds the copies of its own part in rank order; NCCL: an all-reduce),
then, on the pipeline thread, this rank's part is scaled by 1 / (W x gas),
its fp64 sum of squares taken, and it is pushed to the servers that own it
on the push pool (ctypes releases the GIL). With server aggregation every
micro-batch's buckets are pushed whole and the servers sum them.

A mixin of ZeroShardEngine: the methods use the engine's fields.
Threading: hooks on the thread running backward; gloo's sends and
receives posted on the engine's post thread (in bucket order; posting a
send copies the bucket into the socket, which took the thread running
backward 1-5 ms per bucket), NCCL's all-reduce on the thread running
backward; the reduce waits, scaling and pushes on the engine's threads.
"""
import time

import torch
import torch.distributed as dist

from . import layout
from .errors import Error


class GradientPipeline:
    def _setup_grads(self):
        self._gflat = torch.zeros(self.numel, dtype=self.dtype,
                                  device=self.device)
        # On CUDA: the pipeline's stream and pinned host buffer (made on
        # first use).
        self._copy_stream = None
        self._staging, self._staging_base = None, 0
        self._gviews = [self._gflat[e.offset:e.end].view(e.shape)
                        for e in self.entries]
        if self._params.grads_in_views:
            self._attach_grads()
        self._buckets = layout.buckets(self.numel,
                                       self.config.reduce_bucket_size,
                                       self.config.alignment)
        # Which buckets each entry touches; per bucket, how many entries.
        self._bucket_of = []
        self._bucket_need = [0] * len(self._buckets)
        for e in self.entries:
            ks = [k for k, b in enumerate(self._buckets)
                  if layout.intersect(b, (e.offset, e.end))]
            self._bucket_of.append(ks)
            for k in ks:
                self._bucket_need[k] += 1
        self._hooks = []
        for i, e in enumerate(self.entries):
            acc = e.param.expand_as(e.param).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(i))
            self._hooks.append(acc)  # the node must outlive the hook

    def _attach_grads(self):
        for e, v in zip(self.entries, self._gviews):
            g = e.param.grad
            if g is None or g.data_ptr() != v.data_ptr():
                if g is not None:
                    v.copy_(g)
                e.param.grad = v

    def _make_hook(self, i):
        def hook(*_unused):
            self._params.on_grad(i)
            if not self._acting:
                return
            with self._lock:
                for k in self._bucket_of[i]:
                    self._ready[k] += 1
                while (self._issued < len(self._buckets) and
                       self._ready[self._issued] ==
                       self._bucket_need[self._issued]):
                    self._issue(self._issued)
                    self._issued += 1
        return hook

    def _issue(self, k):
        """Bucket k's gradients are final on this rank: start its reduction
        (collectives are issued here, on the thread running backward, in
        bucket order on every rank) and queue the rest on the pipeline."""
        begin, end = self._buckets[k]
        work = None
        if self.world > 1 and not self.aggregation:
            if dist.get_backend() == "gloo":
                # Posting a send copies into the socket: off this thread.
                work = self._post.submit(self._reduce_scatter, k, begin, end)
            else:
                work = self._reduce_scatter(k, begin, end)
        slot = (self._micro_index() * self.world + self.rank
                if self.aggregation else 0)
        ready = None
        if self._gflat.device.type == "cuda":
            # The bucket's gradients are final at this point of the
            # backward's stream: the copy stream starts from here.
            ready = torch.cuda.Event()
            ready.record()
        self._pending.append(self._pipe.submit(
            self._finish, k, work, slot, self._epoch, self._state["step"],
            ready))

    def _reduce_scatter(self, k, begin, end):
        """Bucket k's reduce-scatter over the ranks' slices. gloo (torch
        1.13) has no reduce_scatter: each rank sends every other rank the
        part of the bucket that rank owns and receives the others' copies
        of its own part (point to point, tag k): (W-1)/W of the bucket each
        way, half of what an all-reduce moves. NCCL: an all-reduce. Returns
        what _finish waits for."""
        view = self._gflat[begin:end]
        if dist.get_backend() != "gloo":
            return ("all_reduce", dist.all_reduce(view, async_op=True))
        works, received = [], {}
        for r, part in enumerate(self._slices):
            piece = layout.intersect((begin, end), part)
            if r == self.rank or piece is None:
                continue
            works.append(dist.isend(self._gflat[piece[0]:piece[1]], r,
                                    tag=k))
        mine = layout.intersect((begin, end), self._slice)
        if mine is not None:
            for r in range(self.world):
                if r != self.rank:
                    buf = torch.empty(mine[1] - mine[0], dtype=self.dtype)
                    received[r] = buf
                    works.append(dist.irecv(buf, r, tag=k))
        return ("p2p", works, received, mine)

    def _wait_reduction(self, work):
        """Waits for a bucket's reduction; this rank's part of the bucket
        in _gflat then holds the sum over ranks (added in rank order)."""
        if work[0] == "all_reduce":
            work[1].wait()
            return
        _, works, received, piece = work
        for w in works:
            w.wait()
        if received:
            mine = self._gflat[piece[0]:piece[1]]
            total = None
            for r in range(self.world):
                part = mine if r == self.rank else received[r]
                total = part.clone() if total is None else total.add_(part)
            mine.copy_(total)

    def _finish(self, k, work, slot, epoch, step, ready=None):
        """On the pipeline thread: wait for the reduce, scale this rank's
        part, push it (on the push pool). Returns push futures. On CUDA
        (ready: the event _issue recorded) this runs on the engine's copy
        stream, beside the backward that goes on."""
        if ready is None:
            return self._finish_bucket(k, work, slot, epoch, step)
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream()
        self._copy_stream.wait_event(ready)
        with torch.cuda.stream(self._copy_stream):
            return self._finish_bucket(k, work, slot, epoch, step)

    def _finish_bucket(self, k, work, slot, epoch, step):
        begin, end = self._buckets[k]
        if work is not None:
            t = time.perf_counter()
            if not isinstance(work, tuple):
                work = work.result()  # posted on the post thread
            self._wait_reduction(work)
            self.timings["reduce_wait"] += time.perf_counter() - t
        inv = 1.0 / (self.world * self.gas)
        if self.aggregation:
            mine = (begin, end)
        else:
            mine = layout.intersect((begin, end), self._slice)
        if mine is None:
            return []
        part = self._gflat[mine[0]:mine[1]]
        if inv != 1.0:
            part.mul_(inv)
        if not self.aggregation:
            wide = part.double()
            sq = float(torch.dot(wide, wide))
            self._sumsq += sq
            if sq != sq or sq == float("inf"):
                self._nonfinite = True
        if part.device.type != "cpu":
            part = self._stage_out(mine, part)
        key = f"w{self.rank}/s{step}/m{slot}/o{mine[0]}"
        return [self._pool.submit(self._client.push, mine[0], part,
                                  epoch=epoch, step=step, slot=slot,
                                  key_prefix=key)]

    def _stage_out(self, piece, part):
        """Copies `part` (on the device: the flat range `piece`) into its
        place in the pinned staging buffer, allocated once (this rank's
        slice, or the whole flat space with server aggregation) and
        returns that host view once the copy is done. The buffer is
        reused every micro-batch: backward() waits for the previous pushes
        before the gradients are written again."""
        base, n = ((0, self.numel) if self.aggregation else
                   (self._slice[0], self._slice[1] - self._slice[0]))
        buf = self._staging
        if (buf is None or self._staging_base != base or buf.numel() != n or
                buf.dtype != part.dtype):
            buf = torch.empty(n, dtype=part.dtype, pin_memory=True)
            self._staging, self._staging_base = buf, base
        host = buf[piece[0] - base:piece[1] - base]
        host.copy_(part, non_blocking=True)
        torch.cuda.current_stream().synchronize()
        return host

    def _micro_index(self):
        return (self._micro_steps % self.gas)

    def _wait_pending(self):
        """Waits for this step's reduces and pushes; the first failure's
        status code (0 when all went well)."""
        start = time.perf_counter()
        status = 0
        first_error = None
        self._push_error = None  # the first, for the step's error message
        for f in self._pending:
            try:
                for push in f.result():
                    try:
                        push.result()
                    except Error as e:
                        status = status or e.code
                        self._push_error = self._push_error or e
            except Error as e:
                status = status or e.code
                self._push_error = self._push_error or e
            except Exception as e:  # noqa: BLE001 - a collective failed
                first_error = first_error or e
        self._pending = []
        self.timings["push_wait"] += time.perf_counter() - start
        if first_error is not None:
            raise first_error
        return status
