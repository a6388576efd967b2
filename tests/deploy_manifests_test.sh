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
# Exit status is non-zero when any check failed or was skipped (a check that could not run
# for want of a prerequisite is not a pass).
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
  ((failed == 0 && skipped == 0))
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
    # all-pods.yaml sends every pod to an extender run with --score-all-pods: no managedResources.
    all=(); [[ $f == */all-pods.yaml ]] && all=(--score-all-pods)
    run_check "$f passes catalog check --strict ${all[*]} (built-in catalog)" 0 "catalog check: OK, 0 error(s), 0 warning(s)" \
      --strict "${all[@]}" --scheduler-config="$f"
    run_check "$f passes catalog check --strict ${all[*]} (deploy/base/catalog.yaml)" 0 "catalog check: OK, 0 error(s), 0 warning(s)" \
      --strict "${all[@]}" --catalog=deploy/base/catalog.yaml --scheduler-config="$f"
  done
  run_check "catalog check: all-pods.yaml without --score-all-pods (no managedResources)" 1 \
    "error: scheduler-config/all-pods.yaml: extenders[0].managedResources: empty: kube-scheduler sends every pod" \
    --scheduler-config=scheduler-config/all-pods.yaml
  run_check "catalog check --score-all-pods: a config that lists managedResources" 1 \
    "error: scheduler-config/default-profile.yaml: extenders[0].managedResources: " \
    --score-all-pods --scheduler-config=scheduler-config/default-profile.yaml

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

# ---- the node agent's DaemonSet arguments, with the real binary --------------------------------
# validate.js checks the flag names; here the agent itself checks the values. With the
# DaemonSet's arguments (and NODE_NAME as the DaemonSet sets it) it must pass every flag check
# and stop only at the first thing this machine lacks: NVML (given a path that surely is absent).
agent_bin="${GSE_BIN_DIR:-build/bin}/gpu-slice-agent"
check_name="gpu-slice-agent accepts the arguments of the rendered DaemonSet (deploy/overlays/agent)"
if [[ ! -x "$agent_bin" ]]; then
  fail "$check_name" "no binary at $agent_bin: build the gpu-slice-agent target (or set GSE_BIN_DIR)"
elif [[ ! -f "$work/rendered/agent.yaml" ]]; then
  fail "$check_name" "deploy/overlays/agent did not render"
