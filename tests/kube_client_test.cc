// KubeClient against the fake API server (real wire format): configuration loading and its
// errors, TLS verification and client certificates, paged lists, watch streams whatever the
// chunking, v1.Status errors, token rotation, timeouts and the write rate limit.
#include "kube/kube_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::FakeApiServer;
using testing::PodJson;
using testing::PodSpec;
using testing::SharedPath;
using TempDir = testing::ScratchDir;

std::unique_ptr<KubeClient> ClientFor(const FakeApiServer& fake, KubeClientOptions options = {}) {
  KubeConfig config;
  config.server = fake.url();
  config.token = "test-token";
  config.ca_pem = fake.pki().ca_pem;
  config.source = "test";
  auto client = KubeClient::Create(config, options);
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

std::string NamedPod(const std::string& name, std::map<std::string, std::string> requests = {}) {
  PodSpec spec;
  spec.name = name;
  spec.requests = std::move(requests);
  return PodJson(spec);
}

FakeApiServer::Options Opts(bool tls = false, bool client_cert = false) {
  FakeApiServer::Options o;
  o.tls = tls;
  o.require_client_cert = client_cert;
  return o;
}

std::unique_ptr<FakeApiServer> StartFake(FakeApiServer::Options options = Opts()) {
  auto fake = std::make_unique<FakeApiServer>(options);
  absl::Status s = fake->Start();
  EXPECT_TRUE(s.ok()) << s;
  return fake;
}

// ---------------------------------------------------------------- lists and errors

TEST(KubeClientTest, ListFollowsContinueTokensAndKeepsTheFirstPagesResourceVersion) {
  auto fake = StartFake();
  ASSERT_TRUE(fake->LoadRecordedCluster().ok());
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(fake->Apply("pods", NamedPod(absl::StrCat("p", i), {{"nvidia.com/mig-1g.5gb", "1"}}))
                    .ok());
  }
  const std::string rv_at_list = fake->resource_version();
  KubeClientOptions options;
  options.list_page_size = 2;
  auto client = ClientFor(*fake, options);
  std::vector<std::string> names;
  int pages = 0;
  absl::StatusOr<std::string> rv = client->List("/api/v1/pods", [&](const rapidjson::Value& page) {
    ++pages;
    EXPECT_STREQ(page["kind"].GetString(), "PodList");
    for (const auto& item : page["items"].GetArray()) {
      names.push_back(item["metadata"]["name"].GetString());
    }
    // A write between pages must not leak into the paged snapshot.
    if (pages == 1) {
      EXPECT_TRUE(fake->Apply("pods", NamedPod("late")).ok());
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(rv.ok()) << rv.status();
  EXPECT_EQ(*rv, rv_at_list);
  EXPECT_EQ(pages, 4);  // 7 pods (nb-1 + p0..p5) in pages of 2
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("nb-1", "p0", "p1", "p2", "p3", "p4", "p5"));
  EXPECT_EQ(fake->RequestCount("GET", "/api/v1/pods"), 4);
}

TEST(KubeClientTest, ListErrorFromThePageCallbackStopsTheList) {
  auto fake = StartFake();
  ASSERT_TRUE(fake->LoadRecordedCluster().ok());
  auto client = ClientFor(*fake);
  absl::StatusOr<std::string> rv = client->List(
      "/api/v1/nodes", [](const rapidjson::Value&) { return absl::DataLossError("bad page"); });
  EXPECT_EQ(rv.status().code(), absl::StatusCode::kDataLoss);
}

TEST(KubeClientTest, V1StatusErrorsKeepCodeReasonAndMessage) {
  auto fake = StartFake();
  auto client = ClientFor(*fake);
  absl::StatusOr<std::string> r = client->Get("/api/v1/namespaces/team-a/pods/ghost");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  KubeError e = KubeErrorOf(r.status());
  EXPECT_EQ(e.http_code, 404);
  EXPECT_EQ(e.reason, "NotFound");
  EXPECT_EQ(e.message, "pods \"ghost\" not found");
  EXPECT_THAT(r.status().message(), HasSubstr("HTTP 404 NotFound: pods \"ghost\" not found"));
}

// A server that answers the first request of every connection (keep-alive) and closes the
// connection, unanswered, when a second request arrives on it: what a client sees when a
// server or proxy closes an idle keep-alive connection just as the client reuses it.
class ClosesReusedConnectionsServer {
 public:
  ClosesReusedConnectionsServer() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listener_, 16), 0);
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int conn = accept(listener_, nullptr, nullptr);
        if (conn < 0) return;  // the listener was shut down
        if (ReadRequest(conn)) {
          static constexpr char kAnswer[] =
              "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
              "Connection: keep-alive\r\n\r\n{}";
          // Counted before it is sent: the client may read the answer, and the test read the
          // count, before this thread would get past write().
          answered_.fetch_add(1);
          if (write(conn, kAnswer, sizeof(kAnswer) - 1) <= 0) answered_.fetch_sub(1);
          if (ReadRequest(conn)) closed_unanswered_.fetch_add(1);
        }
        close(conn);
      }
    });
  }
  ~ClosesReusedConnectionsServer() {
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  int answered() const { return answered_.load(); }
  int closed_unanswered() const { return closed_unanswered_.load(); }

 private:
  // Reads one request head (these tests send GETs without a body).
  static bool ReadRequest(int conn) {
    std::string head;
    char buf[512];
    while (head.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = read(conn, buf, sizeof(buf));
      if (n <= 0) return false;
      head.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  int listener_ = -1;
  int port_ = 0;
  std::atomic<int> answered_{0};
  std::atomic<int> closed_unanswered_{0};
  std::thread thread_;
};

// kube-apiserver, and any proxy before it, may close a keep-alive connection that sits idle in
// the client's pool; a request sent on it just then fails with Read or Write. A GET is
// idempotent: it must go out again on a new connection rather than fail its caller (a
// reflector's relist, a bind's read-back). A write is not sent twice by the client.
TEST(KubeClientTest, GetOnAPooledConnectionTheServerClosedIsSentAgain) {
  ClosesReusedConnectionsServer server;
  KubeConfig config;
  config.server = server.url();
  config.source = "test";
  absl::StatusOr<std::unique_ptr<KubeClient>> client = KubeClient::Create(config, {});
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Get("/api/v1/nodes").ok());
  absl::StatusOr<std::string> again = (*client)->Get("/api/v1/nodes");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(server.answered(), 2);
  EXPECT_EQ(server.closed_unanswered(), 1);  // the reused connection was tried first
  // A write on a pooled connection that the server closes is not sent again.
  absl::StatusOr<std::string> post = (*client)->Post("/api/v1/namespaces/a/pods", "{}");
  EXPECT_FALSE(post.ok());
  EXPECT_EQ(server.answered(), 2);
}

TEST(KubeClientTest, StaleExactListIsExpired) {
  auto fake = StartFake();
  ASSERT_TRUE(fake->LoadRecordedCluster().ok());
  const std::string old_rv = fake->resource_version();
  ASSERT_TRUE(fake->Apply("pods", NamedPod("x")).ok());
  fake->Compact();
  auto client = ClientFor(*fake);
  absl::StatusOr<std::string> r =
      client->Get(absl::StrCat("/api/v1/pods?resourceVersion=", old_rv, "&resourceVersionMatch=Exact"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsExpired(r.status())) << r.status();
  // The recorded body, decoded.
  absl::Status recorded = StatusFromKubeStatus(
      "GET /api/v1/pods", 410,
      testing::ReadFileOrDie(SharedPath("protocol/kube-api-1.26/list-too-old-resourceversion-410.json")));
  EXPECT_TRUE(IsExpired(recorded));
  EXPECT_EQ(KubeErrorOf(recorded).message, "The resourceVersion for the provided list is too old.");
}

TEST(KubeClientTest, UnauthorizedIsSurfacedWithItsReason) {
  auto fake = StartFake();
  KubeConfig config;
  config.server = fake->url();
  config.token = "wrong";
  config.source = "test config";
  auto client = KubeClient::Create(config);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::string> r = (*client)->Get("/api/v1/nodes");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(KubeErrorOf(r.status()).reason, "Unauthorized");
  // The start-up check fails at once (no retries) and says the credentials were rejected.
  absl::Time start = absl::Now();
  absl::Status reach = (*client)->CheckReachable(5, absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(reach.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(reach.message(), HasSubstr("rejected the credentials"));
  EXPECT_THAT(reach.message(), HasSubstr("Unauthorized"));
  EXPECT_THAT(reach.message(), HasSubstr("test config"));
}

TEST(KubeClientTest, UnreachableServerFailsAfterTheRetriesNamingTheServer) {
  // A port that was free a moment ago and is not listening now.
  int port = 0;
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    close(fd);  // bound, never listened: connections are refused
  }
  absl::Time start = absl::Now();
  KubeConfig config;
  config.server = absl::StrCat("http://127.0.0.1:", port);
  config.source = "kubeconfig /x (context c)";
  auto client = KubeClient::Create(config);
  ASSERT_TRUE(client.ok());
  absl::Status s = (*client)->CheckReachable(3, absl::Milliseconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(config.server));
  EXPECT_THAT(s.message(), HasSubstr("after 3 attempts"));
  EXPECT_THAT(s.message(), HasSubstr("kubeconfig /x"));
  EXPECT_THAT(s.message(), HasSubstr("connection failed"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // refused at once, 10 + 20 ms of backoff
}

TEST(KubeClientTest, EveryCallHasATimeout) {
  auto fake = StartFake();
  FakeApiServer::Fault slow;
  slow.method = "GET";
  slow.path_contains = "/api/v1/nodes";
  slow.delay_before = absl::Seconds(8);
  fake->AddFault(slow);
  KubeClientOptions options;
  // Long enough for a loaded sanitizer build to answer the next call, far below the delay.
  options.request_timeout = absl::Seconds(1);
  auto client = ClientFor(*fake, options);
  absl::Time start = absl::Now();
  absl::StatusOr<std::string> r = client->Get("/api/v1/nodes");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("timed out"));
  // The next call works (the broken connection was not pooled).
  EXPECT_TRUE(client->Get("/api/v1/nodes").ok());
}

TEST(KubeClientTest, WritesAreRateLimitedReadsAreNot) {
  auto fake = StartFake();
  KubeClientOptions options;
  options.write_qps = 5;
  options.write_burst = 1;
  // Every write reports its turn at the limiter; reads must never ask for one.
  absl::Mutex mu;
  std::vector<absl::Duration> waits;
  options.on_write_paced = [&](bool sent, absl::Duration waited) {
    absl::MutexLock lock(&mu);
    if (sent) waits.push_back(waited);
  };
  auto client = ClientFor(*fake, options);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(client->Get("/version").ok());
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(waits.empty()) << "a read passed the write limiter";
  }
  const absl::Time start = absl::Now();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(client->Post("/apis/coordination.k8s.io/v1/namespaces/x/leases",
                             absl::StrCat(R"({"metadata":{"name":"l)", i, R"("},"spec":{}})"))
                    .ok());
  }
  const absl::Duration writes = absl::Now() - start;
  // 1 from the burst, then 3 at 5/s: at least 600 ms, whatever the machine.
  EXPECT_GE(writes, absl::Milliseconds(590));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(waits.size(), 4u);
  EXPECT_EQ(waits[0], absl::ZeroDuration());  // the burst's token
  for (size_t i = 1; i < waits.size(); ++i) EXPECT_GT(waits[i], absl::ZeroDuration()) << i;
}

TEST(KubeClientTest, AWriteWithoutATurnBeforeItsSendByIsNotSentAndSaysSo) {
  auto fake = StartFake();
  std::vector<std::pair<bool, absl::Duration>> paced;
  KubeClientOptions options;
  options.write_qps = 0.1;  // one turn every 10 s
  options.write_burst = 1;
  options.on_write_paced = [&paced](bool sent, absl::Duration waited) { paced.emplace_back(sent, waited); };
  auto client = ClientFor(*fake, options);
  const std::string leases = "/apis/coordination.k8s.io/v1/namespaces/x/leases";
  ASSERT_TRUE(client->Post(leases, R"({"metadata":{"name":"a"},"spec":{}})").ok());
  // The next turn is 10 s away; this write must be sent within 1 s.
  WriteDeadline deadline;
  deadline.send_by = absl::Now() + absl::Seconds(1);
  deadline.answer_by = absl::Now() + absl::Seconds(2);
  absl::StatusOr<std::string> r =
      client->PostWithin(leases, R"({"metadata":{"name":"b"},"spec":{}})", absl::Seconds(1), deadline);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsNotSent(r.status())) << r.status();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("not sent"));
  EXPECT_THAT(r.status().message(), HasSubstr("0.1 qps, burst 1"));
  EXPECT_EQ(KubeErrorOf(r.status()).http_code, 0);
  // Nothing reached the server, and the client says what it decided for each write.
  EXPECT_EQ(fake->RequestCount("POST", "/leases"), 1);
  EXPECT_FALSE(fake->Get("leases", "x", "b").has_value());
  ASSERT_EQ(paced.size(), 2u);
  EXPECT_TRUE(paced[0].first);
  EXPECT_FALSE(paced[1].first);
  // An answered API error is not "not sent".
  absl::StatusOr<std::string> missing = client->Get("/api/v1/namespaces/x/pods/none");
  EXPECT_FALSE(IsNotSent(missing.status()));
}

