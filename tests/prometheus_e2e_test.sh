#!/usr/bin/env bash
# The monitoring artefacts against a real Prometheus scraping a real extender under load
# (issue 5) and a node agent (issue 15): every PromQL expression of
# deploy/grafana/gpu-slice-extender.json and of deploy/prometheus/alerts.yaml must run without
# error and return data.
#
#   bash tests/prometheus_e2e_test.sh                          (binaries from build/bin)
#   GSE_BIN_DIR=build-x/bin bash tests/prometheus_e2e_test.sh   (from another build)
#
# Steps:
#  1. perf/http_load writes a 100-node cluster with six projects and their quotas; the
#     extender (gpu-slice-extender) serves it on a free loopback port, --audit-interval=1s.
#     A node agent (gpu-slice-agent, --inventory of two GPUs, no kubelet and no reachable API
#     server: it serves its metrics from the start, all at zero) on another free port.
#  2. Prometheus (the Debian package, as scripts/setup.sh installs it) scrapes both every second
#     and evaluates alerts.yaml; the first scrape is awaited (target discovery takes ~5 s).
#  3. http_load drives ~300 pods through filter -> prioritize -> bind over HTTP for 4 s
#     (time-sliced pods of several projects with affinity placements and spills, quota
#     refusals, a bind race, preempt calls, an unknown pod, a malformed bind) and prints a
#     tally; we wait until Prometheus has scraped the final state.
#  4. The queries (Prometheus' /api/v1/query, instant, at the end of the load):
#     * dashboard panels: each target's expr with $__rate_interval -> 1m and $offering -> .*
#       (the "All" value); it must succeed, return at least one series, and no NaN (a panel of
#       NaN is as empty as no data). The offering variable's own query (label_values) is run
#       as the series selector it reads.
#     * alert rules: the expression exactly as written must succeed. Alerts are comparisons
#       that are empty while all is well (oversubscription > 0, error ratio > 5%, ...): an empty
#       result would prove nothing about the query. So when the full expression is empty and
#       it ends in a comparison with a number ("EXPR > 0.05"), EXPR alone (the left-hand side,
#       what the threshold is applied to; comparisons bind more loosely than arithmetic, so it
#       is exactly the compared value) must return data, and none of its values may pass the
#       threshold (otherwise the full expression would not have been empty). An alert whose
#       full expression is empty and has no trailing numeric comparison fails: the load is
#       designed so that GpuSliceExtenderProjectAtQuota (an `and` of two selectors) is
#       non-empty as written, since projects do reach their quota. `for:` does not enter an
#       instant query.
#     * Prometheus' own rule evaluation (/api/v1/rules): every rule healthy (no eval errors).
#     * The numbers are the load's: bind outcomes, filter calls, preemptions, affinity
#       placements and spills in Prometheus equal (or, where the driver cannot see the label,
#       bound) what http_load counted itself.
#  5. `promtool check metrics` on a real /metrics scrape; its series count is printed.
#  6. The extender's decision log has one parseable JSON line per bind.
# Prometheus and the extender are stopped by PID (trap on EXIT). Runs in ~12-15 s.
# Needs: prometheus, promtool, node (+ tests/deploy's npm packages for the YAML parser), curl.
# The last line is "N passed, M failed"; the exit status is non-zero when any check failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO="$(pwd)"
BIN="${GSE_BIN_DIR:-$REPO/build/bin}"
started_at=$(date +%s%N)

passed=0 failed=0
pass() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1${2:+: $2}"; failed=$((failed + 1)); }
finish() {
  echo "runtime $(( ($(date +%s%N) - started_at) / 1000000 )) ms"
  echo "$passed passed, $failed failed"
  ((failed == 0))
  exit $?
}

