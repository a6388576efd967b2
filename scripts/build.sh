#!/usr/bin/env bash
# Configures and builds one build tree. Usage: scripts/build.sh DIR [cmake -D options...]
# GSE_BUILD_TARGET builds those targets only (space-separated; default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$1"; shift
jobs="${GSE_JOBS:-$(nproc)}"
launcher=()
if command -v ccache >/dev/null; then
  # ccache (setup.sh installs it) makes a rebuild of unchanged sources free: four trees (normal,
  # ASan, TSan, fuzz) compile the same files. Paths are rewritten relative to the checkout's
  # parent and the working directory is left out of the hash, so checkouts side by side (git
  # worktrees, a CI clone) share one cache.
  # The suites include a precompiled header (tests/CMakeLists.txt): ccache caches those
  # compiles only with this sloppiness (its manual, "Precompiled headers").
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}" CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros}"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="${GSE_BUILD_TYPE:-RelWithDebInfo}" "${launcher[@]+"${launcher[@]}"}" "$@" >/dev/null
# shellcheck disable=SC2086  # GSE_BUILD_TARGET is a list of target names
cmake --build "$dir" -j"$jobs" ${GSE_BUILD_TARGET:+--target $GSE_BUILD_TARGET}
