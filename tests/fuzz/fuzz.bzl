"""gpipe_fuzz_target: one libFuzzer harness, built as a fuzzer and as a replay test.

    gpipe_fuzz_target(name = "mo", srcs = ["harness_mo.cc"], deps = ["//data"])

makes :mo_fuzzer (clang, ASan + UBSan + libFuzzer; only under --config=fuzz, which
tools/fuzz.sh passes) and :mo_replay_test (any compiler, in `bazel test //...`), which runs
every file of corpus/mo/ through the harness once.
"""

load("//third_party:gpipe.bzl", "gpipe_cc_binary", "gpipe_cc_library", "gpipe_cc_test")

FUZZ_ONLY = select({
    str(Label("//tests/fuzz:fuzz_enabled")): [],
    "//conditions:default": [str(Label("//third_party:incompatible"))],
})

def gpipe_fuzz_target(name, srcs, deps):
    gpipe_cc_library(
        name = name + "_harness",
        testonly = True,
        srcs = srcs,
        deps = deps + [":fuzz_util"],
        alwayslink = 1,
    )
    gpipe_cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        linkopts = ["-fsanitize=fuzzer"],
        target_compatible_with = FUZZ_ONLY,
        deps = [":" + name + "_harness"],
    )
    gpipe_cc_test(
        name = name + "_replay_test",
        catch2_main = False,
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
        deps = [
            ":" + name + "_harness",
            ":replay_main",
        ],
    )