TEST(KubeClientTest, TooManyRequestsKeepsTheServersRetryAfter) {
  FakeApiServer::Options o = Opts();
  o.write_qps = 0.01;  // the server takes one write, then answers 429 as kube-apiserver does
  o.write_burst = 1;
  auto fake = StartFake(o);
  auto client = ClientFor(*fake);
  const std::string leases = "/apis/coordination.k8s.io/v1/namespaces/x/leases";
  ASSERT_TRUE(client->Post(leases, R"({"metadata":{"name":"a"},"spec":{}})").ok());
  absl::StatusOr<std::string> r = client->Post(leases, R"({"metadata":{"name":"b"},"spec":{}})");
  ASSERT_FALSE(r.ok());
  const KubeError e = KubeErrorOf(r.status());
  EXPECT_EQ(e.http_code, 429);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(e.retry_after, absl::Seconds(1));
  // kube-apiserver's body is Go's http.Error plain text, not a v1.Status.
  EXPECT_THAT(e.message, HasSubstr("Too many requests, please try again later."));
  EXPECT_FALSE(IsNotSent(r.status()));
  EXPECT_EQ(fake->throttled(), 1);
  // Reads are not limited by the server's write limit.
  EXPECT_TRUE(client->Get("/version").ok());
}

TEST(KubeClientTest, RotatedTokenFileIsReRead) {
  TempDir dir;
  dir.Write("token", "first-token\n");
  FakeApiServer::Options options;
  options.tokens = {"first-token"};
  auto fake = StartFake(options);
  KubeConfig config;
  config.server = fake->url();
  config.token_file = dir.File("token");
  auto client = KubeClient::Create(config);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Get("/api/v1/nodes").ok());
  // The kubelet rotates the token; the server stops accepting the old one.
  fake->SetTokens({"second-token"});
  dir.Write("token", "second-token\n");
  absl::StatusOr<std::string> r = (*client)->Get("/api/v1/nodes");
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*client)->token_reloads(), 1);
}

