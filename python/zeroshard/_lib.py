"""The C API (client/zeroshard.h) through ctypes: finding libzeroshard.so,
the structs, the functions' signatures and the status check.

Nothing here imports torch or numpy. ctypes releases the GIL for the
duration of every call into the library, so pushes and gathers made from
Python threads overlap each other and the caller's computation.
"""
import ctypes
import ctypes.util
import os
import threading

from .errors import Error

API_VERSION = 4  # the ZS_API_VERSION this binding was written against

OK = 0
CODE_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND", 6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
    10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL",
    14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}
CODES = {name: code for code, name in CODE_NAMES.items()}

DTYPE_FP32, DTYPE_BF16, DTYPE_FP16 = 1, 2, 3
OUTCOME_OK, OUTCOME_ROLLED_BACK, OUTCOME_CONTINUED, OUTCOME_RETRY = 0, 1, 2, 3
PRECISION_FP32, PRECISION_FP16, PRECISION_BF16 = 0, 1, 2

c_char_p, c_int, c_double = ctypes.c_char_p, ctypes.c_int, ctypes.c_double
u32, u64, i64, size_t = (ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64,
                         ctypes.c_size_t)
voidp = ctypes.c_void_p


class ConnectOptions(ctypes.Structure):
    _fields_ = [("addresses", c_char_p), ("job_id", c_char_p),
                ("tls_ca_file", c_char_p), ("tls_cert_file", c_char_p),
                ("tls_key_file", c_char_p), ("token", c_char_p),
                ("token_file", c_char_p), ("insecure", c_int),
                ("deadline_seconds", c_double), ("max_attempts", c_int)]


class Tensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("shape", ctypes.POINTER(i64)),
                ("ndim", size_t), ("param_group", u32)]


class ParamGroup(ctypes.Structure):
    _fields_ = [("beta1", c_double), ("beta2", c_double), ("eps", c_double),
                ("weight_decay", c_double), ("lr_scale", c_double),
                ("no_bias_correction", ctypes.c_int32)]


class Model(ctypes.Structure):
    _fields_ = [("tensors", ctypes.POINTER(Tensor)), ("num_tensors", size_t),
                ("groups", ctypes.POINTER(ParamGroup)), ("num_groups", size_t),
                ("alignment", u32), ("contributions_per_step", u32),
                ("serving_dtype", c_int), ("init_seed", u64),
                ("init_std", c_double)]


class PushId(ctypes.Structure):
    _fields_ = [("epoch", u64), ("step", u64), ("slot", u32),
                ("key_prefix", c_char_p)]


class TrainerState(ctypes.Structure):
    _fields_ = [("step", u64), ("updates", u64), ("data_epoch", i64),
                ("data_shard", i64), ("data_offset", i64), ("seed", u64),
                ("loss_scale", c_double), ("loss_scale_hysteresis", i64),
                ("loss_scale_iteration", i64),
                ("loss_scale_last_overflow", i64)]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class ServerStats(ctypes.Structure):
    _fields_ = [("shard_index", u32), ("num_shards", u32), ("step", u64),
                ("optimizer_steps", u64), ("epoch", u64),
                ("owned_offset", u64), ("owned_count", u64),
                ("bytes_held", u64), ("bytes_held_rss", u64),
                ("contributions_applied", u64), ("duplicates_ignored", u64),
                ("requests_rejected", u64), ("bytes_pushed", u64),
                ("bytes_gathered", u64), ("last_step_seconds", c_double),
                ("optimizer_elements_per_second", c_double),
                ("incarnation", u64), ("restored_step", u64),
                ("checkpoints_written", u64), ("checkpoint_steps", u64 * 16),
                ("num_checkpoint_steps", u32), ("awaiting_restore", c_int),
                ("storage", ctypes.c_char * 8),
                ("trainer_state", TrainerState)]


BROADCAST_FN = ctypes.CFUNCTYPE(c_int, voidp, size_t, voidp)
ALL_GATHER_FN = ctypes.CFUNCTYPE(c_int, voidp, size_t, voidp, voidp)
WRITE_INITIAL_FN = ctypes.CFUNCTYPE(c_int, voidp)


class Group(ctypes.Structure):
    _fields_ = [("rank", c_int), ("size", c_int), ("broadcast", BROADCAST_FN),
                ("all_gather", ALL_GATHER_FN), ("user", voidp)]


class TrainerOptions(ctypes.Structure):
    _fields_ = [("checkpoint_interval", c_int),
                ("recovery_timeout_seconds", c_double), ("elastic", c_int),
                ("min_epoch", u64), ("member", voidp)]


class Outcome(ctypes.Structure):
    _fields_ = [("kind", c_int), ("epoch", u64), ("world_epoch", u64),
                ("state", TrainerState)]


class Decision(ctypes.Structure):
    _fields_ = [("grad_norm", c_double), ("clip_coef", ctypes.c_float),
                ("grad_scale", ctypes.c_float), ("skipped", c_int)]


