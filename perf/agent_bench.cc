// agent_bench: how long kubelet waits for the node agent during admission.
//
// A test kubelet (testsupport/kubelet/) and the agent's device plugin talk real gRPC over unix
// sockets, as on a node. The node has one A100 with --slices time-sliced 1g.5gb slices of
// --replicas tickets each; pods of --slices projects (one per slice) arrive one at a time, as
// the extender's per-node gate lets them, and kubelet admits each: GetPreferredAllocation,
// then Allocate. The node fills to --pods pods; that is repeated --rounds times. Printed: p50
// and p99 of both RPCs as kubelet sees them, and of the floor, an empty gRPC call
// (GetDevicePluginOptions) to the same plugin over the same socket, with the ratios.
// Figures only; nothing is asserted.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/admission_guard.h"
#include "agent/device_health.h"
#include "agent/inventory.h"
#include "agent/plugin_registrar.h"
#include "agent/pod_resources.h"
#include "agent/unit_map.h"
#include "state/assignment.h"
#include "testsupport/kubelet/fixed_pod_source.h"
#include "testsupport/kubelet/test_kubelet.h"

ABSL_FLAG(int32_t, pods, 110, "pods on the node at the end of a round (kubelet's default max)");
ABSL_FLAG(int32_t, rounds, 5, "times the node is filled");
ABSL_FLAG(int32_t, slices, 7, "1g.5gb slices on the GPU (one project each)");
ABSL_FLAG(int32_t, replicas, 16, "tickets per slice");

namespace {

constexpr char kResource[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kNode[] = "bench-node";

double Quantile(std::vector<absl::Duration> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return absl::ToDoubleMicroseconds(v[std::min(i, v.size() - 1)]);
}

std::string Inventory(int slices) {
  std::string migs;
  for (int i = 0; i < slices; ++i) {
    absl::StrAppend(&migs, i ? "," : "", R"({"uuid": "MIG-bench-)", i,
                    R"(", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": )", i, "}");
  }
  return absl::StrCat(R"({"gpus": [{"index": 0, "uuid": "GPU-bench", "product": "NVIDIA A100-SXM4-40GB",
    "memoryMiB": 40960, "migEnabled": true, "migDevices": [)", migs, "]}]}");
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace gse;
  const int pods = absl::GetFlag(FLAGS_pods);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int slices = absl::GetFlag(FLAGS_slices);
  const int replicas = absl::GetFlag(FLAGS_replicas);
  if (pods < 1 || slices < 1 || replicas < 1 || pods > slices * replicas) {
    std::fprintf(stderr, "agent_bench: need 1 <= pods <= slices * replicas\n");
    return 2;
  }
  char tmpl[] = "/tmp/gse-agent-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string root = tmpl;

  testsupport::TestKubelet kubelet({root, 1});
  if (!kubelet.Start().ok()) return 1;
  auto inv = agent::ParseInventoryJson(Inventory(slices));
  auto map = agent::UnitMap::Build(*inv, Catalog::BuiltIn(),
                                   {agent::ServedSpec{kResource, replicas}});
  if (!inv.ok() || !map.ok()) return 1;
  testsupport::FixedPodSource source;
  agent::PodResourcesClient pod_resources(kubelet.pod_resources_socket());
  agent::AdmissionOptions ao;
  ao.node = kNode;
  agent::AdmissionGuard guard(&Catalog::BuiltIn(), &source, &pod_resources, ao);
  agent::DeviceHealth health;
  agent::RegistrarOptions ro;
  ro.device_plugin_dir = kubelet.device_plugin_dir();
  agent::PluginRegistrar registrar(&*map, &guard, &health, agent::PluginOptions{}, nullptr, ro);
  if (!registrar.Start().ok() ||
      !kubelet.WaitForResource(kResource, static_cast<size_t>(slices * replicas),
                               absl::Seconds(30))) {
    std::fprintf(stderr, "agent_bench: the plugin did not register\n");
    return 1;
  }

  std::vector<absl::Duration> preferred, allocate, floor;
  int failures = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> keys;
    for (int i = 0; i < pods; ++i) {
      const int slice = i % slices;
      agent::NodePod p;
      p.namespace_name = absl::StrCat("project-", slice);
      p.name = absl::StrCat("nb-", round, "-", i);
      p.node = kNode;
      p.phase = "Pending";
      p.creation_timestamp = absl::StrCat("2026-01-01T00:", 10 + round, ":", 10 + i % 50, "Z");
      p.device_needs[kResource] = 1;
      p.annotations[std::string(kAnnotationUnit)] = absl::StrCat(kNode, "/", kResource, "/", slice);
      p.annotations[std::string(kAnnotationAmount)] = "1";
      p.annotations[std::string(kAnnotationProject)] = p.namespace_name;
      source.Put(p);
      keys.push_back(p.Key());
      testsupport::TestPod t{p.namespace_name, p.name, {{"main", {{kResource, 1}}}}};
      testsupport::AdmitResult r = kubelet.Admit(t);
      if (!r.status.ok()) {
        ++failures;
        continue;
      }
      preferred.push_back(r.preferred_time);
      allocate.push_back(r.allocate_time);
      auto f = kubelet.TimeEmptyCall(kResource);
      if (f.ok()) floor.push_back(*f);
    }
    // The node empties: pods finish, kubelet and the agent forget them.
    for (const std::string& k : keys) {
      kubelet.RemovePod(k);
      source.Remove(k);
    }
    auto view = pod_resources.List(absl::Seconds(5));
    if (view.ok()) guard.UpdatePodResources(*view);
  }
  registrar.Stop();
  kubelet.Stop();
  std::string cmd = "rm -rf " + root;
  (void)std::system(cmd.c_str());

  const double f50 = Quantile(floor, 0.5), f99 = Quantile(floor, 0.99);
  std::printf("agent_bench: %d rounds x %d pods, %d slices x %d tickets, %zu admissions, %d failed\n",
              rounds, pods, slices, replicas, allocate.size(), failures);
  std::printf("%-28s %10s %10s %10s\n", "call (kubelet's view)", "p50 us", "p99 us", "p99/floor");
  std::printf("%-28s %10.1f %10.1f %10s\n", "floor: empty gRPC call", f50, f99, "1.00");
  for (const auto& [name, v] : {std::pair<const char*, std::vector<absl::Duration>*>{
                                    "GetPreferredAllocation", &preferred},
                                {"Allocate", &allocate}}) {
    const double p99 = Quantile(*v, 0.99);
    std::printf("%-28s %10.1f %10.1f %10.2f\n", name, Quantile(*v, 0.5), p99,
                f99 > 0 ? p99 / f99 : 0.0);
  }
  return failures == 0 ? 0 : 1;
}
