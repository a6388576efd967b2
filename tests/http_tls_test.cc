// HTTPS with real TLS clients: certificates are made at test time with the openssl CLI (a CA,
// a server certificate for 127.0.0.1/localhost, a client certificate from the CA, and one
// from another CA). Checks: HTTPS verified by the CA works; with --client-ca a client
// without a certificate (kubelet's probes, Prometheus) reaches /healthz, /readyz and /metrics
// but gets 403 on the verbs and /debug/state, and a certificate from the other CA fails the
// handshake; plain HTTP to the TLS port gets no answer; missing or wrong files are start-up
// errors naming the flag and the file.
#include <httplib.h>
#include <signal.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/http_fixture.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::gse::testing::ChildProcess;
using ::gse::testing::ChildResult;
using ::gse::testing::ExtenderBinary;
using ::gse::testing::HttpFixture;
using ::gse::testing::HttpFixtureOptions;
using ::gse::testing::PostJson;
using ::gse::testing::ReadFileOrDie;
using ::gse::testing::RunToCompletion;
using ::gse::testing::SharedPath;
using ::gse::testing::SourcePath;
using ::gse::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Runs a shell command in `dir`; the output goes to a log shown when it fails.
bool Sh(const TempDir& dir, const std::string& command) {
  const std::string full =
      absl::StrCat("cd '", dir.path(), "' && { ", command, " ; } >>openssl.log 2>&1");
  return std::system(full.c_str()) == 0;
}

// ca.{crt,key}, server.{crt,key} (SAN 127.0.0.1, localhost), client.{crt,key} from ca,
// other-ca.{crt,key}, rogue.{crt,key}: a client certificate from other-ca.
class Pki {
 public:
  Pki() {
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    ok_ = Sh(dir_,
             absl::StrCat("printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n"
                          "basicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' >server.ext"
                          " && printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n'"
                          " >client.ext")) &&
          MakeCa("ca", key) && MakeCa("other-ca", key) &&
          MakeLeaf("server", "localhost", "ca", "server.ext", key) &&
          MakeLeaf("client", "kube-scheduler", "ca", "client.ext", key) &&
          MakeLeaf("rogue", "kube-scheduler", "other-ca", "client.ext", key);
  }
  bool ok() const { return ok_; }
  std::string Log() const { return ReadFileOrDie(dir_.File("openssl.log")); }
  std::string operator()(const std::string& name) const { return dir_.File(name); }
  const TempDir& dir() const { return dir_; }

 private:
  bool MakeCa(const std::string& name, const std::string& key) {
    return Sh(dir_, absl::StrCat("openssl req -x509 ", key, " -keyout ", name, ".key -out ", name,
                                 ".crt -days 2 -subj /CN=", name,
                                 " -addext basicConstraints=critical,CA:TRUE"
                                 " -addext keyUsage=critical,keyCertSign,cRLSign"));
  }
  bool MakeLeaf(const std::string& name, const std::string& cn, const std::string& ca,
                const std::string& ext, const std::string& key) {
    return Sh(dir_, absl::StrCat("openssl req ", key, " -keyout ", name, ".key -out ", name,
                                 ".csr -subj /CN=", cn, " && openssl x509 -req -in ", name,
                                 ".csr -CA ", ca, ".crt -CAkey ", ca, ".key -CAcreateserial -out ",
                                 name, ".crt -days 2 -extfile ", ext));
  }

  TempDir dir_;
  bool ok_ = false;
};

std::unique_ptr<HttpFixture> TlsServer(const Pki& pki, bool require_client_cert) {
  HttpFixtureOptions options;
  options.http.tls.cert_file = pki("server.crt");
  options.http.tls.key_file = pki("server.key");
  if (require_client_cert) options.http.tls.client_ca_file = pki("ca.crt");
  absl::StatusOr<std::unique_ptr<HttpFixture>> f = HttpFixture::Start(std::move(options));
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::move(*f) : nullptr;
}

// A client that verifies the server against our CA (and its name, 127.0.0.1).
std::unique_ptr<httplib::SSLClient> Client(const Pki& pki, int port, const std::string& cert = "") {
  auto client = cert.empty() ? std::make_unique<httplib::SSLClient>("127.0.0.1", port)
                             : std::make_unique<httplib::SSLClient>(
                                   "127.0.0.1", port, pki(cert + ".crt"), pki(cert + ".key"));
  client->set_ca_cert_path(pki("ca.crt").c_str());
  client->enable_server_certificate_verification(true);
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(5, 0);
  client->set_tcp_nodelay(true);
  return client;
}

class HttpTlsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(pki_.ok()) << pki_.Log(); }
  Pki pki_;
};

TEST_F(HttpTlsTest, ServesHttpsVerifiedByTheCa) {
  auto f = TlsServer(pki_, false);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->server().tls());
  EXPECT_THAT(f->server().BaseUrl(), StartsWith("https://127.0.0.1:"));
  auto client = Client(pki_, f->port());
  httplib::Result r = client->Get("/healthz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  // A verb over HTTPS, keep-alive, several times.
  const std::string body = ReadFileOrDie(
      SharedPath("protocol/captured-k8s-1.26/k8s1.26-filter-request-nodecache-true.json"));
  for (int i = 0; i < 5; ++i) {
    r = client->Post("/filter", testing::SchedulerHeaders(), body, "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_THAT(r->body, HasSubstr("\"Error\":\"\""));
  }
  // A client that trusts another CA does not accept our server.
  httplib::SSLClient stranger("127.0.0.1", f->port());
  stranger.set_ca_cert_path(pki_("other-ca.crt").c_str());
  stranger.enable_server_certificate_verification(true);
  EXPECT_FALSE(stranger.Get("/healthz"));
}

TEST_F(HttpTlsTest, PlainHttpToTheTlsPortGetsNoAnswer) {
  auto f = TlsServer(pki_, false);
  ASSERT_NE(f, nullptr);
  httplib::Client plain("127.0.0.1", f->port());
  plain.set_read_timeout(5, 0);
  httplib::Result r = plain.Get("/healthz");
  EXPECT_FALSE(r) << "status " << r->status;
  const std::string raw = testing::RawExchange(
      f->port(), "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", absl::Seconds(3));
  EXPECT_THAT(raw, ::testing::Not(HasSubstr("HTTP/1.1")));
  // The server is unharmed.
  r = Client(pki_, f->port())->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpTlsTest, ClientCaOpensProbesButNeedsACertificateForVerbs) {
  auto f = TlsServer(pki_, true);
  ASSERT_NE(f, nullptr);
  const std::string filter_body = ReadFileOrDie(
      SharedPath("protocol/captured-k8s-1.26/k8s1.26-filter-request-nodecache-true.json"));

  // kubelet's HTTPS probes and a Prometheus scrape present no client certificate.
  auto anonymous = Client(pki_, f->port());
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
    httplib::Result r = anonymous->Get(path);
    ASSERT_TRUE(r) << path << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  }
  f->service().SetReady(false);
  httplib::Result r = anonymous->Get("/readyz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 503) << "the probe sees the real readiness, not a TLS refusal";
  f->service().SetReady(true);

  // The verbs and the debug state need the certificate: 403 with a JSON reason.
  for (const char* verb : {"/filter", "/prioritize", "/bind", "/preempt"}) {
    r = anonymous->Post(verb, testing::SchedulerHeaders(), filter_body, "application/json");
    ASSERT_TRUE(r) << verb << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 403) << verb;
    EXPECT_THAT(r->body, AllOf(StartsWith("{\"Error\":"), HasSubstr("client certificate"),
                               HasSubstr("--client-ca")))
        << verb;
  }
  r = anonymous->Get("/debug/state");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 403);
  EXPECT_THAT(r->body, Not(HasSubstr("nodes")));
  // The refusals are counted like any answer.
  r = anonymous->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body, HasSubstr("gse_http_requests_total{code=\"403\""));

  // A certificate from another CA fails the handshake, whatever the path.
  for (const char* path : {"/healthz", "/metrics"}) {
    r = Client(pki_, f->port(), "rogue")->Get(path);
    EXPECT_FALSE(r) << "a certificate from another CA was accepted on " << path << ": "
                    << r->status;
  }

  // kube-scheduler's certificate opens everything.
  auto good = Client(pki_, f->port(), "client");
  r = good->Post("/filter", testing::SchedulerHeaders(), filter_body, "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_THAT(r->body, HasSubstr("\"Error\":\"\""));
  r = good->Get("/debug/state");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = good->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // The refused handshakes left no request in flight.
  EXPECT_TRUE(f->WaitUntilIdle());
}

