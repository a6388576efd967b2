#!/usr/bin/env bash
# Sets everything up and runs the whole test suite three times: a normal build (warnings are
# errors), AddressSanitizer+UndefinedBehaviorSanitizer, and ThreadSanitizer, each in its own
# build tree. Exits non-zero on the first failure. GSE_TEST_VARIANTS="normal" limits the run;
# the variant "image" (not in the default run) builds the container images and runs them as
# the manifests do (tests/image_check.sh, see README "Container images"). GSE_TESTS="a_test
# b_test" builds and runs only those suites in each variant (a developer's quick check; CI runs
# everything).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

variants="${GSE_TEST_VARIANTS:-normal asan tsan fuzz}"
jobs="$(nproc)"
for v in $variants; do
  if [[ "$v" == image ]]; then
    echo "=== image: build the container images and run them as deploy/ does" >&2
    bash tests/image_check.sh
    continue
  fi
  # The normal tree is the Release build that scripts/run.sh serves from. Sanitizer trees are
  # built -O1 with line tables only: about half the compile time of -O2 -g on 2 cores, and
  # still fast and precise enough for the sanitizers' reports.
  target=""; tests=()
  case "$v" in
    normal) dir=build;      type=Release; opts=(-DGSE_WERROR=ON) ;;
    asan)   dir=build-asan; type=Debug;   opts=(-DGSE_WERROR=ON -DGSE_SANITIZE=address "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1") ;;
    tsan)   dir=build-tsan; type=Debug;   opts=(-DGSE_WERROR=ON -DGSE_SANITIZE=thread "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1") ;;
    # clang is required here (setup.sh installs it): without it the configure step fails.
    fuzz)   dir=build-fuzz; type=Debug;   target=fuzz; tests=(-L fuzz)
            opts=(-DGSE_WERROR=ON -DGSE_SANITIZE=address -DGSE_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++
                  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" "-DGSE_FUZZ_SECONDS=${GSE_FUZZ_SECONDS:-20}") ;;
    *) echo "test: unknown variant $v" >&2; exit 2 ;;
  esac
  if [[ -n "${GSE_TESTS:-}" && "$v" != fuzz ]]; then
    target="$GSE_TESTS"; tests=(-R "^($(tr ' ' '|' <<<"$GSE_TESTS"))\$")
  fi
  echo "=== $v build ($dir)" >&2
  GSE_BUILD_TYPE="$type" GSE_BUILD_TARGET="$target" bash scripts/build.sh "$dir" "${opts[@]}"
  echo "=== $v tests" >&2
  # halt_on_error so a sanitizer report fails the test instead of scrolling by.
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" GSE_SANITIZER_BUILD="$v" \
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" "${tests[@]+"${tests[@]}"}"
  # Per-variant wall time, so that the CI budget (README) can be checked from any log.
  echo "=== $v done: ${SECONDS}s since the start of the run" >&2
done
