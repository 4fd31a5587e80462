// gpipe's headers use C++20 (concepts, designated initialisers, <span>,
// defaulted comparisons). Without it a compiler's first complaint would be
// somewhere deep in core/; this says what is wrong instead.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error \
    "gpipe needs C++20: compile with -std=c++20 (in Bazel: import gpipe's third_party/gpipe.bazelrc, or add build --cxxopt=-std=c++20; see README, 'Using gpipe from another Bazel workspace')"
#endif
