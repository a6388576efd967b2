// openb CSV parsing and the mapping onto catalog resources (see openb_import.h).
#include "perf/openb_import.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::replay {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// SplitMix64: the same sequence on every platform (std distributions are not portable).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return Next() % n; }
  double Unit() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t s_;
};

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::pair<int, std::vector<std::string>>> rows;  // (line number, fields)
};

absl::StatusOr<CsvTable> ReadCsv(absl::string_view csv, absl::string_view origin,
                                 const std::vector<std::string>& required) {
  CsvTable t;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(csv, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::vector<std::string> fields = absl::StrSplit(line, ',');
    if (t.header.empty()) {
      t.header = fields;
      for (size_t i = 0; i < required.size(); ++i) {
        if (i >= t.header.size() || t.header[i] != required[i]) {
          return absl::InvalidArgumentError(absl::StrCat(
              origin, ":", line_no, ": header: column ", i + 1, " must be \"", required[i],
              "\" (expected ", absl::StrJoin(required, ","), ")"));
        }
      }
      continue;
    }
    if (fields.size() != t.header.size()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":", line_no, ": ", fields.size(),
                                                     " fields, the header has ", t.header.size()));
    }
    t.rows.emplace_back(line_no, std::move(fields));
  }
  if (t.header.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, ": empty file"));
  return t;
}

absl::Status RowError(absl::string_view origin, int line, absl::string_view column,
                      absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": ", column, ": ", reason));
}

absl::Status Int(absl::string_view origin, int line, absl::string_view column,
                 const std::string& text, int64_t lo, int64_t hi, int64_t* out) {
  if (!absl::SimpleAtoi(text, out)) {
    return RowError(origin, line, column, absl::StrCat("\"", text, "\" is not an integer"));
  }
  if (*out < lo || *out > hi) {
    return RowError(origin, line, column, absl::StrCat(*out, " is outside ", lo, "..", hi));
  }
  return absl::OkStatus();
}

// Kubernetes label values: at most 63 characters [A-Za-z0-9._-], alphanumeric at both ends.
bool ValidLabelValue(absl::string_view v) {
  if (v.empty() || v.size() > 63) return false;
  for (char c : v) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return std::isalnum(static_cast<unsigned char>(v.front())) &&
         std::isalnum(static_cast<unsigned char>(v.back()));
}

bool ValidDnsLabel(absl::string_view v) {
  if (v.empty() || v.size() > 63) return false;
  for (char c : v) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
          c == '-')) {
      return false;
    }
  }
  return v.front() != '-' && v.back() != '-';
}

bool ValidDnsSubdomain(absl::string_view v) {
  if (v.empty() || v.size() > 253) return false;
  for (absl::string_view part : absl::StrSplit(v, '.')) {
    if (!ValidDnsLabel(part)) return false;
  }
  return true;
}

