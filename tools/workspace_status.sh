#!/usr/bin/env bash
# tools/workspace_status.sh: Bazel's --workspace_status_command (.bazelrc). Prints the
# commit the tree was built from, which `--version` and every run's first log line show
# (tools/train/version.h). A tree with uncommitted changes is marked "-dirty"; outside a
# git checkout the commit is "unknown".
commit=$(git rev-parse --short=12 HEAD 2> /dev/null) || commit=unknown
if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2> /dev/null; then
  commit="$commit-dirty"
fi
echo "STABLE_GPIPE_COMMIT $commit"
