"""local_mpi: the system MPI (Debian: apt-get install libopenmpi-dev openmpi-bin) as @mpi//:mpi.

Paths come from `mpicxx --showme:incdirs/libdirs`. If mpicxx is not on PATH (MPI not installed),
@mpi//:mpi is an empty cc_library, so builds that do not use MPI never fail on it; code that
needs MPI should then be gated (e.g. tags/target_compatible_with) by whoever uses it.
@mpi//:defs.bzl has MPI_FOUND.
"""

def _showme(ctx, mpicxx, what):
    r = ctx.execute([mpicxx, "--showme:" + what])
    if r.return_code != 0:
        return None
    return r.stdout.strip().split(" ") if r.stdout.strip() else []

def _empty(ctx, why):
    ctx.file("BUILD", """# MPI not available: {why}
# Install it with: apt-get install -y libopenmpi-dev openmpi-bin  (then `bazel sync --only=mpi`
# or `bazel clean --expunge` so this repository is regenerated).
cc_library(
    name = "mpi",
    visibility = ["//visibility:public"],
)
""".format(why = why))
    ctx.file("defs.bzl", "MPI_FOUND = False\n")

def _local_mpi_impl(ctx):
    mpicxx = ctx.which("mpicxx")
    if mpicxx == None:
        _empty(ctx, "mpicxx not found on PATH")
        return
    incdirs = _showme(ctx, mpicxx, "incdirs")
    libdirs = _showme(ctx, mpicxx, "libdirs")
    if not incdirs or libdirs == None:
        _empty(ctx, "`%s --showme:incdirs/libdirs` failed" % mpicxx)
        return
    top = incdirs[0]
    ctx.symlink(top, "include")
    includes = ["include" + d[len(top):] for d in incdirs if d.startswith(top)]
    linkopts = ["-L" + d for d in libdirs] + ["-Wl,-rpath," + d for d in libdirs] + ["-lmpi"]
    ctx.file("BUILD", """
cc_library(
    name = "mpi",
    hdrs = glob(["include/**/*.h"]),
    includes = {includes},
    defines = ["OMPI_SKIP_MPICXX=1"],  # C API only; no libmpi_cxx needed
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(includes = repr(includes), linkopts = repr(linkopts)))
    ctx.file("defs.bzl", "MPI_FOUND = True\n")

local_mpi = repository_rule(implementation = _local_mpi_impl, local = True, environ = ["PATH"])