void Str(Writer& w, absl::string_view s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

// ---- the two mappings

constexpr char kA100[] = "NVIDIA-A100-SXM4-40GB";
constexpr char kH100[] = "NVIDIA-H100-80GB-HBM3";
constexpr char kCardModelLabel[] = "alibabacloud.com/gpu-card-model";

bool IsA100Family(absl::string_view model) {
  return model == "T4" || model == "P100" || model == "V100M16" || model == "A10";
}

struct MigProfile {
  int g;
  const char* a100;
  const char* h100;
};
constexpr MigProfile kProfiles[] = {{3, "3g.20gb", "3g.40gb"}, {4, "4g.20gb", "4g.40gb"}, {7, "7g.40gb", "7g.80gb"}};

std::string SharedResource(const MigProfile& p, bool a100) {
  return absl::StrCat("nvidia.com/mig-", a100 ? p.a100 : p.h100, ".shared");
}

std::string CatalogYaml(const OpenbOptions& o) {
  std::string y =
      "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n"
      "- resource: nvidia.com/gpu\n  unit: gpu\n  sharing: exclusive\n"
      "  displayName: GPU (whole, openb replay)\n";
  if (!o.mig) {
    absl::StrAppend(&y,
                    "- resource: nvidia.com/gpu.mps\n  unit: gpu\n  sharing: mps\n  replicas: ",
                    o.mps_replicas, "\n  displayName: GPU (MPS share, openb replay)\n");
    return y;
  }
  for (bool a100 : {true, false}) {
    for (const MigProfile& p : kProfiles) {
      absl::StrAppend(&y, "- resource: ", SharedResource(p, a100),
                      "\n  unit: mig\n  sharing: time-sliced\n  replicas: ", o.ts_replicas,
                      "\n  migProfile: ", a100 ? p.a100 : p.h100, "\n  product: ",
                      a100 ? kA100 : kH100, "\n  displayName: MIG ", a100 ? p.a100 : p.h100,
                      " (time-sliced, openb replay)\n");
    }
  }
  return y;
}

struct ProjectNs {
  std::string project;
  std::string ns;
  double weight;
};

void WriteNode(Writer& w, const OpenbNode& n, const OpenbOptions& o, int* mig_gpu_counter,
               std::map<std::string, int64_t>* totals) {
  std::map<std::string, std::string> labels = {
      {"kubernetes.io/hostname", n.name},
      {"kubernetes.io/os", "linux"},
      {kCardModelLabel, n.model},
      {"nvidia.com/gpu.count", absl::StrCat(n.gpus)},
  };
  std::map<std::string, std::string> alloc = {
      {"cpu", absl::StrCat(n.cpu_milli, "m")},
      {"memory", absl::StrCat(n.memory_mib, "Mi")},
      {"pods", "1001"},
  };
  if (!o.mig) {
    labels["nvidia.com/gpu.product"] = n.model;
    if (n.gpus > 0) {
      labels["nvidia.com/gpu.mps.replicas"] = absl::StrCat(o.mps_replicas);
      labels["nvidia.com/gpu.mps.count"] = absl::StrCat(n.gpus);
      alloc["nvidia.com/gpu"] = absl::StrCat(n.gpus);
      alloc["nvidia.com/gpu.mps"] = absl::StrCat(int64_t{n.gpus} * o.mps_replicas);
    }
  } else {
    const bool a100 = IsA100Family(n.model);
    labels["nvidia.com/gpu.product"] = a100 ? kA100 : kH100;
    const int mig = n.gpus == 0 ? 0 : (n.gpus + 3) / 4;
    const int whole = n.gpus - mig;
    if (whole > 0) alloc["nvidia.com/gpu"] = absl::StrCat(whole);
    (*totals)["nvidia.com/gpu"] += whole;
    std::map<std::string, int> slices;  // base name -> count
    for (int i = 0; i < mig; ++i) {
      const bool layout_a = (*mig_gpu_counter)++ % 2 == 0;
      if (layout_a) {
        ++slices[absl::StrCat("nvidia.com/mig-", a100 ? kProfiles[1].a100 : kProfiles[1].h100)];
        ++slices[absl::StrCat("nvidia.com/mig-", a100 ? kProfiles[0].a100 : kProfiles[0].h100)];
      } else {
        ++slices[absl::StrCat("nvidia.com/mig-", a100 ? kProfiles[2].a100 : kProfiles[2].h100)];
      }
    }
    for (const auto& [base, count] : slices) {
      labels[base + ".count"] = absl::StrCat(count);
      labels[base + ".replicas"] = absl::StrCat(o.ts_replicas);
      alloc[base + ".shared"] = absl::StrCat(int64_t{count} * o.ts_replicas);
      (*totals)[base + ".shared"] += int64_t{count} * o.ts_replicas;
    }
    labels["nvidia.com/mig.strategy"] = "mixed";
  }
  w.StartObject();
  w.Key("apiVersion");
  w.String("v1");
  w.Key("kind");
  w.String("Node");
  w.Key("metadata");
  w.StartObject();
  w.Key("name");
  Str(w, n.name);
  w.Key("labels");
  w.StartObject();
  for (const auto& [k, v] : labels) {
    Str(w, k);
    Str(w, v);
  }
  w.EndObject();
  w.EndObject();
  w.Key("status");
  w.StartObject();
  for (const char* key : {"allocatable", "capacity"}) {
    w.Key(key);
    w.StartObject();
    for (const auto& [k, v] : alloc) {
      Str(w, k);
      Str(w, v);
    }
    w.EndObject();
  }
  w.EndObject();
  w.EndObject();
}

}  // namespace

