// Test support for suites that speak real HTTP to the extender.
//
//  * HttpFixture: a complete extender (catalog, mirror, ExtenderService, metrics, HttpServer)
//    wired as main.cc wires it, serving on a free loopback port inside the test process.
//  * ChildProcess: the real gpu-slice-extender binary as a subprocess (stdout/stderr captured
//    to files), for flags, start-up banner and signal tests.
//  * TempDir: a scratch directory removed at the end of the test.
// Including this header needs cpp-httplib's compile definitions (the test targets get them
// through gse_extender; gse_test_support through extender/CMakeLists.txt).
#ifndef GSE_TESTS_TESTING_HTTP_FIXTURE_H_
#define GSE_TESTS_TESTING_HTTP_FIXTURE_H_

#include <httplib.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "extender/extender_service.h"
#include "extender/http_server.h"
#include "extender/metrics.h"
#include "kube/binder.h"
#include "scoring/task_mix.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/mirror.h"

namespace gse::testing {

struct HttpFixtureOptions {
  // A Kubernetes List (or NodeList, ...) applied to the mirror before serving; "" = empty.
  std::string snapshot_json;
  std::shared_ptr<const Catalog> catalog;  // null: the built-in catalog
  std::string policy = "affinity-pack";  // a service policy (MakeServicePolicy)
  ServicePolicyOptions policy_options;    // fgd's seed mix
  // ServiceOptions::score_pods_without_offering (the binary's --score-all-pods).
  bool score_all_pods = false;
  // The bind's Binder; null: one that binds everything and records nothing.
  Binder* binder = nullptr;
  MirrorOptions mirror;
  // host and port are forced to 127.0.0.1 and 0 (a free port).
  HttpServerOptions http;
  // Verb handlers replaced before the server starts (HttpServer::SetVerbHandlerForTesting).
  std::map<std::string, HttpServer::VerbHandler> verb_overrides;
};

class HttpFixture {
 public:
  static absl::StatusOr<std::unique_ptr<HttpFixture>> Start(HttpFixtureOptions options = {});
  ~HttpFixture();

  int port() const { return server_->port(); }
  const std::string& prefix() const { return server_->prefix(); }
  Mirror& mirror() { return *mirror_; }
  ExtenderService& service() { return *service_; }
  HttpServer& server() { return *server_; }
  ExtenderMetrics& metrics() { return *metrics_; }

  // Waits until no request is in flight. The server counts a request done only after its
  // answer is written, so a client may see the answer a moment before that.
  bool WaitUntilIdle(absl::Duration timeout = absl::Seconds(5));

  // A keep-alive client with TCP_NODELAY and generous timeouts, as kube-scheduler's would be.
  std::unique_ptr<httplib::Client> NewClient() const;

 private:
  HttpFixture() = default;
  std::unique_ptr<ExtenderMetrics> metrics_;
  std::unique_ptr<Mirror> mirror_;
  RecordOnlyBinder binder_;
  std::unique_ptr<ExtenderService> service_;
  std::unique_ptr<HttpServer> server_;
};

// The headers kube-scheduler 1.26's Go client sends with every extender call (PROTOCOL §7).
httplib::Headers SchedulerHeaders();

// POST `body` as kube-scheduler does; the result's error() says why when there is no answer.
httplib::Result PostJson(httplib::Client& client, const std::string& path, const std::string& body);

// One HTTP exchange over a fresh TCP connection, bytes as given, for requests that
// httplib::Client cannot produce (no Content-Length, wrong framing). Returns everything the
// server sent until it closed the connection or `timeout` passed.
std::string RawExchange(int port, const std::string& request,
                        absl::Duration timeout = absl::Seconds(5));

// The status code of a raw HTTP response ("HTTP/1.1 411 ..."), -1 when there is none.
int RawStatus(const std::string& response);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(absl::string_view name) const;
  void Write(absl::string_view name, absl::string_view content) const;

 private:
  std::string path_;
};

class ChildProcess {
 public:
  // Starts `binary` with `args` (argv[1..]); stdout and stderr go to files in a TempDir.
  // The child gets default handling of SIGTERM, SIGINT and SIGPIPE and an empty signal mask
  // whatever the test process uses.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::string& binary,
                                                             const std::vector<std::string>& args);
  ~ChildProcess();  // SIGKILL and reap if still running

  pid_t pid() const { return pid_; }
  void Signal(int sig) const;
  // Exit code, 128 + signal number when killed by a signal, nullopt when still running after
  // `timeout`.
  std::optional<int> Wait(absl::Duration timeout);
  std::string Stdout() const;
  std::string Stderr() const;
  // Polls stderr until it contains `needle` (true) or the child exits or `timeout` passes.
  bool WaitForStderr(absl::string_view needle, absl::Duration timeout);
  // Port from the start-up banner line "serving on http(s)://HOST:PORT"; -1 before it.
  int ListenPort() const;

 private:
  ChildProcess() = default;
  TempDir dir_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Runs the binary to completion (for flag errors, --help): exit code and captured output.
struct ChildResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
ChildResult RunToCompletion(const std::string& binary, const std::vector<std::string>& args,
                            absl::Duration timeout = absl::Seconds(20));

// Where the binary is built (build/bin/gpu-slice-extender).
std::string ExtenderBinary();

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_HTTP_FIXTURE_H_
