"""gpipe_deps(): every external repository gpipe needs, all offline.

Loads nothing from other repositories, so it can be the first thing a WORKSPACE calls, both in
gpipe itself and in a user workspace that has `local_repository(name = "gpipe", ...)`.
"""

load("//third_party:cuda_configure.bzl", "local_cuda")
load("//third_party:mpi_configure.bzl", "local_mpi")

# @bazel_tools of Bazel 4.2.3 loads these symbols from @rules_cc / @rules_java; without them it
# tries to download the real rule sets and fails offline. Debian's bazel-rules-cc 0.0.4 needs
# Bazel >= 5, so these are generated stubs that re-export the native rules.
_RULES_CC_DEFS = """# generated offline stub: re-export native C++ rules
def cc_library(**kw): native.cc_library(**kw)
def cc_binary(**kw): native.cc_binary(**kw)
def cc_test(**kw): native.cc_test(**kw)
def cc_import(**kw): native.cc_import(**kw)
def cc_toolchain(**kw): native.cc_toolchain(**kw)
def cc_toolchain_suite(**kw): native.cc_toolchain_suite(**kw)
def cc_proto_library(**kw): native.cc_proto_library(**kw)
def objc_library(**kw): native.objc_library(**kw)
"""

_RULES_JAVA_DEFS = """# generated offline stub: re-export native Java rules
def java_binary(**kw): native.java_binary(**kw)
def java_import(**kw): native.java_import(**kw)
def java_library(**kw): native.java_library(**kw)
def java_plugin(**kw): native.java_plugin(**kw)
def java_runtime(**kw): native.java_runtime(**kw)
def java_test(**kw): native.java_test(**kw)
def java_toolchain(**kw): native.java_toolchain(**kw)
def java_proto_library(**kw): native.java_proto_library(**kw)
"""

_COVERAGE_BUILD = """package(default_visibility = ["//visibility:public"])
# No-op executables so `bazel coverage` runs (an empty filegroup crashes the server with an NPE).
sh_binary(name = "coverage_report_generator", srcs = ["noop.sh"])
sh_binary(name = "lcov_merger", srcs = ["noop.sh"])
"""

def _stub_repo_impl(ctx):
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
    ctx.file("BUILD", ctx.attr.build)
    for path, content in ctx.attr.files.items():
        ctx.file(path, content)

stub_repo = repository_rule(
    implementation = _stub_repo_impl,
    local = True,
    attrs = {"build": attr.string(default = ""), "files": attr.string_dict()},
)

# Debian libeigen3-dev (3.4.0). `includes` makes it an -isystem dir: no warnings from Eigen.
_EIGEN_BUILD = """
cc_library(
    name = "eigen",
    hdrs = glob(["Eigen/**", "unsupported/Eigen/**"]),
    includes = ["."],
    visibility = ["//visibility:public"],
)
"""

# Debian catch2 (2.13). path = "/usr" so the header and /usr/lib/libCatch2WithMain.a come from one
# repository. The prebuilt main saves ~20 s of compile per clean build (built C++17; links fine).
_CATCH2_BUILD = """
cc_library(  # #include <catch2/catch.hpp>
    name = "catch2",
    hdrs = glob(["include/catch2/*.hpp"]),
    strip_include_prefix = "include",
    visibility = ["//visibility:public"],
)
cc_import(
    name = "catch2_main_lib",
    static_library = "lib/libCatch2WithMain.a",
    alwayslink = 1,
)
cc_library(  # Catch2 plus Debian's prebuilt main(): for tests without their own main
    name = "catch2_main",
    deps = [":catch2", ":catch2_main_lib"],
    visibility = ["//visibility:public"],
)
"""

# Debian libcli11-dev (2.1.2).
_CLI11_BUILD = """
cc_library(  # #include <CLI/CLI.hpp>
    name = "cli11",
    hdrs = glob(["**/*.hpp"]),
    include_prefix = "CLI",
    visibility = ["//visibility:public"],
)
"""

def _maybe(rule, name, **kw):
    if name not in native.existing_rules():
        rule(name = name, **kw)

def gpipe_deps(cuda_path = "/usr/local/cuda"):
    """Declares all repositories; skips any name the caller already declared."""
    _maybe(stub_repo, "rules_cc", files = {"cc/BUILD": "", "cc/defs.bzl": _RULES_CC_DEFS})
    _maybe(stub_repo, "rules_java", files = {"java/BUILD": "", "java/defs.bzl": _RULES_JAVA_DEFS})
    _maybe(
        stub_repo,
        "remote_coverage_tools",
        build = _COVERAGE_BUILD,
        files = {"noop.sh": "#!/bin/sh\nexit 0\n"},
    )
    _maybe(native.new_local_repository, "eigen", path = "/usr/include/eigen3", build_file_content = _EIGEN_BUILD)
    _maybe(native.new_local_repository, "catch2", path = "/usr", build_file_content = _CATCH2_BUILD)
    _maybe(native.new_local_repository, "cli11", path = "/usr/include/CLI", build_file_content = _CLI11_BUILD)
    _maybe(local_cuda, "cuda", path = cuda_path)
    _maybe(local_mpi, "mpi")