// ---------------------------------------------------------------- watch streams

// A raw server that streams `body` in chunks of `chunk` bytes (0: all at once).
class RawStreamServer {
 public:
  RawStreamServer(std::string body, size_t chunk) : body_(std::move(body)), chunk_(chunk) {
    server_.set_tcp_nodelay(true);
    server_.Get(".*", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("application/json", [this](size_t offset, httplib::DataSink& sink) {
        if (offset >= body_.size()) {
          sink.done();
          return true;
        }
        size_t n = chunk_ == 0 ? body_.size() - offset : std::min(chunk_, body_.size() - offset);
        return sink.write(body_.data() + offset, n);
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) absl::SleepFor(absl::Milliseconds(1));
  }
  ~RawStreamServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

 private:
  std::string body_;
  size_t chunk_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

std::vector<std::string> RecordedWatchLines() {
  std::string text =
      testing::ReadFileOrDie(SharedPath("protocol/kube-api-1.26/watch-pods-stream.jsonl"));
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  return lines;
}

TEST(KubeClientTest, WatchDeliversOneLinePerEventWhateverTheChunking) {
  const std::vector<std::string> expected = RecordedWatchLines();
  ASSERT_EQ(expected.size(), 5u);
  std::string body = testing::ReadFileOrDie(SharedPath("protocol/kube-api-1.26/watch-pods-stream.jsonl"));
  // 1 byte per chunk (every event split), 7 (odd splits), 4096 (several events per chunk), all.
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}, size_t{0}}) {
    SCOPED_TRACE(absl::StrCat("chunk size ", chunk));
    RawStreamServer raw(body, chunk);
    KubeConfig config;
    config.server = raw.url();
    auto client = KubeClient::Create(config);
    ASSERT_TRUE(client.ok());
    WatchStopper stopper;
    std::vector<std::string> got;
    absl::Status s = (*client)->Watch("/api/v1/pods?watch=1", absl::Seconds(5),
                                      [&](absl::string_view line) {
                                        got.emplace_back(line);
                                        return true;
                                      },
                                      &stopper);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(got, expected);
  }
}

