// gpu-slice-agent's flags: every bad value is refused with a message that names the flag and
// the value (AgentConfigFromFlags), and the binary exits 2 with that message before it touches
// kubelet or the API server. Also --help, and a clean SIGTERM stop of a running agent that
// serves /metrics and /healthz.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <httplib.h>

// absl's flag storage reads through a seqlock whose std::atomic_thread_fence GCC rejects in
// ThreadSanitizer builds (-Wtsan); flags are set from the test thread only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#pragma GCC diagnostic pop
#include "absl/strings/str_cat.h"
#include "agent/agent_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/kubelet/test_kubelet.h"
#include "testsupport/paths.h"
#include "tests/testing/eventually.h"

ABSL_DECLARE_FLAG(std::string, node_name);
ABSL_DECLARE_FLAG(std::string, resources);
ABSL_DECLARE_FLAG(std::string, device_plugin_dir);
ABSL_DECLARE_FLAG(std::string, pod_resources_socket);
ABSL_DECLARE_FLAG(std::string, device_list_strategy);
ABSL_DECLARE_FLAG(std::string, cdi_kind);
ABSL_DECLARE_FLAG(std::string, listen);
ABSL_DECLARE_FLAG(absl::Duration, audit_interval);
ABSL_DECLARE_FLAG(absl::Duration, kubelet_poll);
ABSL_DECLARE_FLAG(absl::Duration, resync_timeout);

namespace gse::agent {
namespace {

using ::testing::HasSubstr;

class AgentFlagsTest : public ::testing::Test {
 protected:
  absl::FlagSaver restore_;  // flags are process-wide: every test leaves them as it found them
  void SetUp() override {
    absl::SetFlag(&FLAGS_node_name, "node-a");
    absl::SetFlag(&FLAGS_resources, "nvidia.com/mig-1g.5gb.shared");
  }
  static std::string Error() {
    absl::StatusOr<AgentConfig> c = AgentConfigFromFlags();
    return c.ok() ? "" : std::string(c.status().message());
  }
};

TEST_F(AgentFlagsTest, DefaultsAreAValidConfiguration) {
  absl::StatusOr<AgentConfig> c = AgentConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->agent.node, "node-a");
  EXPECT_EQ(c->agent.registrar.device_plugin_dir, "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(c->agent.pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_TRUE(c->agent.plugin.strategy.envvar);
  EXPECT_EQ(c->listen.host, "0.0.0.0");
  EXPECT_EQ(c->listen.port, 8890);
  EXPECT_EQ(c->agent.audit.interval, absl::Seconds(10));
}

TEST_F(AgentFlagsTest, BadValuesNameTheFlagAndTheValue) {
  struct Case {
    std::function<void()> set;
    const char* error;
  };
  const std::vector<Case> cases = {
      {[] { absl::SetFlag(&FLAGS_node_name, "Node_A"); }, "--node-name=\"Node_A\": not a Node name"},
      {[] { absl::SetFlag(&FLAGS_node_name, std::string(254, 'a')); }, "not a Node name"},
      {[] { absl::SetFlag(&FLAGS_resources, ""); }, "--resources: no resource given"},
      {[] { absl::SetFlag(&FLAGS_resources, "nvidia.com/gpu.shared=0"); }, "replicas must be 1..1024"},
      {[] { absl::SetFlag(&FLAGS_resources, "nvidia.com/gpu.shared=x"); }, "--resources: \"nvidia.com/gpu.shared=x\""},
      {[] { absl::SetFlag(&FLAGS_device_plugin_dir, "relative/dir"); }, "--device-plugin-dir=\"relative/dir\": must be an absolute path"},
      {[] { absl::SetFlag(&FLAGS_device_plugin_dir, "/" + std::string(120, 'd')); }, "unix socket paths would not fit"},
      {[] { absl::SetFlag(&FLAGS_pod_resources_socket, ""); }, "--pod-resources-socket=\"\": must be an absolute path"},
      {[] { absl::SetFlag(&FLAGS_device_list_strategy, "volume-mounts"); }, "--device-list-strategy: \"volume-mounts\""},
      {[] { absl::SetFlag(&FLAGS_device_list_strategy, ""); }, "--device-list-strategy: empty"},
      {[] { absl::SetFlag(&FLAGS_cdi_kind, "nvidia.com"); }, "--cdi-kind=\"nvidia.com\": want <vendor>/<class>"},
      {[] { absl::SetFlag(&FLAGS_listen, "8890"); }, "--listen=\"8890\": want HOST:PORT"},
      {[] { absl::SetFlag(&FLAGS_listen, "0.0.0.0:70000"); }, "port must be 0..65535"},
      {[] { absl::SetFlag(&FLAGS_listen, "::1:80"); }, "is not an IPv4 address or host name"},
      {[] { absl::SetFlag(&FLAGS_listen, "[zz]:80"); }, "\"zz\" is not an IPv6 address"},
      {[] { absl::SetFlag(&FLAGS_audit_interval, absl::Milliseconds(1)); }, "--audit-interval=\"1ms\": must be between 100ms and 1h"},
      {[] { absl::SetFlag(&FLAGS_kubelet_poll, absl::ZeroDuration()); }, "--kubelet-poll=\"0\": must be between"},
      {[] { absl::SetFlag(&FLAGS_resync_timeout, absl::Minutes(5)); }, "--resync-timeout=\"5m\": must be between 50ms and 20s"},
  };
  for (const Case& c : cases) {
    absl::FlagSaver restore;  // each case changes one flag of a valid configuration
    ASSERT_EQ(Error(), "");
    c.set();
    EXPECT_THAT(Error(), HasSubstr(c.error));
  }
}

TEST_F(AgentFlagsTest, NodeNameFallsBackToTheEnvironment) {
  absl::SetFlag(&FLAGS_node_name, "");
  unsetenv("NODE_NAME");
  EXPECT_THAT(Error(), HasSubstr("--node-name: missing (and NODE_NAME is not set)"));
  setenv("NODE_NAME", "gpu-node-7", 1);
  absl::StatusOr<AgentConfig> c = AgentConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->agent.node, "gpu-node-7");
  unsetenv("NODE_NAME");
}

// ---------------------------------------------------------------- the binary

struct Exit {
  int code = -1;
  std::string output;
};

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  const std::string binary = testing::BinPath("gpu-slice-agent");
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &actions, &attr, cargv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return pid;
}

