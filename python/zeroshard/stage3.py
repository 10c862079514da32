"""Where the module's parameters live between steps.

FlatParams (stages 0-2): every rank holds the whole module in one flat
buffer whose views are the parameters; after each step the updated values
are gathered from the servers into it (fp32, or the 16-bit serving copy
under fp16/bf16).

PartitionedParams (stage 3): a module's own parameters (a "unit": the
parameters it registers itself) are materialised only while it runs:
gathered in its forward pre-hook; after its forward kept for its backward
when backward uses it again within stage3_max_reuse_distance elements
(kept_units, DeepSpeed's rule), else released and gathered again for its
backward (an autograd function on its outputs, since torch 1.13 has no
module backward pre-hooks); released once its gradients are taken.
Between steps a rank holds its slice of the flat space (the range
zs_slice gives it); on the CPU it loads a unit's part in that slice from
there and the rest from the servers (no collective: the ranks do not meet
per unit), on CUDA by an all-gather among the ranks; with offload_param
the rank holds nothing and gathers units from the servers.
Units no larger than stage3_param_persistence_threshold elements stay whole
on every rank (fetched after each step; without recovery behind the next
forward, each put in place when its module runs). The first forward runs
with every unit gathered and learns the order the units run in (the next
ones are prefetched, in forward and in backward order, up to
stage3_prefetch_bucket_size elements) and which module reads which
module's parameters: a parameter read by another module joins the reader's
unit (nn.MultiheadAttention reads out_proj.weight), one read by the root
module's own forward stays whole.

Threading: the hooks run on the thread running forward and backward; loads
from the servers run on the prefetch pool.
"""
import concurrent.futures
import copy
import dataclasses
import functools

import torch
import torch.distributed as dist

from . import layout

_SERVING = {"fp16": torch.float16, "bf16": torch.bfloat16}
_ABSENT = object()


def _begin_end(offset_count):
    return offset_count[0], offset_count[0] + offset_count[1]


def _position(ranges, offset):
    """Where flat `offset` sits in the concatenation of `ranges` (sorted,
    disjoint [begin, end) pairs, one of which holds it)."""
    pos = 0
    for begin, end in ranges:
        if begin <= offset < end:
            return pos + offset - begin
        pos += end - begin
    raise ValueError(f"offset {offset} is in none of {ranges}")


def server_ranges(client):
    """Every server's [begin, end) of the flat space, in shard order."""
    return [_begin_end(client.server_range(k))
            for k in range(client.num_servers())]


def _gather_into(engine, ranges, out, pool, host=None):
    """Gathers flat ranges [(begin, end)] from the servers into the 1-D
    tensor `out` (their concatenation), splitting at server boundaries so
    that every server is asked at once; fp32 or the serving dtype. host:
    where the values land first when `out` cannot take them (another
    dtype or a device), e.g. a pinned buffer kept across steps; a fresh
    one when None."""
    precision = engine.precision
    want = torch.float32 if precision == "fp32" else _SERVING[precision]
    if out.dtype == want and out.device.type == "cpu":
        host = out
    elif host is None:
        host = torch.empty(out.numel(), dtype=want)
    pieces, pos = [], 0
    for begin, end in ranges:
        for sb, se in engine._server_ranges:
            r = layout.intersect((begin, end), (sb, se))
            if r is not None:
                pieces.append((r[0], host[pos + r[0] - begin:
                                          pos + r[1] - begin]))
        pos += end - begin
    # Every piece but the last on the pool, the last on this thread (one
    # piece, the usual unit load, then needs no thread hop).
    jobs = [pool.submit(engine._client.gather, b, view)
            for b, view in pieces[:-1]]
    try:
        if pieces:
            engine._client.gather(*pieces[-1])
    finally:
        for j in jobs:
            j.result()
    if host is not out:
        out.copy_(host)