TEST(KubeClientTest, WatchEndingInsideAnEventIsDataLoss) {
  std::string body = testing::ReadFileOrDie(SharedPath("protocol/kube-api-1.26/watch-pods-stream.jsonl"));
  body.resize(body.find('\n') + 100);  // one whole event, then 99 bytes of the next
  RawStreamServer raw(body, 64);
  KubeConfig config;
  config.server = raw.url();
  auto client = KubeClient::Create(config);
  ASSERT_TRUE(client.ok());
  WatchStopper stopper;
  int lines = 0;
  absl::Status s = (*client)->Watch("/api/v1/pods?watch=1", absl::Seconds(5),
                                    [&](absl::string_view) { return ++lines, true; }, &stopper);
  EXPECT_EQ(lines, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

// Issue 12, finding 7: list pages are strict RFC 8259 JSON like every input. Before, trailing
// text after the page was ignored (kParseStopWhenDoneFlag) and U+001A..U+001F passed inside
// strings; now each is refused as DataLoss naming the offset, and no page reaches the caller.
TEST(KubeClientTest, ListPagesThatAreNotStrictJsonAreDataLossNamingTheOffset) {
  const std::string page = R"({"kind":"NodeList","metadata":{"resourceVersion":"7"},"items":[]})";
  std::string control = page;
  control.insert(control.find("\"7\"") + 2, 1, '\x1a');  // inside the string "7"
  const struct {
    std::string body;
    std::string error;
  } cases[] = {
      {page + " {}", "invalid JSON at offset 66: The document root must not be followed by other values."},
      {control, "invalid JSON at offset 51: Unescaped control character U+001A."},
      {page.substr(0, 20) + "\xff" + page.substr(20), "invalid JSON at offset 20: "},
  };
  for (const auto& c : cases) {
    RawStreamServer raw(c.body, 0);
    KubeConfig config;
    config.server = raw.url();
    auto client = KubeClient::Create(config);
    ASSERT_TRUE(client.ok());
    int pages = 0;
    absl::StatusOr<std::string> rv = (*client)->List("/api/v1/nodes", [&](const rapidjson::Value&) {
      ++pages;
      return absl::OkStatus();
    });
    EXPECT_EQ(rv.status().code(), absl::StatusCode::kDataLoss) << c.body;
    EXPECT_THAT(std::string(rv.status().message()), HasSubstr(c.error)) << c.body;
    EXPECT_EQ(pages, 0);
  }
  // The same page without the fault is listed.
  RawStreamServer raw(page, 0);
  KubeConfig config;
  config.server = raw.url();
  auto client = KubeClient::Create(config);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::string> rv =
      (*client)->List("/api/v1/nodes", [](const rapidjson::Value&) { return absl::OkStatus(); });
  ASSERT_TRUE(rv.ok()) << rv.status();
  EXPECT_EQ(*rv, "7");
}

TEST(KubeClientTest, WatchOfTheFakeServerStreamsEventsAndBookmarksUntilTimeout) {
  FakeApiServer::Options options;
  options.bookmark_interval = absl::Milliseconds(200);
  auto fake = StartFake(options);
  ASSERT_TRUE(fake->LoadRecordedCluster().ok());
  auto client = ClientFor(*fake);
  const std::string rv = fake->resource_version();
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    (void)fake->Apply("pods", NamedPod("w1"));
    (void)fake->Apply("nodes", R"({"metadata":{"name":"n-other"}})");  // another kind: not sent
    (void)fake->Delete("pods", "team-a", "w1");
  });
  WatchStopper stopper;
  std::vector<std::string> types;
  absl::Status s = client->Watch(
      absl::StrCat("/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=", rv,
                   "&timeoutSeconds=1"),
      absl::Seconds(5),
      [&](absl::string_view line) {
        rapidjson::Document doc;
        doc.Parse(line.data(), line.size());
        EXPECT_FALSE(doc.HasParseError());
        types.push_back(doc["type"].GetString());
        return true;
      },
      &stopper);
  writer.join();
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_GE(types.size(), 3u);
  EXPECT_EQ(types[0], "ADDED");
  EXPECT_EQ(types[1], "DELETED");
  EXPECT_EQ(types.back(), "BOOKMARK");  // the server bookmarks before closing at timeoutSeconds
}

