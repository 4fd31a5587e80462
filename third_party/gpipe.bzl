"""Uniform macros for gpipe's BUILD files.

    load("//third_party:gpipe.bzl", "gpipe_cc_library", "gpipe_cc_test")

    gpipe_cc_library(name = "tensor", srcs = ["tensor.cc"], hdrs = ["tensor.h"], deps = ["@eigen"])
    gpipe_cc_test(name = "tensor_test", srcs = ["tensor_test.cc"], deps = ["//core:tensor"])

Global flags (-std=c++20, -c opt, -march) live in .bazelrc; COPTS only adds warnings.
"""

load("//third_party:cuda.bzl", _CUDA_ONLY = "CUDA_ONLY", _if_cuda = "if_cuda")

# Re-exported so BUILD files need a single load.
CUDA_ONLY = _CUDA_ONLY
if_cuda = _if_cuda

# Warnings for all gpipe C++ targets; -Werror with --config=werror (CI). Eigen comes in as
# -isystem, so its headers do not trigger them. The suppressions, each one warning of GCC 12
# that is wrong for this code, all here:
#  - missing-field-initializers: C++20 designated initializers (PipelineOptions{.cells = 2},
#    the op table's OpCase{...}) leave the other fields at their defaults on purpose, and GCC
#    12 reports every one of them (later GCCs do not warn for designated initializers);
#  - restrict: a false positive inside libstdc++'s std::string concatenation at -O2 (GCC
#    bug 105329), reported in every file that adds strings.
COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Wno-missing-field-initializers",
    "-Wno-restrict",
]

# For the files compiled with AVX-512 flags only: GCC 12's <avx512fintrin.h> makes its
# "undefined" registers by initialising a variable from itself (`__m512 __Y = __Y;`), which
# -W(maybe-)uninitialized then reports in every function that inlines such an intrinsic.
ISA_COPTS = [
    "-Wno-maybe-uninitialized",
    "-Wno-uninitialized",
]

def _werror():
    return select({
        str(Label("//third_party:werror")): ["-Werror"],
        "//conditions:default": [],
    })

_CATCH2_MAIN = "@catch2//:catch2_main"

def gpipe_cc_library(name, copts = [], **kwargs):
    """cc_library with gpipe's COPTS. Visibility is the package's (private) unless given:
    each target lists the packages that use it, and the README's public targets say public."""
    native.cc_library(
        name = name,
        copts = COPTS + copts + _werror(),
        **kwargs
    )

def gpipe_cc_binary(name, copts = [], **kwargs):
    """cc_binary with gpipe's COPTS."""
    native.cc_binary(
        name = name,
        copts = COPTS + copts + _werror(),
        **kwargs
    )

def gpipe_cc_test(
        name,
        srcs = [],
        deps = [],
        size = "small",
        timeout = None,
        tags = [],
        data = [],
        args = [],
        copts = [],
        catch2_main = True,
        **kwargs):
    """cc_test with gpipe's COPTS, size "small" by default, linked with Catch2's prebuilt main().

    Test sources just `#include <catch2/catch.hpp>` and write TEST_CASEs. Pass
    catch2_main = False for a test with its own main() (CATCH_CONFIG_RUNNER); @catch2 is
    then added instead. Other kwargs (env, shard_count, flaky, local, target_compatible_with,
    linkopts, ...) go to cc_test unchanged.
    """
    catch = _CATCH2_MAIN if catch2_main else "@catch2"
    extra = [catch]
    if type(deps) == type([]) and (catch in deps or catch + "//:catch2" in deps):
        extra = []  # already listed (deps may also be a select(): then just append)
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + extra,
        size = size,
        timeout = timeout,
        tags = tags,
        data = data,
        args = args,
        copts = COPTS + copts + _werror(),
        **kwargs
    )
