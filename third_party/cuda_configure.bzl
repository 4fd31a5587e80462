"""local_cuda: a preinstalled CUDA toolkit (default /usr/local/cuda) as @cuda.

If it is missing, @cuda still exists with empty targets, so CPU-only builds never fail on it.
Override the location with the environment variable GPIPE_CUDA_PATH.
Targets: @cuda//:headers, :cudart, :cublas (with cublasLt), :cudnn, :nccl, :all, and the
file @cuda//:bin/nvcc (a wrapper script). @cuda//:defs.bzl has CUDA_FOUND/CUDA_ROOT/CUDA_VERSION.
"""

_LIBS = {"cudart": ["cudart"], "cublas": ["cublas", "cublasLt"], "cudnn": ["cudnn"], "nccl": ["nccl"]}

_FOUND_BUILD = """
package(default_visibility = ["//visibility:public"])
exports_files(["bin/nvcc"])
cc_library(
    name = "headers",
    hdrs = glob(["include/**"]),
    includes = ["include", "include/cccl"],
)
"""

def _lib_target(name, bases, root):
    # -L/-rpath on the real toolkit: binaries find the libs at run time without
    # LD_LIBRARY_PATH/ldconfig. (cc_import of the .so leaves a RUNPATH without the soname.)
    # Never link -lcuda from lib64/stubs: the binary would not start.
    libdir = root + "/lib64"
    return """
cc_library(
    name = "{name}",
    deps = [":headers"],
    linkopts = ["-L{libdir}", "-Wl,-rpath,{libdir}"] + {flags},
)
""".format(name = name, libdir = libdir, flags = repr(["-l" + b for b in bases]))

def _local_cuda_impl(ctx):
    root = ctx.os.environ.get("GPIPE_CUDA_PATH", ctx.attr.path)
    nvcc = ctx.path(root + "/bin/nvcc")
    found = nvcc.exists
    if found:
        ctx.symlink(root + "/include", "include")

        # A wrapper, not a symlink: nvcc finds cicc/ptxas/nvcc.profile relative to argv[0],
        # which inside the sandbox would be external/cuda/bin (holding nvcc alone).
        ctx.file("bin/nvcc", '#!/bin/sh\nexec "%s" "$@"\n' % nvcc.realpath, executable = True)
        build = _FOUND_BUILD
        for name, bases in _LIBS.items():
            build += _lib_target(name, bases, root)
        version = ctx.execute([str(nvcc), "--version"]).stdout.strip().splitlines()[-1]
    else:
        build = "# CUDA toolkit not found at %s: empty targets, CPU-only builds still work.\n" % root
        build += 'package(default_visibility = ["//visibility:public"])\ncc_library(name = "headers")\n'
        for name in _LIBS:
            build += 'cc_library(name = "%s")\n' % name
        version = "none"
        ctx.file(
            "bin/nvcc",
            "#!/bin/sh\necho 'CUDA toolkit not found at %s' >&2\nexit 1\n" % root,
            executable = True,
        )
        build += 'exports_files(["bin/nvcc"])\n'
    build += 'cc_library(name = "all", deps = [%s])\n' % ", ".join(['":%s"' % n for n in _LIBS])
    ctx.file("BUILD", build)
    ctx.file("defs.bzl", "CUDA_FOUND = %s\nCUDA_ROOT = %r\nCUDA_VERSION = %r\n" % (found, root, version))

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    local = True,
    environ = ["GPIPE_CUDA_PATH"],
    attrs = {"path": attr.string(default = "/usr/local/cuda")},
)
