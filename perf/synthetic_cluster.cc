#include "perf/synthetic_cluster.h"

#include <cstdio>
#include <random>

#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::perf {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr const char* kA100 = "NVIDIA-A100-SXM4-40GB";
constexpr const char* kH100 = "NVIDIA-H100-80GB-HBM3";

bool IsMigNode(const SyntheticClusterSpec& spec, int index) {
  // Interleaved so that any prefix of the node list has the same mix.
  int per_hundred = static_cast<int>(spec.mig_fraction * 100 + 0.5);
  return (index % 100) < per_hundred;
}

std::string NodeName(int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "node-%05d", index);
  return buf;
}

void Str(Writer& w, const std::string& s) { w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size())); }
void KV(Writer& w, const std::string& k, const std::string& v) { Str(w, k); Str(w, v); }

// Per-node layout (counts of physical units).
struct Layout {
  int small_slices = 0;  // nvidia.com/mig-1g.5gb, time-sliced -> .shared
  int big_slices = 0;    // nvidia.com/mig-3g.20gb, exclusive
  int gpus = 0;          // nvidia.com/gpu, exclusive
};

Layout LayoutOf(const SyntheticClusterSpec& spec, int index) {
  Layout l;
  if (IsMigNode(spec, index)) {
    int small_gpus = spec.gpus_per_node / 2;
    l.small_slices = small_gpus * 7;
    l.big_slices = (spec.gpus_per_node - small_gpus) * 2;
  } else {
    l.gpus = spec.gpus_per_node;
  }
  return l;
}

void WriteNode(Writer& w, const SyntheticClusterSpec& spec, int index, bool with_kind) {
  const Layout l = LayoutOf(spec, index);
  const std::string name = NodeName(index);
  const bool mig = IsMigNode(spec, index);
  w.StartObject();
  if (with_kind) {
    KV(w, "apiVersion", "v1");
    KV(w, "kind", "Node");
  }
  Str(w, "metadata");
  w.StartObject();
  KV(w, "name", name);
  KV(w, "uid", "uid-" + name);
  KV(w, "resourceVersion", "1");
  Str(w, "labels");
  w.StartObject();
  KV(w, "kubernetes.io/hostname", name);
  KV(w, "kubernetes.io/os", "linux");
  KV(w, "nvidia.com/gpu.present", "true");
  KV(w, "nvidia.com/gpu.product", mig ? kA100 : kH100);
  KV(w, "nvidia.com/gpu.count", std::to_string(spec.gpus_per_node));
  if (mig) {
    KV(w, "nvidia.com/mig.strategy", "mixed");
    KV(w, "nvidia.com/mig-1g.5gb.count", std::to_string(l.small_slices));
    KV(w, "nvidia.com/mig-1g.5gb.replicas", std::to_string(spec.replicas));
    KV(w, "nvidia.com/mig-1g.5gb.sharing-strategy", "time-slicing");
    KV(w, "nvidia.com/mig-1g.5gb.product", std::string(kA100) + "-MIG-1g.5gb");
    KV(w, "nvidia.com/mig-3g.20gb.count", std::to_string(l.big_slices));
    KV(w, "nvidia.com/mig-3g.20gb.replicas", "1");
    KV(w, "nvidia.com/mig-3g.20gb.product", std::string(kA100) + "-MIG-3g.20gb");
  } else {
    KV(w, "nvidia.com/gpu.replicas", "1");
  }
  w.EndObject();
  w.EndObject();
  Str(w, "spec");
  w.StartObject();
  w.EndObject();
  Str(w, "status");
  w.StartObject();
  for (const char* field : {"capacity", "allocatable"}) {
    Str(w, field);
    w.StartObject();
    KV(w, "cpu", "128");
    KV(w, "memory", "1056462756Ki");
    KV(w, "pods", "250");
    if (mig) {
      KV(w, "nvidia.com/mig-1g.5gb.shared", std::to_string(l.small_slices * spec.replicas));
      KV(w, "nvidia.com/mig-3g.20gb", std::to_string(l.big_slices));
    } else {
      KV(w, "nvidia.com/gpu", std::to_string(l.gpus));
    }
    w.EndObject();
  }
  w.EndObject();
  w.EndObject();
}

