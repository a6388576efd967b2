#!/usr/bin/env bash
# Builds the container images (scripts/image.sh) and runs each the way the manifests run it:
# the user and group ids, read-only root filesystem, dropped capabilities, no privilege
# escalation, the args and volumes of the rendered workload (tests/deploy/container-run-spec.js
# reads them from `kubectl kustomize`, so what runs here is what the manifests say). Then:
#   * the manifests' image reference is the image built here (name and tag);
#   * the process runs as the manifest's uid/gid;
#   * /healthz and /readyz answer, and a captured kube-scheduler 1.26 filter body is answered
#     from the embedded demo cluster, from inside the container;
#   * the preStop hook's command exists and runs as that user;
#   * the image holds no shell, package manager, package cache or compiler;
#   * SIGTERM stops it cleanly (exit 0).
# Run by `GSE_TEST_VARIANTS=image bash scripts/test.sh` (not part of the default test run: the
# image build compiles the project once more inside the build stage; see README "Container
# images"). Prints "N passed, M failed"; exits non-zero on failure.
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/gse-image-check.XXXXXX)
containers=()
cleanup() {
  for c in "${containers[@]+"${containers[@]}"}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  rm -rf "$work"
}
trap cleanup EXIT
passed=0 failed=0
pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1: $2"; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; ((failed == 0)); exit $?; }

export CONTAINERS_CONF="${GSE_IMAGE_WORK:-$PWD/build-image}/containers.conf"
if ! bash scripts/image.sh >"$work/image.out" 2>"$work/image.err"; then
  fail "scripts/image.sh builds the images" "$(tail -20 "$work/image.err")"; finish
