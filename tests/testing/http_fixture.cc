// See http_fixture.h.
#include "tests/testing/http_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "scoring/task_mix.h"
#include "state/k8s_objects.h"
#include "testsupport/paths.h"

extern char** environ;

namespace gse::testing {

absl::StatusOr<std::unique_ptr<HttpFixture>> HttpFixture::Start(HttpFixtureOptions options) {
  // Tests write to sockets that the server may close; that must be an error, not a signal.
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<HttpFixture> f(new HttpFixture());
  std::shared_ptr<const Catalog> catalog =
      options.catalog != nullptr ? options.catalog
                                 : std::make_shared<const Catalog>(Catalog::BuiltIn());
  f->mirror_ = std::make_unique<Mirror>(catalog, options.mirror);
  if (!options.snapshot_json.empty()) {
    absl::StatusOr<ObjectBatch> batch = DecodeObjects(options.snapshot_json);
    if (!batch.ok()) return batch.status();
    f->mirror_->Write([&](ClusterState& s) { s.ApplyBatch(*batch); });
  }
  f->metrics_ = std::make_unique<ExtenderMetrics>();
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy =
      MakeServicePolicy(options.policy, catalog, std::move(options.policy_options));
  if (!policy.ok()) return policy.status();
  ServiceOptions service_options;
  service_options.metrics = f->metrics_.get();
  service_options.score_pods_without_offering = options.score_all_pods;
  f->service_ = std::make_unique<ExtenderService>(
      f->mirror_.get(), std::move(*policy),
      options.binder != nullptr ? options.binder : &f->binder_, service_options);
  options.http.host = "127.0.0.1";
  options.http.port = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Create(f->service_.get(), f->metrics_.get(), options.http);
  if (!server.ok()) return server.status();
  f->server_ = std::move(*server);
  for (auto& [verb, handler] : options.verb_overrides) {
    f->server_->SetVerbHandlerForTesting(verb, std::move(handler));
  }
  f->server_->Start();
  return f;
}

HttpFixture::~HttpFixture() {
  if (server_ != nullptr) {
    server_->Stop();
    server_->Wait();
  }
}

bool HttpFixture::WaitUntilIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (server_->InFlight() != 0) {
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::unique_ptr<httplib::Client> HttpFixture::NewClient() const {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port());
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  client->set_connection_timeout(10, 0);
  client->set_read_timeout(30, 0);
  client->set_write_timeout(30, 0);
  return client;
}

httplib::Headers SchedulerHeaders() {
  return {{"User-Agent", "Go-http-client/1.1"}, {"Accept-Encoding", "gzip"}};
}

httplib::Result PostJson(httplib::Client& client, const std::string& path,
                         const std::string& body) {
  return client.Post(path.c_str(), SchedulerHeaders(), body, "application/json");
}

std::string RawExchange(int port, const std::string& request, absl::Duration timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::microseconds(absl::ToInt64Microseconds(timeout));
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      timeval tv{static_cast<time_t>(left.count() / 1000000),
                 static_cast<suseconds_t>(left.count() % 1000000)};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      char buf[4096];
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

int RawStatus(const std::string& response) {
  // "HTTP/1.1 411 Length Required"
  if (response.compare(0, 5, "HTTP/") != 0) return -1;
  const size_t sp = response.find(' ');
  int status = -1;
  if (sp == std::string::npos || !absl::SimpleAtoi(response.substr(sp + 1, 3), &status)) {
    return -1;
  }
  return status;
}

TempDir::TempDir() {
  std::string base = "/tmp";
  if (const char* t = std::getenv("TEST_TMPDIR"); t != nullptr && *t != '\0') base = t;
  std::string pattern = base + "/gse-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::File(absl::string_view name) const { return absl::StrCat(path_, "/", name); }

void TempDir::Write(absl::string_view name, absl::string_view content) const {
  std::ofstream out(File(name), std::ios::binary);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::string& binary, const std::vector<std::string>& args) {
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  const std::string out = child->dir_.File("stdout");
  const std::string err = child->dir_.File("stderr");

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> argv_storage = {binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawn(&child->pid_, binary.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    child->pid_ = -1;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start ", binary, ": ", std::strerror(rc),
                     " (build the gpu-slice-extender target first)"));
  }
  return child;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exit_code_.has_value()) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
}

void ChildProcess::Signal(int sig) const {
  if (pid_ > 0 && !exit_code_.has_value()) kill(pid_, sig);
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  if (exit_code_.has_value()) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {
std::string ReadOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

std::string ChildProcess::Stdout() const { return ReadOrEmpty(dir_.File("stdout")); }
std::string ChildProcess::Stderr() const { return ReadOrEmpty(dir_.File("stderr")); }

bool ChildProcess::WaitForStderr(absl::string_view needle, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (Stderr().find(std::string(needle)) != std::string::npos) return true;
    if (Wait(absl::ZeroDuration()).has_value()) {
      return Stderr().find(std::string(needle)) != std::string::npos;
    }
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int ChildProcess::ListenPort() const {
  const std::string err = Stderr();
  const size_t at = err.find("serving on http");
  if (at == std::string::npos) return -1;
  const size_t eol = err.find('\n', at);
  const std::string line = err.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
  const size_t colon = line.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(line.substr(colon + 1), &port)) return -1;
  return port;
}

ChildResult RunToCompletion(const std::string& binary, const std::vector<std::string>& args,
                            absl::Duration timeout) {
  ChildResult result;
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(binary, args);
  if (!child.ok()) {
    result.err = std::string(child.status().message());
    return result;
  }
  std::optional<int> code = (*child)->Wait(timeout);
  result.exit_code = code.value_or(-1);
  result.out = (*child)->Stdout();
  result.err = (*child)->Stderr();
  return result;
}

std::string ExtenderBinary() { return BinPath("gpu-slice-extender"); }

}  // namespace gse::testing
