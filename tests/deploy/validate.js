// Offline checks of gpu-slice-extender's deployment files; run by tests/deploy_manifests_test.sh.
//
//   node tests/deploy/validate.js --repo REPO_ROOT --rendered DIR [--renders DIR]
//
// DIR holds `kubectl kustomize` output, one file per variant: base.yaml and <overlay>.yaml for
// every deploy/overlays/<overlay>. Checks, each printed as one line "PASS: ..." / "FAIL: ..." /
// "SKIP: ..." (the shell script counts them):
//   * schema: every rendered object through kubernetes-models' validate() (types, enums,
//     required fields) and through TypeScript's excess-property check against the same models'
//     interfaces (unknown or misspelt fields, which validate() lets through but a real API server
//     with strict field validation rejects);
//   * structure: namespaces, references between objects (ConfigMap, Secret, ServiceAccount,
//     Service -> pod labels -> container ports, ServiceMonitor -> Service port);
//   * security context, probes, resources, replicas and strategy, anti-affinity, PDB per variant;
//   * RBAC: the rendered ClusterRole/Role grant exactly the rows of deploy/RBAC.md;
//   * the node agent (deploy/agent, in the variants that include it): its DaemonSet on GPU
//     nodes only, kubelet's two socket directories as its only hostPath volumes, root without
//     capabilities (kubelet's sockets force root; nothing else), every flag one the agent
//     binary defines, its own namespace and ClusterRole (RBAC.md scope "agent");
//   * scheduler-config/*.yaml: kube-scheduler's validation rules for extenders, strict field
//     names, and managedResources == every name and alias of deploy/base/catalog.yaml (none in
//     all-pods.yaml, which sends every pod to the extender);
//   * with --renders DIR (device-classes.yaml, resource-quotas.yaml from `gpu-slice-extender
//     catalog render`): the DRA DeviceClasses and the ResourceQuota through the same schema and
//     excess-property checks, and their names, selectors and keys against the catalog.
// Exit status 0 when no check failed.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

import { ConfigMap, Namespace, ResourceQuota, Service, ServiceAccount } from "kubernetes-models/v1";
import { DeviceClass } from "kubernetes-models/resource.k8s.io/v1";
import { DaemonSet, Deployment } from "kubernetes-models/apps/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";
import { ClusterRole, ClusterRoleBinding, Role, RoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1";
import { PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const HERE = path.dirname(fileURLToPath(import.meta.url));
let REPO = "";

// ---------------------------------------------------------------------------------------------
// Reporting

let failed = 0;
function pass(name) { console.log(`PASS: ${name}`); }
function fail(name, why) { failed++; console.log(`FAIL: ${name}: ${why}`); }
function skip(name, why) { console.log(`SKIP: ${name}: ${why}`); }
// Runs fn; a thrown Error or a returned string fails the check, anything else passes.
function check(name, fn) {
  let problem;
  try { problem = fn(); } catch (e) { problem = e && e.message ? e.message : String(e); }
  if (typeof problem === "string" && problem !== "") fail(name, problem); else pass(name);
}
function expect(cond, msg) { if (!cond) throw new Error(msg); }
const json = (v) => JSON.stringify(v);

// ---------------------------------------------------------------------------------------------
// Arguments and inputs

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const m = /^--(repo|rendered|renders)$/.exec(argv[i]);
    if (!m || i + 1 >= argv.length) throw new Error(`usage: validate.js --repo DIR --rendered DIR [--renders DIR] (bad argument ${json(argv[i])})`);
    out[m[1]] = argv[++i];
  }
  if (!out.repo || !out.rendered) throw new Error("usage: validate.js --repo DIR --rendered DIR");
  return out;
}

function parseYamlDocs(text, where) {
  const docs = YAML.parseAllDocuments(text);
  const objs = [];
  for (const d of docs) {
    if (d.errors.length) throw new Error(`${where}: ${d.errors[0].message}`);
    const o = d.toJS();
    if (o !== null && o !== undefined) objs.push(o);
  }
  return objs;
}

// ---------------------------------------------------------------------------------------------
// What each variant must look like. A new overlay must be described here before it passes.

const NS = "gpu-slice-extender";
const APP = "gpu-slice-extender";
const AGENT = "gpu-slice-agent";  // name of the agent's namespace, ServiceAccount, ClusterRole, DaemonSet
const VARIANTS = {
  base: { ha: false, tls: false, monitoring: false, agent: false },
  ha: { ha: true, tls: false, monitoring: true, agent: false },
  tls: { ha: false, tls: true, monitoring: true, agent: false },
  "ha-tls": { ha: true, tls: true, monitoring: true, agent: false },
  agent: { ha: false, tls: false, monitoring: false, agent: true },
};
// Objects of the node agent (deploy/agent) carry its name label; they live in its namespace.
const isAgentObject = (o) => (o.kind === "Namespace" ? o.metadata.name === AGENT
  : (o.metadata.labels || {})["app.kubernetes.io/name"] === AGENT);

// apiVersion/kind -> runtime model and TypeScript interface (module, name) of the same package.
const MODELS = {
  "v1/Namespace": [Namespace, "kubernetes-models/v1/Namespace", "INamespace"],
  "v1/ServiceAccount": [ServiceAccount, "kubernetes-models/v1/ServiceAccount", "IServiceAccount"],
  "v1/ConfigMap": [ConfigMap, "kubernetes-models/v1/ConfigMap", "IConfigMap"],
  "v1/Service": [Service, "kubernetes-models/v1/Service", "IService"],
  "v1/ResourceQuota": [ResourceQuota, "kubernetes-models/v1/ResourceQuota", "IResourceQuota"],
  // `catalog render --what=device-classes` (DRA; extendedResourceName is in resource.k8s.io/v1).
  "resource.k8s.io/v1/DeviceClass": [DeviceClass, "kubernetes-models/resource.k8s.io/v1/DeviceClass", "IDeviceClass"],
  "apps/v1/Deployment": [Deployment, "kubernetes-models/apps/v1/Deployment", "IDeployment"],
  "apps/v1/DaemonSet": [DaemonSet, "kubernetes-models/apps/v1/DaemonSet", "IDaemonSet"],
  "policy/v1/PodDisruptionBudget": [PodDisruptionBudget, "kubernetes-models/policy/v1/PodDisruptionBudget", "IPodDisruptionBudget"],
  "rbac.authorization.k8s.io/v1/ClusterRole": [ClusterRole, "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole", "IClusterRole"],
  "rbac.authorization.k8s.io/v1/ClusterRoleBinding": [ClusterRoleBinding, "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding", "IClusterRoleBinding"],
  "rbac.authorization.k8s.io/v1/Role": [Role, "kubernetes-models/rbac.authorization.k8s.io/v1/Role", "IRole"],
  "rbac.authorization.k8s.io/v1/RoleBinding": [RoleBinding, "kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding", "IRoleBinding"],
  // CRDs of prometheus-operator (the monitoring component; PrometheusRule joins with the metrics work).
  "monitoring.coreos.com/v1/ServiceMonitor": [ServiceMonitor, "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor", "IServiceMonitor"],
  "monitoring.coreos.com/v1/PrometheusRule": [PrometheusRule, "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule", "IPrometheusRule"],
};
const CLUSTER_SCOPED = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass"]);
const gvk = (o) => `${o.apiVersion}/${o.kind}`;
const ident = (o) => `${o.kind}/${o.metadata && o.metadata.name}`;

// ---------------------------------------------------------------------------------------------
// Schema: runtime validate() per object, TypeScript excess-property check per file.

