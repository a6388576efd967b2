// Turns one container of a rendered workload (`kubectl kustomize` output) into the way
// tests/image_check.sh runs its image, so that the image is tested exactly as the manifests run
// it: user and group ids, read-only root filesystem, dropped capabilities, no privilege
// escalation, the args, and the volumes (ConfigMaps written out from the rendered manifest,
// emptyDirs as tmpfs, hostPaths to directories the test provides).
//
//   node tests/deploy/container-run-spec.js --rendered FILE --kind Deployment|DaemonSet
//        --container NAME --hostpath-root DIR --configmap-root DIR
//
// Prints JSON: {image, podmanArgs: [...], args: [...], ports: {name: port}, preStop: [...],
// probes: {liveness, readiness}, runAsUser, runAsGroup, fieldEnv: {NAME: fieldPath},
// hostPaths: [{name, hostPath, mountPath, readOnly}], hostNetwork, serviceAccountToken}.
// podmanArgs are `podman run` options (without the image); the caller adds the image and
// `args`. Exits 2 with a message naming the
// field when the manifest lacks what the images rely on (e.g. a securityContext).
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

function arg(name) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0 || i + 1 >= process.argv.length) fail(`missing --${name}`);
  return process.argv[i + 1];
}
function fail(message) {
  process.stderr.write(`container-run-spec: ${message}\n`);
  process.exit(2);
}

const docs = YAML.parseAllDocuments(fs.readFileSync(arg("rendered"), "utf8")).map((d) => d.toJSON());
const kind = arg("kind");
const containerName = arg("container");
const hostPathRoot = arg("hostpath-root");
const configMapRoot = arg("configmap-root");

const workload = docs.find((d) => d && d.kind === kind);
if (!workload) fail(`no ${kind} in the rendered manifests`);
const podSpec = workload.spec.template.spec;
const container = (podSpec.containers || []).find((c) => c.name === containerName);
if (!container) fail(`${kind} ${workload.metadata.name}: no container ${containerName}`);
const where = `${kind} ${workload.metadata.name} container ${containerName}`;

const podSc = podSpec.securityContext || {};
const sc = container.securityContext || {};
const runAsUser = sc.runAsUser ?? podSc.runAsUser;
const runAsGroup = sc.runAsGroup ?? podSc.runAsGroup;
if (runAsUser === undefined || runAsGroup === undefined) fail(`${where}: runAsUser/runAsGroup not set`);

const podmanArgs = [`--user=${runAsUser}:${runAsGroup}`];
if (sc.readOnlyRootFilesystem === true) podmanArgs.push("--read-only", "--read-only-tmpfs=false");
const drop = (sc.capabilities && sc.capabilities.drop) || [];
if (drop.includes("ALL")) podmanArgs.push("--cap-drop=ALL");
else for (const c of drop) podmanArgs.push(`--cap-drop=${c}`);
for (const c of (sc.capabilities && sc.capabilities.add) || []) podmanArgs.push(`--cap-add=${c}`);
if (sc.allowPrivilegeEscalation === false) podmanArgs.push("--security-opt=no-new-privileges");
if (sc.privileged === true) podmanArgs.push("--privileged");
if (podSc.fsGroup !== undefined) podmanArgs.push(`--group-add=${podSc.fsGroup}`);

const hostPaths = [];
const volumes = Object.fromEntries((podSpec.volumes || []).map((v) => [v.name, v]));
for (const m of container.volumeMounts || []) {
  const v = volumes[m.name];
  if (!v) fail(`${where}: volumeMount ${m.name} names no volume`);
  const ro = m.readOnly ? ",ro" : "";
  if (v.configMap) {
    const cm = docs.find((d) => d && d.kind === "ConfigMap" && d.metadata.name === v.configMap.name);
    if (!cm) fail(`${where}: volume ${m.name}: ConfigMap ${v.configMap.name} is not in the rendered manifests`);
    const dir = path.join(configMapRoot, v.configMap.name);
    fs.mkdirSync(dir, { recursive: true });
    for (const [key, value] of Object.entries(cm.data || {})) fs.writeFileSync(path.join(dir, key), value);
    podmanArgs.push(`--volume=${dir}:${m.mountPath}:Z${ro}`);
  } else if (v.emptyDir) {
    const size = v.emptyDir.sizeLimit ? `,size=${v.emptyDir.sizeLimit.replace(/i$/, "").toLowerCase()}` : "";
    podmanArgs.push(`--tmpfs=${m.mountPath}:rw,mode=1777${size}`);
  } else if (v.hostPath) {
    const dir = path.join(hostPathRoot, v.hostPath.path);
    fs.mkdirSync(dir, { recursive: true });
    // ":ro" (not ",ro": options after the container path start with a colon; with a comma
    // podman mounts the directory at a path ending in ",ro").
    podmanArgs.push(`--volume=${dir}:${m.mountPath}${m.readOnly ? ":ro" : ""}`);
    hostPaths.push({ name: m.name, hostPath: v.hostPath.path, mountPath: m.mountPath, readOnly: !!m.readOnly });
  } else if (v.projected || v.secret) {
    // Service account tokens and Secrets: the test runs outside a cluster and provides none.
    continue;
  } else {
    fail(`${where}: volume ${m.name}: kind not handled by the image test`);
  }
}
// Downward-API variables (valueFrom.fieldRef) are left to the caller, which knows what the
// pod's fields would be (e.g. spec.nodeName): {NAME: "spec.nodeName"}.
const fieldEnv = {};
for (const e of container.env || []) {
  if (e.value !== undefined) podmanArgs.push(`--env=${e.name}=${e.value}`);
  else if (e.valueFrom && e.valueFrom.fieldRef) fieldEnv[e.name] = e.valueFrom.fieldRef.fieldPath;
  else fail(`${where}: env ${e.name}: neither a value nor a fieldRef, not handled by the image test`);
}

const ports = Object.fromEntries((container.ports || []).map((p) => [p.name || String(p.containerPort), p.containerPort]));
const probe = (p) => (p && p.httpGet ? { path: p.httpGet.path, port: p.httpGet.port } : null);
process.stdout.write(
  JSON.stringify({
    image: container.image,
    podmanArgs,
    args: container.args || [],
    command: container.command || null,
    ports,
    preStop: (container.lifecycle && container.lifecycle.preStop && container.lifecycle.preStop.exec &&
      container.lifecycle.preStop.exec.command) || null,
    probes: { liveness: probe(container.livenessProbe), readiness: probe(container.readinessProbe) },
    runAsUser,
    runAsGroup,
    fieldEnv,
    hostPaths,
    hostNetwork: podSpec.hostNetwork === true,
    // kubelet mounts the service account's token and CA at
    // /var/run/secrets/kubernetes.io/serviceaccount unless this is false.
    serviceAccountToken: podSpec.automountServiceAccountToken !== false,
  }) + "\n",
);