TEST(KubeClientTest, WatchFromACompactedResourceVersionGetsTheExpiredErrorEvent) {
  auto fake = StartFake();
  ASSERT_TRUE(fake->LoadRecordedCluster().ok());
  const std::string old_rv = fake->resource_version();
  ASSERT_TRUE(fake->Apply("pods", NamedPod("x")).ok());
  fake->Compact();
  auto client = ClientFor(*fake);
  WatchStopper stopper;
  std::vector<std::string> lines;
  absl::Status s = client->Watch(absl::StrCat("/api/v1/pods?watch=1&resourceVersion=", old_rv),
                                 absl::Seconds(5),
                                 [&](absl::string_view l) { return lines.emplace_back(l), true; },
                                 &stopper);
  EXPECT_TRUE(s.ok()) << s;  // HTTP 200, then the ERROR event, as recorded
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0] + "\n", testing::ReadFileOrDie(SharedPath(
                                 "protocol/kube-api-1.26/watch-too-old-resourceversion.jsonl")));
}

TEST(KubeClientTest, StopperEndsAnIdleWatchPromptly) {
  auto fake = StartFake();
  auto client = ClientFor(*fake);
  WatchStopper stopper;
  absl::Status result;
  std::thread t([&] {
    result = client->Watch("/api/v1/pods?watch=1&timeoutSeconds=60", absl::Seconds(90),
                           [](absl::string_view) { return true; }, &stopper);
  });
  while (fake->open_watches() == 0) absl::SleepFor(absl::Milliseconds(5));
  absl::Time start = absl::Now();
  stopper.Stop();
  t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
  // A stopped stopper refuses new watches at once.
  EXPECT_EQ(client->Watch("/api/v1/pods?watch=1", absl::Seconds(1),
                          [](absl::string_view) { return true; }, &stopper)
                .code(),
            absl::StatusCode::kCancelled);
}