Exit Wait(pid_t pid, const std::string& log) {
  Exit e;
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFEXITED(status)) e.code = WEXITSTATUS(status);
  e.output = testing::ReadFileOrDie(log);
  return e;
}

Exit RunAgent(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = Spawn(args, log);
  EXPECT_GT(pid, 0) << "cannot run " << testing::BinPath("gpu-slice-agent");
  if (pid <= 0) return {};
  return Wait(pid, log);
}

TEST(AgentBinaryTest, ConfigurationErrorsExitTwoNamingTheFlag) {
  testing::ScratchDir dir;
  const std::string log = dir.File("out.log");
  dir.Write("bad-inventory.json", R"({"gpus": [{"index": 0, "uuid": "GPU-0"}, {"index": 0, "uuid": "GPU-1"}]})");
  dir.Write("catalog.yaml", "offerings: [");
  dir.Write("good.json", R"({"gpus": [{"index": 0, "uuid": "GPU-0", "product": "NVIDIA A100-SXM4-40GB"}]})");
  struct Case {
    std::vector<std::string> args;
    const char* error;
  };
  const std::vector<Case> cases = {
      {{"--bogus=1"}, "unknown flag --bogus"},
      {{"positional"}, "unexpected argument \"positional\""},
      {{"--node-name"}, "flag --node-name needs a value"},
      {{"--node-name=n1", "--verify-prestart=maybe"}, "--verify-prestart=\"maybe\""},
      {{"--node-name=n1", "--audit-interval=soon"}, "--audit-interval=\"soon\""},
      {{"--node-name=n1", "--resources=nvidia.com/mig-1g.5gb.shared", "--listen=nowhere"},
       "--listen=\"nowhere\": want HOST:PORT"},
      {{"--node-name=n1", "--resources=nvidia.com/no-such-gpu", "--inventory=" + dir.File("bad-inventory.json")},
       "--inventory: "},
      {{"--node-name=n1", "--resources=nvidia.com/mig-1g.5gb.shared", "--inventory=" + dir.File("missing.json")},
       "--inventory: inventory file"},
      {{"--node-name=n1", "--resources=nvidia.com/mig-1g.5gb.shared", "--catalog=" + dir.File("catalog.yaml")},
       "--catalog=\""},
      {{"--node-name=n1", "--resources=nvidia.com/mig-1g.5gb.shared", "--nvml-library=/nonexistent/libnvidia-ml.so.1"},
       "--nvml-library: NVML library /nonexistent/libnvidia-ml.so.1 cannot be loaded"},
      {{"--node-name=n1", "--resources=nvidia.com/no-such-gpu", "--inventory=" + dir.File("good.json")},
       "--resources: nvidia.com/no-such-gpu is not in the GPU catalog"},
      {{"--node-name=n1", "--resources=nvidia.com/gpu", "--inventory=" + dir.File("good.json"),
        "--kubeconfig=" + dir.File("no-kubeconfig")},
       "--kubeconfig=\""},
  };
  for (const Case& c : cases) {
    Exit e = RunAgent(c.args, log);
    EXPECT_EQ(e.code, 2) << e.output;
    EXPECT_THAT(e.output, HasSubstr(c.error));
    EXPECT_THAT(e.output, HasSubstr("gpu-slice-agent: "));
  }
}