absl::StatusOr<std::vector<OpenbNode>> ParseOpenbNodes(absl::string_view csv, absl::string_view origin) {
  absl::StatusOr<CsvTable> t = ReadCsv(csv, origin, {"sn", "cpu_milli", "memory_mib", "gpu", "model"});
  if (!t.ok()) return t.status();
  std::vector<OpenbNode> out;
  std::set<std::string> seen;
  for (const auto& [line, f] : t->rows) {
    OpenbNode n;
    n.name = f[0];
    if (!ValidDnsSubdomain(n.name)) {
      return RowError(origin, line, "sn", absl::StrCat("\"", n.name, "\" is not a valid node name"));
    }
    if (!seen.insert(n.name).second) return RowError(origin, line, "sn", absl::StrCat("duplicate node \"", n.name, "\""));
    int64_t gpus = 0;
    if (absl::Status s = Int(origin, line, "cpu_milli", f[1], 1, int64_t{1} << 40, &n.cpu_milli); !s.ok()) return s;
    if (absl::Status s = Int(origin, line, "memory_mib", f[2], 1, int64_t{1} << 40, &n.memory_mib); !s.ok()) return s;
    if (absl::Status s = Int(origin, line, "gpu", f[3], 0, 64, &gpus); !s.ok()) return s;
    n.gpus = static_cast<int32_t>(gpus);
    n.model = f[4];
    if (n.gpus > 0 && !ValidLabelValue(n.model)) {
      return RowError(origin, line, "model", absl::StrCat("\"", n.model, "\" is not a valid label value"));
    }
    out.push_back(std::move(n));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, ": no nodes"));
  return out;
}

absl::StatusOr<std::vector<OpenbPod>> ParseOpenbPods(absl::string_view csv, absl::string_view origin) {
  absl::StatusOr<CsvTable> t =
      ReadCsv(csv, origin, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"});
  if (!t.ok()) return t.status();
  int spec_col = -1;
  for (size_t i = 0; i < t->header.size(); ++i) {
    if (t->header[i] == "gpu_spec") spec_col = static_cast<int>(i);
  }
  std::vector<OpenbPod> out;
  std::set<std::string> seen;
  for (const auto& [line, f] : t->rows) {
    OpenbPod p;
    p.name = f[0];
    if (!ValidDnsSubdomain(p.name) || p.name.size() > 200) {
      return RowError(origin, line, "name", absl::StrCat("\"", p.name, "\" is not a valid pod name"));
    }
    if (!seen.insert(p.name).second) return RowError(origin, line, "name", absl::StrCat("duplicate pod \"", p.name, "\""));
    int64_t n = 0, milli = 0;
    if (absl::Status s = Int(origin, line, "cpu_milli", f[1], 0, int64_t{1} << 40, &p.cpu_milli); !s.ok()) return s;
    if (absl::Status s = Int(origin, line, "memory_mib", f[2], 0, int64_t{1} << 40, &p.memory_mib); !s.ok()) return s;
    if (absl::Status s = Int(origin, line, "num_gpu", f[3], 0, 64, &n); !s.ok()) return s;
    if (absl::Status s = Int(origin, line, "gpu_milli", f[4], 0, 1000, &milli); !s.ok()) return s;
    if (n > 1 && milli != 1000) {
      return RowError(origin, line, "gpu_milli", absl::StrCat(milli, " with num_gpu ", n, ": a multi-GPU pod takes whole GPUs (1000)"));
    }
    if (n == 1 && milli == 0) return RowError(origin, line, "gpu_milli", "0 with num_gpu 1");
    if (n == 0 && milli != 0) return RowError(origin, line, "gpu_milli", absl::StrCat(milli, " with num_gpu 0"));
    p.num_gpu = static_cast<int32_t>(n);
    p.gpu_milli = static_cast<int32_t>(milli);
    if (spec_col >= 0 && !f[static_cast<size_t>(spec_col)].empty()) {
      for (absl::string_view m : absl::StrSplit(f[static_cast<size_t>(spec_col)], '|')) {
        if (!ValidLabelValue(m)) {
          return RowError(origin, line, "gpu_spec", absl::StrCat("\"", m, "\" is not a valid GPU model"));
        }
        p.gpu_spec.emplace_back(m);
      }
      if (p.num_gpu == 0) return RowError(origin, line, "gpu_spec", "set on a pod without GPUs");
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, ": no pods"));
  return out;
}

absl::StatusOr<std::vector<ProjectShare>> ParseHeliosQuotas(absl::string_view csv, absl::string_view origin) {
  absl::StatusOr<CsvTable> t = ReadCsv(csv, origin, {"date"});
  if (!t.ok()) return t.status();
  std::vector<double> sums(t->header.size(), 0);
  for (const auto& [line, f] : t->rows) {
    for (size_t i = 1; i < f.size(); ++i) {
      if (t->header[i] == "total") continue;
      int64_t v = 0;
      if (absl::Status s = Int(origin, line, t->header[i], f[i], 0, 1000000, &v); !s.ok()) return s;
      sums[i] += static_cast<double>(v);
    }
  }
  std::vector<ProjectShare> out;
  std::set<std::string> namespaces;
  for (size_t i = 1; i < t->header.size(); ++i) {
    if (t->header[i] == "total" || sums[i] <= 0) continue;
    const std::string ns = absl::AsciiStrToLower(t->header[i]);
    if (!ValidDnsLabel(ns) || !ValidLabelValue(t->header[i])) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":1: column \"", t->header[i], "\": not usable as a project name"));
    }
    if (!namespaces.insert(ns).second) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":1: column \"", t->header[i], "\": lower-cased name collides"));
    }
    out.push_back({t->header[i], sums[i] / static_cast<double>(t->rows.size())});
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, ": no VC with a GPU quota"));
  return out;
}