TEST(KubeClientTest, DroppedWatchIsATransportError) {
  auto fake = StartFake();
  auto client = ClientFor(*fake);
  WatchStopper stopper;
  absl::Status result;
  std::thread t([&] {
    result = client->Watch("/api/v1/pods?watch=1&timeoutSeconds=60", absl::Seconds(90),
                           [](absl::string_view) { return true; }, &stopper);
  });
  while (fake->open_watches() == 0) absl::SleepFor(absl::Milliseconds(5));
  fake->DropWatches();
  t.join();
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(KubeErrorOf(result).http_code, 0);
}

// ---------------------------------------------------------------- TLS

TEST(KubeClientTest, HttpsVerifiesTheServerAgainstTheConfiguredCa) {
  auto fake = StartFake(Opts(true));
  {
    auto client = ClientFor(*fake);  // the fake's CA
    EXPECT_TRUE(client->CheckReachable(1, absl::Milliseconds(10)).ok());
    EXPECT_TRUE(client->Get("/api/v1/nodes").ok());
  }
  {
    KubeConfig config;
    config.server = fake->url();
    config.token = "test-token";
    config.ca_pem = testing::MakeTestPki().ca_pem;  // some other CA
    config.source = "kubeconfig k (context c)";
    auto client = KubeClient::Create(config);
    ASSERT_TRUE(client.ok());
    absl::Time start = absl::Now();
    absl::Status s = (*client)->CheckReachable(5, absl::Seconds(3));
    // No retries (retrying cannot help): one would wait its 3 s backoff first.
    EXPECT_LT(absl::Now() - start, absl::Seconds(3));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("certificate verification failed"));
    EXPECT_THAT(s.message(), HasSubstr("configured CA"));
  }
  {
    KubeConfig config;
    config.server = fake->url();
    config.token = "test-token";
    config.insecure_skip_tls_verify = true;
    auto client = KubeClient::Create(config);
    ASSERT_TRUE(client.ok());
    EXPECT_TRUE((*client)->Get("/api/v1/nodes").ok());
  }
}