TEST_F(HttpTlsTest, WithoutClientCaNoCertificateIsNeeded) {
  auto f = TlsServer(pki_, false);
  ASSERT_NE(f, nullptr);
  httplib::Result r = Client(pki_, f->port())->Get("/debug/state");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpTlsTest, BadTlsFilesAreErrorsNamingTheFlagAndTheFile) {
  struct Case {
    TlsOptions tls;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {{"/nonexistent/server.crt", pki_("server.key"), ""},
       {"--tls-cert=/nonexistent/server.crt", "No such file"}},
      {{pki_("server.crt"), "/nonexistent/server.key", ""},
       {"--tls-key=/nonexistent/server.key", "No such file"}},
      {{pki_.dir().path(), pki_("server.key"), ""}, {"--tls-cert=", "Is a directory"}},
      {{pki_("server.key"), pki_("server.key"), ""}, {"--tls-cert=", "no PEM certificate"}},
      {{pki_("server.crt"), pki_("server.crt"), ""},
       {"--tls-key=", "no unencrypted PEM private key"}},
      {{pki_("server.crt"), pki_("client.key"), ""},
       {"--tls-key=", "does not match", "--tls-cert="}},
      {{pki_("server.crt"), pki_("server.key"), "/nonexistent/ca.crt"},
       {"--client-ca=/nonexistent/ca.crt"}},
      {{pki_("server.crt"), pki_("server.key"), pki_("server.key")},
       {"--client-ca=", "no PEM certificate"}},
      {{pki_("server.crt"), "", ""}, {"--tls-key"}},
      {{"", pki_("server.key"), ""}, {"--tls-cert"}},
      {{"", "", pki_("ca.crt")}, {"--client-ca", "--tls-cert"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.tls.cert_file, " | ", c.tls.key_file, " | ", c.tls.client_ca_file));
    absl::Status s = CheckTlsFiles(c.tls);
    ASSERT_FALSE(s.ok());
    for (const std::string& needle : c.needles) {
      EXPECT_THAT(std::string(s.message()), HasSubstr(needle));
    }
  }
  TlsOptions good{pki_("server.crt"), pki_("server.key"), pki_("ca.crt")};
  EXPECT_TRUE(CheckTlsFiles(good).ok());
  EXPECT_TRUE(CheckTlsFiles(TlsOptions{}).ok());

  // The binary refuses to start, exit 2, naming flag and file.
  ChildResult r = RunToCompletion(ExtenderBinary(),
                                  {"--listen=127.0.0.1:0", "--tls-cert=/nonexistent/server.crt",
                                   absl::StrCat("--tls-key=", pki_("server.key"))});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--tls-cert=/nonexistent/server.crt"));
  r = RunToCompletion(ExtenderBinary(),
                      {"--listen=127.0.0.1:0", absl::StrCat("--tls-cert=", pki_("server.crt")),
                       absl::StrCat("--tls-key=", pki_("client.key"))});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("does not match"));
}

TEST_F(HttpTlsTest, BinaryServesHttpsWithClientCertificates) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(ExtenderBinary(), {"--listen=127.0.0.1:0", "--prefix=gpu-extender",
                                             absl::StrCat("--tls-cert=", pki_("server.crt")),
                                             absl::StrCat("--tls-key=", pki_("server.key")),
                                             absl::StrCat("--client-ca=", pki_("ca.crt"))});
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE((*child)->WaitForStderr("serving on", absl::Seconds(30))) << (*child)->Stderr();
  EXPECT_THAT((*child)->Stderr(), HasSubstr("serving on https://127.0.0.1:"));
  const int port = (*child)->ListenPort();
  ASSERT_GT(port, 0);

  auto client = Client(pki_, port, "client");
  httplib::Result r =
      client->Post("/gpu-extender/filter", testing::SchedulerHeaders(),
                   ReadFileOrDie(SourcePath("examples/filter-request.json")), "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_THAT(r->body, HasSubstr("\"NodeNames\":[\""));
  // What the tls overlay's kubelet probes do: HTTPS without a client certificate.
  auto probe = Client(pki_, port);
  for (const char* path : {"/healthz", "/readyz"}) {
    r = probe->Get(path);
    ASSERT_TRUE(r) << path << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << path;
  }
  r = probe->Post("/gpu-extender/filter", testing::SchedulerHeaders(),
                  ReadFileOrDie(SourcePath("examples/filter-request.json")), "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 403) << r->body;
  EXPECT_FALSE(Client(pki_, port, "rogue")->Get("/healthz")) << "certificate from another CA";

  (*child)->Signal(SIGTERM);
  EXPECT_EQ((*child)->Wait(absl::Seconds(10)), std::optional<int>(0)) << (*child)->Stderr();
}

}  // namespace
}  // namespace gse