work="$(mktemp -d "${TMPDIR:-/tmp}/gse-prom-e2e.XXXXXX")"
extender_pid="" prometheus_pid="" agent_pid=""
cleanup() {
  # Only the processes this script started, by PID.
  [[ -n "$prometheus_pid" ]] && kill "$prometheus_pid" 2>/dev/null && wait "$prometheus_pid" 2>/dev/null
  [[ -n "$extender_pid" ]] && kill "$extender_pid" 2>/dev/null && wait "$extender_pid" 2>/dev/null
  [[ -n "$agent_pid" ]] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# ---- tools and binaries ------------------------------------------------------------------------
for tool in prometheus promtool node curl; do
  command -v "$tool" >/dev/null || { fail "tool $tool on PATH" "missing (scripts/setup.sh installs it)"; finish; }
done
for b in gpu-slice-extender gpu-slice-agent http_load; do
  [[ -x "$BIN/$b" ]] || { fail "binary $BIN/$b" "missing: build the targets gpu-slice-extender, gpu-slice-agent and http_load (or set GSE_BIN_DIR)"; finish; }
done
if [[ ! -d tests/deploy/node_modules/yaml ]]; then
  (cd tests/deploy && npm ci --silent --no-audit --no-fund >"$work/npm.log" 2>&1) ||
    { fail "npm ci in tests/deploy (the YAML parser)" "$(tail -3 "$work/npm.log")"; finish; }
fi

# ---- 1. the extender -------------------------------------------------------------------------
"$BIN/http_load" --write_snapshot="$work/cluster.json" >/dev/null 2>"$work/load.err" ||
  { fail "http_load writes the cluster" "$(cat "$work/load.err")"; finish; }
"$BIN/gpu-slice-extender" --snapshot="$work/cluster.json" --listen=127.0.0.1:0 \
  --audit-interval=1s --decision-log=all 2>"$work/extender.err" &
extender_pid=$!
ext_port=""
for _ in $(seq 1 100); do
  ext_port=$(grep -oP 'serving on http://127\.0\.0\.1:\K[0-9]+' "$work/extender.err" 2>/dev/null | head -1)
  [[ -n "$ext_port" ]] && break
  kill -0 "$extender_pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$ext_port" ]] || { fail "extender starts" "$(tail -5 "$work/extender.err")"; finish; }
pass "extender serves on 127.0.0.1:$ext_port (pid $extender_pid)"

# ---- 1b. a node agent ------------------------------------------------------------------------
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
mkdir -p "$work/device-plugins"
cat >"$work/inventory.json" <<'JSON'
{"gpus": [{"index": 0, "uuid": "GPU-prom-0", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960,
           "migEnabled": true, "migDevices": [
             {"uuid": "MIG-prom-0", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 0},
             {"uuid": "MIG-prom-1", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 1}]},
          {"index": 1, "uuid": "GPU-prom-1", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960}]}
JSON
# An API server that is not there (port 9, discard): the agent retries its list in the background.
cat >"$work/agent-kubeconfig" <<'YAML'
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
YAML
agent_port=""
for _ in 1 2 3 4 5; do
  p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
  port_free "$p" && { agent_port=$p; break; }
done
"$BIN/gpu-slice-agent" --node-name=prom-e2e --resources=nvidia.com/mig-1g.5gb.shared,nvidia.com/gpu \
  --inventory="$work/inventory.json" --kubeconfig="$work/agent-kubeconfig" \
  --device-plugin-dir="$work/device-plugins" --pod-resources-socket="$work/no-kubelet.sock" \
  --listen="127.0.0.1:$agent_port" 2>"$work/agent.err" &
agent_pid=$!
agent_up=""
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$agent_port/metrics" >/dev/null 2>&1 && { agent_up=1; break; }
  kill -0 "$agent_pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n "$agent_up" ]] || { fail "agent starts" "$(tail -5 "$work/agent.err")"; finish; }
pass "agent serves /metrics on 127.0.0.1:$agent_port (pid $agent_pid)"

# ---- 2. Prometheus ---------------------------------------------------------------------------
prom_port=""
for _ in 1 2 3 4 5; do
  p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
  port_free "$p" || continue
  cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
- $REPO/deploy/prometheus/alerts.yaml
scrape_configs:
- job_name: gpu-slice-extender
  static_configs:
  - targets: ['127.0.0.1:$ext_port']
- job_name: gpu-slice-agent
  static_configs:
  - targets: ['127.0.0.1:$agent_port']
EOF
  prometheus --config.file="$work/prometheus.yml" --web.listen-address="127.0.0.1:$p" \
    --storage.tsdb.path="$work/tsdb" --log.level=warn 2>"$work/prometheus.err" &
  prometheus_pid=$!
  for _ in $(seq 1 50); do
    curl -sf "http://127.0.0.1:$p/-/ready" >/dev/null 2>&1 && { prom_port=$p; break; }
    kill -0 "$prometheus_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$prom_port" ]] && break
  kill "$prometheus_pid" 2>/dev/null; wait "$prometheus_pid" 2>/dev/null; prometheus_pid=""
