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
# The node agent's image runs as the DaemonSet runs it, in a pod network namespace of its own
# (podman pod), with its peers around it (build/bin/gse-node-peers, testsupport/
# node_peers_main.cc): the local API server inside that pod's network namespace, reached
# in-cluster (KUBERNETES_SERVICE_HOST/PORT and the service account files where kubelet mounts
# them), and the test kubelet whose sockets live in the host directories that the DaemonSet's
# hostPath volumes name. A test inventory (--inventory) replaces NVML: no GPU here. Checked:
# the plugins register with kubelet through the mounted directory and list the inventory's
# devices, a pod annotated with a GPU is admitted to that GPU (Allocate, PreStartContainer
# through the read-only pod-resources mount), the Node gets the inventory annotation,
# /healthz answers "ok" from outside (published port), from the host to the pod IP as
# kubelet's probe, and from inside the pod's network namespace, and SIGTERM removes the
# plugin sockets (exit 0).
# Run by `GSE_TEST_VARIANTS=image bash scripts/test.sh` (not part of the default test run: the
# image build compiles the project once more inside the build stage; see README "Container
# images"). Prints "N passed, M failed"; exits non-zero on failure.
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/gse-image-check.XXXXXX)
containers=() pods=() peers_pid=""
cleanup() {
  for c in "${containers[@]+"${containers[@]}"}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  for p in "${pods[@]+"${pods[@]}"}"; do podman pod rm -f -t 0 "$p" >/dev/null 2>&1; done
  if [[ -n "$peers_pid" ]]; then kill "$peers_pid" 2>/dev/null; wait "$peers_pid" 2>/dev/null; fi
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
# make_spec NAME KIND CONTAINER RENDERED-FILE: $work/NAME.spec.json, how the manifest runs it.
make_spec() {
  local name="$1" kind="$2" container="$3" rendered="$4"
  node tests/deploy/container-run-spec.js --rendered "$rendered" --kind "$kind" \
      --container "$container" --hostpath-root "$work/host" --configmap-root "$work/configmaps" \
      >"$work/$name.spec.json" 2>"$work/$name.spec.err" && return 0
  fail "$name: the manifest says how to run it" "$(cat "$work/$name.spec.err")"; return 1
}
# field SPEC a.b: one value of a spec (objects as JSON); list SPEC key: an array, one a line.
field() { node -e 'const s=JSON.parse(require("fs").readFileSync(process.argv[1]));const v=process.argv[2].split(".").reduce((o,k)=>o==null?o:o[k],s);console.log(v==null?"":(typeof v==="object"?JSON.stringify(v):v))' "$@"; }
list() { node -e 'const s=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const a of s[process.argv[2]]||[])console.log(typeof a==="object"?JSON.stringify(a):a)' "$@"; }

# What the cluster would add around the manifest's container, set by the caller of
# check_image: run_pod (a podman pod whose network namespace stands for the Kubernetes pod's;
# its infra container publishes the port), run_extra (podman run options: downward-API env,
# the service account mount), args_extra (arguments after the manifest's).
run_pod="" run_extra=() args_extra=()

# check_image NAME: runs the image as $work/NAME.spec.json says (make_spec first).
check_image() {
  local name="$1"
  local spec="$work/$name.spec.json"

  # The manifest's image is the one built here: same name, tag = the project version, which
  # scripts/image.sh gives the build of this commit too.
  local image; image=$(field "$spec" image)
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
  mapfile -t run_args < <(list "$spec" podmanArgs)
  mapfile -t args < <(list "$spec" args)
  if [[ -n "$run_pod" ]]; then
    run_args+=("--pod=$run_pod")
  elif [[ -n "$port" ]]; then
    run_args+=("--publish=127.0.0.1::$port")
  fi
  run_args+=("${run_extra[@]+"${run_extra[@]}"}")
  args+=("${args_extra[@]+"${args_extra[@]}"}")
  if ! podman run -d --name "$cname" "${run_args[@]}" "localhost/$name:$version" "${args[@]}" \
      >"$work/$name.run" 2>&1; then
    fail "$name: starts as the manifest runs it" "podman run ${run_args[*]} ... ${args[*]}: $(cat "$work/$name.run")"; return
  fi
  containers+=("$cname")
  pass "$name: starts with: ${run_args[*]} ${args[*]}"

  local base=""
  if [[ -n "$port" && -n "$run_pod" ]]; then
    base="http://$(podman port "$(podman pod inspect --format '{{.InfraContainerID}}' "$run_pod")" "$port" | head -1)"
  elif [[ -n "$port" ]]; then
    base="http://$(podman port "$cname" "$port" | head -1)"
  fi
  local healthz; healthz=$(field "$spec" probes.liveness.path)
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
  local u g; u=$(field "$spec" runAsUser); g=$(field "$spec" runAsGroup)
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

  local prestop; prestop=$(list "$spec" preStop | tr '\n' ' ')
  if [[ -n "$prestop" ]]; then
    local -a pre; mapfile -t pre < <(list "$spec" preStop)
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
make_spec gpu-slice-extender Deployment extender "$work/base.yaml" && check_image gpu-slice-extender
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

# ---- node agent ----------------------------------------------------------------------------------
# check_agent: the DaemonSet's container in a pod of its own, among its peers (see the top).
check_agent() {
  local name=gpu-slice-agent spec="$work/gpu-slice-agent.spec.json" node=image-check-gpu-0
  kubectl kustomize deploy/overlays/agent >"$work/agent.yaml" 2>"$work/kustomize.err" ||
    { fail "kubectl kustomize deploy/overlays/agent" "$(cat "$work/kustomize.err")"; return; }
  make_spec "$name" DaemonSet agent "$work/agent.yaml" || return
  if ! GSE_BUILD_TYPE=Release GSE_BUILD_TARGET=gse-node-peers bash scripts/build.sh build -DGSE_WERROR=ON \
      >"$work/peers-build.log" 2>&1; then
    fail "agent: build/bin/gse-node-peers builds" "$(tail -5 "$work/peers-build.log")"; return
  fi

  # What the test ran must be what the DaemonSet says about kubelet's directories: the plugin
  # directory mounted read-write where --device-plugin-dir points, the pod-resources socket's
  # directory mounted read-only, both host paths; its own network namespace; a token mounted.
  local mounts
  if mounts=$(node -e '
      const s = JSON.parse(require("fs").readFileSync(process.argv[1]));
      const flag = (n) => { const a = s.args.find((x) => x.startsWith(`--${n}=`)); return a ? a.slice(n.length + 3) : null; };
      const at = (dir) => s.hostPaths.find((h) => h.mountPath === dir);
      const dp = flag("device-plugin-dir"), pr = flag("pod-resources-socket");
      const d = at(dp), p = pr && at(pr.replace(/\/[^/]*$/, ""));
      const bad = [];
      if (!d || d.readOnly || d.hostPath !== dp) bad.push(`--device-plugin-dir=${dp}: no read-write hostPath mount of ${dp} there`);
      if (!p || !p.readOnly || p.hostPath !== p.mountPath) bad.push(`--pod-resources-socket=${pr}: no read-only hostPath mount of its directory`);
      if (s.hostNetwork) bad.push("hostNetwork: the test runs the pod in a network namespace of its own");
      if (!s.serviceAccountToken) bad.push("automountServiceAccountToken: false, but the agent reads the API server in-cluster");
      if (s.fieldEnv.NODE_NAME !== "spec.nodeName" && !flag("node-name")) bad.push("neither NODE_NAME from spec.nodeName nor --node-name");
      if (bad.length) { console.error(bad.join("; ")); process.exit(1); }
      console.log(s.hostPaths.map((h) => `${h.hostPath}->${h.mountPath}${h.readOnly ? ":ro" : ""}`).join(" "));' \
      "$spec" 2>"$work/mounts.err"); then
    pass "agent: the DaemonSet mounts kubelet's directories where its flags point ($mounts)"
  else
    fail "agent: the DaemonSet mounts kubelet's directories where its flags point" "$(cat "$work/mounts.err")"; return
  fi

  # The test inventory: one A100 in MIG mode with seven 1g.5gb slices and one whole A100.
  mkdir -p "$work/agent" "$work/agent/serviceaccount"
  local gpu_uuid=GPU-image-check-whole-1
  cat >"$work/agent/inventory.json" <<JSON
{"gpus": [
  {"index": 0, "uuid": "GPU-image-check-mig-0", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960,
   "migEnabled": true, "migDevices": [
     {"uuid": "MIG-image-check-0-0", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 0, "gpuInstanceId": 9},
     {"uuid": "MIG-image-check-0-1", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 1, "gpuInstanceId": 10},
     {"uuid": "MIG-image-check-0-2", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 2, "gpuInstanceId": 11},
     {"uuid": "MIG-image-check-0-3", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 3, "gpuInstanceId": 12},
     {"uuid": "MIG-image-check-0-4", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 4, "gpuInstanceId": 13},
     {"uuid": "MIG-image-check-0-5", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 5, "gpuInstanceId": 14},
     {"uuid": "MIG-image-check-0-6", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 6, "gpuInstanceId": 7}]},
  {"index": 1, "uuid": "$gpu_uuid", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960, "migEnabled": false}]}
JSON
  # Devices kubelet must be offered for each resource the DaemonSet serves, from that inventory.
  local resources; resources=$(list "$spec" args | sed -n 's/^--resources=//p')
  local -A want=()
  local r
  for r in ${resources//,/ }; do
    case "$r" in
      nvidia.com/gpu) want[nvidia.com/gpu]=1 ;;
      nvidia.com/mig-1g.5gb.shared=*) want[nvidia.com/mig-1g.5gb.shared]=$((7 * ${r#*=})) ;;
      nvidia.com/mig-1g.5gb.shared) want[nvidia.com/mig-1g.5gb.shared]=28 ;;
      *) fail "agent: the test inventory covers the DaemonSet's --resources" "no devices for $r: extend the inventory in tests/image_check.sh"; return ;;
    esac
  done

  # The pod: its network namespace is the pod's; the peers live in it, as the API server's
  # service address is reachable from a pod; the port is published as a Service would not,
  # to look from outside.
  local port; port=$(node -e 'const s=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(Object.values(s.ports)[0]||"")' "$spec")
  run_pod="gse-image-check-agent-$$"
  if ! podman pod create --name "$run_pod" --publish "127.0.0.1::$port" >"$work/pod.out" 2>&1 ||
     ! podman pod start "$run_pod" >>"$work/pod.out" 2>&1; then
    fail "agent: a pod for it" "$(cat "$work/pod.out")"; run_pod=""; return
  fi
  pods+=("$run_pod")
  local infra; infra=$(podman pod inspect --format '{{.InfraContainerID}}' "$run_pod")
  local infra_pid; infra_pid=$(podman inspect --format '{{.State.Pid}}' "$infra")
  nsenter --net="/proc/$infra_pid/ns/net" build/bin/gse-node-peers \
    --kubelet-root="$work/host/var/lib/kubelet" --serviceaccount="$work/agent/serviceaccount" \
    --node="$node" --resources="$resources" --admit=nvidia.com/gpu \
    >"$work/peers.out" 2>"$work/peers.err" &
  peers_pid=$!
  local api_port=""
  for _ in $(seq 1 100); do
    api_port=$(sed -n 's/^apiserver //p' "$work/peers.out")
    [[ -n "$api_port" ]] && break
    kill -0 "$peers_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$api_port" ]]; then
    fail "agent: its peers start (API server, test kubelet)" "$(cat "$work/peers.err")"; return
  fi
  pass "agent: peers serve in its pod: API server on 127.0.0.1:$api_port, kubelet sockets in $work/host/var/lib/kubelet"

  # What kubelet adds to the DaemonSet's container: the downward-API NODE_NAME, the API
  # server's service address, the service account token and CA (read-only).
  run_extra=("--env=NODE_NAME=$node" --env=KUBERNETES_SERVICE_HOST=127.0.0.1 "--env=KUBERNETES_SERVICE_PORT=$api_port"
             "--volume=$work/agent/serviceaccount:/var/run/secrets/kubernetes.io/serviceaccount:ro"
             "--volume=$work/agent/inventory.json:/etc/gse-image-check/inventory.json:ro")
  args_extra=(--inventory=/etc/gse-image-check/inventory.json)
  check_image "$name"
  local cname="gse-image-check-$name-$$" base
  base=$(cat "$work/$name.base" 2>/dev/null)
  if [[ -z "$base" ]]; then
    fail "agent: runs among its peers" "$(tail -5 "$work/peers.out" | tr '\n' ' ') $(podman logs "$cname" 2>&1 | tail -5)"; return
  fi

  # kubelet's side, as the peers saw it.
  for _ in $(seq 1 150); do
    grep -qx ready "$work/peers.out" && break
    kill -0 "$peers_pid" 2>/dev/null || break
    sleep 0.5
  done
  local line got
  for r in "${!want[@]}"; do
    line=$(grep -E "^(registered|not-registered) $r( |$)" "$work/peers.out")
    got=$(sed -nE 's/.* devices=([0-9]+) healthy=([0-9]+)$/\1 \2/p' <<<"$line")
    if [[ "$got" == "${want[$r]} ${want[$r]}" ]]; then
      pass "agent: $r registered with kubelet through the mounted device-plugins directory, ${want[$r]} healthy devices"
    else
      fail "agent: $r registered with kubelet, ${want[$r]} healthy devices" "${line:-no report}; agent: $(podman logs "$cname" 2>&1 | grep -E 'regist' | tail -3)"
    fi
  done
  line=$(grep -E '^admit ' "$work/peers.out")
  if [[ "$line" == "admit OK resource=nvidia.com/gpu ids=$gpu_uuid visible=$gpu_uuid" ]]; then
    pass "agent: a pod annotated with nvidia.com/gpu unit 0 is admitted to that GPU ($line)"
  else
    fail "agent: a pod annotated with unit 0 is admitted to that GPU" "${line:-no admission}; want ids=visible=$gpu_uuid"
  fi
  line=$(grep -E '^start ' "$work/peers.out")
  if [[ "$line" == "start OK" ]]; then
    pass "agent: PreStartContainer checks the pod through the read-only pod-resources socket"
  else
    fail "agent: PreStartContainer passes" "${line:-not tried}: $(podman logs "$cname" 2>&1 | grep -E 'prestart|pod_resources' | tail -3)"
  fi
  if grep -qx 'inventory-annotation OK' "$work/peers.out"; then
    pass "agent: publishes the node's inventory on its Node (in-cluster API access with the mounted token)"
  else
    fail "agent: publishes the node's inventory on its Node" "$(podman logs "$cname" 2>&1 | tail -3)"
  fi

  # /healthz: registered with kubelet now, so "ok"; from outside (the published port), from
  # the host to the pod's address as kubelet's httpGet probe, and from inside the pod.
  local healthz; healthz=$(field "$spec" probes.liveness.path)
  local pod_ip; pod_ip=$(podman inspect --format '{{.NetworkSettings.IPAddress}}' "$infra")
  local outside kubelet_view inside
  outside=$(curl -fsS "$base$healthz" 2>&1)
  kubelet_view=$(curl -fsS "http://$pod_ip:$port$healthz" 2>&1)
  inside=$(nsenter --net="/proc/$infra_pid/ns/net" curl -fsS "http://127.0.0.1:$port$healthz" 2>&1)
  if [[ "$outside" == ok && "$kubelet_view" == ok && "$inside" == ok ]]; then
    pass "agent: $healthz says ok from outside ($base), from the host to the pod ($pod_ip:$port) and inside the pod"
  else
    fail "agent: $healthz says ok everywhere" "outside '$outside', pod IP '$kubelet_view', inside '$inside'"
  fi
  local metrics; metrics=$(curl -fsS "$base/metrics" 2>&1)
  if grep -qE '^gse_agent_allocations_total\{.*outcome="allocated".*\} 1$' <<<"$metrics" &&
     ! grep -E '^gse_agent_api_errors_total' <<<"$metrics" | grep -qvE ' 0$'; then
    pass "agent: /metrics counts the allocation and no API error"
  else
    fail "agent: /metrics counts the allocation and no API error" "$(grep -E '^gse_agent_(allocations|api_errors)_total' <<<"$metrics" | tr '\n' ' ')"
  fi

  podman stop -t 15 "$cname" >/dev/null 2>&1
  local code; code=$(podman inspect --format '{{.State.ExitCode}}' "$cname")
  local left; left=$(find "$work/host/var/lib/kubelet/device-plugins" -name 'gse-*' 2>/dev/null | tr '\n' ' ')
  if [[ "$code" == 0 && -z "$left" ]]; then
    pass "agent: SIGTERM stops it cleanly (exit 0) and removes its plugin sockets"
  else
    fail "agent: SIGTERM stops it cleanly and removes its plugin sockets" "exit $code; left: ${left:-none}; $(podman logs "$cname" 2>&1 | tail -3)"
  fi
}
check_agent
check_contents gpu-slice-agent
finish