else
  mapfile -t ds_args < <(NODE_PATH=tests/deploy/node_modules node -e '
    const YAML = require("yaml");
    const docs = YAML.parseAllDocuments(require("fs").readFileSync(process.argv[1], "utf8")).map((d) => d.toJS());
    const ds = docs.find((o) => o && o.kind === "DaemonSet" && o.metadata.name === "gpu-slice-agent");
    for (const a of ds.spec.template.spec.containers[0].args) console.log(a);' "$work/rendered/agent.yaml")
  out=$(NODE_NAME=gpu-node-1 "$agent_bin" "${ds_args[@]}" --nvml-library=/nonexistent/libnvidia-ml.so.1 2>&1); rc=$?
  if ((rc == 2 && ${#ds_args[@]} > 0)) && grep -Fq -- "--nvml-library: NVML library /nonexistent/libnvidia-ml.so.1 cannot be loaded" <<<"$out"; then
    pass "$check_name"
  else
    fail "$check_name" "exit $rc with ${#ds_args[@]} argument(s): $(head -3 <<<"$out" | tr '\n' '|')"
  fi
fi

# ---- Dockerfile ------------------------------------------------------------------------------
# Static checks here; tests/image_check.sh (GSE_TEST_VARIANTS=image) builds and runs the images.
df=Dockerfile
# The same install and build steps as the developers' (scripts/setup.sh; the Release build of
# the binaries), so the image never drifts from what the tests built.
configure='cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGSE_BUILD_TESTS=OFF'
build='cmake --build build -j"$(nproc)" --target gpu-slice-extender'
if [[ ! -f "$df" ]]; then
  fail "Dockerfile exists" "missing"; finish
fi
# Instructions with line continuations joined, comments dropped.
sed -e '/^[[:space:]]*#/d' "$df" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' >"$work/Dockerfile.joined"

if [[ -f scripts/setup.sh ]] && grep -Eq '^RUN +bash scripts/setup\.sh --build-only *$' "$work/Dockerfile.joined"; then
  pass "Dockerfile build stage runs bash scripts/setup.sh --build-only"
else
  fail "Dockerfile build stage runs bash scripts/setup.sh --build-only" "no such RUN (or scripts/setup.sh is missing)"
fi
if grep -Fq "RUN ${configure} && ${build}" "$work/Dockerfile.joined"; then
  pass "Dockerfile builds with the project's cmake commands"
else
  fail "Dockerfile builds with the project's cmake commands" "expected: RUN ${configure} && ${build}"
fi

# A debian:bookworm build stage, then runtime stages from scratch: the runtime root holds what
# scripts/collect-runtime.sh gathers (the binary and what ldd resolves for it), nothing else.
stages=$(grep -E '^FROM ' "$work/Dockerfile.joined")
if [[ "$(echo "$stages" | head -1)" =~ ^FROM\ debian:bookworm\ AS\ build$ ]] &&
   ! echo "$stages" | tail -n +2 | grep -qvE '^FROM scratch AS [a-z]+$'; then
  pass "Dockerfile stages: debian:bookworm build, runtime stages from scratch"
else
  fail "Dockerfile stages: debian:bookworm build, runtime stages from scratch" "$(echo "$stages" | tr '\n' ';')"
fi
# check_stage STAGE BINARY: the build stage builds and collects build/bin/BINARY into
# /runtime/STAGE, and the runtime stage STAGE holds that root and runs /usr/local/bin/BINARY
# (scripts/image.sh builds an image for each of these stages).
check_stage() {
  local stage="$1" binary="$2"
  local name="Dockerfile's $stage stage holds the collected runtime root and runs /usr/local/bin/$binary"
  if grep -Eq "^RUN cmake .* --target ([a-z-]+ )*$binary( |\$)" "$work/Dockerfile.joined" &&
     grep -Eq "^RUN bash scripts/collect-runtime\.sh /runtime/$stage build/bin/$binary( |\$)" "$work/Dockerfile.joined" &&
     grep -Eq "^COPY --from=build /runtime/$stage/ /\$" "$work/Dockerfile.joined" &&
     [[ "$(awk -v s="FROM scratch AS $stage" '$0 == s {f=1; next} /^FROM /{f=0} f && /^ENTRYPOINT /{print; exit}' "$work/Dockerfile.joined")" == "ENTRYPOINT [\"/usr/local/bin/$binary\"]" ]]; then
    pass "$name"
  else
    fail "$name" "$(grep -E '^(RUN cmake|RUN bash scripts/collect|FROM|COPY --from|ENTRYPOINT)' "$work/Dockerfile.joined" | tr '\n' ';')"
  fi
}
check_stage extender gpu-slice-extender
check_stage agent gpu-slice-agent
users=$(awk '/^FROM scratch AS /{s=$4} /^USER /{print s, $2}' "$work/Dockerfile.joined")
if [[ -n "$users" ]] && ! grep -qvE ' 65532:65532$' <<<"$users"; then
  pass "every runtime stage runs as USER 65532:65532 (the manifests' runAsUser/runAsGroup)"
else
  fail "every runtime stage runs as USER 65532:65532" "${users:-no USER}"
fi

# Build context: every COPY source exists, and everything the top-level CMakeLists.txt reads is copied.
copied=$(grep -E '^COPY ' "$work/Dockerfile.joined" | grep -v -- '--from=' | awk '{for (i = 2; i < NF; i++) print $i}' | sed 's:/$::')
missing_src=() missing_copy=()
for s in $copied; do [[ -e "$s" ]] || missing_src+=("$s"); done
# The top level's unconditional add_subdirectory()/include(cmake/...) (the indented ones sit in
# if(GSE_BUILD_TESTS), which the image turns off), and every ${CMAKE_SOURCE_DIR}/<dir> the CMake
# files of those directories read (extender/ embeds examples/demo-cluster.json).
subdirs=$(sed -nE 's/^add_subdirectory\(([^ )]+).*/\1/p' CMakeLists.txt)
needed=$( (echo "$subdirs"; sed -nE 's/^[[:space:]]*include\((cmake)\/.*/\1/p' CMakeLists.txt
  for d in $subdirs; do cat "$d/CMakeLists.txt"; done | cat - CMakeLists.txt cmake/*.cmake 2>/dev/null |
    grep -oE '\$\{CMAKE_SOURCE_DIR\}/[A-Za-z0-9_.-]+' | sed 's:.*/::' | grep -vx '\.\.') | sort -u)
for n in $needed scripts CMakeLists.txt; do grep -qx "$n" <<<"$copied" || missing_copy+=("$n"); done
if ((${#missing_src[@]} == 0 && ${#missing_copy[@]} == 0)); then
  pass "Dockerfile COPYs exist and cover what CMakeLists.txt reads ($(echo $needed))"
else
  fail "Dockerfile COPYs exist and cover what CMakeLists.txt reads" "missing in the tree: ${missing_src[*]:-none}; not copied: ${missing_copy[*]:-none}"
fi

# The runtime roots that the images' last stages copy are enough to run the binaries: collect
# each from this build with the image's own script and run the binary inside it (chroot, as
# root; an unprivileged user namespace otherwise). ctest sets GSE_BIN_DIR.
# check_runtime_root BINARY [--extra PATH...]
check_runtime_root() {
  local binary="$1"; shift
  local bin="${GSE_BIN_DIR:?set GSE_BIN_DIR to the bin directory of a build tree}/$binary"
  local root="$work/runtime-root-$binary" name="the $binary image's runtime root runs the binary"
  local -a chroot_cmd
  if [[ ! -x "$bin" ]]; then
    fail "$name" "no built binary at $bin"; return
  elif ! bash scripts/collect-runtime.sh "$root" "$bin" "$@" 2>"$work/collect.err"; then
    fail "$name" "collect-runtime.sh: $(cat "$work/collect.err")"; return
  fi
  if [[ $(id -u) -eq 0 ]]; then chroot_cmd=(chroot "$root"); else chroot_cmd=(unshare --user --map-root-user chroot "$root"); fi
  local out
  if out=$("${chroot_cmd[@]}" "/usr/local/bin/$binary" --version 2>&1) && [[ ! -e "$root/bin/sh" ]] &&
     { [[ "$*" != *"/bin/sleep"* ]] || "${chroot_cmd[@]}" /bin/sleep 0 2>/dev/null; }; then
    pass "$name (collect-runtime.sh, $(find "$root" -type f | wc -l) files): $out"
  else
    fail "$name" "${out:-/bin/sleep or shell check failed}"
  fi
}
check_runtime_root gpu-slice-extender --extra /bin/sleep
check_runtime_root gpu-slice-agent

finish
