"""Stages 0-2: the updated parameters gathered behind the next forward.

After a step the engine starts gathering the flat parameters from the
servers in chunks (each within one server's range, at most CHUNK elements,
in flat order, on the engine's pool) and returns; the forward that follows
waits only for the chunks holding the parameter it reads. (Gathering only
this rank's slice from the servers and exchanging the rest among the ranks
over gloo was measured too: it saved the servers 1 ms per step and cost
each rank 2 ms more CPU, gloo's receives being busy waits.) Reads are seen
where torch makes them: `module.weight` is `module._parameters["weight"]`
(nn.Module.__getattr__), so while a gather is in flight every module that
owns parameters has a `_Waiting` dict in place of its `_parameters`; a read
of one parameter waits for its chunks, anything that walks the dict
(parameters(), named_parameters(), state_dict(), to()) waits for all of
it. When the last chunk is in, the engine ends the fetch (the step
protocol's after_fetch) and the modules get their own dicts back.

Not every forward reads its parameters through `_parameters`: nn.LSTM,
nn.GRU and nn.RNN read the tensors they cached in `_flat_weights`, and a
TorchScript module reads them in C++. So every module that owns
parameters also has a forward pre-hook that waits for its own (before
its forward, whatever it reads them through), and a TorchScript subtree,
which takes no hooks, is waited for by the pre-hook of its nearest
ordinary ancestor, or, when the model itself is scripted, by the
engine's forward (`pre_hooks`).

Only without recovery (no checkpoint_interval, not elastic), where
after_fetch is local to the rank; with recovery it is a collective that may
roll back, and the engine fetches before step() returns. A tensor the
caller took before step() and reads before the next forward is the one
way to see a half-gathered value: call engine.wait_parameters() first.

Threading: the engine's thread (the forward's) waits; the gathers run on
the engine's pool. Errors: a chunk's zeroshard.Error is kept and reported
to after_fetch, which raises it on the thread that waited.
"""
import collections
import time

import torch

from . import layout
from .errors import Error

CHUNK = 1 << 18  # elements per gather: 1 MiB of fp32


class _Waiting(collections.OrderedDict):
    """A module's `_parameters` (an OrderedDict) while the gather is in
    flight."""

    def __init__(self, original, ranges, fetch):
        self.original = None  # (OrderedDict's __init__ sets items)
        super().__init__(original)
        self.original, self.ranges, self.fetch = original, ranges, fetch

    def __getitem__(self, name):
        r = self.ranges.get(name)
        if r is not None:
            self.fetch.wait_range(r)
        return super().__getitem__(name)

    def get(self, name, default=None):
        return self[name] if name in self else default

    def _all(self):
        self.fetch.wait_all()

    def items(self):
        self._all()
        return super().items()

    def values(self):
        self._all()
        return super().values()

    def keys(self):
        self._all()
        return super().keys()

    def __iter__(self):
        self._all()
        return super().__iter__()

    def copy(self):
        self._all()
        return dict(self)

    def __setitem__(self, name, value):
        super().__setitem__(name, value)
        if self.original is not None:
            self.original[name] = value

    def __delitem__(self, name):
        super().__delitem__(name)
        del self.original[name]


class BehindFetch:
    """One gather of [0, numel) into `flat` (a CPU tensor of the gathered
    dtype) in flight. `finish(status, waited)` is the engine's end of the
    fetch, called once: the first error's status code (0: none) and the
    seconds the engine's thread waited for chunks."""

    def __init__(self, engine, flat, owners, finish):
        self._finish = finish
        self._done = False
        self._error = 0
        self._waited = 0.0
        self._jobs = []  # (begin, end, future) in flat order
        for begin, end in chunks(engine._server_ranges):
            self._jobs.append((begin, end, engine._pool.submit(
                engine._client.gather, begin, flat[begin:end])))
        self._swapped = []
        for module, ranges in owners:
            self._swapped.append((module, module._parameters))
            module._parameters = _Waiting(module._parameters, ranges, self)

    def _wait(self, jobs):
        start = time.perf_counter()
        for _, _, f in jobs:
            try:
                f.result()
            except Error as e:
                self._error = self._error or e.code
        self._waited += time.perf_counter() - start

    def wait_ranges(self, ranges):
        for r in ranges:
            self.wait_range(r)

    def wait_range(self, r):
        if self._done:
            return
        self._wait([j for j in self._jobs
                    if layout.intersect((j[0], j[1]), r)])
        if all(f.done() for _, _, f in self._jobs):
            self.wait_all()

    def wait_all(self):
        """Waits for every chunk, gives the modules their dicts back and
        ends the fetch (raises what `finish` raises)."""
        if self._done:
            return
        self._done = True
        self._wait(self._jobs)
        for module, original in self._swapped:
            module._parameters = original
        self._swapped = []
        self._finish(self._error, self._waited)


def chunks(server_ranges):
    """[(begin, end)]: every server's range cut every CHUNK elements, in
    flat order."""
    out = []
    for sb, se in sorted(server_ranges):
        for begin in range(sb, se, CHUNK):
            out.append((begin, min(se, begin + CHUNK)))
    return out


def pre_hooks(module, entries):
    """({module: [flat range]}, [flat range]): for every module that
    owns trainable parameters in `entries` and takes forward hooks, the
    ranges its pre-hook waits for (its own, and those of the TorchScript
    modules beneath it up to the next ordinary module); and the ranges of
    a model that is itself TorchScript, which only the engine's forward
    can wait for."""
    where = {id(e.param): (e.offset, e.end) for e in entries}
    hooked, unhooked = collections.OrderedDict(), []

    def ranges_of(params):
        out, seen = [], set()
        for p in params:
            if p is not None and id(p) in where and id(p) not in seen:
                seen.add(id(p))
                out.append(where[id(p)])
        return out

    def visit(m, anchor):
        if isinstance(m, torch.jit.ScriptModule):
            ranges = ranges_of(m.parameters())
            if anchor is None:
                unhooked.extend(ranges)
            elif ranges:
                hooked.setdefault(anchor, []).extend(ranges)
            return  # its submodules are TorchScript too
        own = ranges_of(m._parameters.values())
        if own:
            hooked.setdefault(m, []).extend(own)
        for child in m.children():
            visit(child, m)

    visit(module, None)
    return hooked, unhooked


def owners(module, entries):
    """[(module, {name: flat range})] for every module that owns a
    trainable parameter in `entries` (a tied weight under each owner)."""
    where = {id(e.param): (e.offset, e.end) for e in entries}
    out = []
    for m in module.modules():
        if isinstance(m, torch.jit.ScriptModule):
            continue  # reads its parameters in C++: pre_hooks waits for it
        ranges = {n: where[id(p)] for n, p in m._parameters.items()
                  if p is not None and id(p) in where}
        if ranges:
            out.append((m, ranges))
    return out