done
[[ -n "$prom_port" ]] || { fail "Prometheus starts" "$(tail -5 "$work/prometheus.err" 2>/dev/null)"; finish; }
PROM="http://127.0.0.1:$prom_port"
pass "Prometheus ready on 127.0.0.1:$prom_port (pid $prometheus_pid)"

# Instant query; prints the number of series (or -1 on error) and the first value.
prom_scalar() {  # expr -> value of the first series, or "" when empty
  curl -s --get "$PROM/api/v1/query" --data-urlencode "query=$1" |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{try{const r=JSON.parse(s);
      const v=r.data&&r.data.result&&r.data.result[0];process.stdout.write(v?String(v.value[1]):"")}catch(e){}})'
}
scraped=""
for _ in $(seq 1 40); do  # ~20 s: discovery runs every 5 s, then the first 1 s scrape
  [[ "$(prom_scalar 'max(gse_build_info)')" == "1" ]] && { scraped=1; break; }
  sleep 0.5
done
[[ -n "$scraped" ]] || { fail "first scrape of the extender" "no gse_build_info after 20 s"; finish; }
pass "Prometheus scrapes the extender"
scraped=""
for _ in $(seq 1 40); do
  [[ "$(prom_scalar 'sum(gse_agent_units)')" == "3" ]] && { scraped=1; break; }
  sleep 0.5
done
[[ -n "$scraped" ]] && pass "Prometheus scrapes the agent (3 units advertised)" ||
  fail "first scrape of the agent" "sum(gse_agent_units) = $(prom_scalar 'sum(gse_agent_units)'), want 3"

# ---- 3. the load -----------------------------------------------------------------------------
if "$BIN/http_load" --extender="http://127.0.0.1:$ext_port" --duration=4s >"$work/tally.txt" 2>"$work/load.err"; then
  pass "http_load: $(tr '\n' ' ' <"$work/tally.txt")"
else
  fail "http_load ran without HTTP errors" "$(tail -5 "$work/load.err")"
fi
tally() { grep -oP "^$1=\K[0-9.]+" "$work/tally.txt" || echo 0; }
binds=$(tally binds) bound=$(tally bound)
# The final state is in Prometheus once the bind counter and the audit-refreshed pod gauge
# (bound pods = pods held in the mirror: the cluster started empty) are both scraped.
settled=""
for _ in $(seq 1 30); do
  if [[ "$(prom_scalar 'sum(gse_bind_total)')" == "$binds" && "$(prom_scalar 'sum(gse_mirror_pods)')" == "$bound" ]]; then
    settled=1; break
  fi
  sleep 0.5
done
[[ -n "$settled" ]] && pass "Prometheus has the final state ($binds binds, $bound pods held)" ||
  fail "Prometheus has the final state" "sum(gse_bind_total)=$(prom_scalar 'sum(gse_bind_total)') want $binds, sum(gse_mirror_pods)=$(prom_scalar 'sum(gse_mirror_pods)') want $bound"

# ---- 4. every expression of the dashboard and the alerts ------------------------------------
cat >"$work/queries.mjs" <<'EOF'
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
const [prom, repo, tallyFile] = process.argv.slice(2);
const YAML = createRequire(`${repo}/tests/deploy/package.json`)("yaml");
const tally = Object.fromEntries(readFileSync(tallyFile, "utf8").trim().split("\n")
  .map((l) => l.split("=")).map(([k, v]) => [k, Number(v)]));
let passed = 0, failed = 0;
const ok = (m) => { passed++; console.log(`ok   ${m}`); };
const bad = (m) => { failed++; console.log(`FAIL ${m}`); };

