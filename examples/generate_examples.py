#!/usr/bin/env python3
"""Writes the embedded demo cluster (demo-cluster.json) and example extender requests.

The demo is a `kubectl get namespaces,resourcequotas,nodes,pods -A -o json` style List whose
Node labels follow NVIDIA GPU feature discovery (<resource>.count/.replicas/.product), so the
extender reads it exactly as it reads a live cluster. Run it again after changing the layout.
"""
import json

A40 = "NVIDIA-A100-SXM4-40GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def node(name, product, gpus, resources, cpu="64", mem="512Gi", extra_labels=None):
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    alloc = {"cpu": cpu, "memory": mem, "pods": "110"}
    if gpus:
        labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
                       "nvidia.com/gpu.count": str(gpus)})
    for base, advertised, count, replicas, prod in resources:
        labels[f"{base}.count"] = str(count)
        labels[f"{base}.replicas"] = str(replicas)
        labels[f"{base}.sharing-strategy"] = "time-slicing" if replicas > 1 else "none"
        labels[f"{base}.product"] = prod
        alloc[advertised] = str(count * replicas)
    labels.update(extra_labels or {})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"demo-node-{name}", "resourceVersion": "1", "labels": labels},
            "spec": {},
            "status": {"capacity": dict(alloc), "allocatable": alloc}}


NODES = [
    # 4 A100-40GB in MIG mixed strategy: 2 GPUs as 7x1g.5gb time-sliced 4 ways (renameByDefault
    # -> .shared), 2 GPUs as 2x3g.20gb exclusive.
    node("a100-mig-1", A40, 4, [
        ("nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.5gb.shared", 14, 4, A40 + "-MIG-1g.5gb"),
        ("nvidia.com/mig-3g.20gb", "nvidia.com/mig-3g.20gb", 4, 1, A40 + "-MIG-3g.20gb")],
        extra_labels={"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "custom-1g-shared-3g"}),
    # 2 A100-40GB, all-balanced: per GPU 2x1g.5gb + 1x2g.10gb + 1x3g.20gb, all exclusive.
    node("a100-mig-2", A40, 2, [
        ("nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.5gb", 4, 1, A40 + "-MIG-1g.5gb"),
        ("nvidia.com/mig-2g.10gb", "nvidia.com/mig-2g.10gb", 2, 1, A40 + "-MIG-2g.10gb"),
        ("nvidia.com/mig-3g.20gb", "nvidia.com/mig-3g.20gb", 2, 1, A40 + "-MIG-3g.20gb")],
        extra_labels={"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-balanced"}),
    # Whole H100s.
    node("h100-1", H100, 8, [("nvidia.com/gpu", "nvidia.com/gpu", 8, 1, H100)], cpu="192", mem="2Ti"),
    node("h100-2", H100, 8, [("nvidia.com/gpu", "nvidia.com/gpu", 8, 1, H100)], cpu="192", mem="2Ti"),
    # 4 A10G time-sliced 4 ways (renameByDefault -> nvidia.com/gpu.shared).
    node("a10g-1", "NVIDIA-A10G", 4, [("nvidia.com/gpu", "nvidia.com/gpu.shared", 4, 4, "NVIDIA-A10G")],
         cpu="48", mem="192Gi"),
    node("cpu-1", None, 0, [], cpu="32", mem="128Gi"),
]


def namespace(name, project=None):
    labels = {"kubernetes.io/metadata.name": name}
    if project:
        labels["gpu.themelio.io/project"] = project
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": f"demo-ns-{name}", "labels": labels}}


# Projects: vision (two namespaces), nlp, speech; research has no label and no quota
# (project = namespace name, unlimited).
NAMESPACES = [namespace("default"), namespace("team-a", "vision"), namespace("team-a-dev", "vision"),
              namespace("team-b", "nlp"), namespace("team-c", "speech"), namespace("research")]


def quota(ns, hard):
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "gpu", "namespace": ns, "uid": f"demo-rq-{ns}"},
            "spec": {"hard": hard}}


# Time-sliced quotas count tickets: 8 tickets of a 4-replica slice = 2 slices.
QUOTAS = [
    quota("team-a", {"requests.nvidia.com/mig-1g.5gb.shared": "8", "requests.nvidia.com/gpu": "4"}),
    quota("team-a-dev", {"requests.nvidia.com/mig-1g.5gb.shared": "4"}),
    quota("team-b", {"requests.nvidia.com/mig-1g.5gb.shared": "12", "requests.nvidia.com/mig-3g.20gb": "2",
                     "requests.nvidia.com/gpu": "8"}),
    quota("team-c", {"requests.nvidia.com/gpu": "2", "requests.nvidia.com/gpu.shared": "8",
                     "requests.nvidia.com/mig-2g.10gb": "1"}),
]


def pod(ns, name, resource, amount, node_name=None, unit=None, project=None, sharing=None, mig=None):
    md = {"name": name, "namespace": ns, "uid": f"demo-pod-{ns}-{name}", "resourceVersion": "1"}
    if node_name and unit is not None:
        md["annotations"] = {"gpu.themelio.io/unit": f"{node_name}/{resource}/{unit}",
                             "gpu.themelio.io/amount": "1", "gpu.themelio.io/sharing": sharing,
                             "gpu.themelio.io/project": project}
        if mig:
            md["annotations"]["gpu.themelio.io/mig-profile"] = mig
    spec = {"schedulerName": "default-scheduler",
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "resources": {"requests": {"cpu": "2", "memory": "8Gi", resource: str(amount)},
                                          "limits": {resource: str(amount)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


PODS = [
    pod("team-a", "notebook-0", "nvidia.com/mig-1g.5gb.shared", 1, "a100-mig-1", "0", "vision", "time-sliced", "1g.5gb"),
    pod("team-a", "notebook-1", "nvidia.com/mig-1g.5gb.shared", 1, "a100-mig-1", "0", "vision", "time-sliced", "1g.5gb"),
    pod("team-b", "bert-serve-0", "nvidia.com/mig-1g.5gb.shared", 1, "a100-mig-1", "1", "nlp", "time-sliced", "1g.5gb"),
    pod("team-b", "train-0", "nvidia.com/mig-3g.20gb", 1, "a100-mig-1", "0", "nlp", "exclusive", "3g.20gb"),
    pod("team-c", "asr-train-0", "nvidia.com/gpu", 1, "h100-1", "0", "speech", "exclusive"),
    pod("research", "sweep-0", "nvidia.com/gpu", 1, "h100-2", "3", "research", "exclusive"),
]
web = pod("default", "web-0", "cpu", 1, "cpu-1")
web["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
PODS.append(web)


def main():
    items = NAMESPACES + QUOTAS + NODES + PODS
    with open("demo-cluster.json", "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items},
                  f, indent=1)
        f.write("\n")
    # Example requests in the exact shape kube-scheduler 1.26 sends with nodeCacheCapable: true
    # (the Pod carries no kind/apiVersion).
    p = pod("team-a", "notebook-2", "nvidia.com/mig-1g.5gb.shared", 1)
    del p["apiVersion"], p["kind"]
    names = [n["metadata"]["name"] for n in NODES]
    examples = {
        "filter-request.json": {"Pod": p, "Nodes": None, "NodeNames": names},
        "prioritize-request.json": {"Pod": p, "Nodes": None, "NodeNames": ["a100-mig-1", "a100-mig-2"]},
        "bind-request.json": {"PodName": "notebook-2", "PodNamespace": "team-a",
                              "PodUID": p["metadata"]["uid"], "Node": "a100-mig-1"},
    }
    for name, body in examples.items():
        with open(name, "w") as f:
            json.dump(body, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
