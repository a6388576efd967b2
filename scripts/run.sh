#!/usr/bin/env bash
# Sets everything up, builds, and runs the extender on its embedded default: the built-in GPU
# catalog and the demo cluster in examples/demo-cluster.json, binds recorded in memory only.
# Extra arguments go to the binary (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
GSE_BUILD_TYPE=Release bash scripts/build.sh build -DGSE_WERROR=ON
exec build/bin/gpu-slice-extender "$@"
