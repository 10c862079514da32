"""zeroshard.Client, Trainer and Member: the C API's handles in Python.

Buffers are torch tensors or numpy arrays, passed zero-copy through their
data pointers: they must be contiguous, on the CPU, of float32, bfloat16
(torch only) or float16; anything else is a ValueError naming the argument.
Every failed call raises zeroshard.Error with the gRPC code and the
server's or the library's message.

Threading: as the C API's. Client and Member methods may be called from any
thread at once (the library releases the GIL while it waits on the
network); a Trainer takes one call at a time and its calls are collective.
"""
import ctypes

from . import _lib
from ._lib import check, enc, u32, u64, size_t
from .errors import Error

_TORCH_DTYPES = {"torch.float32": _lib.DTYPE_FP32,
                 "torch.bfloat16": _lib.DTYPE_BF16,
                 "torch.float16": _lib.DTYPE_FP16}
_NUMPY_DTYPES = {"float32": _lib.DTYPE_FP32, "float16": _lib.DTYPE_FP16}
_DTYPE_NAMES = {"fp32": _lib.DTYPE_FP32, "float32": _lib.DTYPE_FP32,
                "bf16": _lib.DTYPE_BF16, "bfloat16": _lib.DTYPE_BF16,
                "fp16": _lib.DTYPE_FP16, "float16": _lib.DTYPE_FP16}


def dtype_code(name):
    if isinstance(name, int) and name in (1, 2, 3):
        return name
    code = _DTYPE_NAMES.get(str(name).replace("torch.", ""))
    if code is None:
        raise ValueError(f"dtype {name!r}: expected fp32, bf16 or fp16")
    return code


def buffer_of(x, what, writable=False):
    """(address, bytes, dtype code, elements) of a tensor or array."""
    kind = type(x).__module__.split(".")[0]
    if kind == "torch":
        if x.device.type != "cpu":
            raise ValueError(f"{what}: a CPU tensor is needed, got one on "
                             f"{x.device}")
        code = _TORCH_DTYPES.get(str(x.dtype))
        if code is None:
            raise ValueError(f"{what}: dtype {x.dtype} is not float32, "
                             "bfloat16 or float16")
        if not x.is_contiguous():
            raise ValueError(f"{what}: the tensor is not contiguous "
                             "(call .contiguous())")
        n = x.numel()
        return x.data_ptr(), n * x.element_size(), code, n
    if kind == "numpy":
        code = _NUMPY_DTYPES.get(str(x.dtype))
        if code is None:
            raise ValueError(f"{what}: dtype {x.dtype} is not float32 or "
                             "float16")
        if not x.flags["C_CONTIGUOUS"]:
            raise ValueError(f"{what}: the array is not C-contiguous "
                             "(numpy.ascontiguousarray)")
        if writable and not x.flags["WRITEABLE"]:
            raise ValueError(f"{what}: the array is read-only")
        return x.ctypes.data, x.nbytes, code, x.size
    raise ValueError(f"{what}: expected a torch tensor or a numpy array, got "
                     f"{type(x).__name__}")