TEST(AgentBinaryTest, HelpListsEveryFlagAndExitsZero) {
  testing::ScratchDir dir;
  Exit e = RunAgent({"--help"}, dir.File("help.log"));
  EXPECT_EQ(e.code, 0);
  for (const char* name : AgentFlagOrder()) {
    std::string dashed = name;
    for (char& ch : dashed) ch = ch == '_' ? '-' : ch;
    EXPECT_THAT(e.output, HasSubstr("--" + dashed + "\n")) << name;
  }
}

TEST(AgentBinaryTest, ServesMetricsAndHealthAndStopsCleanlyOnSigterm) {
  testing::ScratchDir dir;
  testing::FakeApiServer fake;
  ASSERT_TRUE(fake.Start().ok());
  ASSERT_TRUE(fake.Apply("nodes", R"({"metadata":{"name":"node-a"}})").ok());
  dir.Write("kubeconfig", fake.Kubeconfig());
  dir.Write("inventory.json", R"({"gpus": [{"index": 0, "uuid": "GPU-0", "product": "NVIDIA A100-SXM4-40GB",
    "migEnabled": true, "migDevices": [{"uuid": "MIG-0", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 0}]}]})");
  testsupport::TestKubelet kubelet({dir.File("kubelet"), 1});
  ASSERT_TRUE(kubelet.Start().ok());
  const std::string log = dir.File("agent.log");
  pid_t pid = Spawn({"--node-name=node-a", "--resources=nvidia.com/mig-1g.5gb.shared",
                     "--kubeconfig=" + dir.File("kubeconfig"), "--inventory=" + dir.File("inventory.json"),
                     "--device-plugin-dir=" + kubelet.device_plugin_dir(),
                     "--pod-resources-socket=" + kubelet.pod_resources_socket(), "--listen=127.0.0.1:0",
                     "--kubelet-poll=50ms"},
                    log);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(kubelet.WaitForResource("nvidia.com/mig-1g.5gb.shared", 4, absl::Seconds(60)))
      << testing::ReadFileOrDie(log);
  // The port it picked is in its "serving" log line.
  int port = 0;
  ASSERT_TRUE(testing::Eventually([&] {
    const std::string out = testing::ReadFileOrDie(log);
    const size_t at = out.find("\"listen\":\"127.0.0.1:");
    if (at == std::string::npos) return false;
    port = std::atoi(out.c_str() + at + std::string("\"listen\":\"127.0.0.1:").size());
    return port > 0;
  }, absl::Seconds(30))) << testing::ReadFileOrDie(log);
  httplib::Client http("127.0.0.1", port);
  http.set_tcp_nodelay(true);
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("gse_agent_units{resource=\"nvidia.com/mig-1g.5gb.shared\"} 1"));
  EXPECT_THAT(metrics->body, HasSubstr("gse_agent_pods_synced 1"));
  EXPECT_EQ(http.Get("/nothing")->status, 404);
  // It published the Node inventory.
  ASSERT_TRUE(testing::Eventually([&] {
    auto node = fake.Get("nodes", "", "node-a");
    return node && node->find("gpu.themelio.io/inventory") != std::string::npos;
  }));
  kill(pid, SIGTERM);
  Exit e = Wait(pid, log);
  EXPECT_EQ(e.code, 0) << e.output;
  EXPECT_THAT(e.output, HasSubstr("\"event\":\"stopping\""));
  // Its plugin socket is gone, so kubelet stops calling it.
  EXPECT_NE(access((kubelet.device_plugin_dir() + "/gse-nvidia.com_mig-1g.5gb.shared.sock").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace gse::agent