TEST(KubeClientTest, ClientCertificateFromKubeconfigData) {
  auto fake = StartFake(Opts(true, true));
  absl::StatusOr<KubeConfig> config = ParseKubeconfig(fake->Kubeconfig(), "/tmp/kc");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->client_cert_pem.empty());
  auto client = KubeClient::Create(*config);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Get("/api/v1/nodes").ok());
  // Without the certificate the TLS handshake is refused.
  config->client_cert_pem.clear();
  config->client_key_pem.clear();
  auto anonymous = KubeClient::Create(*config);
  ASSERT_TRUE(anonymous.ok());
  EXPECT_FALSE((*anonymous)->Get("/api/v1/nodes").ok());
}

TEST(KubeClientTest, HttpsWatchStreams) {
  auto fake = StartFake(Opts(true));
  auto client = ClientFor(*fake);
  const std::string rv = fake->resource_version();
  ASSERT_TRUE(fake->Apply("pods", NamedPod("tls-pod")).ok());
  WatchStopper stopper;
  std::string first;
  absl::Status s = client->Watch(absl::StrCat("/api/v1/pods?watch=1&resourceVersion=", rv),
                                 absl::Seconds(5),
                                 [&](absl::string_view l) {
                                   first = std::string(l);
                                   return false;  // enough
                                 },
                                 &stopper);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(first, HasSubstr("\"name\":\"tls-pod\""));
}

// ---------------------------------------------------------------- configuration

constexpr char kKubeconfig[] = R"(apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: CA_DATA
- name: files
  cluster:
    server: https://api.example:443/prefix
    certificate-authority: ca.crt
contexts:
- name: prod
  context: {cluster: prod, user: alice, namespace: gpu}
- name: files
  context: {cluster: files, user: bob}
current-context: prod
users:
- name: alice
  user:
    token: alice-token
- name: bob
  user:
    tokenFile: token
)";

TEST(KubeconfigTest, CurrentContextClusterAndUser) {
  const std::string ca = testing::MakeTestPki().ca_pem;
  std::string text = absl::StrReplaceAll(kKubeconfig, {{"CA_DATA", absl::Base64Escape(ca)}});
  absl::StatusOr<KubeConfig> c = ParseKubeconfig(text, "/home/u/.kube/config");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_pem, ca);
  EXPECT_EQ(c->token, "alice-token");
  EXPECT_EQ(c->namespace_name, "gpu");
  EXPECT_THAT(c->source, HasSubstr("context prod"));
}

TEST(KubeconfigTest, RelativeFilesResolveAgainstTheKubeconfigDirectory) {
  TempDir dir;
  dir.Write("ca.crt", testing::MakeTestPki().ca_pem);
  dir.Write("token", "bob-token");
  dir.Write("config", kKubeconfig);
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(dir.File("config"), "files");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://api.example:443/prefix");
  EXPECT_EQ(c->token_file, dir.File("token"));
  EXPECT_EQ(c->namespace_name, "default");
  EXPECT_TRUE(KubeClient::Create(*c).ok());
}

