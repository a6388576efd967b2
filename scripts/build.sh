#!/usr/bin/env bash
# Configures and builds one build tree. Usage: scripts/build.sh DIR [cmake -D options...]
# GSE_BUILD_TARGET builds that target only (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$1"; shift
jobs="${GSE_JOBS:-$(nproc)}"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="${GSE_BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$dir" -j"$jobs" ${GSE_BUILD_TARGET:+--target "$GSE_BUILD_TARGET"}
