#!/usr/bin/env bash
# Sets everything up and runs the whole test suite three times: a normal build (warnings are
# errors), AddressSanitizer+UndefinedBehaviorSanitizer, and ThreadSanitizer, each in its own
# build tree. Exits non-zero on the first failure. GSE_TEST_VARIANTS="normal" limits the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

variants="${GSE_TEST_VARIANTS:-normal asan tsan}"
jobs="$(nproc)"
for v in $variants; do
  case "$v" in
    normal) dir=build;      opts=(-DGSE_WERROR=ON) ;;
    asan)   dir=build-asan; opts=(-DGSE_WERROR=ON -DGSE_SANITIZE=address) ;;
    tsan)   dir=build-tsan; opts=(-DGSE_WERROR=ON -DGSE_SANITIZE=thread) ;;
    *) echo "test: unknown variant $v" >&2; exit 2 ;;
  esac
  echo "=== $v build ($dir)" >&2
  bash scripts/build.sh "$dir" "${opts[@]}"
  echo "=== $v tests" >&2
  # halt_on_error so a sanitizer report fails the test instead of scrolling by.
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 GSE_SANITIZER_BUILD="$v" \
    ctest --test-dir "$dir" --output-on-failure -j"$jobs"
done