fi
pass "scripts/image.sh builds the images: $(tr '\n' ';' <"$work/image.out")"
version=$(sed -nE 's/^project\([^)]* VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
commit_tag=$(git rev-parse --short=12 HEAD)

# ---- one image, run as its workload runs it --------------------------------------------------
# check_image NAME KIND CONTAINER RENDERED-FILE
check_image() {
  local name="$1" kind="$2" container="$3" rendered="$4"
  local spec="$work/$name.spec.json"
  if ! node tests/deploy/container-run-spec.js --rendered "$rendered" --kind "$kind" \
      --container "$container" --hostpath-root "$work/host" --configmap-root "$work/configmaps" \
      >"$spec" 2>"$work/$name.spec.err"; then
    fail "$name: the manifest says how to run it" "$(cat "$work/$name.spec.err")"; return
  fi
  field() { node -e 'const s=JSON.parse(require("fs").readFileSync(process.argv[1]));const v=process.argv[2].split(".").reduce((o,k)=>o==null?o:o[k],s);console.log(v==null?"":(typeof v==="object"?JSON.stringify(v):v))' "$spec" "$1"; }
  list() { node -e 'const s=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const a of s[process.argv[2]]||[])console.log(a)' "$spec" "$1"; }

  # The manifest's image is the one built here: same name, tag = the project version, which
  # scripts/image.sh gives the build of this commit too.
  local image; image=$(field image)
  local built; built=$(awk -v n="localhost/$name:" 'index($1, n) == 1 {print $1}' "$work/image.out")
  if [[ "$image" == "$name:$version" && "$built" == "localhost/$name:$commit_tag"* ]] &&
     [[ "$(podman image inspect --format '{{.Id}}' "localhost/$name:$version" 2>/dev/null)" == \
        "$(podman image inspect --format '{{.Id}}' "$built")" ]]; then
    pass "$name: the manifest's image $image is this commit's build"
  else
    fail "$name: the manifest's image is this commit's build" "manifest says '$image'; built ${built:-nothing} (want :$commit_tag), tagged localhost/$name:$version"
  fi

  local port; port=$(node -e 'const s=JSON.parse(require("fs").readFileSync(process.argv[1]));const p=Object.values(s.ports)[0];console.log(p||"")' "$spec")
  local cname="gse-image-check-$name-$$"
  local -a run_args args
  mapfile -t run_args < <(list podmanArgs)
  mapfile -t args < <(list args)
  [[ -n "$port" ]] && run_args+=("--publish=127.0.0.1::$port")
  if ! podman run -d --name "$cname" "${run_args[@]}" "localhost/$name:$version" "${args[@]}" \
      >"$work/$name.run" 2>&1; then
    fail "$name: starts as the manifest runs it" "podman run ${run_args[*]} ... ${args[*]}: $(cat "$work/$name.run")"; return
  fi
  containers+=("$cname")
  pass "$name: starts with: ${run_args[*]} ${args[*]}"

  local base=""
  if [[ -n "$port" ]]; then
    base="http://$(podman port "$cname" "$port" | head -1)"
  fi
  local healthz; healthz=$(field probes.liveness.path)
  local ok=0
  for _ in $(seq 1 100); do
    if [[ -n "$base" ]] && curl -fsS "$base$healthz" >/dev/null 2>&1; then ok=1; break; fi
    [[ "$(podman inspect --format '{{.State.Running}}' "$cname")" == true ]] || break
    sleep 0.2
  done
  if ((ok)); then
    pass "$name: liveness probe $healthz answers"
  else
    fail "$name: liveness probe $healthz answers" "$(podman logs "$cname" 2>&1 | tail -5)"; return
  fi

  local pid; pid=$(podman inspect --format '{{.State.Pid}}' "$cname")
  local uids gids
  uids=$(awk '/^Uid:/{print $2, $3, $4, $5}' "/proc/$pid/status")
  gids=$(awk '/^Gid:/{print $2, $3, $4, $5}' "/proc/$pid/status")
  local u g; u=$(field runAsUser); g=$(field runAsGroup)
  if [[ "$uids" == "$u $u $u $u" && "$gids" == "$g $g $g $g" ]]; then
    pass "$name: runs as uid $u gid $g (the manifest's runAsUser/runAsGroup)"
  else
    fail "$name: runs as the manifest's uid/gid" "Uid: $uids, Gid: $gids; want $u/$g"
  fi
  if grep -qE '^CapEff:[[:space:]]+0+$' "/proc/$pid/status" && grep -qE '^NoNewPrivs:[[:space:]]+1$' "/proc/$pid/status"; then
    pass "$name: no effective capabilities, no_new_privs set"
  else
    fail "$name: no capabilities, no_new_privs" "$(grep -E '^(CapEff|NoNewPrivs)' "/proc/$pid/status" | tr '\n' ' ')"
  fi
  if [[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$cname")" == true ]]; then
    pass "$name: root filesystem is read-only"
  else
    fail "$name: root filesystem is read-only" "ReadonlyRootfs false"
  fi

  local prestop; prestop=$(list preStop | tr '\n' ' ')
  if [[ -n "$prestop" ]]; then
    local -a pre; mapfile -t pre < <(list preStop)
    # The hook takes as long as it says (e.g. sleep 5); run it for 0 s to check it exists.
    [[ "${pre[0]}" == /bin/sleep ]] && pre=(/bin/sleep 0)
    if podman exec "$cname" "${pre[@]}" >/dev/null 2>&1; then
      pass "$name: preStop command ($prestop) runs in the image"
    else
      fail "$name: preStop command runs in the image" "podman exec ${pre[*]} failed"
    fi
  fi
  echo "$base" >"$work/$name.base"
}

# ---- the image's contents ----------------------------------------------------------------------
# check_contents NAME: no shell, no package manager or its caches, no compiler.
check_contents() {
  local name="$1"
  local cid; cid=$(podman create "localhost/$name:$version" 2>/dev/null)
  podman export "$cid" | tar -t >"$work/$name.files"
  podman rm "$cid" >/dev/null
  local bad
  bad=$(grep -E '^(bin|usr/bin)/(sh|bash|dash|apt|apt-get|dpkg|gcc|g\+\+|cc|c\+\+)$|^var/(cache|lib)/(apt|dpkg)/|^usr/lib/gcc/' "$work/$name.files" | head)
  if [[ -z "$bad" ]]; then
    pass "$name: no shell, package manager, package cache or compiler ($(grep -vc '/$' "$work/$name.files") files)"
  else
    fail "$name: no shell, package manager, package cache or compiler" "$(echo $bad)"
  fi
  if podman run --rm --entrypoint /bin/sh "localhost/$name:$version" -c true >/dev/null 2>&1; then
    fail "$name: has no shell" "/bin/sh ran"
  else
    pass "$name: /bin/sh does not run in it"
  fi
}

# ---- extender ------------------------------------------------------------------------------------
kubectl kustomize deploy/base >"$work/base.yaml" 2>"$work/kustomize.err" ||
  { fail "kubectl kustomize deploy/base" "$(cat "$work/kustomize.err")"; finish; }
check_image gpu-slice-extender Deployment extender "$work/base.yaml"
check_contents gpu-slice-extender
if [[ -s "$work/gpu-slice-extender.base" ]]; then
  base=$(cat "$work/gpu-slice-extender.base")
  # Outside a cluster (no service account) it serves its embedded demo cluster: ready at once.
  code=$(curl -s -o "$work/readyz" -w '%{http_code}' "$base/readyz")
  if [[ "$code" == 200 ]]; then pass "extender: /readyz 200"; else fail "extender: /readyz" "HTTP $code: $(cat "$work/readyz")"; fi
  body=../shared/protocol/captured-k8s-1.26/k8s1.26-filter-request-nodecache-false.json
  code=$(curl -s -o "$work/filter" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "@$body" "$base/filter")
  if [[ "$code" == 200 ]] && node -e '
      const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
      if (r.Error) throw new Error("Error: " + r.Error);
      const n = (r.Nodes && r.Nodes.items ? r.Nodes.items.length : 0) + Object.keys(r.FailedNodes || {}).length +
        Object.keys(r.FailedAndUnresolvableNodes || {}).length;
      if (n === 0) throw new Error("no node judged");' "$work/filter" 2>"$work/filter.err"; then
    pass "extender: answers a captured kube-scheduler 1.26 filter body ($(head -c 160 "$work/filter")...)"
  else
    fail "extender: answers a captured kube-scheduler filter body" "HTTP $code: $(head -c 300 "$work/filter") $(cat "$work/filter.err")"
  fi
  cname="gse-image-check-gpu-slice-extender-$$"
  podman stop -t 15 "$cname" >/dev/null 2>&1
  code=$(podman inspect --format '{{.State.ExitCode}}' "$cname")
  if [[ "$code" == 0 ]]; then pass "extender: SIGTERM stops it cleanly (exit 0)"; else fail "extender: SIGTERM stops it cleanly" "exit $code: $(podman logs "$cname" 2>&1 | tail -3)"; fi
fi
finish
