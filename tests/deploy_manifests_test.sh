#!/usr/bin/env bash
# Offline tests of deploy/ (kustomize base and overlays), scheduler-config/, the catalog's
# renders and checks (`gpu-slice-extender catalog render|check`) and the Dockerfile.
#
#   bash tests/deploy_manifests_test.sh        (from anywhere; it works from the repository root)
#   GSE_BIN_DIR=build-x/bin bash tests/deploy_manifests_test.sh   (binary from another build)
#
# Needs kubectl (for `kubectl kustomize`), node and the npm packages of tests/deploy (installed
# with `npm ci` here if missing; scripts/setup.sh does the same). No cluster and no container
# engine: every object is validated against the Kubernetes / prometheus-operator schemas of npm
# kubernetes-models (tests/deploy/validate.js), the Dockerfile against the project's own build
# scripts and Debian's package metadata.
# Every check prints one PASS/FAIL/SKIP line; the last line is "N passed, M failed[, K skipped]".
# Exit status is non-zero when any check failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO="$(pwd)"

passed=0 failed=0 skipped=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1: $2"; failed=$((failed + 1)); }
skip() { echo "SKIP: $1: $2"; skipped=$((skipped + 1)); }
finish() {
  local line="${passed} passed, ${failed} failed"
  ((skipped)) && line+=", ${skipped} skipped"
  echo "$line"
  ((failed == 0))
  exit $?
}

work="$(mktemp -d "${TMPDIR:-/tmp}/gse-deploy-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# ---- tools -----------------------------------------------------------------------------------
for tool in kubectl node npm; do
  command -v "$tool" >/dev/null || { fail "tool $tool on PATH" "missing (scripts/setup.sh installs node/npm; kubectl must be installed)"; finish; }
done
if [[ ! -d tests/deploy/node_modules ]]; then
  if ! (cd tests/deploy && npm ci --silent --no-audit --no-fund >"$work/npm.log" 2>&1); then
    fail "npm ci in tests/deploy" "$(tail -5 "$work/npm.log")"; finish
  fi
fi