class FlatParams:
    grads_in_views = True

    def __init__(self, engine):
        self.engine = engine
        e0 = engine.entries
        self.flat = torch.empty(engine.numel, dtype=engine.dtype,
                                device=engine.device)
        self._host = None  # CUDA: the pinned landing buffer of fetch()
        for e in e0:
            view = self.flat[e.offset:e.end]
            view.copy_(e.param.data.reshape(-1))
            e.param.data = view.view(e.shape)

    def initial(self):
        return self.flat.detach().float().cpu().contiguous()

    def fetch(self, behind=False):  # noqa: ARG002 - see behind.py
        if self.flat.device.type == "cuda" and self._host is None:
            # Gathered into pinned memory, then one copy to the device:
            # no fresh pages to fault in, and a DMA at full speed.
            precision = self.engine.precision
            self._host = torch.empty(
                self.engine.numel, pin_memory=True,
                dtype=torch.float32 if precision == "fp32" else
                _SERVING[precision])
        _gather_into(self.engine, [(0, self.engine.numel)], self.flat,
                     self.engine._pool, self._host)

    def wait_part(self):
        pass

    def after_hooks(self):
        pass

    def before_backward(self):
        pass

    def after_backward(self):
        pass

    def on_grad(self, i):
        pass

    def held_bytes(self):
        return self.flat.numel() * self.flat.element_size()


class _Unit:
    def __init__(self, index, module, entries):
        self.index, self.module, self.entries = index, module, entries
        self.numel = sum(e.numel for e in entries)
        self.ranges = _merge([(e.offset, e.end) for e in entries])
        self.persistent = False
        self.live = False
        self.pending = None  # a prefetch in flight
        self.grads_left = 0


def _merge(ranges):
    out = []
    for b, e in sorted(ranges):
        if out and out[-1][1] == b:
            out[-1] = (out[-1][0], e)
        else:
            out.append((b, e))
    return out


class _PreBackward(torch.autograd.Function):
    """Identity on a unit's outputs whose backward gathers the unit first."""

    @staticmethod
    def forward(ctx, params, unit_index, *outputs):
        ctx.params, ctx.unit_index = params, unit_index
        return outputs if len(outputs) > 1 else outputs[0]

    @staticmethod
    def backward(ctx, *grads):
        ctx.params.gather_for_backward(ctx.unit_index)
        return (None, None) + grads


class _Tracking(dict):
    """A module's `_parameters` during the first forward: reports reads
    (nn.Module.__getattr__ looks parameters up here)."""

    def __init__(self, original, owner, params):
        super().__init__(original)
        self.owner, self.params = owner, params

    def __getitem__(self, name):
        value = super().__getitem__(name)
        if value is not None:
            self.params.on_read(self.owner, value)
        return value


class _Gathering:
    """A unit's all-gather among the ranks in flight (issued on the thread
    running forward or backward, in the same order on every rank)."""

    def __init__(self, out, steps):
        self.out, self.steps = out, steps

    def result(self):
        for work, recv, pieces in self.steps:
            work.wait()
            for chunk, (dst, count) in zip(recv, pieces):
                if count:
                    self.out[dst:dst + count].copy_(chunk[:count])
        self.steps = []
        return self.out


class _Piece:
    """A persistent unit's values out of the one gather of every
    persistent unit (a future of their concatenation over `ranges`)."""

    def __init__(self, job, unit, ranges):
        self.job, self.unit, self.ranges = job, unit, ranges

    def result(self):
        return _unit_values(self.unit, self.ranges, self.job.result())