class Client:
    """A connection to a job's shard servers (zs_connect).

    servers: "host:port,host:port" or a list of them (shard k at the k-th).
    insecure: plaintext (loopback, tests); otherwise tls_ca_file is needed.
    """

    def __init__(self, servers, job_id="default", *, insecure=False,
                 tls_ca_file=None, tls_cert_file=None, tls_key_file=None,
                 token=None, token_file=None, deadline_seconds=60.0,
                 max_attempts=10):
        self._lib = _lib.load()
        if not isinstance(servers, str):
            servers = ",".join(servers)
        o = _lib.ConnectOptions()
        self._lib.zs_connect_options_init(ctypes.byref(o))
        self._keep = [enc(servers), enc(job_id), enc(tls_ca_file),
                      enc(tls_cert_file), enc(tls_key_file), enc(token),
                      enc(token_file)]
        (o.addresses, o.job_id, o.tls_ca_file, o.tls_cert_file,
         o.tls_key_file, o.token, o.token_file) = self._keep
        o.insecure = 1 if insecure else 0
        o.deadline_seconds = float(deadline_seconds)
        o.max_attempts = int(max_attempts)
        handle = ctypes.c_void_p()
        check(self._lib.zs_connect(ctypes.byref(o), ctypes.byref(handle)))
        self._h = handle
        self.servers = servers
        self.job_id = job_id

    @property
    def handle(self):
        if self._h is None:
            raise Error(_lib.CODES["FAILED_PRECONDITION"], "client is closed")
        return self._h

    def close(self):
        if self._h is not None:
            h, self._h = self._h, None
            check(self._lib.zs_close(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    # ----------------------------------------------------------- the model
    def register(self, tensors, groups=None, *, alignment=64,
                 contributions_per_step=1, serving_dtype="bf16", init_seed=0,
                 init_std=0.0):
        """tensors: [(name, shape, group index)]; groups: [dict(beta1,
        beta2, eps, weight_decay, lr_scale, no_bias_correction)] (default:
        one group with the C API's defaults)."""
        if not tensors:
            raise ValueError("register: the model has no tensors")
        ts = (_lib.Tensor * len(tensors))()
        keep = []
        for i, (name, shape, group) in enumerate(tensors):
            shape = [int(d) for d in shape] or [1]
            arr = (_lib.i64 * len(shape))(*shape)
            keep += [enc(name), arr]
            ts[i].name, ts[i].shape = keep[-2], arr
            ts[i].ndim, ts[i].param_group = len(shape), int(group)
        groups = groups or [{}]
        gs = (_lib.ParamGroup * len(groups))()
        for i, g in enumerate(groups):
            self._lib.zs_param_group_init(ctypes.byref(gs[i]))
            for key, value in g.items():
                if not hasattr(gs[i], key):
                    raise ValueError(f"register: groups[{i}] has unknown key "
                                     f"{key!r}")
                kind = int if key == "no_bias_correction" else float
                setattr(gs[i], key, kind(value))
        m = _lib.Model()
        self._lib.zs_model_init(ctypes.byref(m))
        m.tensors, m.num_tensors = ts, len(tensors)
        m.groups, m.num_groups = gs, len(groups)
        m.alignment = int(alignment)
        m.contributions_per_step = int(contributions_per_step)
        m.serving_dtype = dtype_code(serving_dtype)
        m.init_seed, m.init_std = int(init_seed), float(init_std)
        check(self._lib.zs_register(self.handle, ctypes.byref(m)))

    def attach(self):
        check(self._lib.zs_attach(self.handle))

    def num_servers(self):
        n = u32()
        check(self._lib.zs_num_servers(self.handle, ctypes.byref(n)))
        return n.value

    def model_size(self):
        n = u64()
        check(self._lib.zs_model_size(self.handle, ctypes.byref(n)))
        return n.value

    def _range(self, fn, *args):
        off, cnt = u64(), u64()
        check(fn(self.handle, *args, ctypes.byref(off), ctypes.byref(cnt)))
        return off.value, cnt.value

    def tensor_range(self, name):
        return self._range(self._lib.zs_tensor_range, enc(name))

    def server_range(self, server):
        return self._range(self._lib.zs_server_range, int(server))

    def slice(self, parts, index):
        return self._range(self._lib.zs_slice, int(parts), int(index))

    # ---------------------------------------------------------- data plane
    def write_parameters(self, offset, data):
        """Writes fp32 master weights of [offset, offset + data.numel())."""
        addr, nbytes, code, n = buffer_of(data, "write_parameters: data")
        if code != _lib.DTYPE_FP32:
            raise ValueError("write_parameters: data must be float32")
        check(self._lib.zs_write_parameters(self.handle, int(offset), n, addr,
                                            nbytes))

    def push(self, offset, grad, *, epoch, step, slot=0, key_prefix="p"):
        """Pushes the gradient of [offset, offset + grad.numel())."""
        addr, nbytes, code, n = buffer_of(grad, "push: grad")
        pid = _lib.PushId(int(epoch), int(step), int(slot), enc(key_prefix))
        check(self._lib.zs_push(self.handle, int(offset), n, code, addr,
                                nbytes, ctypes.byref(pid)))

    def gather(self, offset, out):
        """Gathers [offset, offset + out.numel()) into `out` (fp32: the
        master copy; bf16/fp16: the serving copy). Returns the step."""
        addr, nbytes, code, n = buffer_of(out, "gather: out", writable=True)
        step = u64()
        check(self._lib.zs_gather(self.handle, int(offset), n, code, addr,
                                  nbytes, ctypes.byref(step)))
        return step.value

    # --------------------------------------------------------------- admin
    def stats(self):
        """Every server's figures, in shard order, as dicts."""
        count = size_t()
        cap = 8
        while True:
            arr = (_lib.ServerStats * cap)()
            code = self._lib.zs_stats(self.handle, arr, cap,
                                      ctypes.byref(count))
            if code == _lib.CODES["OUT_OF_RANGE"] and count.value > cap:
                cap = count.value
                continue
            check(code)
            break
        out = []
        for s in arr[:count.value]:
            d = {name: getattr(s, name) for name, _ in s._fields_}
            d["checkpoint_steps"] = list(s.checkpoint_steps[
                :s.num_checkpoint_steps])
            d["storage"] = s.storage.decode()
            d["trainer_state"] = s.trainer_state.as_dict()
            out.append(d)
        return out

    def checkpoint(self, step, state=None, tag=None):
        s = None if state is None else _lib.fill(
            _lib.TrainerState, state, "checkpoint: state")
        check(self._lib.zs_checkpoint(self.handle, int(step),
                                      ctypes.byref(s) if s else None,
                                      enc(tag)))

    def restore(self, step=0, epoch=0):
        """Restores checkpoint `step` (0: the newest) with `epoch`; returns
        the workers' state recorded in it (a dict)."""
        s = _lib.TrainerState()
        check(self._lib.zs_restore(self.handle, int(step), int(epoch),
                                   ctypes.byref(s)))
        return s.as_dict()

    def member(self, worker_name, *, node=None, address=None, local_rank=0,
               local_size=1, rpc_timeout_seconds=10.0):
        return Member(self, worker_name, node=node, address=address,
                      local_rank=local_rank, local_size=local_size,
                      rpc_timeout_seconds=rpc_timeout_seconds)


class Member:
    """A worker's membership of the job (zs_member_*)."""

    def __init__(self, client, worker_name, *, node=None, address=None,
                 local_rank=0, local_size=1, rpc_timeout_seconds=10.0):
        self._lib = client._lib
        o = _lib.MemberOptions()
        self._lib.zs_member_options_init(ctypes.byref(o))
        self._keep = [enc(worker_name), enc(node), enc(address)]
        o.worker_name, o.node, o.address = self._keep
        o.local_rank, o.local_size = int(local_rank), int(local_size)
        o.rpc_timeout_seconds = float(rpc_timeout_seconds)
        h = ctypes.c_void_p()
        check(self._lib.zs_member_create(client.handle, ctypes.byref(o),
                                         ctypes.byref(h)))
        self._h = h

    def join(self):
        mid = u64()
        check(self._lib.zs_member_join(self._h, ctypes.byref(mid)))
        return mid.value

    def heartbeat(self):
        check(self._lib.zs_member_heartbeat(self._h))

    def leave(self):
        check(self._lib.zs_member_leave(self._h))

    def world(self):
        w = _lib.World()
        code = self._lib.zs_member_world(self._h, ctypes.byref(w), None, 0)
        if code not in (_lib.OK, _lib.CODES["OUT_OF_RANGE"]):
            check(code)
        members = (_lib.MemberInfo * max(1, w.num_members))()
        check(self._lib.zs_member_world(self._h, ctypes.byref(w), members,
                                        w.num_members))
        return {"epoch": w.epoch, "step": w.step, "member_id": w.member_id,
                "expired": bool(w.expired),
                "members": [{"member_id": m.member_id, "rank": m.rank,
                             "local_rank": m.local_rank,
                             "local_size": m.local_size,
                             "worker_name": m.worker_name.decode(),
                             "node": m.node.decode(),
                             "address": m.address.decode()}
                            for m in members[:w.num_members]]}

    @property
    def handle(self):
        return self._h

    def close(self):
        if self._h is not None:
            h, self._h = self._h, None
            check(self._lib.zs_member_close(h))

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