class StepArgs(ctypes.Structure):
    _fields_ = [("step", u64), ("push_status", c_int),
                ("norm_from_servers", c_int), ("sum_squares", c_double),
                ("nonfinite", c_int), ("loss_scale", c_double),
                ("max_norm", c_double), ("lr", c_double)]


class MemberOptions(ctypes.Structure):
    _fields_ = [("worker_name", c_char_p), ("node", c_char_p),
                ("address", c_char_p), ("local_rank", u32),
                ("local_size", u32), ("rpc_timeout_seconds", c_double)]


class MemberInfo(ctypes.Structure):
    _fields_ = [("member_id", u64), ("rank", u32), ("local_rank", u32),
                ("local_size", u32), ("worker_name", ctypes.c_char * 256),
                ("node", ctypes.c_char * 256), ("address", ctypes.c_char * 256)]


class World(ctypes.Structure):
    _fields_ = [("epoch", u64), ("step", u64), ("member_id", u64),
                ("expired", c_int), ("num_members", size_t)]


class TrainConfig(ctypes.Structure):
    _fields_ = [
        ("train_batch_size", i64), ("micro_batch_per_worker", i64),
        ("gradient_accumulation_steps", i64), ("world_size", ctypes.c_int32),
        ("gradient_clipping", c_double), ("optimizer_type", ctypes.c_char * 16),
        ("lr", c_double), ("beta1", c_double), ("beta2", c_double),
        ("eps", c_double), ("weight_decay", c_double),
        ("lr_schedule", ctypes.c_int32), ("schedule_lr", c_double),
        ("warmup_min_lr", c_double), ("warmup_max_lr", c_double),
        ("warmup_num_steps", i64), ("warmup_linear", ctypes.c_int32),
        ("total_num_steps", i64), ("warmup_min_ratio", c_double),
        ("cos_min_ratio", c_double), ("precision", ctypes.c_int32),
        ("loss_scale_dynamic", ctypes.c_int32), ("static_loss_scale", c_double),
        ("initial_loss_scale", c_double), ("loss_scale_window", i64),
        ("hysteresis", i64), ("consecutive_hysteresis", ctypes.c_int32),
        ("min_loss_scale", c_double), ("stage", ctypes.c_int32),
        ("overlap_comm", ctypes.c_int32),
        ("contiguous_gradients", ctypes.c_int32),
        ("reduce_scatter", ctypes.c_int32), ("reduce_bucket_size", i64),
        ("allgather_bucket_size", i64), ("stage3_prefetch_bucket_size", i64),
        ("stage3_max_live_parameters", i64),
        ("stage3_max_reuse_distance", i64),
        ("stage3_param_persistence_threshold", i64), ("sub_group_size", i64),
        ("offload_param_server", ctypes.c_int32),
        ("num_servers", ctypes.c_int32), ("servers", ctypes.c_char * 4096),
        ("server_aggregation", ctypes.c_int32), ("alignment", u32),
        ("checkpoint_interval", ctypes.c_int32),
        ("delayed_parameter_update", ctypes.c_int32),
        ("delayed_update_warmup_steps", i64),
        ("no_bias_correction", ctypes.c_int32)]


def fill(struct_type, values, what):
    """A struct_type whose fields are set from the dict `values` (the
    others zero); ValueError naming `what` for a key it has no field for."""
    s = struct_type()
    for key, value in dict(values).items():
        if key not in {name for name, _ in struct_type._fields_}:
            raise ValueError(f"{what}: unknown field {key!r}")
        setattr(s, key, value)
    return s