# ---- render base and every overlay -----------------------------------------------------------
mkdir -p "$work/rendered"
variants=(base)
for d in deploy/overlays/*/; do variants+=("$(basename "$d")"); done
for v in "${variants[@]}"; do
  dir="deploy/overlays/$v"; [[ "$v" == base ]] && dir="deploy/base"
  if kubectl kustomize "$dir" >"$work/rendered/$v.yaml" 2>"$work/kustomize-$v.err"; then
    pass "kubectl kustomize $dir renders"
  else
    fail "kubectl kustomize $dir renders" "$(head -3 "$work/kustomize-$v.err")"
    rm -f "$work/rendered/$v.yaml"
  fi
done

# ---- the catalog renders and checks, with the real binary --------------------------------------
# Renders of the built-in catalog must equal tests/golden/ (catalog_render_test compares the
# library with them too; this proves the CLI prints the same). The shipped scheduler configs must
# pass `catalog check --strict`; broken variants of them must fail with kube-scheduler's (or the
# drift check's) message naming the file and the field.
gse="${GSE_BIN_DIR:-build/bin}/gpu-slice-extender"
renders_args=()
# run_check NAME WANT_EXIT NEEDLE ARGS...: `catalog check ARGS`, exit status and one output line.
run_check() {
  local name="$1" want="$2" needle="$3"; shift 3
  local out rc
  out=$("$gse" catalog check "$@" 2>&1); rc=$?
  if ((rc != want)); then fail "$name" "exit $rc, want $want: $(tail -4 <<<"$out" | tr '\n' '|')"; return; fi
  if ! grep -Fq -- "$needle" <<<"$out"; then fail "$name" "no line with: $needle; got: $(head -4 <<<"$out" | tr '\n' '|')"; return; fi
  pass "$name"
}
# variant NAME SED_SCRIPT: scheduler-config/default-profile.yaml edited into $work/ksc/NAME.yaml.
variant() {
  mkdir -p "$work/ksc"
  sed -e "$2" scheduler-config/default-profile.yaml >"$work/ksc/$1.yaml"
  if cmp -s scheduler-config/default-profile.yaml "$work/ksc/$1.yaml"; then
    fail "broken variant $1 differs from default-profile.yaml" "the edit '$2' changed nothing: update this test"
  fi
}
if [[ ! -x "$gse" ]]; then
  fail "gpu-slice-extender catalog render/check" "no binary at $gse: build the gpu-slice-extender target (or set GSE_BIN_DIR)"
else
  mkdir -p "$work/renders"
  rendered_all=1
  for what in device-classes resource-quotas kubeflow scheduler-extender; do
    if ! "$gse" catalog render --what="$what" >"$work/renders/$what.yaml" 2>"$work/render.err"; then
      fail "catalog render --what=$what" "$(head -3 "$work/render.err")"; rendered_all=0
    elif cmp -s "$work/renders/$what.yaml" "tests/golden/$what.yaml"; then
      pass "catalog render --what=$what equals tests/golden/$what.yaml"
    else
      fail "catalog render --what=$what equals tests/golden/$what.yaml" "$(diff "tests/golden/$what.yaml" "$work/renders/$what.yaml" 2>&1 | head -6 | tr '\n' '|')"
    fi
  done
  ((rendered_all)) && renders_args=(--renders "$work/renders")
  if "$gse" catalog --help >"$work/catalog-help.out" 2>&1 && grep -q 'catalog render' "$work/catalog-help.out" &&
     grep -q 'catalog check' "$work/catalog-help.out" && "$gse" --help 2>&1 | grep -q 'catalog render|check'; then
    pass "gpu-slice-extender --help and catalog --help describe the catalog subcommands"
  else
    fail "gpu-slice-extender --help and catalog --help describe the catalog subcommands" "$(head -3 "$work/catalog-help.out")"
  fi
  out=$("$gse" catalog render --what=quotas 2>&1); rc=$?
  if ((rc == 2)) && grep -Fq 'want one of device-classes, resource-quotas, kubeflow, scheduler-extender' <<<"$out"; then
    pass "catalog render --what=quotas is a usage error (exit 2) naming the valid targets"
  else
    fail "catalog render --what=quotas is a usage error (exit 2) naming the valid targets" "exit $rc: $out"
  fi

  for f in scheduler-config/*.yaml; do
    run_check "$f passes catalog check --strict (built-in catalog)" 0 "catalog check: OK, 0 error(s), 0 warning(s)" \
      --strict --scheduler-config="$f"
    run_check "$f passes catalog check --strict (deploy/base/catalog.yaml)" 0 "catalog check: OK, 0 error(s), 0 warning(s)" \
      --strict --catalog=deploy/base/catalog.yaml --scheduler-config="$f"
  done

  variant missing-resource '/^  - name: nvidia.com\/a10g$/,+1d'
  run_check "catalog check: missing resource" 1 \
    "error: $work/ksc/missing-resource.yaml: extenders[0].managedResources: missing \"nvidia.com/a10g\"" \
    --scheduler-config="$work/ksc/missing-resource.yaml"
  variant missing-alias '/^  - name: nvidia.com\/gpu-a100$/,+1d'
  run_check "catalog check: alias not managed" 1 \
    "error: $work/ksc/missing-alias.yaml: extenders[0].managedResources: alias \"nvidia.com/gpu-a100\" of nvidia.com/a100 is not managed" \
    --scheduler-config="$work/ksc/missing-alias.yaml"
  variant extra-resource '$a\  - name: example.com/tpu\n    ignoredByScheduler: false'
  extra_index=$(grep -c '^  - name: ' scheduler-config/default-profile.yaml)  # appended last
  run_check "catalog check: resource the catalog does not know" 1 \
    "error: $work/ksc/extra-resource.yaml: extenders[0].managedResources[$extra_index].name: \"example.com/tpu\" is not in the built-in catalog (extra)" \
    --scheduler-config="$work/ksc/extra-resource.yaml"
  variant two-binders '$a\- urlPrefix: http://other-extender.example:8080\n  filterVerb: filter\n  bindVerb: bind\n  managedResources:\n  - name: example.com/fpga'
  run_check "catalog check: two binders" 1 \
    "error: $work/ksc/two-binders.yaml: extenders: Invalid value: \"found 2 extenders implementing bind\": only one extender can implement bind" \
    --scheduler-config="$work/ksc/two-binders.yaml"
  variant zero-weight 's/^  weight: 5$/  weight: 0/'
  run_check "catalog check: zero weight with prioritizeVerb" 1 \
    "error: $work/ksc/zero-weight.yaml: extenders[0].weight: Invalid value: 0: must have a positive weight applied to it" \
    --scheduler-config="$work/ksc/zero-weight.yaml"
  variant invalid-name 's|^  - name: nvidia.com/gpu.mps$|  - name: kubernetes.io/gpu-mps|'
  run_check "catalog check: invalid extended resource name" 1 \
    "error: $work/ksc/invalid-name.yaml: extenders[0].managedResources[2].name: Invalid value: \"kubernetes.io/gpu-mps\": is an invalid extended resource name" \
    --scheduler-config="$work/ksc/invalid-name.yaml"
  variant duplicate-name '/^  managedResources:$/a\  - name: nvidia.com/gpu\n    ignoredByScheduler: false'
  run_check "catalog check: duplicate managed resource name" 1 \
    "error: $work/ksc/duplicate-name.yaml: extenders[0].managedResources[1].name: Invalid value: \"nvidia.com/gpu\": duplicate extender managed resource name" \
    --scheduler-config="$work/ksc/duplicate-name.yaml"

  run_check "catalog check --snapshot=examples/demo-cluster.json passes" 0 "catalog check: OK, 0 error(s)," \
    --snapshot=examples/demo-cluster.json --scheduler-config=scheduler-config/default-profile.yaml
  run_check "catalog check --snapshot: offerings no demo node advertises are warnings, --strict fails on them" 1 \
    "warning: built-in catalog: offerings[2] (nvidia.com/gpu.mps): no node in examples/demo-cluster.json advertises it" \
    --strict --snapshot=examples/demo-cluster.json
  node -e '
    const fs = require("fs");
    const d = JSON.parse(fs.readFileSync("examples/demo-cluster.json", "utf8"));
    const n = d.items.find((i) => i.kind === "Node" && i.metadata.name === "a100-mig-1");
    n.status.allocatable["nvidia.com/mig-9g.99gb"] = "1";
    fs.writeFileSync(process.argv[1], JSON.stringify(d));' "$work/unknown-gpu.json"
  run_check "catalog check --snapshot: a node advertising a GPU resource the catalog does not know" 1 \
    "error: $work/unknown-gpu.json: nodes/a100-mig-1: status.allocatable[\"nvidia.com/mig-9g.99gb\"]: a GPU resource the built-in catalog does not know" \
    --snapshot="$work/unknown-gpu.json"
  run_check "catalog check: an unreadable file is a usage error (exit 2)" 2 "--scheduler-config=/nonexistent/ksc.yaml: cannot read the file" \
    --scheduler-config=/nonexistent/ksc.yaml
fi

# ---- schemas, structure, security, RBAC, scheduler configs, catalog renders (node) -------------
node tests/deploy/validate.js --repo "$REPO" --rendered "$work/rendered" "${renders_args[@]}" >"$work/validate.out" 2>"$work/validate.err"
node_rc=$?
cat "$work/validate.out"
n_pass=$(grep -c '^PASS: ' "$work/validate.out")
n_fail=$(grep -c '^FAIL: ' "$work/validate.out")
n_skip=$(grep -c '^SKIP: ' "$work/validate.out")
passed=$((passed + n_pass)); failed=$((failed + n_fail)); skipped=$((skipped + n_skip))
if ((node_rc != 0 && n_fail == 0)); then
  fail "tests/deploy/validate.js ran" "exit $node_rc: $(tail -5 "$work/validate.err")"
fi

# ---- Dockerfile ------------------------------------------------------------------------------
df=Dockerfile
# The same install and build steps as the developers' (scripts/setup.sh; the Release build of
# the one target), so the image never drifts from what the tests built.
configure='cmake -S . -B build -DCMAKE_BUILD_TYPE=Release'
build='cmake --build build -j"$(nproc)" --target gpu-slice-extender'
if [[ ! -f "$df" ]]; then
  fail "Dockerfile exists" "missing"; finish
fi
# Instructions with line continuations joined, comments dropped.
sed -e '/^[[:space:]]*#/d' "$df" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' >"$work/Dockerfile.joined"

if [[ -f scripts/setup.sh ]] && grep -Eq '^RUN +bash scripts/setup\.sh *$' "$work/Dockerfile.joined"; then
  pass "Dockerfile build stage runs bash scripts/setup.sh"
else
  fail "Dockerfile build stage runs bash scripts/setup.sh" "no 'RUN bash scripts/setup.sh' (or scripts/setup.sh is missing)"
fi
if grep -Fq "RUN ${configure} && ${build}" "$work/Dockerfile.joined"; then
  pass "Dockerfile builds with the project's cmake commands"
else
  fail "Dockerfile builds with the project's cmake commands" "expected: RUN ${configure} && ${build}"
fi

stages=$(grep -E '^FROM ' "$work/Dockerfile.joined")
if [[ "$(echo "$stages" | head -1)" =~ ^FROM\ debian:bookworm\ AS\ build$ && "$(echo "$stages" | tail -1)" == "FROM debian:bookworm-slim" && $(echo "$stages" | wc -l) -eq 2 ]]; then
  pass "Dockerfile stages: debian:bookworm build, debian:bookworm-slim runtime"
else
  fail "Dockerfile stages: debian:bookworm build, debian:bookworm-slim runtime" "$(echo "$stages" | tr '\n' ';')"
fi

# The binary is copied from where CMake puts it and run from where it is copied to.
workdir=$(grep -E '^WORKDIR ' "$work/Dockerfile.joined" | head -1 | awk '{print $2}')
copy_bin=$(grep -E '^COPY --from=build ' "$work/Dockerfile.joined")
entry=$(grep -E '^ENTRYPOINT ' "$work/Dockerfile.joined" | tail -1)
src_bin=$(echo "$copy_bin" | awk '{print $3}'); dst_bin=$(echo "$copy_bin" | awk '{print $4}')
if grep -Fq 'set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)' CMakeLists.txt &&
   [[ "$src_bin" == "$workdir/build/bin/gpu-slice-extender" && "$entry" == "ENTRYPOINT [\"$dst_bin\"]" ]]; then
  pass "Dockerfile copies build/bin/gpu-slice-extender and runs it as ENTRYPOINT"
else
  fail "Dockerfile copies build/bin/gpu-slice-extender and runs it as ENTRYPOINT" "WORKDIR '$workdir', '$copy_bin', '$entry'"
fi
if [[ "$(grep -E '^USER ' "$work/Dockerfile.joined" | tail -1)" =~ ^USER\ 65532(:65532)?$ ]]; then
  pass "Dockerfile runs as USER 65532 (the Deployment's runAsUser)"
else
  fail "Dockerfile runs as USER 65532 (the Deployment's runAsUser)" "$(grep -E '^USER ' "$work/Dockerfile.joined" || echo 'no USER')"
fi

# Build context: every COPY source exists, and everything the top-level CMakeLists.txt reads is copied.
copied=$(grep -E '^COPY ' "$work/Dockerfile.joined" | grep -v -- '--from=' | awk '{for (i = 2; i < NF; i++) print $i}' | sed 's:/$::')
missing_src=() missing_copy=()
for s in $copied; do [[ -e "$s" ]] || missing_src+=("$s"); done
# add_subdirectory()/include(cmake/...) of the top level, and every ${CMAKE_SOURCE_DIR}/<dir>
# any CMake file reads (extender/ embeds examples/demo-cluster.json); ../shared is test data.
needed=$( (sed -nE 's/^[[:space:]]*add_subdirectory\(([^ )]+).*/\1/p; s/^[[:space:]]*include\((cmake)\/.*/\1/p' CMakeLists.txt
  cat CMakeLists.txt ./*/CMakeLists.txt cmake/*.cmake 2>/dev/null | grep -oE '\$\{CMAKE_SOURCE_DIR\}/[A-Za-z0-9_.-]+' |
    sed 's:.*/::' | grep -vx '\.\.') | sort -u)
for n in $needed scripts CMakeLists.txt; do grep -qx "$n" <<<"$copied" || missing_copy+=("$n"); done
if ((${#missing_src[@]} == 0 && ${#missing_copy[@]} == 0)); then
  pass "Dockerfile COPYs exist and cover what CMakeLists.txt reads ($(echo $needed))"
else
  fail "Dockerfile COPYs exist and cover what CMakeLists.txt reads" "missing in the tree: ${missing_src[*]:-none}; not copied: ${missing_copy[*]:-none}"
fi

# Runtime packages: exactly the bookworm runtime packages of the -dev packages the build links
# (the -dev package Depends on its runtime library package, so a wrong soname fails here).
runtime_pkgs=$(awk '/^FROM debian:bookworm-slim/{rt=1} rt && /^RUN /' "$work/Dockerfile.joined" |
  grep -oE 'apt-get install [^&]*' | tr ' ' '\n' | grep -vE '^(apt-get|install|-.*|)$' | sort -u)
declare -A dev_of=([libabsl20220623]=libabsl-dev [libcpp-httplib0.11]=libcpp-httplib-dev
  [libprometheus-cpp-core1.0]=prometheus-cpp-dev [libyaml-cpp0.7]=libyaml-cpp-dev [libssl3]=libssl-dev)
problems=()
for rt in "${!dev_of[@]}"; do grep -qx "$rt" <<<"$runtime_pkgs" || problems+=("$rt not installed in the runtime stage"); done
for rt in $runtime_pkgs; do
  dev="${dev_of[$rt]:-}"
  if [[ -z "$dev" ]]; then problems+=("$rt: not a runtime library of the build"); continue; fi
  grep -Eq "(^|[ (])$dev([ )]|$)" scripts/setup.sh || problems+=("$dev (for $rt) is not installed by scripts/setup.sh")
  # Captured first: with pipefail, grep -q closing the pipe early could fail apt-cache (SIGPIPE).
  deps=$(apt-cache depends "$dev" 2>/dev/null)
  if ! grep -Eq "^ +Depends: $(sed 's/\./\\./g' <<<"$rt")$" <<<"$deps"; then
    problems+=("$dev does not depend on $rt in this machine's Debian metadata")
  fi
done
if ((${#problems[@]} == 0)); then
  pass "runtime stage installs the bookworm runtime packages of the linked libraries ($(echo $runtime_pkgs))"
else
  fail "runtime stage installs the bookworm runtime packages of the linked libraries" "$(IFS=';'; echo "${problems[*]}")"
fi

# The build target must exist. Issue 3 adds the executable to extender/CMakeLists.txt; while that
# file defines no executable at all this is reported as skipped, after that it must be this one.
target_re='add_executable\(gpu-slice-extender[[:space:])]'
if grep -rEq --include=CMakeLists.txt --exclude-dir='build*' --exclude-dir=node_modules "$target_re" .; then
  pass "CMake defines the target gpu-slice-extender that the Dockerfile builds"
elif ! grep -q 'add_executable' extender/CMakeLists.txt 2>/dev/null; then
  skip "CMake defines the target gpu-slice-extender that the Dockerfile builds" "extender/CMakeLists.txt defines no executable yet"
else
  fail "CMake defines the target gpu-slice-extender that the Dockerfile builds" "no add_executable(gpu-slice-extender ...) in any CMakeLists.txt"
fi

# With a built binary at hand: every shared library it loads comes from a package of the
# runtime stage (or of the slim base, whose apt needs libc6, libstdc++6 and libgcc-s1).
bin="${GSE_BINARY:-build/bin/gpu-slice-extender}"
if [[ -x "$bin" ]]; then
  closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances --no-pre-depends apt $runtime_pkgs 2>/dev/null |
    grep -vE '^ ' | sed 's/:.*//' | sort -u)
  closure+=$'\n'"$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances apt $runtime_pkgs 2>/dev/null | sed -nE 's/^ +PreDepends: <?([^>]+)>?$/\1/p' | sort -u)"
  unprovided=()
  while read -r lib; do
    [[ -z "$lib" ]] && continue
    real=$(readlink -f "$lib")
    pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null)
    pkg=${pkg%%:*}
    if [[ -z "$pkg" ]] || ! grep -qx "$pkg" <<<"$closure"; then unprovided+=("$(basename "$lib")(${pkg:-no package})"); fi
  done < <(ldd "$bin" | awk '/=> \//{print $3}')
  if ((${#unprovided[@]} == 0)); then
    pass "every shared library of $bin comes from the runtime stage's packages"
  else
    fail "every shared library of $bin comes from the runtime stage's packages" "${unprovided[*]}"
  fi
else
  skip "shared libraries of the built binary come from the runtime stage's packages" "no built binary at $bin (set GSE_BINARY)"
fi

finish