async function query(expr) {
  const r = await fetch(`${prom}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const body = await r.json();
  if (body.status !== "success") return { error: `${body.errorType}: ${body.error}` };
  return { result: body.data.result.map((s) => ({ metric: s.metric, value: Number(s.value[1]) })) };
}
const short = (e) => e.replace(/\s+/g, " ").trim();

// Dashboard: every target of every panel (rows nest panels), and the variables' queries.
const dash = JSON.parse(readFileSync(`${repo}/deploy/grafana/gpu-slice-extender.json`, "utf8"));
const targets = [];
const walk = (panels) => { for (const p of panels || []) {
  walk(p.panels);
  for (const t of p.targets || []) if (t.expr) targets.push([p.title, t.expr]);
} };
walk(dash.panels);
for (const v of dash.templating?.list || []) {
  const q = typeof v.query === "string" ? v.query : v.query?.query;
  const m = v.type === "query" && q && q.match(/^label_values\((.+),\s*(\w+)\)$/);
  if (m) targets.push([`variable $${v.name}`, `count by (${m[2]}) (${m[1]})`]);
}
if (targets.length < 10) bad(`dashboard has only ${targets.length} queries`);
for (const [title, raw] of targets) {
  const expr = raw.replaceAll("$__rate_interval", "1m").replaceAll("$__interval", "1m")
    .replaceAll("${offering:regex}", ".*").replaceAll("${offering}", ".*").replaceAll("$offering", ".*");
  if (expr.includes("$")) { bad(`dashboard "${title}": unsubstituted variable in ${short(raw)}`); continue; }
  const r = await query(expr);
  if (r.error) bad(`dashboard "${title}": ${short(expr)}: ${r.error}`);
  else if (r.result.length === 0) bad(`dashboard "${title}": ${short(expr)}: no data`);
  else if (r.result.some((s) => Number.isNaN(s.value))) bad(`dashboard "${title}": ${short(expr)}: NaN in ${JSON.stringify(r.result)}`);
  else ok(`dashboard "${title}": ${short(expr)} (${r.result.length} series)`);
}

// Alerts: as written; if empty, the left-hand side of a trailing numeric comparison.
const rules = YAML.parse(readFileSync(`${repo}/deploy/prometheus/alerts.yaml`, "utf8"));
const alerts = rules.groups.flatMap((g) => g.rules).filter((r) => r.alert);
if (alerts.length < 5) bad(`alerts.yaml has only ${alerts.length} alerts`);
const cmp = { ">": (a, b) => a > b, "<": (a, b) => a < b, ">=": (a, b) => a >= b,
              "<=": (a, b) => a <= b, "==": (a, b) => a === b, "!=": (a, b) => a !== b };
for (const a of alerts) {
  const expr = a.expr.trim();
  const full = await query(expr);
  if (full.error) { bad(`alert ${a.alert}: ${short(expr)}: ${full.error}`); continue; }
  if (full.result.length > 0) { ok(`alert ${a.alert}: returns ${full.result.length} series as written`); continue; }
  const m = expr.match(/^([\s\S]*?)\s*(>=|<=|==|!=|>|<)\s*(-?[0-9.]+(?:e[-+]?[0-9]+)?)$/);
  if (!m) { bad(`alert ${a.alert}: empty, and not a comparison with a number: ${short(expr)}`); continue; }
  const [, lhs, op, threshold] = m;
  const l = await query(lhs);
  if (l.error) bad(`alert ${a.alert}: left-hand side ${short(lhs)}: ${l.error}`);
  else if (l.result.length === 0) bad(`alert ${a.alert}: left-hand side ${short(lhs)}: no data`);
  else if (l.result.some((s) => Number.isNaN(s.value)))  // NaN never passes a threshold: a blind spot
    bad(`alert ${a.alert}: left-hand side ${short(lhs)}: NaN in ${JSON.stringify(l.result)}`);
  else if (l.result.some((s) => cmp[op](s.value, Number(threshold))))
    bad(`alert ${a.alert}: left-hand side ${JSON.stringify(l.result)} passes ${op} ${threshold} but the alert expression was empty`);
  else ok(`alert ${a.alert}: not firing; compared value ${short(lhs)} = ${l.result.map((s) => s.value).join(", ")} (${op} ${threshold})`);
}

// Prometheus evaluated every rule without error.
const rr = await (await fetch(`${prom}/api/v1/rules`)).json();
const evaluated = rr.data.groups.flatMap((g) => g.rules);
const unhealthy = evaluated.filter((r) => r.health !== "ok");
if (evaluated.length !== alerts.length) bad(`Prometheus loaded ${evaluated.length} rules, alerts.yaml has ${alerts.length}`);
else if (unhealthy.length) bad(`rules not healthy: ${unhealthy.map((r) => `${r.name}: ${r.health} ${r.lastError || ""}`).join("; ")}`);
else ok(`Prometheus evaluates all ${evaluated.length} rules without error`);

// The load's own numbers, as Prometheus saw them.
const value = async (expr) => { const r = await query(expr); return r.result?.length ? r.result[0].value : NaN; };
const expectEq = async (what, expr, want) => {
  const got = await value(expr);
  got === want ? ok(`${what}: ${expr} = ${got}`) : bad(`${what}: ${expr} = ${got}, http_load counted ${want}`);
};
const expectGt0 = async (what, expr) => {
  const got = await value(expr);
  got > 0 ? ok(`${what}: ${expr} = ${got}`) : bad(`${what}: ${expr} = ${got}, want > 0`);
};
await expectEq("filter calls", 'sum(gse_http_requests_total{verb="filter",code="200"})', tally.filter_calls);
await expectEq("binds", "sum(gse_bind_total)", tally.binds);
await expectEq("bound", 'sum(gse_bind_total{outcome="bound"})', tally.bound);
await expectEq("bind races lost", 'sum(gse_bind_total{outcome=~"quota|unit_taken"})', tally.quota_race_refused);
await expectGt0("quota refusals at bind", 'sum(gse_bind_total{outcome="quota"})');
await expectEq("unknown pods", 'sum(gse_bind_total{outcome="unknown_pod"})', tally.unknown_pod_binds);
await expectEq("malformed binds", 'sum(gse_bind_total{outcome="bad_request"})', tally.bad_request_binds);
await expectEq("preemption nodes", "sum(gse_preemption_nodes_total)", tally.preempt_nodes);
await expectEq("preemption victims", "sum(gse_preemption_victims_total)", tally.preempt_victims);
await expectEq("time-sliced placements = time-sliced binds", "sum(gse_affinity_placements_total)",
  await value('sum(gse_bind_total{offering="nvidia.com/mig-1g.5gb.shared",outcome="bound"})'));
await expectGt0("placements onto the project's own slice", 'sum(gse_affinity_placements_total{placement="own_unit"})');
await expectGt0("placements onto a new slice", 'sum(gse_affinity_placements_total{placement="new_unit"})');
await expectGt0("affinity spills", "sum(gse_affinity_spills_total)");
await expectGt0("filter refusals for quota", 'sum(gse_filter_verdicts_total{reason="quota_exhausted"})');
await expectEq("audit: no oversubscription", "max(gse_audit_oversubscribed_units + gse_audit_multi_owner_units)", 0);
console.log(`__counts__ ${passed} ${failed}`);
EOF
node "$work/queries.mjs" "$PROM" "$REPO" "$work/tally.txt" >"$work/queries.out" 2>&1
grep -v '^__counts__' "$work/queries.out"
read -r _ qp qf < <(grep '^__counts__' "$work/queries.out" || echo "__counts__ 0 1")
passed=$((passed + qp)) failed=$((failed + qf))

# ---- 5. promtool on a real scrape --------------------------------------------------------------
curl -s "http://127.0.0.1:$ext_port/metrics" >"$work/metrics.txt"
series=$(grep -vc '^#' "$work/metrics.txt")
if out=$(promtool check metrics <"$work/metrics.txt" 2>&1) && [[ -z "$out" ]]; then
  pass "promtool check metrics: clean ($series series in the scrape)"
else
  fail "promtool check metrics" "$out"
fi
curl -s "http://127.0.0.1:$agent_port/metrics" >"$work/agent-metrics.txt"
series=$(grep -vc '^#' "$work/agent-metrics.txt")
if out=$(promtool check metrics <"$work/agent-metrics.txt" 2>&1) && [[ -z "$out" ]]; then
  pass "promtool check metrics (agent): clean ($series series in the scrape)"
else
  fail "promtool check metrics (agent)" "$out"
fi

# ---- 6. the decision log and a clean stop -----------------------------------------------------
log_lines=$(grep -c '"event":"bind"' "$work/extender.err")
if [[ "$log_lines" == "$binds" ]] &&
   grep '"event":"bind"' "$work/extender.err" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{
     for (const l of s.trim().split("\n")) { const j=JSON.parse(l); for (const k of ["pod","project","offering","node","units","outcome","reason","latency_seconds"]) if (!(k in j)) process.exit(1); }})'; then
  pass "decision log: one JSON line per bind ($log_lines), all parse with every field"
else
  fail "decision log" "$log_lines lines with \"event\":\"bind\" for $binds binds, or a line does not parse"
fi
kill -TERM "$extender_pid"
wait "$extender_pid"; rc=$?
extender_pid=""
[[ $rc == 0 ]] && pass "extender stops with exit 0 on SIGTERM" || fail "extender stop" "exit $rc"
kill -TERM "$agent_pid"
wait "$agent_pid"; rc=$?
agent_pid=""
[[ $rc == 0 ]] && pass "agent stops with exit 0 on SIGTERM" || fail "agent stop" "exit $rc: $(tail -3 "$work/agent.err")"
finish
