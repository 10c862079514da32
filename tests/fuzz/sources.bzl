"""The C++ sources behind a cc_library closure, for compilers Bazel does not drive.

cc_closure_sources(name, deps) makes every source and header file of the
cc_library targets reachable from `deps` (through `deps`) available as
runfiles, plus two manifests for build_and_run.sh:
  <name>.srcs     one workspace-relative path per line: the .cc/.c files
                  to compile (generated files, e.g. protoc output, are left
                  out: the script regenerates them)
  <name>.linkopts one linker flag per line, as the closure links them
                  (system libraries such as //tools:absl)
"""

_SourcesInfo = provider(fields = ["srcs", "hdrs"])

def _collect_impl(target, ctx):
    srcs = []
    hdrs = []
    for attr, out in [("srcs", srcs), ("hdrs", hdrs), ("textual_hdrs", hdrs)]:
        for t in getattr(ctx.rule.attr, attr, []):
            out.extend(t.files.to_list())
    deps = [d for d in getattr(ctx.rule.attr, "deps", []) if _SourcesInfo in d]
    return [_SourcesInfo(
        srcs = depset(srcs, transitive = [d[_SourcesInfo].srcs for d in deps]),
        hdrs = depset(hdrs, transitive = [d[_SourcesInfo].hdrs for d in deps]),
    )]

_collect = aspect(implementation = _collect_impl, attr_aspects = ["deps"])

def _cc_closure_sources_impl(ctx):
    srcs = depset(transitive = [d[_SourcesInfo].srcs for d in ctx.attr.deps])
    hdrs = depset(transitive = [d[_SourcesInfo].hdrs for d in ctx.attr.deps])
    compile = [
        f.short_path
        for f in srcs.to_list()
        if f.is_source and f.extension in ["cc", "c", "cpp"]
    ]
    linkopts = []
    for d in ctx.attr.deps:
        for li in d[CcInfo].linking_context.linker_inputs.to_list():
            for flag in li.user_link_flags:
                if flag not in linkopts:
                    linkopts.append(flag)
    srcs_manifest = ctx.actions.declare_file(ctx.label.name + ".srcs")
    link_manifest = ctx.actions.declare_file(ctx.label.name + ".linkopts")
    ctx.actions.write(srcs_manifest, "\n".join(compile) + "\n")
    ctx.actions.write(link_manifest, "\n".join(linkopts) + "\n")
    files = depset(
        [srcs_manifest, link_manifest],
        transitive = [
            depset([f for f in srcs.to_list() if f.is_source]),
            depset([f for f in hdrs.to_list() if f.is_source]),
        ],
    )
    return [DefaultInfo(
        files = files,
        runfiles = ctx.runfiles(transitive_files = files),
    )]

cc_closure_sources = rule(
    implementation = _cc_closure_sources_impl,
    attrs = {
        "deps": attr.label_list(
            aspects = [_collect],
            providers = [CcInfo],
        ),
    },
)