absl::StatusOr<OpenbImport> ImportOpenb(const std::vector<OpenbNode>& nodes,
                                        const std::vector<OpenbPod>& pods,
                                        const OpenbOptions& o) {
  if (o.mps_replicas < 1 || o.mps_replicas > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("--mps-replicas: must be 1..1000, got ", o.mps_replicas));
  }
  if (o.ts_replicas < 1 || o.ts_replicas > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--ts-replicas: must be 1..64, got ", o.ts_replicas));
  }
  OpenbImport out;
  out.trace.header.catalog = CatalogYaml(o);
  if (!o.mig) out.trace.header.twins = {{"nvidia.com/gpu", "nvidia.com/gpu.mps"}};
  out.trace.header.source = o.source;

  std::vector<ProjectNs> projects;
  double weight_sum = 0;
  for (const ProjectShare& p : o.projects) {
    if (p.weight <= 0) continue;
    projects.push_back({p.name, absl::AsciiStrToLower(p.name), p.weight});
    weight_sum += p.weight;
  }
  if (projects.empty()) {
    projects.push_back({"default", "default", 1});
    weight_sum = 1;
  }

  // ---- nodes
  int mig_gpu_counter = 0;
  std::map<std::string, int64_t> totals;  // MIG mapping: cluster totals per resource
  double a100_mig = 0, h100_mig = 0;
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("apiVersion");
  w.String("v1");
  w.Key("kind");
  w.String("List");
  w.Key("items");
  w.StartArray();
  for (const ProjectNs& p : projects) WriteProjectNamespace(w, p.ns, p.project);
  for (const OpenbNode& n : nodes) {
    out.cluster_gpus += n.gpus;
    if (o.mig) ((IsA100Family(n.model) ? a100_mig : h100_mig) += n.gpus == 0 ? 0 : (n.gpus + 3) / 4);
    WriteNode(w, n, o, &mig_gpu_counter, &totals);
  }
  if (o.mig && o.quota_factor > 0) {
    for (const ProjectNs& p : projects) {
      const double share = p.weight / weight_sum;
      w.StartObject();
      w.Key("apiVersion");
      w.String("v1");
      w.Key("kind");
      w.String("ResourceQuota");
      w.Key("metadata");
      w.StartObject();
      w.Key("name");
      w.String("gpu-quota");
      w.Key("namespace");
      Str(w, p.ns);
      w.EndObject();
      w.Key("spec");
      w.StartObject();
      w.Key("hard");
      w.StartObject();
      for (const auto& [resource, total] : totals) {
        Str(w, absl::StrCat("requests.", resource));
        Str(w, absl::StrCat(static_cast<int64_t>(std::ceil(o.quota_factor * share * static_cast<double>(total)))));
      }
      w.EndObject();
      w.EndObject();
      w.EndObject();
    }
  }
  w.EndArray();
  w.EndObject();
  Event objects;
  objects.type = EventType::kObjects;
  objects.json.assign(buf.GetString(), buf.GetSize());
  out.trace.events.push_back(std::move(objects));
  if (out.cluster_gpus <= 0) return absl::InvalidArgumentError("openb nodes: the cluster has no GPUs");

  // ---- which pods arrive (the FGD method)
  std::vector<std::pair<size_t, int>> drawn;  // (index into pods, copy number)
  if (o.load > 0) {
    Rng rng(o.seed * 0x100000001b3ull + 1);
    double sum = 0;
    std::vector<int> copies(pods.size(), 0);
    const double target = o.load * out.cluster_gpus;
    double total_request = 0;
    for (const OpenbPod& p : pods) total_request += p.GpuRequest();
    if (total_request <= 0) return absl::InvalidArgumentError("openb pods: no pod requests a GPU; --load cannot be reached");
    while (sum < target) {
      const size_t i = rng.Below(pods.size());
      drawn.emplace_back(i, copies[i]++);
      sum += pods[i].GpuRequest();
    }
    std::sort(drawn.begin(), drawn.end());
  } else {
    for (size_t i = 0; i < pods.size(); ++i) drawn.emplace_back(i, 0);
  }
  if (o.shuffle) {
    Rng order_rng(o.seed * 0xd6e8feb86659fd93ull + 13);
    for (size_t i = drawn.size(); i > 1; --i) std::swap(drawn[i - 1], drawn[order_rng.Below(i)]);
  }

  // ---- pods
  Rng project_rng(o.seed * 0x9e3779b97f4a7c15ull + 7);
  Rng family_rng(o.seed * 0xc2b2ae3d27d4eb4full + 11);
  for (const auto& [index, copy] : drawn) {
    const OpenbPod& p = pods[index];
    Event ev;
    ev.type = EventType::kPodArrive;
    PodArrival& a = ev.pod;
    double u = project_rng.Unit() * weight_sum;
    const ProjectNs* project = &projects.back();
    for (const ProjectNs& pr : projects) {
      if (u < pr.weight) {
        project = &pr;
        break;
      }
      u -= pr.weight;
    }
    a.namespace_name = project->ns;
    a.name = copy == 0 ? p.name : absl::StrCat(p.name, "-c", copy);
    a.resources["cpu"] = absl::StrCat(p.cpu_milli, "m");
    a.resources["memory"] = absl::StrCat(p.memory_mib, "Mi");
    a.gpu = p.GpuRequest();
    if (p.num_gpu > 0) {
      if (!o.mig) {
        if (p.gpu_milli >= 1000) {
          a.resources["nvidia.com/gpu"] = absl::StrCat(p.num_gpu);
        } else {
          const int64_t shares = (int64_t{p.gpu_milli} * o.mps_replicas + 999) / 1000;
          a.resources["nvidia.com/gpu.mps"] = absl::StrCat(std::max<int64_t>(1, shares));
        }
        if (!p.gpu_spec.empty()) a.affinity.push_back({"nvidia.com/gpu.product", "In", p.gpu_spec});
      } else {
        if (p.gpu_milli >= 1000) {
          a.resources["nvidia.com/gpu"] = absl::StrCat(p.num_gpu);
        } else {
          // Family: the one gpu_spec allows, else drawn by MIG GPUs per family.
          bool any_a = p.gpu_spec.empty(), any_h = p.gpu_spec.empty();
          for (const std::string& m : p.gpu_spec) (IsA100Family(m) ? any_a : any_h) = true;
          bool a100 = any_a && (!any_h || family_rng.Unit() * (a100_mig + h100_mig) < a100_mig);
          if (a100_mig <= 0) a100 = false;
          if (h100_mig <= 0) a100 = true;
          const MigProfile* chosen = &kProfiles[2];
          for (const MigProfile& prof : kProfiles) {
            if (prof.g * 1000 >= p.gpu_milli * 7) {
              chosen = &prof;
              break;
            }
          }
          a.resources[SharedResource(*chosen, a100)] = "1";
          // What the ticket reserves: its slice's share of the GPU, split among the replicas.
          a.gpu = chosen->g / 7.0 / o.ts_replicas;
        }
        if (!p.gpu_spec.empty()) a.affinity.push_back({kCardModelLabel, "In", p.gpu_spec});
      }
    }
    out.arrived_gpu += a.gpu;
    out.trace.events.push_back(std::move(ev));
  }
  return out;
}

}  // namespace gse::replay
