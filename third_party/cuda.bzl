"""cuda_library: compile .cu files with the system nvcc, no rules_cuda needed; and CUDA_ONLY.

    load("//third_party:cuda.bzl", "CUDA_ONLY", "cuda_library")

    cuda_library(name = "saxpy", srcs = ["saxpy.cu"], hdrs = ["saxpy.cuh"])   # CUDA_ONLY by default
    cc_binary(name = "gpu_probe", srcs = ["gpu_probe.cc"], deps = [":saxpy", "@cuda//:cublas"],
              target_compatible_with = CUDA_ONLY)

Nothing GPU-related builds unless --config=cuda (= --define=cuda=1); `//...` skips those targets.
Limits: each .cu is compiled on its own (no -rdc, so no device link step).
"""

# Resolved through Label() so the keys also point at gpipe when gpipe is an external repository.
_CUDA_ENABLED = str(Label("//third_party:cuda_enabled"))
_INCOMPATIBLE = str(Label("//third_party:incompatible"))

# target_compatible_with value for GPU-only targets: built only under --config=cuda.
CUDA_ONLY = select({
    _CUDA_ENABLED: [],
    "//conditions:default": [_INCOMPATIBLE],
})

def if_cuda(if_true, if_false = []):
    """select() helper: `if_true` under --config=cuda, else `if_false`."""
    return select({
        _CUDA_ENABLED: if_true,
        "//conditions:default": if_false,
    })

# sm_80 (A100) + sm_90 (H100/H200) machine code, plus compute_90 PTX for newer GPUs (JIT).
CUDA_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def _cuda_objects_impl(ctx):
    cc = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps]).compilation_context
    root = ctx.label.workspace_root or "."  # "external/gpipe" when built from another workspace
    flags = ["-std=c++20", "-O3", "-Xcompiler=-fPIC", "-I" + root, "-I" + ctx.bin_dir.path + "/" + root]
    # --define=cuda_arch=sm_90 (tools/gpu_check.sh --stage): machine code for that one
    # architecture, no PTX. The fatbins are most of a CUDA binary's bytes, and the staged
    # bundle must stay small enough to carry to a GPU machine.
    arch = ctx.var.get("cuda_arch")
    if arch and not (arch.startswith("sm_") and arch[3:].isdigit()):
        fail("--define=cuda_arch=%s: expected sm_NN, e.g. sm_90 (H100/H200) or sm_80 (A100)" % arch)
    flags += ["-gencode=arch=compute_%s,code=sm_%s" % (arch[3:], arch[3:])] if arch else ctx.attr.gencode

    # Host-side flags given with --copt (e.g. -march=x86-64-v3, sanitizers) go to nvcc's host
    # compiler too, so Eigen types shared with .cc files get the same alignment.
    flags += ["-Xcompiler=" + f for f in ctx.fragments.cpp.copts if "," not in f]
    flags += ["-I" + p for p in cc.includes.to_list() + cc.quote_includes.to_list()]
    flags += ["-isystem=" + p for p in cc.system_includes.to_list()]
    flags += ["-D" + d for d in cc.defines.to_list()]
    flags += ctx.attr.copts
    if ctx.var.get("werror") == "1":  # --config=werror: the host compiler's warnings are errors
        flags.append("-Xcompiler=-Werror")
    inputs = depset(ctx.files.srcs + ctx.files.hdrs, transitive = [cc.headers])
    objs = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_cuda_objs/%s/%s.o" % (ctx.label.name, src.basename))
        # nvcc names its temporary files after its process id, which is the
        # same small number in every sandbox, and the sandboxes share /tmp:
        # two nvcc at once could take each other's files ("tmpxft_..._00000001
        # ...cudafe1.cpp: No such file"). Each gets a fresh TMPDIR.
        ctx.actions.run_shell(
            command = 'T=$(mktemp -d) && trap \'rm -rf "$T"\' EXIT && TMPDIR="$T" "$@"',
            arguments = [ctx.executable._nvcc.path] + flags + ["-c", src.path, "-o", obj.path],
            tools = [ctx.executable._nvcc],
            inputs = inputs,
            outputs = [obj],
            mnemonic = "NvccCompile",
            use_default_shell_env = True,  # nvcc needs PATH to find gcc and cc1plus
            progress_message = "nvcc %s" % src.short_path,
        )
        objs.append(obj)
    return [DefaultInfo(files = depset(objs))]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh", ".hpp"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "gencode": attr.string_list(default = CUDA_GENCODE),
        "_nvcc": attr.label(
            default = "@cuda//:bin/nvcc",
            executable = True,
            cfg = "exec",
            allow_single_file = True,
        ),
    },
    fragments = ["cpp"],
)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], gencode = CUDA_GENCODE, **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc (object files in `<name>_cu`).

    Args:
      name: the cc_library's name.
      srcs: .cu files.
      hdrs: headers (.h/.cuh/.hpp), visible to the .cu files and to dependents.
      deps: cc deps (headers for nvcc, linked into dependents). @cuda//:cudart is always added.
      copts: extra nvcc flags.
      gencode: nvcc -gencode flags (default CUDA_GENCODE).
      **kwargs: passed to cc_library (visibility, tags, ...). target_compatible_with defaults
        to CUDA_ONLY.
    """
    kwargs.setdefault("target_compatible_with", CUDA_ONLY)
    cuda_objects(
        name = name + "_cu",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:headers"],
        copts = copts,
        gencode = gencode,
        target_compatible_with = kwargs["target_compatible_with"],
        tags = kwargs.get("tags", []),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_cu"],  # cc_library accepts .o files in srcs
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )
