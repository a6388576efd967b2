// gse-node-peers: the surroundings of one node agent, as a process, for tests that run the
// agent's container image (tests/image_check.sh) rather than the code in-process.
//
//   gse-node-peers --kubelet-root=DIR --serviceaccount=DIR --node=NAME
//                  --resources=R[=replicas],... [--admit=RESOURCE]
//
// Serves, until SIGTERM or SIGINT:
//  * the local Kubernetes API server (testsupport/fake_apiserver.h) over HTTPS on 127.0.0.1,
//    with the Node NAME and the namespace team-a. Run it inside the agent's pod network
//    namespace (nsenter): the agent then reaches it as in-cluster code reaches the API server,
//    through KUBERNETES_SERVICE_HOST/PORT and the service account files written to
//    --serviceaccount (token, ca.crt, namespace), which the test mounts where kubelet mounts
//    them (/var/run/secrets/kubernetes.io/serviceaccount);
//  * the test kubelet (testsupport/kubelet/test_kubelet.h) with its device-plugins/ and
//    pod-resources/ sockets under --kubelet-root, the host directories that the DaemonSet's
//    hostPath volumes name: the agent's plugin sockets are created there from inside the
//    container, and kubelet dials them back from outside.
// Reports one line per fact on stdout (flushed), for the calling script to check:
//   apiserver PORT
//   registered RESOURCE devices=N healthy=H      (or: not-registered RESOURCE)
//   admit OK resource=R ids=ID,... visible=NVIDIA_VISIBLE_DEVICES   (or: admit FAILED <why>)
//   start OK                                     (PreStartContainer; or: start FAILED <why>)
//   inventory-annotation OK                      (the agent patched the Node; or: ... MISSING)
//   ready                                        (everything above was tried)
// --admit: a pod annotated with unit 0 of RESOURCE (one device) is created on the node and
// admitted as kubelet admits it, then its container is started.
// Exit: 0 after a signal, 2 on bad flags, 1 when a peer cannot start.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/kubelet/test_kubelet.h"

namespace {

using gse::testing::FakeApiServer;
using gse::testsupport::TestKubelet;

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void Die(int code, const std::string& message) {
  std::fprintf(stderr, "gse-node-peers: %s\n", message.c_str());
  std::exit(code);
}

bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  return static_cast<bool>(out);
}

struct Flags {
  std::string kubelet_root, serviceaccount, node, admit;
  std::vector<std::string> resources;  // names only, replicas stripped
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (!absl::StartsWith(arg, "--") || eq == std::string::npos) Die(2, "flags are --name=value: " + arg);
    const std::string name = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
    if (name == "kubelet-root") {
      f.kubelet_root = value;
    } else if (name == "serviceaccount") {
      f.serviceaccount = value;
    } else if (name == "node") {
      f.node = value;
    } else if (name == "admit") {
      f.admit = value;
    } else if (name == "resources") {
      for (absl::string_view r : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        f.resources.emplace_back(r.substr(0, r.find('=')));
      }
    } else {
      Die(2, "unknown flag --" + name);
    }
  }
  if (f.kubelet_root.empty() || f.serviceaccount.empty() || f.node.empty() || f.resources.empty()) {
    Die(2, "--kubelet-root, --serviceaccount, --node and --resources are required");
  }
  return f;
}

void SeedCluster(FakeApiServer& api, const Flags& f) {
  const std::string node = absl::StrCat(
      R"({"apiVersion":"v1","kind":"Node","metadata":{"name":")", f.node,
      R"(","labels":{"kubernetes.io/hostname":")", f.node,
      R"(","nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB"}},)"
      R"("spec":{},"status":{"capacity":{},"allocatable":{}}})");
  if (absl::Status s = api.Apply("nodes", node); !s.ok()) Die(1, absl::StrCat("node: ", s.message()));
  const std::string ns =
      R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","labels":{"gpu.themelio.io/project":"team-a"}}})";
  if (absl::Status s = api.Apply("namespaces", ns); !s.ok()) Die(1, absl::StrCat("namespace: ", s.message()));
}

// The pod kubelet admits: unit 0 of `resource`, as the extender would have annotated it.
void AdmitOne(FakeApiServer& api, TestKubelet& kubelet, const Flags& f) {
  gse::testing::PodSpec spec;
  spec.namespace_name = "team-a";
  spec.name = "image-check-0";
  spec.node = f.node;
  spec.requests = {{f.admit, "1"}};
  spec.annotations = {{"gpu.themelio.io/unit", absl::StrCat(f.node, "/", f.admit, "/0")},
                      {"gpu.themelio.io/amount", "1"},
                      {"gpu.themelio.io/project", "team-a"}};
  if (absl::Status s = api.Apply("pods", gse::testing::PodJson(spec)); !s.ok()) {
    Say(absl::StrCat("admit FAILED creating the pod: ", s.message()));
    return;
  }
  gse::testsupport::TestPod pod{spec.namespace_name, spec.name, {{"infer", {{f.admit, 1}}}}};
  gse::testsupport::AdmitResult r = kubelet.Admit(pod);
  if (!r.status.ok()) {
    Say(absl::StrCat("admit FAILED ", r.status.message()));
    return;
  }
  const auto& c = r.containers["infer"];
  auto visible = c.envs.find("NVIDIA_VISIBLE_DEVICES");
  Say(absl::StrCat("admit OK resource=", c.resource, " ids=", absl::StrJoin(c.ids, ","),
                   " visible=", visible == c.envs.end() ? "" : visible->second));
  absl::Status start = kubelet.StartContainer(pod.Key(), "infer");
  Say(start.ok() ? std::string("start OK") : absl::StrCat("start FAILED ", start.message()));
  kubelet.RemovePod(pod.Key());  // no start retries behind the test's back
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const Flags f = ParseFlags(argc, argv);

  FakeApiServer::Options options;
  options.tls = true;
  FakeApiServer api(options);
  if (absl::Status s = api.Start(); !s.ok()) Die(1, absl::StrCat("API server: ", s.message()));
  SeedCluster(api, f);
  if (!WriteFile(f.serviceaccount + "/token", "test-token") ||
      !WriteFile(f.serviceaccount + "/ca.crt", api.pki().ca_pem) ||
      !WriteFile(f.serviceaccount + "/namespace", "gpu-slice-agent")) {
    Die(1, "cannot write the service account files into " + f.serviceaccount);
  }
  TestKubelet kubelet(TestKubelet::Options{f.kubelet_root});
  if (absl::Status s = kubelet.Start(); !s.ok()) Die(1, absl::StrCat("test kubelet: ", s.message()));
  Say(absl::StrCat("apiserver ", api.port()));

  for (const std::string& r : f.resources) {
    if (!kubelet.WaitForResource(r, 1, absl::Seconds(60))) {
      Say("not-registered " + r);
      continue;
    }
    int healthy = 0;
    const std::map<std::string, bool> devices = kubelet.Devices(r);
    for (const auto& [id, ok] : devices) healthy += ok ? 1 : 0;
    Say(absl::StrCat("registered ", r, " devices=", devices.size(), " healthy=", healthy));
  }
  if (!f.admit.empty()) AdmitOne(api, kubelet, f);
  bool annotated = false;
  for (int i = 0; i < 100 && !annotated; ++i) {
    std::optional<std::string> node = api.Get("nodes", "", f.node);
    annotated = node && absl::StrContains(*node, "gpu.themelio.io/inventory");
    if (!annotated) absl::SleepFor(absl::Milliseconds(100));
  }
  Say(annotated ? "inventory-annotation OK" : "inventory-annotation MISSING");
  Say("ready");

  int sig = 0;
  sigwait(&signals, &sig);
  kubelet.Stop();
  api.Stop();
  return 0;
}