TEST(KubeconfigTest, ErrorsNameTheFileAndField) {
  const std::string good_ca = absl::Base64Escape(testing::MakeTestPki().ca_pem);
  struct Case {
    std::string text;
    std::string context;
    std::string want;
  } cases[] = {
      {"apiVersion: v1\nclusters: []\n", "", "current-context: not set"},
      {absl::StrReplaceAll(kKubeconfig, {{"CA_DATA", good_ca}}), "staging",
       "contexts: no context named \"staging\""},
      {absl::StrReplaceAll(kKubeconfig, {{"CA_DATA", "abc*def"}}), "",
       "clusters[0].cluster.certificate-authority-data: not valid base64"},
      {absl::StrReplaceAll(kKubeconfig, {{"CA_DATA", absl::Base64Escape("not a certificate")}}), "",
       "clusters[0].cluster.certificate-authority-data: not a valid PEM certificate"},
      {absl::StrReplaceAll(kKubeconfig, {{"CA_DATA", good_ca}, {"https://10.0.0.1:6443", "10.0.0.1"}}),
       "", "clusters[0].cluster.server: \"10.0.0.1\" must start with https://"},
      {absl::StrReplaceAll(kKubeconfig, {{"CA_DATA", good_ca}, {"token: alice-token", "exec: {command: x}"}}),
       "", "users[0].user.exec: exec credential plugins are not supported"},
      {absl::StrReplaceAll(kKubeconfig, {{"CA_DATA", good_ca}}), "files",
       "clusters[1].cluster.certificate-authority: /nonexistent/ca.crt"},
      {"clusters: [\n", "", "line "},
  };
  for (const Case& c : cases) {
    absl::StatusOr<KubeConfig> r = ParseKubeconfig(c.text, "/nonexistent/config", c.context);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_THAT(r.status().message(), HasSubstr("kubeconfig /nonexistent/config: "));
    EXPECT_THAT(r.status().message(), HasSubstr(c.want));
  }
  absl::StatusOr<KubeConfig> missing = LoadKubeconfig("/nonexistent/kubeconfig");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("kubeconfig /nonexistent/kubeconfig: No such file or directory"));
}

TEST(KubeconfigTest, MismatchedClientKeyIsRejected) {
  testing::TestPki a = testing::MakeTestPki();
  testing::TestPki b = testing::MakeTestPki();
  KubeConfig config;
  config.server = "https://127.0.0.1:1";
  config.client_cert_pem = a.client_cert_pem;
  config.client_key_pem = b.client_key_pem;
  auto client = KubeClient::Create(config);
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.status().message(), HasSubstr("client key does not match"));
}

TEST(InClusterConfigTest, ReadsServiceAccountFilesAndEnvironment) {
  TempDir dir;
  dir.Write("token", "sa-token\n");
  dir.Write("ca.crt", testing::MakeTestPki().ca_pem);
  dir.Write("namespace", "gpu-slice-extender");
  InClusterPaths paths{dir.File("token"), dir.File("ca.crt"), dir.File("namespace"), "10.96.0.1", "443"};
  absl::StatusOr<KubeConfig> c = LoadInClusterConfig(paths);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->token_file, dir.File("token"));
  EXPECT_EQ(c->namespace_name, "gpu-slice-extender");
  paths.host = "fd00::1";
  EXPECT_EQ(LoadInClusterConfig(paths)->server, "https://[fd00::1]:443");
}

TEST(InClusterConfigTest, ErrorsNameTheMissingOrBadFile) {
  TempDir dir;
  dir.Write("ca.crt", "garbage");
  dir.Write("token", "t");
  InClusterPaths paths{dir.File("missing-token"), dir.File("ca.crt"), dir.File("ns"), "10.96.0.1", "443"};
  absl::StatusOr<KubeConfig> c = LoadInClusterConfig(paths);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(dir.File("missing-token")));
  EXPECT_THAT(c.status().message(), HasSubstr("No such file"));
  paths.token = dir.File("token");
  c = LoadInClusterConfig(paths);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(dir.File("ca.crt")));
  EXPECT_THAT(c.status().message(), HasSubstr("not a valid PEM certificate"));
}

}  // namespace
}  // namespace gse