def _unit_values(unit, ranges, values):
    """The unit's values (its ranges concatenated) out of `values`, the
    concatenation of `ranges` (which hold the unit's)."""
    out = torch.empty(unit.numel, dtype=values.dtype)
    q = 0
    for b, e in unit.ranges:
        p = _position(ranges, b)
        out[q:q + e - b].copy_(values[p:p + e - b])
        q += e - b
    return out


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class PartitionedParams:
    grads_in_views = False

    def __init__(self, engine):
        self.engine = engine
        cfg = engine.config
        self.offload = bool(cfg.offload_param_server)
        self.threshold = int(cfg.stage3_param_persistence_threshold)
        self.prefetch_elements = int(cfg.stage3_prefetch_bucket_size)
        self.max_live = int(cfg.stage3_max_live_parameters)
        self.reuse = int(cfg.stage3_max_reuse_distance)
        self.kept = frozenset()  # units kept from forward to backward
        self.loads = 0  # unit loads started (gathers of a unit's values)
        # What every released parameter holds (one tensor: a fresh one per
        # release cost ~20 us on the CPU).
        self._empty = torch.empty(0, dtype=engine.dtype, device=engine.device)
        self.world, self.rank = engine.world, engine.rank
        self.slices = [_begin_end(engine._client.slice(self.world, r))
                       for r in range(self.world)]
        self._by_id = {id(e.param): i for i, e in enumerate(engine.entries)}
        self.units, self.unit_of = [], {}
        for module in engine.module.modules():
            mine = [engine.entries[self._by_id[id(p)]]
                    for p in module.parameters(recurse=False)
                    if id(p) in self._by_id]
            if mine:
                self._add_unit(module, mine)
        # Between steps: this rank's slice (none with offload).
        lo, hi = self.slices[self.rank]
        self.part = torch.empty(0 if self.offload else hi - lo,
                                dtype=engine.dtype)
        self._part_jobs = []  # the slice's gathers in flight (behind)
        self.trace, self.tracing = [], True
        self.root_units = set()  # units the root module's forward reads
        self.live_elements = 0
        self.pending_elements = 0  # prefetched, not yet materialised
        # Only the leader writes a fresh job's parameters: the other ranks
        # keep no copy of the whole model.
        self._initial = None
        if engine.rank == 0:
            self._initial = torch.cat([e.param.data.detach().reshape(-1)
                                       .float().cpu()
                                       for e in engine.entries])
        root = engine.module
        root.register_forward_pre_hook(self._root_pre_forward)
        root.register_forward_hook(self._root_post_forward)
        self._reads = self._undo = None
        self._running = []
        self._guard_first_forward()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="zeroshard-prefetch")

    def _add_unit(self, module, entries):
        unit = _Unit(len(self.units), module, entries)
        unit.persistent = unit.numel <= self.threshold
        self.units.append(unit)
        for e in entries:
            self.unit_of.setdefault(id(e.param), []).append(unit.index)
        module.register_forward_pre_hook(self._pre_forward)
        module.register_forward_hook(self._post_forward)
        self.entry_units = [self.unit_of.get(id(e.param), [])
                            for e in self.engine.entries]
        return unit

    def after_hooks(self):
        """The gradient hooks exist (made while every parameter had its
        full shape, which autograd records): release the parameters."""
        for u in self.units:
            self._release(u, force=True)

    # ------------------------------------------------- the first forward
    def _guard_first_forward(self):
        """Until a first forward succeeds the root's `forward` is an
        instance attribute that undoes the tracking set-up when the forward
        raises (torch 1.13 has no hook for a forward that raises), so that
        the engine is left as before it and the next forward traces
        afresh."""
        root = self.engine.module
        self._own_forward = root.__dict__.get("forward", _ABSENT)
        inner = root.forward

        @functools.wraps(inner)
        def forward(*args, **kwargs):
            try:
                return inner(*args, **kwargs)
            except BaseException:
                self._abort_first_forward()
                raise

        root.forward = self._guard = forward

    def _unguard_first_forward(self):
        root = self.engine.module
        if root.__dict__.get("forward") is not self._guard:
            pass  # replaced since: left as it is
        elif self._own_forward is _ABSENT:
            root.__dict__.pop("forward", None)
        else:
            root.forward = self._own_forward
        self._guard = None

    def _undo_tracking(self):
        """Puts back each module's own `_parameters` and removes the
        tracking hooks of the first forward."""
        undo, self._undo = self._undo, None
        for item in reversed(undo or []):
            if isinstance(item, tuple):
                item[0]._parameters = item[1]
            else:
                item.remove()

    def _abort_first_forward(self):
        """The first forward raised: the tracking set-up is undone and the
        units it gathered released (the persistent ones stay, as after the
        fetch); the next forward starts the tracking afresh."""
        if not self.tracing or self._undo is None:
            return
        self._undo_tracking()
        self._reads, self._running = None, []
        self.trace = []
        for u in self.units:
            self._release(u)

    def _root_pre_forward(self, _module, _inputs):
        """The first forward runs with every unit gathered, to learn which
        modules run in which order and which module reads which module's
        parameters (a tracking dict in place of each `_parameters`)."""
        if not self.tracing:
            for i in self.root_units:  # read by the root's own forward
                self._materialise(self.units[i])
            return
        # A first forward that raised where the guard did not see it (in a
        # hook of the root): its set-up is undone before this one's.
        self._abort_first_forward()
        for u in self.units:
            self._materialise(u)
        # The root is running already (its hooks below start with the
        # next forward; its post hook pops it).
        self._running, self._reads, self._undo = [self.engine.module], [], []
        for m in self.engine.module.modules():
            original = m._parameters
            m._parameters = _Tracking(original, m, self)
            self._undo.append((m, original))
            self._undo.append(m.register_forward_pre_hook(self._enter))
            self._undo.append(m.register_forward_hook(self._leave))

    def _enter(self, module, _inputs):
        self._running.append(module)

    def _leave(self, _module, _inputs, _output):
        if self._running:
            self._running.pop()

    def on_read(self, owner, param):
        """During the first forward: `param` of `owner` was read."""
        if self._reads is None:  # not in the first forward
            return
        running = self._running[-1] if self._running else None
        if running is not None and running is not owner and \
                id(param) in self._by_id:
            self._reads.append((running, param))

    def _root_post_forward(self, _module, _inputs, output):
        """After the first forward: a parameter read by a module other than
        its own while that module runs (nn.MultiheadAttention reads
        out_proj.weight; a tied head reads the embedding's weight) joins
        the reader's unit, so that it is gathered whenever the reader
        runs; one read by the root module's own forward stays whole."""
        if not self.tracing:
            return output
        self.tracing = False
        self._undo_tracking()
        self._unguard_first_forward()
        root = self.engine.module
        for reader, param in self._reads:
            entry = self.engine.entries[self._by_id[id(param)]]
            if reader is root:
                for ui in self.unit_of[id(param)]:
                    self.units[ui].persistent = True
                    self.root_units.add(ui)
                continue
            target = [t for t in self.units if t.module is reader]
            if not target:
                t = self._add_unit(reader, [entry])
                t.live = True  # gathered (this forward)
                self.live_elements += t.numel
                continue
            t = target[0]
            if entry in t.entries:
                continue
            t.entries.append(entry)
            t.numel += entry.numel
            t.ranges = _merge([(e.offset, e.end) for e in t.entries])
            t.persistent = t.numel <= self.threshold
            self.unit_of[id(param)].append(t.index)
            self.live_elements += entry.numel
        self.entry_units = [self.unit_of.get(id(e.param), [])
                            for e in self.engine.entries]
        self.units_by_module = {}
        for u in self.units:
            self.units_by_module.setdefault(u.module, []).append(u)
        self.kept = kept_units([self.units[i].numel for i in self.trace],
                               self.trace, self.reuse)
        self._reads = self._undo = None
        return output

    # ---------------------------------------------------------- parameters
    def initial(self):
        out, self._initial = self._initial, None
        return out

    def fetch(self, behind=False):
        """This rank's slice and the persistent units from the servers.
        behind (the engine has no recovery, W > 1): the gathers are only
        started; what reads the slice waits for them (_wait_slice), a
        persistent unit is materialised when its module runs (or by
        wait_part), and their error is raised there."""
        # A prefetch of a unit whose module did not run holds values from
        # before the step (and an all-gather must still be completed).
        for u in self.units:
            if u.pending is not None:
                u.pending.result()
                u.pending = None
        self.pending_elements = 0
        self._wait_slice()
        self._part_jobs = []
        behind = behind and self.world > 1
        if not self.offload:
            lo, hi = self.slices[self.rank]
            want = torch.float32 if self.engine.precision == "fp32" else \
                _SERVING[self.engine.precision]
            if hi > lo and behind and self.part.dtype == want:
                self._part_jobs = [
                    self.engine._pool.submit(self.engine._client.gather,
                                             r[0], self.part[r[0] - lo:
                                                             r[1] - lo])
                    for r in (layout.intersect((lo, hi), sr)
                              for sr in self.engine._server_ranges) if r]
            elif hi > lo:
                _gather_into(self.engine, [(lo, hi)], self.part,
                             self.engine._pool)
        for u in self.units:
            self._release(u, force=True)
        persistent = [u for u in self.units if u.persistent and u.entries]
        if persistent:
            # Every persistent unit in one gather from the servers.
            ranges = _merge([r for u in persistent for r in u.ranges])
            if not behind:
                values = self._load_persistent(ranges)
                for u in persistent:
                    self._materialise(u, _unit_values(u, ranges, values))
                return
            job = self._pool.submit(self._load_persistent, ranges)
            for u in persistent:
                u.pending = _Piece(job, u, ranges)
                self.pending_elements += u.numel
        if behind and not self.tracing:
            # The next forward's first units, from now: their loads run
            # while the step returns and the next batch is made, instead of
            # starting when their modules are called.
            self._prefetch([self.units[i] for i in self.trace])

    def _load_persistent(self, ranges):
        values = torch.empty(sum(e - b for b, e in ranges),
                             dtype=self.engine.dtype)
        if self.world == 1 and not self.offload:
            self._copy_from_part(ranges, values)
        elif self.offload or self.engine.device.type != "cpu":
            _gather_into(self.engine, ranges, values, self.engine._pool)
        else:
            # What lies in this rank's slice comes from it (one gather from
            # the servers per range fewer: most persistent units are small
            # and scattered).
            self._load_mixed(ranges, values)
        return values

    def _wait_slice(self):
        """Waits for the slice's gathers started by fetch(behind=True)
        (any thread; raises their error)."""
        for job in self._part_jobs:
            job.result()

    def wait_part(self):
        """Waits for what fetch(behind=True) started: the slice's gathers
        and the persistent units (materialised here; the engine's
        thread)."""
        self._wait_slice()
        for u in self.units:
            if u.persistent and u.pending is not None:
                self._materialise(u)

    def _copy_from_part(self, ranges, out):
        self._wait_slice()
        lo = self.slices[self.rank][0]
        pos = 0
        for b, e in ranges:
            out[pos:pos + e - b].copy_(self.part[b - lo:e - lo])
            pos += e - b

    def _start_load(self, unit):
        """Starts loading the unit's flat values (its ranges concatenated):
        from this rank's slice (one rank); from the servers (offload, on
        the prefetch pool); on the CPU, what is in this rank's slice from
        there and the rest from the servers (on the prefetch pool: no
        collective, so no rank waits for another's forward); on a GPU an
        all-gather among the ranks (issued now)."""
        out = torch.empty(unit.numel, dtype=self.engine.dtype)
        self.loads += 1
        if self.world == 1 and not self.offload:
            self._copy_from_part(unit.ranges, out)
            return _Done(out)
        if self.offload:
            return self._pool.submit(
                lambda: (_gather_into(self.engine, unit.ranges, out,
                                      self.engine._pool), out)[1])
        if self.engine.device.type == "cpu":
            return self._pool.submit(self._load_mixed, unit.ranges, out)
        self._wait_slice()
        steps, pos = [], 0
        lo = self.slices[self.rank][0]
        for b, e in unit.ranges:
            pieces = [layout.intersect((b, e), s) for s in self.slices]
            width = max((p[1] - p[0]) if p else 0 for p in pieces)
            send = torch.zeros(width, dtype=self.engine.dtype)
            mine = pieces[self.rank]
            if mine is not None:
                send[:mine[1] - mine[0]].copy_(
                    self.part[mine[0] - lo:mine[1] - lo])
            recv = [torch.empty(width, dtype=self.engine.dtype)
                    for _ in range(self.world)]
            work = dist.all_gather(recv, send, async_op=True)
            where = [((pos + p[0] - b), p[1] - p[0]) if p else (0, 0)
                     for p in pieces]
            steps.append((work, recv, where))
            pos += e - b
        return _Gathering(out, steps)

    def _load_mixed(self, ranges, out):
        """On the prefetch pool: `ranges` into `out` (their
        concatenation), the rest gathered from the servers first, then this
        rank's slice's part copied from it (once the slice's own gather,
        started after the step, is in: a unit wholly outside the slice
        does not wait for it)."""
        lo, hi = self.slices[self.rank]
        remote, mine, pos = [], [], 0
        for b, e in ranges:
            m = layout.intersect((b, e), (lo, hi))
            if m is not None:
                mine.append((pos + m[0] - b, m))
            for r in ((b, min(e, lo)), (max(b, hi), e)):
                if r[0] < r[1]:
                    remote.append((r, out[pos + r[0] - b:pos + r[1] - b]))
            pos += e - b
        for r, view in remote:
            _gather_into(self.engine, [r], view, self.engine._pool)
        if mine:
            self._wait_slice()
        for at, (b, e) in mine:
            out[at:at + e - b].copy_(self.part[b - lo:e - lo])
        return out

    def _materialise(self, unit, values=None):
        if unit.live or not unit.entries:
            return
        if values is None:
            pending, unit.pending = unit.pending, None
            if pending is not None:
                self.pending_elements -= unit.numel
            values = (pending or self._start_load(unit)).result()
        device = self.engine.device
        if device.type != "cpu":
            values = values.to(device)
        for e in unit.entries:
            start = _position(unit.ranges, e.offset)
            e.param.data = values[start:start + e.numel].view(e.shape)
        unit.live = True
        self.live_elements += unit.numel

    def _release(self, unit, force=False):
        if unit.persistent and not force:
            return
        if not unit.live and not force:
            return
        for e in unit.entries:
            # A parameter shared with a live unit stays.
            others = [i for i in self.unit_of[id(e.param)]
                      if i != unit.index and self.units[i].live]
            if not others:
                e.param.data = self._empty
        if unit.live:
            self.live_elements -= unit.numel
        unit.live = False

    def held_bytes(self):
        """Bytes of parameter storage this rank holds now: its slice, the
        gathered units (shared storage counted once) and the prefetches in
        flight."""
        seen, total = set(), self.part.numel() * self.part.element_size()
        total += self.pending_elements * self.part.element_size()
        for e in self.engine.entries:
            s = e.param.data
            if s.numel() == 0:
                continue
            key = s.storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += s.storage().size() * s.element_size()
        return total

    # -------------------------------------------------------------- hooks
    def _prefetch(self, units):
        """Starts loading the next of `units` (in the order they will run)
        that are neither live nor loading, up to stage3_prefetch_bucket_size
        elements in flight, within stage3_max_live_parameters."""
        if self.prefetch_elements <= 0:
            return
        budget = self.prefetch_elements - self.pending_elements
        for u in units:
            if u.live or u.persistent or not u.entries:
                continue
            if u.pending is not None:
                continue
            if u.numel > budget or self.live_elements + \
                    self.pending_elements + u.numel > self.max_live:
                return
            u.pending = self._start_load(u)
            self.pending_elements += u.numel
            budget -= u.numel

    def _neighbours(self, unit, step):
        try:
            at = self.trace.index(unit.index)
        except ValueError:
            return []
        order = self.trace[at + 1:] if step > 0 else self.trace[:at][::-1]
        return [self.units[i] for i in order]

    def _pre_forward(self, module, _inputs):
        if self.tracing:
            for u in self._units_of_module(module):
                if u.index not in self.trace:
                    self.trace.append(u.index)
            return
        for u in self._units_of_module(module):
            self._materialise(u)
            self._prefetch(self._neighbours(u, +1))

    def _post_forward(self, module, _inputs, output):
        units = self._units_of_module(module)
        grad = torch.is_grad_enabled()
        released = False
        if not self.tracing:
            for u in units:
                # Kept for its backward: within stage3_max_reuse_distance
                # and stage3_max_live_parameters.
                if not (grad and u.index in self.kept and
                        self.live_elements <= self.max_live):
                    released |= u.live and not u.persistent
                    self._release(u)
        if not grad or not units:
            return output
        try:
            return _wrap(output, self, units[0].index, released)
        except _Opaque as e:
            raise TypeError(
                f"zeroshard stage 3: module {self._name_of(module)!r} "
                f"({type(module).__name__}) returned a "
                f"{type(e.value).__module__}.{type(e.value).__qualname__} "
                "holding tensors that need gradients; its parameters are "
                "released after its forward (stage3_max_reuse_distance) and "
                "gathered again for its backward through its outputs, which "
                "the engine finds only in tensors, tuples, lists, dicts, "
                "namedtuples and dataclasses: return one of those (or raise "
                "stage3_max_reuse_distance so that the unit is kept from "
                "forward to backward)") from None

    def _name_of(self, module):
        names = getattr(self, "_module_names", None)
        if names is None:
            names = self._module_names = {
                m: n or "<root>"
                for n, m in self.engine.module.named_modules()}
        return names.get(module, type(module).__name__)

    def _units_of_module(self, module):
        by_module = getattr(self, "units_by_module", None)
        if by_module is not None:
            return by_module.get(module, [])
        return [u for u in self.units if u.module is module]

    def gather_for_backward(self, unit_index):
        unit = self.units[unit_index]
        for u in self._units_of_module(unit.module):
            self._materialise(u)
            u.grads_left = len(u.entries)
            self._prefetch(self._neighbours(u, -1))

    def before_backward(self):
        for u in self.units:
            u.grads_left = len(u.entries)

    def on_grad(self, i):
        """Entry i's gradient is in param.grad: take it into the flat
        buffer, free it, release units whose gradients are all taken."""
        e = self.engine.entries[i]
        g = e.param.grad
        if g is not None:
            self.engine._gviews[i].add_(g)
            e.param.grad = None
        for ui in self.entry_units[i]:
            u = self.units[ui]
            u.grads_left -= 1
            if u.grads_left <= 0:
                self._release(u)

    def after_backward(self):
        for u in self.units:
            if not u.persistent:
                self._release(u)