function schemaChecks(variant, objs) {
  for (const o of objs) {
    const name = `${variant}: ${ident(o)} validates against its schema`;
    const m = MODELS[gvk(o)];
    if (!m) { fail(name, `no model for ${gvk(o)}: add it to MODELS in tests/deploy/validate.js`); continue; }
    check(name, () => { new m[0](o).validate(); });
  }
}

// Every object as a typed literal in one .ts file; tsc reports fields the type does not have.
function strictFieldChecks(allVariants) {
  const lines = [];
  const where = []; // line index -> check name
  const imports = new Map();
  for (const [variant, objs] of allVariants) {
    for (const o of objs) {
      const m = MODELS[gvk(o)];
      if (!m) continue; // already failed in schemaChecks
      const alias = `T${imports.size}`;
      if (!imports.has(m[1])) imports.set(m[1], { alias, type: m[2] });
      const imp = imports.get(m[1]);
      where.push([lines.length, `${variant}: ${ident(o)} has no unknown fields`]);
      lines.push(`export const o${lines.length}: ${imp.alias} = ${JSON.stringify(o)};`);
    }
  }
  const header = [...imports].map(([mod, { alias, type }]) => `import type { ${type} as ${alias} } from "${mod}";`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gse-deploy-tsc-"));
  try {
    // Resolve the packages from this project's node_modules without writing into the source tree.
    fs.symlinkSync(path.join(HERE, "node_modules"), path.join(dir, "node_modules"), "dir");
    fs.writeFileSync(path.join(dir, "objects.ts"), header.concat(lines).join("\n") + "\n");
    let out = "";
    try {
      execFileSync(path.join(HERE, "node_modules", ".bin", "tsc"),
        ["--noEmit", "--strict", "--skipLibCheck", "--module", "nodenext", "--moduleResolution", "nodenext",
          "--types", "", path.join(dir, "objects.ts")],
        { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    } catch (e) {
      out = `${e.stdout || ""}${e.stderr || ""}`;
      if (!out) throw e;
    }
    const byLine = new Map();
    for (const l of out.split("\n")) {
      const m = /objects\.ts\((\d+),\d+\): error (TS\d+: .*)$/.exec(l);
      if (!m) continue;
      const idx = Number(m[1]) - 1 - header.length;
      if (idx < 0) { fail("TypeScript models import", m[2]); continue; }
      if (!byLine.has(idx)) byLine.set(idx, []);
      byLine.get(idx).push(m[2]);
    }
    const unplaced = out.split("\n").filter((l) => l.trim() && !/objects\.ts\(\d+,\d+\): error/.test(l));
    for (const [idx, name] of where) {
      if (byLine.has(idx)) fail(name, byLine.get(idx).join("; ")); else pass(name);
    }
    if (unplaced.length) fail("tsc ran cleanly", unplaced.join(" | ").slice(0, 500));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Structure and policy of one rendered variant.

function one(objs, kind, name) {
  const found = objs.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  expect(found.length === 1, `expected exactly one ${kind}${name ? "/" + name : ""}, found ${found.length}`);
  return found[0];
}
const labelsMatch = (selector, labels) =>
  Object.entries(selector || {}).every(([k, v]) => labels && labels[k] === v) && Object.keys(selector || {}).length > 0;

function parseQuantity(q) {
  const m = /^([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(q));
  if (!m) throw new Error(`unparsable quantity ${json(q)}`);
  const mult = { m: 1e-3, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, M: 1e6, G: 1e9, T: 1e12 }[m[2]] || 1;
  return Number(m[1]) * mult;
}

function argValue(args, flag) {
  const hits = args.filter((a) => a === flag || a.startsWith(flag + "="));
  if (hits.length === 0) return undefined;
  if (hits.length > 1) throw new Error(`flag ${flag} given ${hits.length} times`);
  return hits[0].includes("=") ? hits[0].slice(flag.length + 1) : "";
}

// Which volume (and item path) provides file `file` inside the container.
function fileSource(podSpec, container, file) {
  for (const vm of container.volumeMounts || []) {
    const mp = vm.mountPath.replace(/\/$/, "");
    if (!file.startsWith(mp + "/")) continue;
    const rel = file.slice(mp.length + 1);
    const vol = (podSpec.volumes || []).find((v) => v.name === vm.name);
    expect(vol, `volumeMount ${vm.name} has no volume`);
    return { vol, vm, rel };
  }
  throw new Error(`no volumeMount provides ${file}`);
}

// Names of the ABSL_FLAGs compiled into a binary (the extender: extender/, state/, scoring/;
// the agent: agent/). Both main.cc treat '-' and '_' in flag names alike; names are returned
// with '_'.
const flagCache = new Map();
function binaryFlags(repo, dirs = ["extender", "state", "scoring"]) {
  const key = dirs.join();
  if (flagCache.has(key)) return flagCache.get(key);
  const flags = new Set();
  for (const dir of dirs) {
    for (const f of fs.readdirSync(path.join(repo, dir)).filter((x) => x.endsWith(".cc"))) {
      const text = fs.readFileSync(path.join(repo, dir, f), "utf8");
      for (const m of text.matchAll(/ABSL_FLAG\(\s*[^,]+,\s*([A-Za-z0-9_]+)\s*,/g)) flags.add(m[1]);
    }
  }
  if (!flags.has("listen")) throw new Error(`no ABSL_FLAG(..., listen, ...) found in ${dirs.join(", ")}/*.cc: the flag scan is broken`);
  flagCache.set(key, flags);
  return flags;
}

function structureChecks(variant, traits, objs, catalogText) {
  const v = variant;
  check(`${v}: every namespaced object is in namespace ${NS} (the agent's in ${AGENT})`, () => {
    const bad = objs.filter((o) => !CLUSTER_SCOPED.has(o.kind) && o.metadata.namespace !== (isAgentObject(o) ? AGENT : NS)).map(ident);
    expect(bad.length === 0, `wrong or missing namespace: ${bad.join(", ")}`);
    const ns = one(objs, "Namespace", NS);
    expect(ns.metadata.labels["pod-security.kubernetes.io/enforce"] === "restricted", "Namespace does not enforce the restricted Pod Security Standard");
  });
  check(`${v}: object names are unique per kind`, () => {
    const seen = new Set();
    for (const o of objs) { const k = `${o.kind}/${o.metadata.namespace || ""}/${o.metadata.name}`; expect(!seen.has(k), `duplicate ${k}`); seen.add(k); }
  });
  check(`${v}: CRD kinds only where monitoring is included`, () => {
    const crd = objs.filter((o) => o.apiVersion.startsWith("monitoring.coreos.com/")).map(ident);
    if (traits.monitoring) expect(crd.includes("ServiceMonitor/" + APP), `no ServiceMonitor/${APP}`);
    else expect(crd.length === 0, `base must apply without prometheus-operator CRDs, found ${crd.join(", ")}`);
  });

  let dep, pod, c;
  check(`${v}: one Deployment with one container`, () => {
    dep = one(objs, "Deployment", APP);
    pod = dep.spec.template.spec;
    expect(pod.containers.length === 1, `${pod.containers.length} containers`);
    c = pod.containers[0];
  });
  if (!c) return;
  const podLabels = dep.spec.template.metadata.labels;
  const args = c.args || [];

  check(`${v}: Deployment selector matches its pod labels`, () => {
    expect(labelsMatch(dep.spec.selector.matchLabels, podLabels), `selector ${json(dep.spec.selector)} vs labels ${json(podLabels)}`);
  });
  check(`${v}: image, listen address, catalog flag, in-cluster API access`, () => {
    expect(c.image === "gpu-slice-extender:0.1.0", `image ${c.image}`);
    expect(argValue(args, "--listen") === "0.0.0.0:8888", `--listen ${argValue(args, "--listen")}`);
    expect(argValue(args, "--catalog") === "/etc/gpu-slice-extender/catalog.yaml", `--catalog ${argValue(args, "--catalog")}`);
    expect(argValue(args, "--kubeconfig") === undefined, "--kubeconfig must be left out (in-cluster)");
    expect((c.ports || []).some((p) => p.containerPort === 8888), "no containerPort 8888");
  });
  check(`${v}: every argument is a flag the binary defines`, () => {
    const defined = binaryFlags(REPO);
    const unknown = args.filter((a) => {
      const m = /^--?([A-Za-z0-9_-]+)(=|$)/.exec(a);
      return !m || !defined.has(m[1].replace(/-/g, "_"));
    });
    expect(unknown.length === 0, `unknown to the binary (it exits 2): ${json(unknown)}`);
  });
  check(`${v}: catalog comes from the generated ConfigMap and equals deploy/base/catalog.yaml`, () => {
    const { vol, rel } = fileSource(pod, c, argValue(args, "--catalog"));
    expect(vol.configMap, `catalog volume ${vol.name} is not a ConfigMap`);
    const cm = one(objs, "ConfigMap", vol.configMap.name);
    expect(/^gpu-slice-extender-catalog-[a-z0-9]{10}$/.test(cm.metadata.name), `ConfigMap ${cm.metadata.name} is not the hash-suffixed generated one`);
    expect(cm.data && cm.data[rel] === catalogText, `ConfigMap key ${rel} differs from deploy/base/catalog.yaml`);
  });
  check(`${v}: ServiceAccount exists and is the pod's`, () => {
    one(objs, "ServiceAccount", APP);
    expect(pod.serviceAccountName === APP, `serviceAccountName ${pod.serviceAccountName}`);
    expect(pod.automountServiceAccountToken !== false, "the in-cluster client needs the mounted token");
  });

  // Security: effective values (container overrides pod).
  const eff = (k) => (c.securityContext && c.securityContext[k] !== undefined ? c.securityContext[k] : (pod.securityContext || {})[k]);
  check(`${v}: runs as non-root uid 65532`, () => {
    expect(eff("runAsNonRoot") === true, `runAsNonRoot ${eff("runAsNonRoot")}`);
    expect(eff("runAsUser") === 65532, `runAsUser ${eff("runAsUser")}`);
  });
  check(`${v}: read-only root filesystem, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp`, () => {
    const sc = c.securityContext || {};
    expect(sc.readOnlyRootFilesystem === true, "readOnlyRootFilesystem is not true");
    expect(sc.allowPrivilegeEscalation === false, "allowPrivilegeEscalation is not false");
    expect(sc.privileged !== true, "privileged");
    expect(sc.capabilities && (sc.capabilities.drop || []).includes("ALL"), "capabilities.drop lacks ALL");
    expect(!(sc.capabilities.add || []).length, `capabilities.add ${json(sc.capabilities.add)}`);
    const sp = eff("seccompProfile");
    expect(sp && sp.type === "RuntimeDefault", `seccompProfile ${json(sp)}`);
    expect(!pod.hostNetwork && !pod.hostPID && !pod.hostIPC, "host namespaces");
    const hostPaths = (pod.volumes || []).filter((x) => x.hostPath).map((x) => x.name);
    expect(hostPaths.length === 0, `hostPath volumes ${hostPaths}`);
  });
  const scheme = traits.tls ? "HTTPS" : "HTTP";
  check(`${v}: liveness /healthz and readiness /readyz over ${scheme} on the container port`, () => {
    for (const [probe, p] of [["livenessProbe", "/healthz"], ["readinessProbe", "/readyz"]]) {
      const pr = c[probe];
      expect(pr && pr.httpGet, `${probe} missing or not httpGet`);
      expect(pr.httpGet.path === p, `${probe} path ${pr.httpGet.path}`);
      expect((pr.httpGet.scheme || "HTTP") === scheme, `${probe} scheme ${pr.httpGet.scheme}`);
      const port = pr.httpGet.port;
      expect((c.ports || []).some((x) => x.name === port || x.containerPort === port), `${probe} port ${port} is not a container port`);
    }
  });
  check(`${v}: resources: requests and limits for cpu and memory, limits >= requests`, () => {
    const r = c.resources || {};
    for (const k of ["cpu", "memory"]) {
      expect(r.requests && r.requests[k] !== undefined, `no requests.${k}`);
      expect(r.limits && r.limits[k] !== undefined, `no limits.${k}`);
      expect(parseQuantity(r.limits[k]) >= parseQuantity(r.requests[k]), `limits.${k} < requests.${k}`);
    }
    // The mirror's target is 200 MB at 5,000 nodes: the request must hold it with room for a relist.
    expect(parseQuantity(r.requests.memory) >= 2 * 200e6, `requests.memory ${r.requests.memory} < 2 x 200 MB`);
  });
  check(`${v}: graceful stop: preStop sleep shorter than terminationGracePeriodSeconds 30`, () => {
    expect(pod.terminationGracePeriodSeconds === 30, `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds}`);
    const ps = c.lifecycle && c.lifecycle.preStop;
    expect(ps, "no preStop hook");
    let secs;
    if (ps.sleep) secs = ps.sleep.seconds;
    else if (ps.exec && /(^|\/)sleep$/.test(ps.exec.command[0])) secs = Number(ps.exec.command[1]);
    expect(Number.isFinite(secs) && secs > 0, `preStop is not a sleep: ${json(ps)}`);
    expect(secs + 10 <= pod.terminationGracePeriodSeconds, `preStop sleep ${secs}s leaves under 10 s of the grace period to drain`);
  });
  check(`${v}: Service port 8888 reaches the container port of these pods`, () => {
    const svc = one(objs, "Service", APP);
    expect(labelsMatch(svc.spec.selector, podLabels), `selector ${json(svc.spec.selector)}`);
    const p = (svc.spec.ports || []).find((x) => x.port === 8888);
    expect(p, "no port 8888");
    expect((c.ports || []).some((x) => x.name === p.targetPort || x.containerPort === p.targetPort), `targetPort ${p.targetPort} is not a container port`);
  });
  check(`${v}: replicas and rollout strategy`, () => {
    if (traits.ha) {
      expect(dep.spec.replicas === 2, `replicas ${dep.spec.replicas}`);
      expect(dep.spec.strategy.type === "RollingUpdate" && dep.spec.strategy.rollingUpdate.maxSurge === 0,
        `with required anti-affinity a surge pod needs a spare node: ${json(dep.spec.strategy)}`);
    } else {
      expect(dep.spec.replicas === 1, `replicas ${dep.spec.replicas}`);
      // Without leader election two replicas must never overlap (each would hand out units).
      expect(dep.spec.strategy && dep.spec.strategy.type === "Recreate", `strategy ${json(dep.spec.strategy)}`);
    }
  });
  check(`${v}: pod anti-affinity between replicas (${traits.ha ? "required" : "preferred"})`, () => {
    const aa = pod.affinity && pod.affinity.podAntiAffinity;
    expect(aa, "no podAntiAffinity");
    const req = aa.requiredDuringSchedulingIgnoredDuringExecution || [];
    const pref = (aa.preferredDuringSchedulingIgnoredDuringExecution || []).map((t) => t.podAffinityTerm);
    const terms = traits.ha ? req : pref;
    expect(terms.some((t) => t.topologyKey === "kubernetes.io/hostname" && labelsMatch(t.labelSelector.matchLabels, podLabels)),
      `no ${traits.ha ? "required" : "preferred"} hostname term selecting these pods: ${json(aa)}`);
    if (!traits.ha) expect(req.length === 0, "required anti-affinity in a non-HA variant");
  });
  // A PDB counts Ready pods. With leader election only the leader is Ready, so any budget that
  // protects something (minAvailable 1, maxUnavailable 1 of 2 replicas) allows 0 disruptions and
  // a drain of the leader's node never finishes: HA has none (deploy/README.md). One replica
  // with maxUnavailable 1 allows 1 eviction.
  check(`${v}: PodDisruptionBudget (${traits.ha ? "none: only the leader is Ready" : "maxUnavailable 1"})`, () => {
    const pdbs = objs.filter((o) => o.kind === "PodDisruptionBudget");
    if (traits.ha) {
      expect(pdbs.length === 0, `${pdbs.map(ident).join(", ")} would block evicting the leader (disruptionsAllowed 0)`);
      return;
    }
    const pdb = one(objs, "PodDisruptionBudget", APP);
    expect(labelsMatch(pdb.spec.selector.matchLabels, podLabels), `selector ${json(pdb.spec.selector)}`);
    expect(pdb.spec.maxUnavailable === 1 && pdb.spec.minAvailable === undefined, json(pdb.spec));
  });
  check(`${v}: leader election ${traits.ha ? "on, with a Lease the Role grants" : "off"}`, () => {
    const le = argValue(args, "--leader-elect");
    if (!traits.ha) {
      expect(le === undefined || le === "false", `--leader-elect=${le}`);
      // (The agent component's heartbeat Lease Roles live in the agent's namespace.)
      expect(!objs.some((o) => (o.kind === "Role" || o.kind === "RoleBinding") && o.metadata.namespace !== AGENT),
        "a Role/RoleBinding in the extender's namespace without leader election");
      return;
    }
    expect(le === "true", `--leader-elect=${le}`);
    const name = argValue(args, "--leader-elect-resource-name");
    const lns = argValue(args, "--leader-elect-resource-namespace");
    expect(name && lns, "--leader-elect-resource-name and --leader-elect-resource-namespace must be set");
    const role = one(objs, "Role");
    expect(role.metadata.namespace === lns, `Role in ${role.metadata.namespace}, Lease in ${lns}`);
    const byName = role.rules.filter((r) => (r.resources || []).includes("leases") && (r.resourceNames || []).includes(name));
    expect(byName.some((r) => r.verbs.includes("get")) && byName.some((r) => r.verbs.includes("update")), `Role grants no get/update on Lease ${name}`);
    const rb = one(objs, "RoleBinding");
    expect(rb.roleRef.kind === "Role" && rb.roleRef.name === role.metadata.name, `RoleBinding refers to ${json(rb.roleRef)}`);
    expect(rb.subjects.some((s) => s.kind === "ServiceAccount" && s.name === APP && s.namespace === NS), `RoleBinding subjects ${json(rb.subjects)}`);
  });
  check(`${v}: TLS ${traits.tls ? "cert, key and client CA from the Secret volume" : "off"}`, () => {
    const flags = ["--tls-cert", "--tls-key", "--client-ca"];
    if (!traits.tls) {
      for (const f of flags) expect(argValue(args, f) === undefined, `${f} in a non-TLS variant`);
      return;
    }
    let secret;
    for (const f of flags) {
      const file = argValue(args, f);
      expect(file, `${f} missing`);
      const { vol, vm, rel } = fileSource(pod, c, file);
      expect(vol.secret, `${f}: volume ${vol.name} is not a Secret`);
      expect(vm.readOnly === true, `${f}: mount ${vm.name} is not readOnly`);
      expect(!vol.secret.items || vol.secret.items.some((i) => i.path === rel), `${f}: Secret volume has no item ${rel}`);
      secret = secret || vol.secret.secretName;
      expect(secret === vol.secret.secretName, "cert, key and CA come from different Secrets");
    }
    const catalogMount = fileSource(pod, c, argValue(args, "--catalog")).vm.mountPath;
    for (const vm of c.volumeMounts) {
      expect(vm.mountPath === catalogMount || !vm.mountPath.startsWith(catalogMount + "/"), `${vm.mountPath} is nested in the read-only catalog volume`);
    }
  });
  if (traits.monitoring) {
    check(`${v}: ServiceMonitor scrapes /metrics every 15s on the Service port (${traits.tls ? "https" : "http"})`, () => {
      // Required fields of the CRD, checked by hand as well as by the model above.
      const sm = one(objs, "ServiceMonitor", APP);
      const svc = one(objs, "Service", APP);
      expect(sm.apiVersion === "monitoring.coreos.com/v1", sm.apiVersion);
      expect(sm.spec && sm.spec.selector && labelsMatch(sm.spec.selector.matchLabels, svc.metadata.labels), `selector ${json(sm.spec && sm.spec.selector)} does not select Service labels ${json(svc.metadata.labels)}`);
      expect(sm.spec.namespaceSelector && (sm.spec.namespaceSelector.matchNames || []).includes(NS), `namespaceSelector ${json(sm.spec.namespaceSelector)}`);
      expect(Array.isArray(sm.spec.endpoints) && sm.spec.endpoints.length === 1, "endpoints");
      const ep = sm.spec.endpoints[0];
      expect(svc.spec.ports.some((p) => p.name === ep.port), `endpoint port ${ep.port} is not a named Service port`);
      expect(ep.path === "/metrics", `path ${ep.path}`);
      expect(ep.interval === "15s", `interval ${ep.interval}`);
      expect(ep.scheme === (traits.tls ? "https" : "http"), `scheme ${ep.scheme}`);
      if (traits.tls) {
        const ca = ep.tlsConfig && ep.tlsConfig.ca && ep.tlsConfig.ca.secret;
        expect(ca && ca.name && ca.key, `tlsConfig.ca.secret ${json(ep.tlsConfig)}`);
        expect(ep.tlsConfig.serverName === `${APP}.${NS}.svc`, `tlsConfig.serverName ${ep.tlsConfig.serverName}`);
        expect(!ep.tlsConfig.insecureSkipVerify, "insecureSkipVerify");
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------
// The node agent's DaemonSet (deploy/agent).

const KUBELET_DIRS = { "device-plugins": "/var/lib/kubelet/device-plugins", "pod-resources": "/var/lib/kubelet/pod-resources" };

function agentChecks(variant, traits, objs) {
  const v = variant;
  const agentObjs = objs.filter(isAgentObject);
  if (!traits.agent) {
    check(`${v}: no node agent objects`, () => { expect(agentObjs.length === 0, `found ${agentObjs.map(ident).join(", ")}`); });
    return;
  }
  let ds, pod, c;
  check(`${v}: agent DaemonSet with one container, ServiceAccount and namespace of its own`, () => {
    ds = one(objs, "DaemonSet", AGENT);
    pod = ds.spec.template.spec;
    expect(pod.containers.length === 1, `${pod.containers.length} containers`);
    c = pod.containers[0];
    expect(labelsMatch(ds.spec.selector.matchLabels, ds.spec.template.metadata.labels), `selector ${json(ds.spec.selector)}`);
    one(objs, "ServiceAccount", AGENT);
    expect(pod.serviceAccountName === AGENT, `serviceAccountName ${pod.serviceAccountName}`);
    const ns = one(objs, "Namespace", AGENT);
    // hostPath volumes are allowed by the "privileged" standard only (deploy/agent/namespace.yaml).
    expect(ns.metadata.labels["pod-security.kubernetes.io/enforce"] === "privileged", "agent Namespace must enforce privileged (hostPath)");
    const others = objs.filter((o) => o.metadata.namespace === AGENT && !isAgentObject(o)).map(ident);
    expect(others.length === 0, `other objects in the agent's namespace: ${others.join(", ")}`);
  });
  if (!c) return;
  const args = c.args || [];
  check(`${v}: agent runs on GPU nodes only, as a node-critical pod tolerating the GPU taint`, () => {
    expect((pod.nodeSelector || {})["nvidia.com/gpu.present"] === "true", `nodeSelector ${json(pod.nodeSelector)}`);
    expect(pod.priorityClassName === "system-node-critical", `priorityClassName ${pod.priorityClassName}`);
    expect((pod.tolerations || []).some((t) => t.key === "nvidia.com/gpu" && t.effect === "NoSchedule"), `tolerations ${json(pod.tolerations)}`);
  });
  check(`${v}: agent image and flags the agent binary defines`, () => {
    expect(c.image === `${AGENT}:0.1.0`, `image ${c.image}`);
    expect(!c.command, `command ${json(c.command)}: the image's ENTRYPOINT is the agent`);
    const defined = binaryFlags(REPO, ["agent"]);
    const unknown = args.filter((a) => {
      const m = /^--?([A-Za-z0-9_-]+)(=|$)/.exec(a);
      return !m || !defined.has(m[1].replace(/-/g, "_"));
    });
    expect(unknown.length === 0, `unknown to gpu-slice-agent (it exits 2): ${json(unknown)}`);
    expect(argValue(args, "--resources"), "--resources missing");
    expect(argValue(args, "--kubeconfig") === undefined, "--kubeconfig must be left out (in-cluster)");
    expect(argValue(args, "--node-name") === undefined, "--node-name must come from NODE_NAME");
    const env = (c.env || []).find((e) => e.name === "NODE_NAME");
    expect(env && env.valueFrom && env.valueFrom.fieldRef && env.valueFrom.fieldRef.fieldPath === "spec.nodeName", `NODE_NAME ${json(env)}`);
  });
  check(`${v}: agent's only hostPath volumes are kubelet's device-plugins (rw) and pod-resources (ro) directories`, () => {
    const hp = (pod.volumes || []).filter((x) => x.hostPath);
    expect(hp.length === 2, `hostPath volumes ${json(hp)}`);
    for (const [name, dir] of Object.entries(KUBELET_DIRS)) {
      const vol = hp.find((x) => x.hostPath.path === dir);
      expect(vol && vol.hostPath.type === "Directory", `no hostPath ${dir} of type Directory`);
      const vm = (c.volumeMounts || []).find((m) => m.name === vol.name);
      expect(vm && vm.mountPath === dir, `${dir} not mounted at the same path`);
      expect((vm.readOnly === true) === (name === "pod-resources"), `${dir} readOnly ${vm.readOnly}`);
    }
    expect(argValue(args, "--device-plugin-dir") === KUBELET_DIRS["device-plugins"], `--device-plugin-dir ${argValue(args, "--device-plugin-dir")}`);
    expect(argValue(args, "--pod-resources-socket") === `${KUBELET_DIRS["pod-resources"]}/kubelet.sock`, `--pod-resources-socket ${argValue(args, "--pod-resources-socket")}`);
    expect(!pod.hostNetwork && !pod.hostPID && !pod.hostIPC, "host namespaces");
  });
  check(`${v}: agent runs as root (kubelet's sockets) but without capabilities, escalation or a writable root`, () => {
    const sc = c.securityContext || {};
    expect(sc.runAsUser === 0 && sc.runAsNonRoot === false, `runAsUser ${sc.runAsUser} runAsNonRoot ${sc.runAsNonRoot}`);
    expect(sc.privileged !== true, "privileged");
    expect(sc.allowPrivilegeEscalation === false, "allowPrivilegeEscalation is not false");
    expect(sc.readOnlyRootFilesystem === true, "readOnlyRootFilesystem is not true");
    expect(sc.capabilities && (sc.capabilities.drop || []).includes("ALL") && !(sc.capabilities.add || []).length, `capabilities ${json(sc.capabilities)}`);
    const sp = sc.seccompProfile || (pod.securityContext || {}).seccompProfile;
    expect(sp && sp.type === "RuntimeDefault", `seccompProfile ${json(sp)}`);
  });
  check(`${v}: agent liveness /healthz on the --listen port; requests and limits`, () => {
    const listen = argValue(args, "--listen");
    const port = Number(String(listen).split(":").pop());
    const cp = (c.ports || []).find((p) => p.containerPort === port);
    expect(cp, `no containerPort for --listen ${listen}`);
    const pr = c.livenessProbe && c.livenessProbe.httpGet;
    expect(pr && pr.path === "/healthz" && (pr.port === cp.name || pr.port === port), `livenessProbe ${json(c.livenessProbe)}`);
    const r = c.resources || {};
    for (const k of ["cpu", "memory"]) {
      expect(r.requests && r.limits && r.requests[k] !== undefined && r.limits[k] !== undefined, `requests/limits.${k}`);
      expect(parseQuantity(r.limits[k]) >= parseQuantity(r.requests[k]), `limits.${k} < requests.${k}`);
    }
    const ann = ds.spec.template.metadata.annotations || {};
    expect(ann["prometheus.io/port"] === String(port) && ann["prometheus.io/path"] === "/metrics", `scrape annotations ${json(ann)}`);
  });
}

// ---------------------------------------------------------------------------------------------
// RBAC: rendered rules == rows of deploy/RBAC.md.

function documentedRbac(repo) {
  const text = fs.readFileSync(path.join(repo, "deploy/RBAC.md"), "utf8");
  const m = /<!-- rbac-table:begin -->([\s\S]*?)<!-- rbac-table:end -->/.exec(text);
  if (!m) throw new Error("deploy/RBAC.md has no rbac-table markers");
  const rows = [];
  for (const line of m[1].split("\n")) {
    const cells = line.split("|").slice(1, -1).map((s) => s.trim());
    if (cells.length < 6 || cells[0] === "scope" || /^-+$/.test(cells[0])) continue;
    const [scope, group, resource, verb, names, why] = cells;
    if (!["cluster", "namespace", "agent", "agent-namespace"].includes(scope)) throw new Error(`RBAC.md: bad scope ${json(scope)}`);
    if (!why) throw new Error(`RBAC.md: row ${resource} ${verb} says not why`);
    rows.push(`${scope} ${group === "core" ? "" : group}|${resource}|${verb}|${names === "-" ? "*" : names}`);
  }
  if (rows.length === 0) throw new Error("deploy/RBAC.md table is empty");
  return rows;
}

function renderedRbac(objs) {
  const out = [];
  for (const o of objs) {
    const scope = o.kind === "ClusterRole" ? (o.metadata.name === AGENT ? "agent" : "cluster")
      : o.kind === "Role" ? (o.metadata.namespace === AGENT ? "agent-namespace" : "namespace") : null;
    if (!scope) continue;
    for (const r of o.rules || []) {
      expect(!(r.nonResourceURLs || []).length, `${ident(o)} grants nonResourceURLs`);
      for (const g of r.apiGroups || []) for (const res of r.resources || []) for (const verb of r.verbs || []) {
        expect(g !== "*" && res !== "*" && verb !== "*", `${ident(o)} uses a wildcard`);
        const names = r.resourceNames && r.resourceNames.length ? r.resourceNames : ["*"];
        for (const n of names) out.push(`${scope} ${g}|${res}|${verb}|${n}`);
      }
    }
  }
  return out;
}

function rbacChecks(variant, traits, objs, documented) {
  check(`${variant}: RBAC grants exactly the documented verbs (deploy/RBAC.md)`, () => {
    const want = documented.filter((r) => r.startsWith("cluster ") || (r.startsWith("namespace ") && traits.ha) ||
      ((r.startsWith("agent ") || r.startsWith("agent-namespace ")) && traits.agent));
    const got = renderedRbac(objs);
    const dup = got.filter((r, i) => got.indexOf(r) !== i);
    const missing = want.filter((r) => !got.includes(r));
    const extra = got.filter((r) => !want.includes(r));
    expect(!missing.length && !extra.length && !dup.length,
      `missing ${json(missing)} extra ${json(extra)} duplicated ${json(dup)}`);
  });
  check(`${variant}: ClusterRole is bound to the extender's ServiceAccount only`, () => {
    const cr = one(objs, "ClusterRole", APP);
    const crb = one(objs, "ClusterRoleBinding", APP);
    expect(crb.roleRef.kind === "ClusterRole" && crb.roleRef.name === cr.metadata.name, `roleRef ${json(crb.roleRef)}`);
    expect(crb.subjects.length === 1 && crb.subjects[0].kind === "ServiceAccount" && crb.subjects[0].name === APP && crb.subjects[0].namespace === NS,
      `subjects ${json(crb.subjects)}`);
  });
  if (!traits.agent) return;
  check(`${variant}: the agent's ClusterRole is bound to the agent's ServiceAccount only`, () => {
    const cr = one(objs, "ClusterRole", AGENT);
    const crb = one(objs, "ClusterRoleBinding", AGENT);
    expect(crb.roleRef.kind === "ClusterRole" && crb.roleRef.name === cr.metadata.name, `roleRef ${json(crb.roleRef)}`);
    expect(crb.subjects.length === 1 && crb.subjects[0].kind === "ServiceAccount" && crb.subjects[0].name === AGENT && crb.subjects[0].namespace === AGENT,
      `subjects ${json(crb.subjects)}`);
  });
  check(`${variant}: the heartbeat Lease Roles are bound to the agent (renew) and the extender (read) only`, () => {
    const bind = (name) => objs.find((o) => o.kind === "RoleBinding" && o.metadata.name === name && o.metadata.namespace === AGENT);
    const hb = bind("gpu-slice-agent-heartbeat");
    expect(hb && hb.subjects.length === 1 && hb.subjects[0].name === AGENT && hb.subjects[0].namespace === AGENT,
      `gpu-slice-agent-heartbeat subjects ${json(hb && hb.subjects)}`);
    const rd = bind("gpu-slice-extender-agent-leases");
    expect(rd && rd.subjects.length === 1 && rd.subjects[0].name === APP && rd.subjects[0].namespace === NS,
      `gpu-slice-extender-agent-leases subjects ${json(rd && rd.subjects)}`);
  });
}

// ---------------------------------------------------------------------------------------------
// KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1).

// kube-scheduler decodes its config strictly: an unknown field stops it from starting.
const KSC_FIELDS = {
  root: ["apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "enableProfiling",
    "enableContentionProfiling", "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
    "profiles", "extenders", "delayCacheUntilActive"],
  leaderElection: ["leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock", "resourceName", "resourceNamespace"],
  clientConnection: ["kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"],
  profile: ["schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"],
  extender: ["urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
    "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"],
  tlsConfig: ["insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"],
  managedResource: ["name", "ignoredByScheduler"],
};
function unknownKeys(obj, allowed, where) {
  const bad = Object.keys(obj || {}).filter((k) => !allowed.includes(k));
  expect(bad.length === 0, `${where}: unknown field(s) ${bad.join(", ")}`);
}

// k8s.io/apimachinery validation.IsQualifiedName.
const QNAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
function qualifiedNameError(v) {
  const parts = v.split("/");
  let name = v;
  if (parts.length === 2) {
    const [prefix, n] = parts;
    if (!prefix) return "prefix part must be non-empty";
    if (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix)) return "prefix part must be a DNS-1123 subdomain";
    name = n;
  } else if (parts.length > 2) {
    return "a qualified name has at most one '/'";
  }
  if (!name) return "name part must be non-empty";
  if (name.length > 63) return "name part must be no more than 63 characters";
  if (!QNAME.test(name)) return "name part must consist of alphanumerics, '-', '_' or '.', starting and ending alphanumeric";
  return "";
}
// kube-scheduler's validateExtenders: IsQualifiedName(name) and v1helper.IsExtendedResourceName(name).
function extendedResourceNameError(name) {
  const q = qualifiedNameError(name);
  if (q) return q;
  if (!name.includes("/")) return "not domain-prefixed (a native resource name)";
  if (name.includes("kubernetes.io/")) return "in the kubernetes.io domain (native)";
  if (name.startsWith("requests.")) return "starts with \"requests.\"";
  const rq = qualifiedNameError("requests." + name);
  if (rq) return `"requests.${name}" is not a qualified name: ${rq}`;
  return "";
}

function durationSeconds(d) {
  const m = /^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$/.exec(String(d));
  if (!m || String(d) === "") throw new Error(`not a Go duration: ${json(d)}`);
  return (Number(m[1] || 0) * 3600) + (Number(m[2] || 0) * 60) + Number(m[3] || 0) + Number(m[4] || 0) / 1000;
}

// Path of the first difference between two parsed YAML values, or null when equal.
function firstDifference(a, b, at) {
  if (typeof a !== typeof b || Array.isArray(a) !== Array.isArray(b) || (a === null) !== (b === null)) return at || "/";
  if (a === null || typeof a !== "object") return a === b ? null : `${at || "/"} (${json(a)} vs ${json(b)})`;
  if (Array.isArray(a)) {
    if (a.length !== b.length) return `${at}[] (length ${a.length} vs ${b.length})`;
    for (let i = 0; i < a.length; i++) { const d = firstDifference(a[i], b[i], `${at}[${i}]`); if (d) return d; }
    return null;
  }
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
  for (const k of keys) { const d = firstDifference(a[k], b[k], `${at}.${k}`); if (d) return d; }
  return null;
}

function catalogNames(catalog) {
  const names = [];
  for (const o of catalog.offerings || []) {
    names.push(o.resource);
    for (const a of o.aliases || []) names.push(a);
  }
  return names;
}

function schedulerConfigChecks(repo, base, catalog) {
  // The checker itself must reject what kube-scheduler rejects, or the checks below prove nothing.
  check("extended resource name rules reject native, kubernetes.io, requests. and malformed names", () => {
    const bad = ["cpu", "memory", "kubernetes.io/gpu", "example.kubernetes.io/gpu", "requests.nvidia.com/gpu",
      "nvidia.com/", "nvidia.com/mig 1g", "Nvidia.com/gpu", "a/b/c", "nvidia.com/-gpu"];
    const wrongly = bad.filter((n) => extendedResourceNameError(n) === "");
    const good = ["nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.5gb.shared", "amd.com/gpu"];
    const rejected = good.filter((n) => extendedResourceNameError(n) !== "");
    expect(!wrongly.length && !rejected.length, `accepted ${json(wrongly)}, rejected ${json(rejected)}`);
  });

  const svc = one(base, "Service", APP);
  const servicePrefix = `${svc.metadata.name}.${svc.metadata.namespace}.svc:${svc.spec.ports[0].port}`;
  const names = catalogNames(catalog);
  const dir = path.join(repo, "scheduler-config");
  const files = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort();
  check("scheduler-config has default-profile.yaml, gpu-scheduler.yaml and tls.yaml", () => {
    for (const f of ["default-profile.yaml", "gpu-scheduler.yaml", "tls.yaml"]) expect(files.includes(f), `${f} missing`);
  });
  for (const f of files) {
    let cfg;
    check(`${f}: parses as one KubeSchedulerConfiguration v1 with only known fields`, () => {
      const docs = parseYamlDocs(fs.readFileSync(path.join(dir, f), "utf8"), f);
      expect(docs.length === 1, `${docs.length} documents`);
      cfg = docs[0];
      expect(cfg.apiVersion === "kubescheduler.config.k8s.io/v1", `apiVersion ${cfg.apiVersion}`);
      expect(cfg.kind === "KubeSchedulerConfiguration", `kind ${cfg.kind}`);
      unknownKeys(cfg, KSC_FIELDS.root, "top level");
      unknownKeys(cfg.leaderElection, KSC_FIELDS.leaderElection, "leaderElection");
      unknownKeys(cfg.clientConnection, KSC_FIELDS.clientConnection, "clientConnection");
      (cfg.profiles || []).forEach((p, i) => unknownKeys(p, KSC_FIELDS.profile, `profiles[${i}]`));
      expect(Array.isArray(cfg.extenders) && cfg.extenders.length > 0, "no extenders");
      cfg.extenders.forEach((e, i) => {
        unknownKeys(e, KSC_FIELDS.extender, `extenders[${i}]`);
        unknownKeys(e.tlsConfig, KSC_FIELDS.tlsConfig, `extenders[${i}].tlsConfig`);
        (e.managedResources || []).forEach((m, j) => unknownKeys(m, KSC_FIELDS.managedResource, `extenders[${i}].managedResources[${j}]`));
      });
    });
    if (!cfg) continue;
    check(`${f}: percentageOfNodesToScore 100`, () => {
      expect(cfg.percentageOfNodesToScore === 100, `percentageOfNodesToScore ${cfg.percentageOfNodesToScore}`);
      for (const p of cfg.profiles || []) expect(p.percentageOfNodesToScore === undefined || p.percentageOfNodesToScore === 100, `profile ${p.schedulerName} overrides it`);
    });
    check(`${f}: kube-scheduler's extender validation (weight > 0 with prioritizeVerb, one bindVerb, unique valid managedResources)`, () => {
      cfg.extenders.forEach((e, i) => {
        if (e.prioritizeVerb) expect(Number.isInteger(e.weight) && e.weight > 0, `extenders[${i}].weight ${e.weight}: must have a positive weight applied to it`);
      });
      const binders = cfg.extenders.filter((e) => e.bindVerb);
      expect(binders.length === 1, `found ${binders.length} extenders implementing bind`);
      const seen = new Set();
      cfg.extenders.forEach((e, i) => (e.managedResources || []).forEach((m, j) => {
        const err = extendedResourceNameError(String(m.name));
        expect(!err, `extenders[${i}].managedResources[${j}].name ${json(m.name)} is an invalid extended resource name: ${err}`);
        expect(!seen.has(m.name), `duplicate extender managed resource name ${m.name}`);
        seen.add(m.name);
      }));
    });
    const e = cfg.extenders.find((x) => String(x.urlPrefix).includes(`${APP}.`));
    check(`${f}: the gpu-slice-extender entry`, () => {
      expect(e, `no extender with urlPrefix at ${servicePrefix}`);
      const tls = f === "tls.yaml";
      expect(e.urlPrefix === `${tls ? "https" : "http"}://${servicePrefix}`, `urlPrefix ${e.urlPrefix} (Service is ${servicePrefix})`);
      expect(e.filterVerb === "filter" && e.prioritizeVerb === "prioritize" && e.bindVerb === "bind" && e.preemptVerb === "preempt",
        `verbs ${e.filterVerb}/${e.prioritizeVerb}/${e.bindVerb}/${e.preemptVerb}`);
      expect(e.weight >= 5 && e.weight <= 10, `weight ${e.weight} outside the reasoned 5..10`);
      const t = durationSeconds(e.httpTimeout);
      expect(t > 0 && t <= 10, `httpTimeout ${e.httpTimeout}`);
      expect(e.nodeCacheCapable === true, `nodeCacheCapable ${e.nodeCacheCapable}`);
      expect(e.ignorable === false, `ignorable ${e.ignorable}`);
      if (tls) {
        expect(e.enableHTTPS === true, "enableHTTPS is not true");
        const tc = e.tlsConfig || {};
        expect(tc.certFile && tc.keyFile && tc.caFile, `tlsConfig needs certFile, keyFile and caFile: ${json(tc)}`);
        expect(tc.insecure !== true, "tlsConfig.insecure");
      } else {
        expect(!e.enableHTTPS && !e.tlsConfig, "TLS settings in a plain-HTTP config");
      }
    });
    if (f === "all-pods.yaml") {
      // For an extender run with --score-all-pods: kube-scheduler sends every pod only when the
      // entry lists no managedResources.
      check(`${f}: no managedResources (every pod reaches the extender)`, () => {
        expect(e.managedResources === undefined, `managedResources ${json(e.managedResources)}`);
      });
    } else {
      check(`${f}: managedResources are exactly the catalog's names and aliases, not ignoredByScheduler`, () => {
        const got = (e.managedResources || []).map((m) => m.name);
        const missing = names.filter((n) => !got.includes(n));
        const extra = got.filter((n) => !names.includes(n));
        expect(!missing.length && !extra.length, `missing ${json(missing)} extra ${json(extra)}`);
        const ignored = e.managedResources.filter((m) => m.ignoredByScheduler !== false).map((m) => m.name);
        expect(!ignored.length, `ignoredByScheduler is not false for ${json(ignored)}`);
      });
    }
    if (f === "gpu-scheduler.yaml") {
      check(`${f}: a second scheduler named gpu-scheduler with its own Lease`, () => {
        expect((cfg.profiles || []).map((p) => p.schedulerName).join() === "gpu-scheduler", `profiles ${json(cfg.profiles)}`);
        const le = cfg.leaderElection || {};
        expect(le.leaderElect === false || (le.resourceName && le.resourceName !== "kube-scheduler"),
          `leaderElection.resourceName ${le.resourceName} would contend with kube-scheduler's Lease`);
      });
    } else {
      check(`${f}: extends the default profile`, () => {
        const ps = cfg.profiles || [];
        expect(ps.every((p) => (p.schedulerName || "default-scheduler") === "default-scheduler"), `profiles ${json(ps)}`);
      });
    }
  }
}


// ---------------------------------------------------------------------------------------------
// What `gpu-slice-extender catalog render` made of the catalog (DeviceClasses, ResourceQuota).

function catalogRenderChecks(catalog, deviceClasses, quotas) {
  const offerings = catalog.offerings || [];
  check("catalog render: one DeviceClass per offering with a deviceClass, named after it, publishing its resource", () => {
    const want = offerings.filter((o) => o.deviceClass).map((o) => `${o.deviceClass} -> ${o.resource}`).sort();
    const got = deviceClasses.map((d) => `${d.metadata && d.metadata.name} -> ${d.spec && d.spec.extendedResourceName}`).sort();
    const missing = want.filter((x) => !got.includes(x));
    const extra = got.filter((x) => !want.includes(x));
    expect(!missing.length && !extra.length, `missing ${json(missing)} extra ${json(extra)}`);
  });
  for (const d of deviceClasses) {
    const name = d.metadata && d.metadata.name;
    check(`catalog render: DeviceClass/${name} structure (cluster-scoped, valid names, one CEL selector on gpu.nvidia.com)`, () => {
      expect(d.apiVersion === "resource.k8s.io/v1" && d.kind === "DeviceClass", `${d.apiVersion}/${d.kind}`);
      expect(Object.keys(d).sort().join() === "apiVersion,kind,metadata,spec", `top-level fields ${Object.keys(d)}`);
      expect(d.metadata.namespace === undefined, "a DeviceClass is cluster-scoped: no metadata.namespace");
      expect(typeof name === "string" && name.length <= 253 && DNS1123_SUBDOMAIN.test(name), `metadata.name ${json(name)} is not a DNS subdomain`);
      const err = extendedResourceNameError(String(d.spec.extendedResourceName));
      expect(!err, `spec.extendedResourceName ${json(d.spec.extendedResourceName)}: ${err}`);
      const sel = d.spec.selectors || [];
      expect(sel.length === 1 && sel[0].cel && typeof sel[0].cel.expression === "string", `selectors ${json(sel)}`);
      const expr = sel[0].cel.expression;
      // resource.k8s.io's limit on a CEL selector (CELSelectorExpressionMaxLength).
      expect(expr.length <= 10 * 1024, `expression of ${expr.length} characters`);
      const o = offerings.find((x) => x.deviceClass === name);
      expect(o, "no offering has this deviceClass");
      expect(expr.startsWith("device.driver == 'gpu.nvidia.com' && "), `expression does not select the NVIDIA DRA driver: ${expr}`);
      const type = o.unit === "mig" ? "mig" : "gpu";
      expect(expr.includes(`device.attributes['gpu.nvidia.com'].type == '${type}'`), `expression does not select type ${type}: ${expr}`);
      if (o.unit === "mig") expect(expr.includes(`.profile == '${o.migProfile}'`), `expression does not select profile ${o.migProfile}: ${expr}`);
      if (o.product) {
        // The NVML name in DRA has spaces where the GFD label has '-': both must match.
        const m = /\.productName\.matches\('([^']*)'\)/.exec(expr);
        expect(m, `no productName match for product ${o.product}: ${expr}`);
        const re = new RegExp(m[1]);
        const nvml = o.product.replace("-", " ");
        for (const p of [`${o.product}-SXM4-40GB`, `${nvml}-SXM4-40GB`]) expect(re.test(p), `${m[1]} does not match ${json(p)}`);
        expect(!re.test(`X${o.product}`), `${m[1]} is not anchored`);
      } else {
        expect(!expr.includes("productName"), `productName in an offering without product: ${expr}`);
      }
    });
  }
  check("catalog render: ResourceQuota gpu-quota lists every quota key of the catalog at \"0\"", () => {
    expect(quotas.length === 1, `${quotas.length} objects`);
    const q = quotas[0];
    expect(q.kind === "ResourceQuota" && q.metadata.name === "gpu-quota" && q.metadata.namespace === undefined, `${ident(q)} in ${q.metadata.namespace}`);
    const want = [...new Set(offerings.map((o) => o.quotaKey || `requests.${o.resource}`))].sort();
    const got = Object.keys(q.spec.hard || {}).sort();
    expect(json(want) === json(got), `keys ${json(got)}, want ${json(want)}`);
    const nonZero = Object.entries(q.spec.hard).filter(([, v]) => v !== "0");
    expect(!nonZero.length, `a template grants nothing: ${json(nonZero)}`);
  });
}

// ---------------------------------------------------------------------------------------------

function main() {
  const { repo, rendered, renders } = parseArgs(process.argv.slice(2));
  REPO = repo;
  const catalogText = fs.readFileSync(path.join(repo, "deploy/base/catalog.yaml"), "utf8");
  let catalog;
  check("deploy/base/catalog.yaml parses, offerings have unique names and aliases", () => {
    catalog = parseYamlDocs(catalogText, "catalog.yaml")[0];
    expect(catalog && Array.isArray(catalog.offerings) && catalog.offerings.length > 0, "no offerings list");
    const names = catalogNames(catalog);
    expect(names.every((n) => typeof n === "string" && n), "an offering without a resource name");
    const dup = names.filter((n, i) => names.indexOf(n) !== i);
    expect(!dup.length, `duplicates ${json(dup)}`);
  });

  check("deploy/base/catalog.yaml holds the same offerings as the built-in catalog (state/builtin_catalog.cc)", () => {
    const src = fs.readFileSync(path.join(repo, "state/builtin_catalog.cc"), "utf8");
    const m = /R"yaml\(([\s\S]*?)\)yaml"/.exec(src);
    expect(m, "no R\"yaml(...)yaml\" literal in state/builtin_catalog.cc: update this check to the new form");
    const builtin = parseYamlDocs(m[1], "builtin_catalog.cc")[0];
    const diff = firstDifference(builtin, catalog, "");
    expect(diff === null, `differs at ${diff}: copy the built-in catalog into deploy/base/catalog.yaml`);
  });

  const overlays = fs.readdirSync(path.join(repo, "deploy/overlays")).sort();
  const variants = ["base", ...overlays];
  const all = [];
  for (const v of variants) {
    const traits = VARIANTS[v];
    if (!traits) { fail(`${v}: known variant`, `add the expectations of overlay ${v} to VARIANTS in tests/deploy/validate.js`); continue; }
    const file = path.join(rendered, `${v}.yaml`);
    if (!fs.existsSync(file)) { fail(`${v}: rendered`, `${file} missing (kubectl kustomize failed?)`); continue; }
    let objs;
    check(`${v}: rendered YAML parses`, () => { objs = parseYamlDocs(fs.readFileSync(file, "utf8"), file); expect(objs.length > 0, "empty"); });
    if (!objs) continue;
    all.push([v, objs]);
    schemaChecks(v, objs);
    structureChecks(v, traits, objs, catalogText);
    agentChecks(v, traits, objs);
  }
  let deviceClasses, quotas;
  if (renders) {
    check("catalog render: device-classes.yaml and resource-quotas.yaml parse", () => {
      deviceClasses = parseYamlDocs(fs.readFileSync(path.join(renders, "device-classes.yaml"), "utf8"), "device-classes.yaml");
      quotas = parseYamlDocs(fs.readFileSync(path.join(renders, "resource-quotas.yaml"), "utf8"), "resource-quotas.yaml");
      expect(deviceClasses.length > 0, "no DeviceClass");
    });
    if (deviceClasses && quotas) {
      schemaChecks("catalog render", [...deviceClasses, ...quotas]);
      all.push(["catalog render", [...deviceClasses, ...quotas]]);
    }
  }
  strictFieldChecks(all);
  if (deviceClasses && quotas && catalog) catalogRenderChecks(catalog, deviceClasses, quotas);

  let documented;
  check("deploy/RBAC.md table parses", () => { documented = documentedRbac(repo); });
  if (documented) for (const [v, objs] of all) if (VARIANTS[v]) rbacChecks(v, VARIANTS[v], objs, documented);

  const base = all.find(([v]) => v === "base");
  if (base && catalog) schedulerConfigChecks(repo, base[1], catalog);
  else skip("scheduler-config", "needs the rendered base and the catalog");

  process.exitCode = failed ? 1 : 0;
}

main();
