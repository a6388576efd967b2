#!/usr/bin/env bash
# Offline checks of the monitoring artefacts with the real tools: promtool validates and
# unit-tests the alert rules; the Grafana dashboard is type-checked against @grafana/schema
# (and a deliberately broken copy must be rejected, so the check itself is known to bite).
set -uo pipefail
cd "$(dirname "$0")/.."
passed=0; failed=0
check() {  # name, command...
  local name="$1"; shift
  if out=$("$@" 2>&1); then passed=$((passed+1)); echo "ok   $name"
  else failed=$((failed+1)); echo "FAIL $name"; echo "$out" | sed 's/^/     /'; fi
}
check "promtool check rules" promtool check rules deploy/prometheus/alerts.yaml
check "promtool test rules" promtool test rules deploy/prometheus/alerts_test.yaml
[[ -d tests/grafana/node_modules ]] || (cd tests/grafana && npm ci --silent --no-audit --no-fund >/dev/null)
check "dashboard matches @grafana/schema" bash -c 'cd tests/grafana && npm run --silent check'
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/deploy/grafana" "$tmp/tests"
sed 's/"schemaVersion": 39/"schemaVersion": "39"/' deploy/grafana/gpu-slice-extender.json > "$tmp/deploy/grafana/broken.json"
cp -r tests/grafana "$tmp/tests/grafana"
# Rejected for the mistyped field and nothing else: any non-zero exit (a missing tsc, a
# broken generator) would otherwise pass for a check that bites.
broken_dashboard_rejected() {
  local out rc line
  grep -qF '"schemaVersion": "39"' "$tmp/deploy/grafana/broken.json" ||
    { echo "the copy is not broken: no \"schemaVersion\": \"39\" in it"; return 1; }
  out=$(cd "$tmp/tests/grafana" && npm run --silent check 2>&1); rc=$?
  echo "$out"
  ((rc != 0)) || { echo "exit 0: the mistyped dashboard was accepted"; return 1; }
  [[ $(grep -c 'error TS' <<<"$out") -eq 1 ]] || { echo "expected exactly one type error"; return 1; }
  line=$(grep -oP "^dashboards\.gen\.ts\(\K[0-9]+(?=,[0-9]+\): error TS2322: Type 'string' is not assignable to type 'number'\.)" <<<"$out") ||
    { echo "expected error TS2322 (string is not assignable to number)"; return 1; }
  sed -n "${line}p" "$tmp/tests/grafana/dashboards.gen.ts" | grep -qF '"schemaVersion": "39"' ||
    { echo "the type error is not on schemaVersion (dashboards.gen.ts line $line)"; return 1; }
}
check "a mistyped dashboard is rejected for its schemaVersion" broken_dashboard_rejected
# Every alert has a unit test case.
for alert in $(grep -oP '^\s+- alert: \K\S+' deploy/prometheus/alerts.yaml); do
  check "alert $alert has a test" grep -q "alertname: $alert" deploy/prometheus/alerts_test.yaml
done
echo "$passed passed, $failed failed"
((failed == 0))