void WritePod(Writer& w, const std::string& ns, const std::string& name, const std::string& uid,
              const std::string& resource, int amount, const std::string& node,
              const std::string& unit_annotation, bool with_kind) {
  w.StartObject();
  if (with_kind) {
    KV(w, "apiVersion", "v1");
    KV(w, "kind", "Pod");
  }
  Str(w, "metadata");
  w.StartObject();
  KV(w, "name", name);
  KV(w, "namespace", ns);
  KV(w, "uid", uid);
  if (!unit_annotation.empty()) {
    Str(w, "annotations");
    w.StartObject();
    KV(w, "gpu.themelio.io/unit", unit_annotation);
    KV(w, "gpu.themelio.io/amount", "1");
    w.EndObject();
  }
  w.EndObject();
  Str(w, "spec");
  w.StartObject();
  if (!node.empty()) KV(w, "nodeName", node);
  KV(w, "schedulerName", "default-scheduler");
  Str(w, "containers");
  w.StartArray();
  w.StartObject();
  KV(w, "name", "main");
  Str(w, "resources");
  w.StartObject();
  for (const char* field : {"requests", "limits"}) {
    Str(w, field);
    w.StartObject();
    KV(w, resource, std::to_string(amount));
    w.EndObject();
  }
  w.EndObject();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  Str(w, "status");
  w.StartObject();
  KV(w, "phase", node.empty() ? "Pending" : "Running");
  w.EndObject();
  w.EndObject();
}

}  // namespace

std::string ProjectNamespace(int project) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "proj-%03d", project);
  return buf;
}

std::vector<std::string> SyntheticNodeNames(const SyntheticClusterSpec& spec) {
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(spec.nodes));
  for (int i = 0; i < spec.nodes; ++i) names.push_back(NodeName(i));
  return names;
}

std::string SyntheticNodeJson(const SyntheticClusterSpec& spec, int index) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  WriteNode(w, spec, index, /*with_kind=*/false);
  return std::string(buf.GetString(), buf.GetSize());
}

std::string PendingPodJson(const std::string& ns, const std::string& name, const std::string& uid,
                           const std::string& resource, int amount) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  WritePod(w, ns, name, uid, resource, amount, "", "", /*with_kind=*/false);
  return std::string(buf.GetString(), buf.GetSize());
}

std::string SyntheticClusterJson(const SyntheticClusterSpec& spec) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  KV(w, "apiVersion", "v1");
  KV(w, "kind", "List");
  Str(w, "items");
  w.StartArray();
  for (int p = 0; p < spec.projects; ++p) {
    const std::string ns = ProjectNamespace(p);
    w.StartObject();
    KV(w, "apiVersion", "v1");
    KV(w, "kind", "Namespace");
    Str(w, "metadata");
    w.StartObject();
    KV(w, "name", ns);
    w.EndObject();
    w.EndObject();
  }
  for (int i = 0; i < spec.nodes; ++i) WriteNode(w, spec, i, /*with_kind=*/true);

  // Bound pods: walk nodes in a seeded order and fill units; each time-sliced slice belongs to
  // one project (I2), whose pods take its tickets one by one.
  std::mt19937_64 rng(spec.seed);
  int placed = 0;
  for (int i = 0; i < spec.nodes && placed < spec.bound_pods; ++i) {
    const Layout l = LayoutOf(spec, i);
    const std::string node = NodeName(i);
    auto place = [&](const std::string& resource, int unit, int tickets) {
      const int project = static_cast<int>(rng() % static_cast<uint64_t>(spec.projects));
      const std::string ns = ProjectNamespace(project);
      for (int t = 0; t < tickets && placed < spec.bound_pods; ++t, ++placed) {
        const std::string name = "p" + std::to_string(placed);
        WritePod(w, ns, name, "uid-" + name, resource, 1, node,
                 node + "/" + resource + "/" + std::to_string(unit), /*with_kind=*/true);
      }
    };
    // Leave roughly a quarter of each node's units free so decisions have room to choose.
    for (int u = 0; u < l.small_slices * 3 / 4; ++u) {
      place("nvidia.com/mig-1g.5gb.shared", u, 1 + static_cast<int>(rng() % static_cast<uint64_t>(spec.replicas)));
    }
    for (int u = 0; u < l.big_slices / 2; ++u) place("nvidia.com/mig-3g.20gb", u, 1);
    for (int u = 0; u < l.gpus * 3 / 4; ++u) place("nvidia.com/gpu", u, 1);
  }
  w.EndArray();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace gse::perf