P = ctypes.POINTER
_SIGNATURES = {
    "zs_version": (c_char_p, []),
    "zs_api_version": (c_int, []),
    "zs_status_name": (c_char_p, [c_int]),
    "zs_last_error": (c_char_p, []),
    "zs_connect_options_init": (None, [P(ConnectOptions)]),
    "zs_connect": (c_int, [P(ConnectOptions), P(voidp)]),
    "zs_close": (c_int, [voidp]),
    "zs_param_group_init": (None, [P(ParamGroup)]),
    "zs_model_init": (None, [P(Model)]),
    "zs_register": (c_int, [voidp, P(Model)]),
    "zs_attach": (c_int, [voidp]),
    "zs_num_servers": (c_int, [voidp, P(u32)]),
    "zs_model_size": (c_int, [voidp, P(u64)]),
    "zs_tensor_range": (c_int, [voidp, c_char_p, P(u64), P(u64)]),
    "zs_server_range": (c_int, [voidp, u32, P(u64), P(u64)]),
    "zs_slice": (c_int, [voidp, u32, u32, P(u64), P(u64)]),
    "zs_write_parameters": (c_int, [voidp, u64, u64, voidp, size_t]),
    "zs_push": (c_int, [voidp, u64, u64, c_int, voidp, size_t, P(PushId)]),
    "zs_gather": (c_int, [voidp, u64, u64, c_int, voidp, size_t, P(u64)]),
    "zs_stats": (c_int, [voidp, P(ServerStats), size_t, P(size_t)]),
    "zs_checkpoint": (c_int, [voidp, u64, P(TrainerState), c_char_p]),
    "zs_restore": (c_int, [voidp, u64, u64, P(TrainerState)]),
    "zs_trainer_options_init": (None, [P(TrainerOptions)]),
    "zs_trainer_create": (c_int, [voidp, P(Group), P(TrainerOptions),
                                  P(voidp)]),
    "zs_trainer_close": (c_int, [voidp]),
    "zs_trainer_start": (c_int, [voidp, voidp, size_t, WRITE_INITIAL_FN,
                                 voidp, P(TrainerState), P(Outcome)]),
    "zs_trainer_step": (c_int, [voidp, P(StepArgs), P(TrainerState),
                                P(Decision), P(Outcome)]),
    "zs_trainer_decide": (c_int, [voidp, P(StepArgs), P(Decision),
                                  P(Outcome)]),
    "zs_trainer_commit": (c_int, [voidp, P(TrainerState), P(Outcome)]),
    "zs_trainer_after_fetch": (c_int, [voidp, c_int, P(Outcome)]),
    "zs_member_options_init": (None, [P(MemberOptions)]),
    "zs_member_create": (c_int, [voidp, P(MemberOptions), P(voidp)]),
    "zs_member_close": (c_int, [voidp]),
    "zs_member_join": (c_int, [voidp, P(u64)]),
    "zs_member_heartbeat": (c_int, [voidp]),
    "zs_member_leave": (c_int, [voidp]),
    "zs_member_world": (c_int, [voidp, P(World), P(MemberInfo), size_t]),
    # API version 2: the DeepSpeed config, learning rates, loss scaler.
    "zs_config_parse": (c_int, [c_char_p, c_int, P(TrainConfig),
                                ctypes.c_char_p, size_t, P(size_t)]),
    "zs_config_parse_file": (c_int, [c_char_p, c_int, P(TrainConfig),
                                     ctypes.c_char_p, size_t, P(size_t)]),
    "zs_config_resolve": (c_int, [c_char_p, c_char_p, c_int, c_char_p,
                                  P(TrainConfig), ctypes.c_char_p, size_t,
                                  P(size_t)]),
    "zs_config_describe": (size_t, [P(TrainConfig), ctypes.c_char_p, size_t]),
    "zs_config_lr": (c_int, [P(TrainConfig), i64, P(c_double)]),
    "zs_loss_scaler_init": (c_int, [P(TrainConfig), P(TrainerState)]),
    "zs_loss_scaler_update": (c_int, [P(TrainConfig), P(TrainerState), c_int]),
}

_lock = threading.Lock()
_lib = None


def _candidates():
    """Where the library is looked for, in order: (description, path)."""
    env = os.environ.get("ZEROSHARD_LIB")
    if env:
        yield "$ZEROSHARD_LIB", env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "libzeroshard.so")
    yield "the package", here
    found = ctypes.util.find_library("zeroshard")
    yield "the system path", found or "libzeroshard.so"


def load(path=None):
    """The loaded library (loaded once). Error(NOT_FOUND) naming every place
    tried when it cannot be loaded; Error(FAILED_PRECONDITION) when its API
    version is older than this binding's."""
    global _lib
    with _lock:
        if _lib is not None and path is None:
            return _lib
        tried = []
        places = [("the argument", path)] if path else list(_candidates())
        for where, candidate in places:
            if where != "the system path" and not os.path.exists(candidate):
                tried.append(f"{where} ({candidate}: no such file)")
                continue
            try:
                lib = ctypes.CDLL(candidate)
            except OSError as e:
                tried.append(f"{where} ({candidate}: {e})")
                continue
            _declare(lib)
            version = lib.zs_api_version()
            if version < API_VERSION:
                raise Error(CODES["FAILED_PRECONDITION"],
                            f"{candidate} has C API version {version}; this "
                            f"zeroshard package needs {API_VERSION} (rebuild "
                            "//client:libzeroshard.so)")
            if path is None:
                _lib = lib
            return lib
        raise Error(CODES["NOT_FOUND"],
                    "libzeroshard.so not found; tried " + "; ".join(tried) +
                    ". Build it with `bazel build //client:libzeroshard.so` "
                    "and set ZEROSHARD_LIB to its path, or install it "
                    "(tools/install.sh)")


def _declare(lib):
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue  # an older library: load() refuses it by version
        fn.restype = restype
        fn.argtypes = argtypes


def last_error():
    return load().zs_last_error().decode("utf-8", "replace")


def check(code, what=None):
    """Raises Error for a status code other than OK, with the calling
    thread's last message from the library."""
    if code != OK:
        message = last_error()
        if what:
            message = f"{what}: {message}" if message else what
        raise Error(code, message)


def enc(text):
    return None if text is None else str(text).encode("utf-8")
