"""Shared build definitions: compiler options, proto/gRPC codegen, CUDA."""

# Options for every C++ target of the project.
ZS_COPTS = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]

# -DZEROSHARD_HAVE_CUDA=1 under --config=cuda, for `local_defines` of the
# targets whose own sources test it (never `defines`: a define that spread
# to every dependent would change their command lines, and nothing that
# does not test it would be shared between the two configurations).
CUDA_DEFINES = select({
    "//tools:cuda_enabled": ["ZEROSHARD_HAVE_CUDA=1"],
    "//conditions:default": [],
})

def zs_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = ZS_COPTS + copts, **kwargs)

def zs_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = ZS_COPTS + copts, **kwargs)

def zs_cc_test(name, copts = [], deps = [], **kwargs):
    native.cc_test(
        name = name,
        copts = ZS_COPTS + copts,
        deps = deps + ["//tools:gtest_main"],
        **kwargs
    )

def zs_benchmark(name, copts = [], tags = [], **kwargs):
    """A testonly benchmark binary; its last line is `RESULT k=v ...`."""
    native.cc_binary(
        name = name,
        copts = ZS_COPTS + copts,
        testonly = True,
        tags = tags + ["benchmark"],
        **kwargs
    )

def _py_runfiles(src, data):
    """What a Python test or benchmark runs with: its file, this build's
    library and server, the package's sources, and `data`."""
    return [
        src,
        "//client:libzeroshard.so",
        "//python:zeroshard_py",
        "//server:zeroshard-server",
    ] + data

def zs_py_test(name, src = None, data = [], args = [], **kwargs):
    """A Python test (unittest) run by Debian's /usr/bin/python3.

    `src` (default: name + ".py") runs through tools/py_test.sh with
    PYTHONPATH=<runfiles>/python, ZEROSHARD_LIB and ZEROSHARD_SERVER naming
    this build's //client:libzeroshard.so and //server:zeroshard-server, and
    TMPDIR=$TEST_TMPDIR. `data`: more runfiles; the rest goes to sh_test
    (size, tags, ...). The library and python/ are visible to
    //tests/python only.
    """
    src = src or name + ".py"
    native.sh_test(
        name = name,
        srcs = ["//tools:py_test.sh"],
        args = ["$(rootpath %s)" % src] + args,
        data = _py_runfiles(src, data),
        **kwargs
    )

def zs_py_benchmark(name, src = None, data = [], **kwargs):
    """A Python benchmark run by `bazel run`, with zs_py_test's environment;
    tagged `benchmark`, its last line is `RESULT k=v ...`."""
    src = src or name + ".py"
    native.sh_binary(
        name = name,
        srcs = ["//tools:py_test.sh"],
        args = ["$(rootpath %s)" % src],
        data = _py_runfiles(src, data),
        testonly = True,
        tags = ["benchmark"],
        **kwargs
    )

def zs_proto_library(name, src, grpc = True, deps = [], visibility = None):
    """C++ messages (and gRPC stubs) for one .proto, by the system protoc.

    Generates <base>.pb.{h,cc} and, with grpc = True, <base>.grpc.pb.{h,cc};
    consumers include "proto/<base>.pb.h" / "proto/<base>.grpc.pb.h".
    """
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    cmd = "protoc --proto_path=. --cpp_out=$(GENDIR)"
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        cmd += (" --grpc_out=$(GENDIR)" +
                " --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)")
    cmd += " $(location %s)" % src
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = outs,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//tools:protobuf"] + (["//tools:grpc"] if grpc else []),
        visibility = visibility,
    )

def zs_cuda_library(
        name,
        srcs,
        hdrs = [],
        deps = [],
        nocuda_srcs = [],
        copts = [],
        nvcc_opts = [],
        tags = [],
        visibility = None,
        **kwargs):
    """CUDA code as a cc_library that builds in every configuration.

    Under --config=cuda (//tools:cuda_enabled) each .cu file of `srcs` is
    compiled by /usr/local/cuda/bin/nvcc for sm_90 SASS plus compute_90 PTX
    (JIT fallback for newer GPUs); the library is those objects plus
    //tools:cuda (cudart, cuBLAS, NCCL, CUDA headers) and it defines
    ZEROSHARD_HAVE_CUDA=1 for its own sources (targets that test it too
    name CUDA_DEFINES in their local_defines).

    In the default configuration nothing needs CUDA: the library is `hdrs`
    plus `nocuda_srcs` (ordinary C++ compiled with ZS_COPTS, e.g. stubs that
    report "built without --config=cuda"), ZEROSHARD_HAVE_CUDA is undefined,
    and the nvcc genrules are tagged manual so `bazel build //...` never runs
    them. Dependents can therefore use the library unconditionally and test
    ZEROSHARD_HAVE_CUDA (or the stubs' return values) at run time.

    Non-.cu entries of `srcs` (private .h/.cuh) are inputs of every nvcc
    action. .cu files include project headers by workspace path (-I.) and are
    compiled with -DZEROSHARD_HAVE_CUDA=1.
    """
    cuda_srcs = [s for s in srcs if s.endswith(".cu")]
    private_hdrs = [s for s in srcs if not s.endswith(".cu")]
    objs = []
    for src in cuda_srcs:
        obj = src[:-len(".cu")] + ".cu.o"
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs + private_hdrs,
            outs = [obj],
            cmd = (
                "/usr/local/cuda/bin/nvcc -std=c++17 -O3 -Xcompiler -fPIC " +
                "-DZEROSHARD_HAVE_CUDA=1 -I. -I$(GENDIR) " +
                "-gencode arch=compute_90,code=sm_90 " +
                "-gencode arch=compute_90,code=compute_90 " +
                " ".join(nvcc_opts) +
                " -c $(location %s) -o $@" % src
            ),
            # Only built when the cc_library below selects it (--config=cuda).
            tags = tags + ["manual"],
            visibility = ["//visibility:private"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = select({
            "//tools:cuda_enabled": objs,
            "//conditions:default": nocuda_srcs,
        }),
        hdrs = hdrs,
        copts = ZS_COPTS + copts,
        local_defines = CUDA_DEFINES,
        deps = deps + select({
            "//tools:cuda_enabled": ["//tools:cuda"],
            "//conditions:default": [],
        }),
        linkstatic = True,
        tags = tags,
        visibility = visibility,
        **kwargs
    )