def kept_units(numels, order, reuse):
    """The units (indices in `order`, the forward's, with their `numels`)
    kept from their forward to their backward, as DeepSpeed's
    stage3_max_reuse_distance keeps a parameter: the step runs the units
    forward then in reverse, and a unit stays when fewer than `reuse`
    elements are used between its forward and its next use in backward
    (twice the elements of the units after it; the last unit is used
    again at once). 0 keeps none."""
    kept, after = set(), 0
    for numel, index in reversed(list(zip(numels, order))):
        if 2 * after < reuse:
            kept.add(index)
        after += numel
    return frozenset(kept)


class _Opaque(Exception):
    """An output object _wrap cannot walk holds tensors needing grads."""

    def __init__(self, value):
        super().__init__(type(value).__name__)
        self.value = value


_LEAVES = (type(None), bool, int, float, complex, str, bytes, type(...),
           torch.dtype, torch.device, torch.Size)


def _wrap(output, params, unit_index, strict=False):
    """The module's output with _PreBackward inserted on its tensors that
    need gradients: tuples, namedtuples, lists, dicts and dataclasses are
    walked (and rebuilt). strict (the unit was released after its
    forward): another object holding a tensor that needs gradients raises
    _Opaque, since its backward would find the released parameters."""
    def walk(o):
        return _wrap(o, params, unit_index, strict)

    if torch.is_tensor(output):
        if output.requires_grad:
            return _PreBackward.apply(params, unit_index, output)
        return output
    if isinstance(output, tuple):
        items = [walk(o) for o in output]
        if hasattr(type(output), "_make"):  # a namedtuple
            return type(output)._make(items)
        if type(output) is not tuple:
            try:  # torch.return_types and other structseqs
                return type(output)(items)
            except Exception:  # noqa: BLE001 - a plain tuple, as before
                pass
        return tuple(items)
    if isinstance(output, list):
        return [walk(o) for o in output]
    if isinstance(output, dict):
        return type(output)((k, walk(v)) for k, v in output.items())
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        # A shallow copy with the walked fields set (frozen ones too).
        fields = {f.name: getattr(output, f.name)
                  for f in dataclasses.fields(output)}
        walked = {n: walk(v) for n, v in fields.items()}
        if all(walked[n] is fields[n] for n in fields):
            return output
        out = copy.copy(output)
        for n, v in walked.items():
            if v is not fields[n]:
                object.__setattr__(out, n, v)
        return out
    if strict and _holds_grad_tensor(output):
        raise _Opaque(output)
    return output


def _holds_grad_tensor(value, depth=4, seen=None):
    """Whether `value` (an object _wrap does not walk) holds, within
    `depth` levels of attributes and containers, a tensor that needs
    gradients."""
    if torch.is_tensor(value):
        return value.requires_grad
    if depth == 0 or isinstance(value, _LEAVES) or \
            isinstance(value, (torch.nn.Module, type)) or callable(value):
        return False
    seen = set() if seen is None else seen
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, (list, tuple, set, frozenset)):
        children = list(value)
    else:
        children = list(getattr(value, "__dict__", {}).values())
        for klass in type(value).__mro__:
            for slot in getattr(klass, "__slots__", ()):
                if isinstance(slot, str) and hasattr(value, slot):
                    children.append(getattr(value, slot))
    return any(_holds_grad_tensor(c, depth - 1, seen) for c in children)
