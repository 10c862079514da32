"""Shared build definitions: compiler options, proto/gRPC codegen, CUDA."""

# Options for every C++ target of the project.
ZS_COPTS = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]

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

def zs_cuda_library(name, srcs, hdrs = [], deps = [], visibility = None):
    """Compiles .cu files with nvcc for sm_90 (+ PTX) into a cc_library.

    Only meaningful under --config=cuda; callers wrap uses in
    select({"//tools:cuda_enabled": [...], "//conditions:default": []}).
    """
    objs = []
    for src in srcs:
        obj = src[:-len(".cu")] + ".cu.o"
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = ("/usr/local/cuda/bin/nvcc -std=c++17 -O3 -Xcompiler -fPIC -I. " +
                   "-gencode arch=compute_90,code=sm_90 " +
                   "-gencode arch=compute_90,code=compute_90 " +
                   "-c $(location %s) -o $@" % src),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//tools:cuda"],
        linkstatic = True,
        visibility = visibility,
    )
