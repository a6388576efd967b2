// HttpServer on cpp-httplib 0.11. The library's defaults and gaps that this file works around
// (measured, see shared/BUILD-NOTES.md and tests/http_server_test.cc):
//  * set_payload_max_length only limits bodies framed by Content-Length; chunked and
//    compressed bodies are read without limit. Verbs therefore read their body through a
//    ContentReader with our own limit on the decoded bytes.
//  * A POST without Content-Length or chunked framing is read until the peer closes; we
//    answer 411 before reading instead.
//  * A response's "Connection: close" header is sent but the server keeps reading the
//    connection; clients honour the header, so it is still how we end a connection that has
//    unread body bytes on it.
//  * The default socket options set SO_REUSEPORT, which lets a second process bind the same
//    port and silently take half the traffic; we set SO_REUSEADDR only.
//  * JSON responses are gzip-compressed whenever the client accepts gzip (kube-scheduler's
//    Go client always does); compressing a 245 KB prioritize answer costs more than computing
//    it, so JSON is sent as "application/json; charset=utf-8", a content type the library
//    does not compress. (/metrics, text, is compressed for scrapers that ask.)
//  * stop() is a no-op until the accept loop runs, and idle keep-alive connections are only
//    closed when their keep-alive timeout expires.
//  * SSLServer with a client CA sets SSL_VERIFY_FAIL_IF_NO_PEER_CERT, which refuses every
//    client without a certificate at the handshake: kubelet's HTTPS probes and Prometheus
//    present none. The context is switched to SSL_VERIFY_PEER alone (a certificate is
//    requested and, when presented, must verify against --client-ca or the handshake fails),
//    and routes that need a client (the verbs, /debug/state) check per request that the
//    connection presented a verified certificate: 403 otherwise.
#include "extender/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <malloc.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "extender/elastic_thread_pool.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/mirror.h"

namespace gse {

struct HttpServer::Route {
  std::string method;  // "POST" or "GET" (GET routes also answer HEAD)
  std::string label;   // verb label of the request metrics
  // With --client-ca: only connections that presented a certificate signed by it may use the
  // route. Health and metrics stay open to kubelet probes and Prometheus.
  bool needs_client_cert = false;
  // GET routes: the whole answer. POST routes dispatch through verb_handlers_[label].
  std::function<void(const httplib::Request&, httplib::Response&)> get;
};

// cpp-httplib's task queue for the connections: an ElasticThreadPool, registered with the
// server while the accept loop runs so that Workers() can read its counts.
class HttpServer::WorkerQueue : public httplib::TaskQueue {
 public:
  WorkerQueue(HttpServer* server, ElasticThreadPoolOptions options)
      : server_(server), pool_(options) {
    absl::MutexLock lock(&server_->workers_mu_);
    server_->workers_ = this;
  }
  ~WorkerQueue() override {
    absl::MutexLock lock(&server_->workers_mu_);
    if (server_->workers_ == this) server_->workers_ = nullptr;
  }
  void enqueue(std::function<void()> fn) override { pool_.Enqueue(std::move(fn)); }
  void shutdown() override { pool_.Shutdown(); }
  ElasticThreadPool::Stats stats() const { return pool_.stats(); }

 private:
  HttpServer* const server_;
  ElasticThreadPool pool_;
};

namespace {

// application/json; the parameter keeps cpp-httplib from compressing answers (see top).
constexpr char kJson[] = "application/json; charset=utf-8";
constexpr char kPrometheusText[] = "text/plain; version=0.0.4; charset=utf-8";

// Per-request bookkeeping between the pre-routing handler (headers read), the handler that
// makes the answer (metrics recorded: the answer is ready) and the logger (answer written:
// no longer in flight). cpp-httplib serves a request on one worker thread from start to
// end, so a thread_local carries it without touching the Request.
struct RequestContext {
  bool active = false;    // pre-routing ran: counted in in_flight_
  bool recorded = false;  // ObserveRequest done
  std::chrono::steady_clock::time_point start;
  std::string outcome;  // set by verb handlers from VerbResult::outcome
};
thread_local RequestContext t_request;

std::string ErrorJson(absl::string_view message) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("Error");
  w.String(message.data(), static_cast<rapidjson::SizeType>(message.size()));
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

// A request path for an error message: decoded paths may hold any byte, and JSON must be
// valid UTF-8, so anything but printable ASCII becomes '?'; long paths are cut.
std::string Printable(const std::string& path) {
  std::string out = path.substr(0, 200);
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  if (path.size() > out.size()) out += "...";
  return out;
}

// /readyz: {"ready":true}, or {"ready":false,"reason":"not_leader","leader":"<identity>",
// "Error":"not the leader; <identity> leads (Lease ...)"} ("leader" only for not_leader, and
// null when no live holder is known).
std::string ReadinessJson(const Readiness& r) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("ready");
  w.Bool(r.ready());
  if (!r.ready()) {
    w.Key("reason");
    w.String(r.label());
    if (r.state == Readiness::State::kNotLeader) {
      w.Key("leader");
      if (r.leader.empty()) {
        w.Null();
      } else {
        w.String(r.leader.data(), static_cast<rapidjson::SizeType>(r.leader.size()));
      }
    }
    w.Key("Error");
    w.String(r.message.data(), static_cast<rapidjson::SizeType>(r.message.size()));
  }
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

void ReplyError(httplib::Response& res, int status, absl::string_view message) {
  res.status = status;
  res.set_content(ErrorJson(message), kJson);
}

// The connection may still carry body bytes we did not read: ask the client to close it.
void CloseConnection(httplib::Response& res) { res.set_header("Connection", "close"); }

bool HasBody(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  if (!req.has_header("Content-Length")) return false;
  return req.get_header_value("Content-Length") != "0";
}

std::string OutcomeOfStatus(int status) {
  if (status >= 500) return "error";
  if (status >= 400) return "bad_request";
  return "ok";
}

std::string StatusText(int status) {
  switch (status) {
    case 400:
      return "malformed HTTP request";
    case 404:
      return "not found";
    case 405:
      return "method not allowed";
    case 411:
      return "Content-Length required";
    case 413:
      return "request body too large";
    case 414:
      return "request URI too long";
    case 415:
      return "unsupported Content-Encoding";
    default:
      return absl::StrCat("HTTP status ", status);
  }
}

std::string Errno() { return errno != 0 ? std::strerror(errno) : "unknown error"; }

// The connection presented a client certificate and it verified against the client CA. With
// SSL_VERIFY_PEER a certificate that does not verify already failed the handshake; without a
// certificate the verify result is X509_V_OK too, so the certificate itself must be checked.
bool HasVerifiedClientCert(const httplib::Request& req) {
  if (req.ssl == nullptr) return false;
  return SSL_get0_peer_certificate(req.ssl) != nullptr &&
         SSL_get_verify_result(req.ssl) == X509_V_OK;
}

// Whole file, or an error naming the flag and the file.
absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": cannot read the file: ", Errno()));
  }
  std::string data;
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const std::string reason = Errno();
  std::fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": cannot read the file: ", reason));
  }
  return data;
}

// OpenSSL's own words for the last error, for messages after ours.
std::string OpenSslError() {
  unsigned long code = ERR_peek_last_error();
  std::string text;
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    text = absl::StrCat(" (", buf, ")");
  }
  ERR_clear_error();
  return text;
}

// A password callback that refuses, so an encrypted key fails instead of prompting on a tty.
int NoPassword(char*, int, int, void*) { return 0; }

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioDeleter> MemoryBio(const std::string& data) {
  return std::unique_ptr<BIO, BioDeleter>(
      BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

// Prefix characters allowed in a URL path segment without percent-encoding (RFC 3986
// pchar minus '%': httplib matches the decoded path, so an encoded prefix would never match).
bool IsPathChar(char c) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  return std::strchr("-._~!$&'()*+,;=:@/", c) != nullptr && c != '\0';
}

void SetTimeout(absl::Duration d, time_t& sec, time_t& usec) {
  sec = static_cast<time_t>(absl::ToInt64Seconds(d));
  usec = static_cast<time_t>(absl::ToInt64Microseconds(d - absl::Seconds(sec)));
}

}  // namespace

absl::StatusOr<std::string> NormalizePrefix(absl::string_view prefix) {
  std::string p(prefix);
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (p.empty()) return p;
  if (p.front() != '/') p.insert(p.begin(), '/');
  for (char c : p) {
    if (!IsPathChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--prefix=\"", prefix, "\": character '", std::string(1, c),
          "' is not allowed in a URL path prefix (use letters, digits and - . _ ~ / only)"));
    }
  }
  if (p.find("//") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix=\"", prefix, "\": empty path segment (\"//\")"));
  }
  return p;
}

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view listen) {
  const std::string what = absl::StrCat("--listen=\"", listen, "\": ");
  const std::string usage = "want HOST:PORT, e.g. 127.0.0.1:8888, 0.0.0.0:8888 or [::1]:8888";
  ListenAddress out;
  absl::string_view port_text;
  if (!listen.empty() && listen.front() == '[') {
    const size_t close = listen.find(']');
    if (close == absl::string_view::npos || close + 1 >= listen.size() ||
        listen[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat(what, usage));
    }
    out.host = std::string(listen.substr(1, close - 1));
    port_text = listen.substr(close + 2);
    in6_addr addr;
    if (inet_pton(AF_INET6, out.host.c_str(), &addr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "\"", out.host, "\" is not an IPv6 address"));
    }
    out.ipv6 = true;
  } else {
    const size_t colon = listen.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(what, "missing port; ", usage));
    }
    out.host = std::string(listen.substr(0, colon));
    port_text = listen.substr(colon + 1);
    if (out.host.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "missing host (0.0.0.0 listens on every interface); ", usage));
    }
    if (out.host.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "an IPv6 address must be in brackets; ", usage));
    }
    for (char c : out.host) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') {
        return absl::InvalidArgumentError(
            absl::StrCat(what, "\"", out.host, "\" is not an IPv4 address or host name"));
      }
    }
  }
  int port = -1;
  if (port_text.empty() || !std::all_of(port_text.begin(), port_text.end(),
                                        [](char c) { return absl::ascii_isdigit(c); })) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "port \"", port_text, "\" is not a number; ", usage));
  }
  if (port_text.size() > 5 || !absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "port ", port_text, " is out of range 0-65535"));
  }
  out.port = port;
  return out;
}

// Idle connection workers kept ready beyond the busy ones (ElasticThreadPoolOptions::spare):
// kube-scheduler dials a connection per concurrent call beyond the 2 it keeps idle, and binds
// hold those, so while binds are in flight its scheduling loop dials often. 4 covers the
// connections that arrive before the pool's keeper has replaced the spares they took (one
// scheduling round of the keeper); an idle worker costs its stack only.
constexpr size_t kSpareConnectionWorkers = 4;

int DefaultThreadCount() {
  // The workers kept ready, and the floor left for everything but binds. A worker serves one
  // connection for its whole keep-alive life, and kube-scheduler opens a connection per
  // concurrent call (filter, parallel prioritize, asynchronous binds) and keeps 2 idle (Go's
  // DefaultMaxIdleConnsPerHost). More are started on demand; ready ones save the start-up of
  // a thread on a new connection, and idle workers cost only their stacks.
  const unsigned hw = std::thread::hardware_concurrency();
  return std::max(64, 4 * static_cast<int>(hw));
}

// Bind workers: raises the calling thread's nice value by `steps` (to at most 19). Linux
// keeps a nice value per thread (setpriority with a thread id), and CFS weighs each thread by
// it, across the whole process and its cgroup. Raising one's own nice value needs no privilege.
void LowerThisThreadsPriority(int steps) {
  const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);
  if (now == -1 && errno != 0) return;
  if (setpriority(PRIO_PROCESS, tid, std::min(19, now + steps)) != 0) {
    static std::atomic<bool> reported{false};
    if (!reported.exchange(true)) {
      std::fprintf(stderr, "gpu-slice-extender: --bind-nice: setpriority failed (%s); binds run "
                   "at the priority of the other verbs\n", std::strerror(errno));
    }
  }
}

void TuneMallocForLargeBodies() {
  // A 5,000-Node filter body is 3.5 MB and its answer as large: at glibc's default thresholds
  // each request mmaps and unmaps them, and every page is faulted in and zeroed again.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

absl::Status CheckTlsFiles(const TlsOptions& tls) {
  if (!tls.enabled()) {
    if (!tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--client-ca needs --tls-cert and --tls-key: client certificates are checked only "
          "on HTTPS");
    }
    return absl::OkStatus();
  }
  if (tls.cert_file.empty()) {
    return absl::InvalidArgumentError("--tls-key is set but --tls-cert is not; HTTPS needs both");
  }
  if (tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert is set but --tls-key is not; HTTPS needs both");
  }
  ERR_clear_error();
  absl::StatusOr<std::string> cert_pem = ReadFlagFile("--tls-cert", tls.cert_file);
  if (!cert_pem.ok()) return cert_pem.status();
  auto cert_bio = MemoryBio(*cert_pem);
  std::unique_ptr<X509, X509Deleter> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassword, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-cert=", tls.cert_file, ": no PEM certificate in the file", OpenSslError()));
  }
  absl::StatusOr<std::string> key_pem = ReadFlagFile("--tls-key", tls.key_file);
  if (!key_pem.ok()) return key_pem.status();
  auto key_bio = MemoryBio(*key_pem);
  std::unique_ptr<EVP_PKEY, KeyDeleter> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassword, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-key=", tls.key_file,
                                                   ": no unencrypted PEM private key in the file",
                                                   OpenSslError()));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key=", tls.key_file, " does not match the certificate in --tls-cert=", tls.cert_file,
        OpenSslError()));
  }
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca_pem = ReadFlagFile("--client-ca", tls.client_ca_file);
    if (!ca_pem.ok()) return ca_pem.status();
    auto ca_bio = MemoryBio(*ca_pem);
    std::unique_ptr<X509, X509Deleter> ca(
        PEM_read_bio_X509(ca_bio.get(), nullptr, NoPassword, nullptr));
    if (ca == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--client-ca=", tls.client_ca_file, ": no PEM certificate in the file", OpenSslError()));
    }
  }
  ERR_clear_error();
  return absl::OkStatus();
}

HttpServer::HttpServer(ExtenderService* service, ExtenderMetrics* metrics,
                       HttpServerOptions options)
    : service_(service), metrics_(metrics), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(ExtenderService* service,
                                                               ExtenderMetrics* metrics,
                                                               HttpServerOptions options) {
  std::unique_ptr<HttpServer> server(new HttpServer(service, metrics, std::move(options)));
  if (absl::Status s = server->Init(); !s.ok()) return s;
  return server;
}

absl::Status HttpServer::Init() {
  absl::StatusOr<std::string> prefix = NormalizePrefix(options_.prefix);
  if (!prefix.ok()) return prefix.status();
  options_.prefix = *prefix;
  if (options_.port < 0 || options_.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen: port ", options_.port, " is out of range 0-65535"));
  }
  if (options_.host.empty()) return absl::InvalidArgumentError("--listen: missing host");
  if (options_.threads == 0) options_.threads = DefaultThreadCount();
  if (options_.threads < 1 || options_.threads > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads=", options_.threads, ": want 1-4096 (0 = default)"));
  }
  if (options_.max_concurrent_binds < 1 || options_.max_concurrent_binds > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-concurrent-binds=", options_.max_concurrent_binds, ": want 1-65536"));
  }
  if (options_.bind_nice < 0 || options_.bind_nice > 19) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bind-nice=", options_.bind_nice,
        ": want 0-19 (how much lower than the other verbs binds run; 0 = the same)"));
  }
  if (options_.worker_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("worker idle timeout must be positive");
  }
  if (options_.max_body_bytes == 0) {
    return absl::InvalidArgumentError("--max-body-bytes must be positive");
  }
  const std::pair<const char*, absl::Duration> timeouts[] = {
      {"--read-timeout", options_.read_timeout},
      {"--write-timeout", options_.write_timeout},
      {"--keep-alive-timeout", options_.keep_alive_timeout}};
  for (const auto& [flag, d] : timeouts) {
    if (d <= absl::ZeroDuration() || d > absl::Hours(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "=", absl::FormatDuration(d), ": want more than 0 and at most 1h"));
    }
  }
  if (options_.keep_alive_max_count == 0) {
    return absl::InvalidArgumentError("keep_alive_max_count must be positive");
  }

  if (absl::Status s = CheckTlsFiles(options_.tls); !s.ok()) return s;
  if (options_.tls.enabled()) {
    const TlsOptions& tls = options_.tls;
    auto ssl = std::make_unique<httplib::SSLServer>(
        tls.cert_file.c_str(), tls.key_file.c_str(),
        tls.client_ca_file.empty() ? nullptr : tls.client_ca_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls-cert=", tls.cert_file, " / --tls-key=", tls.key_file,
          tls.client_ca_file.empty() ? "" : absl::StrCat(" / --client-ca=", tls.client_ca_file),
          ": OpenSSL could not set up HTTPS with these files", OpenSslError()));
    }
    SSL_CTX* ctx = ssl->ssl_context();
    // TLS 1.0 and 1.1 are deprecated (RFC 8996); Go clients default to 1.2 as well.
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (!tls.client_ca_file.empty()) {
      // Request a client certificate without requiring one (see the top of this file); a
      // certificate from another CA still fails the handshake.
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
      // Name the acceptable CAs in the CertificateRequest, so that a client holding several
      // certificates sends the one from --client-ca.
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str())) {
        SSL_CTX_set_client_CA_list(ctx, names);  // takes ownership
      }
      // Resumed sessions keep the peer's certificate; OpenSSL refuses to resume a session
      // with peer verification unless the context names itself.
      static constexpr unsigned char kSessionContext[] = "gpu-slice-extender";
      SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
    }
    ERR_clear_error();
    server_ = std::move(ssl);
    tls_ = true;
  } else {
    server_ = std::make_unique<httplib::Server>();
  }

  httplib::Server& svr = *server_;
  svr.set_tcp_nodelay(true);
  svr.set_keep_alive_max_count(options_.keep_alive_max_count);
  // Whole seconds only: round up, so that a sub-second setting still keeps connections.
  svr.set_keep_alive_timeout(static_cast<time_t>(
      absl::ToInt64Seconds(absl::Ceil(options_.keep_alive_timeout, absl::Seconds(1)))));
  time_t sec, usec;
  SetTimeout(options_.read_timeout, sec, usec);
  svr.set_read_timeout(sec, usec);
  SetTimeout(options_.write_timeout, sec, usec);
  svr.set_write_timeout(sec, usec);
  svr.set_payload_max_length(options_.max_body_bytes);
  ElasticThreadPoolOptions pool;
  pool.warm = static_cast<size_t>(options_.threads);
  // Binds hold at most max_concurrent_binds workers (HandleVerb), so `threads` stay for the rest.
  pool.max = pool.warm + static_cast<size_t>(options_.max_concurrent_binds);
  pool.idle_timeout = options_.worker_idle_timeout;
  // Idle workers kept ready ahead of new connections, started off the accept thread (see
  // ElasticThreadPoolOptions::spare): a connection kube-scheduler dials while binds hold its
  // idle ones is handed to a running thread, never to one being created.
  pool.spare = kSpareConnectionWorkers;
  svr.new_task_queue = [this, pool] { return new WorkerQueue(this, pool); };
  if (options_.bind_nice > 0) {
    // At most max_concurrent_binds binds are admitted (HandleVerb), so a bind never waits for
    // a bind worker: one is idle or is started for it. None are kept ready beyond the one
    // spare: binds come in bursts, and starting a thread costs less than a bind's POST.
    ElasticThreadPoolOptions binds;
    binds.warm = 0;
    binds.max = static_cast<size_t>(options_.max_concurrent_binds);
    binds.spare = 1;
    binds.idle_timeout = options_.worker_idle_timeout;
    binds.on_thread_start = [steps = options_.bind_nice] {
      LowerThisThreadsPriority(steps);
      // Its reservations must not make the verbs wait for a thread the scheduler weighs less.
      Mirror::YieldToReadersOnThisThread();
    };
    bind_workers_ = std::make_unique<ElasticThreadPool>(binds);
  }
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  in6_addr v6;
  in_addr v4;
  if (inet_pton(AF_INET6, options_.host.c_str(), &v6) == 1) {
    svr.set_address_family(AF_INET6);
  } else if (inet_pton(AF_INET, options_.host.c_str(), &v4) == 1) {
    svr.set_address_family(AF_INET);
  } else {
    svr.set_address_family(AF_UNSPEC);
  }

  InstallRoutes();

  errno = 0;
  if (options_.port == 0) {
    port_ = svr.bind_to_any_port(options_.host);
  } else {
    port_ = svr.bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ < 0) {
    return absl::UnavailableError(absl::StrCat(
        "--listen: cannot listen on ", BaseUrl(), ": ", Errno(),
        " (is another process using the port, or is the host not an address of this machine?)"));
  }
  return absl::OkStatus();
}

void HttpServer::InstallRoutes() {
  for (const char* verb : {"filter", "prioritize", "bind", "preempt"}) {
    auto route = std::make_unique<Route>();
    route->method = "POST";
    route->label = verb;
    route->needs_client_cert = true;
    routes_[absl::StrCat(options_.prefix, "/", verb)] = std::move(route);
  }
  verb_handlers_["filter"] = [this](std::string body) { return service_->Filter(std::move(body)); };
  verb_handlers_["prioritize"] = [this](std::string body) {
    return service_->Prioritize(std::move(body));
  };
  verb_handlers_["bind"] = [this](std::string body) { return service_->Bind(std::move(body)); };
  verb_handlers_["preempt"] = [this](std::string body) {
    return service_->Preempt(std::move(body));
  };

  auto add_get = [this](const std::string& path, const std::string& label,
                        std::function<void(const httplib::Request&, httplib::Response&)> fn,
                        bool needs_client_cert = false) {
    auto route = std::make_unique<Route>();
    route->method = "GET";
    route->label = label;
    route->get = std::move(fn);
    route->needs_client_cert = needs_client_cert;
    routes_[path] = std::move(route);
  };
  add_get("/healthz", "healthz", [](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content("ok", "text/plain; charset=utf-8");
  });
  add_get("/readyz", "readyz", [this](const httplib::Request&, httplib::Response& res) {
    const Readiness readiness = service_->readiness();
    res.status = readiness.ready() ? 200 : 503;
    res.set_content(ReadinessJson(readiness), kJson);
  });
  add_get("/metrics", "metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(metrics_ != nullptr ? metrics_->Serialize() : std::string(), kPrometheusText);
  });
  // The state names every project, pod and unit: only for clients kube-scheduler's CA trusts.
  add_get(
      "/debug/state", "debug_state",
      [this](const httplib::Request&, httplib::Response& res) {
        res.status = 200;
        res.body = service_->DebugStateJson();
        res.set_header("Content-Type", kJson);
      },
      /*needs_client_cert=*/true);

  httplib::Server& svr = *server_;

  // Runs once the headers are read, before any body byte: unknown paths, wrong methods and
  // unframed POSTs are answered here, so no body is read for a request we will refuse.
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_request.active = true;
    t_request.recorded = false;
    t_request.start = std::chrono::steady_clock::now();
    t_request.outcome.clear();
    in_flight_.fetch_add(1);

    const Route* route = FindRoute(req.path);
    if (route == nullptr) {
      std::vector<std::string> known;
      for (const auto& [path, r] : routes_) known.push_back(absl::StrCat(r->method, " ", path));
      ReplyError(res, 404,
                 absl::StrCat("no route for ", Printable(req.path),
                              "; routes: ", absl::StrJoin(known, ", ")));
      if (HasBody(req)) CloseConnection(res);
      RecordRequest(req.path, res.status);
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool allowed =
        req.method == route->method || (route->method == "GET" && req.method == "HEAD");
    if (!allowed) {
      const std::string allow = route->method == "GET" ? "GET, HEAD" : "POST";
      ReplyError(
          res, 405,
          absl::StrCat(req.method, " is not allowed on ", Printable(req.path), "; use ", allow));
      res.set_header("Allow", allow);
      if (HasBody(req)) CloseConnection(res);
      RecordRequest(req.path, res.status);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (tls_ && !options_.tls.client_ca_file.empty() && route->needs_client_cert &&
        !HasVerifiedClientCert(req)) {
      ReplyError(res, 403,
                 absl::StrCat(req.method, " ", Printable(req.path),
                              " needs a client certificate signed by --client-ca; this "
                              "connection presented none (only /healthz, /readyz and /metrics "
                              "are open without one)"));
      if (HasBody(req)) CloseConnection(res);
      RecordRequest(req.path, res.status);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (route->method == "POST" && !req.has_header("Content-Length") &&
        !req.has_header("Transfer-Encoding")) {
      ReplyError(res, 411,
                 absl::StrCat("POST ", req.path,
                              " needs a JSON body with Content-Length or chunked encoding"));
      RecordRequest(req.path, res.status);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Pre-routing admitted only known (path, method) pairs, so these catch-alls see routes only.
  svr.Post(".*", [this](const httplib::Request& req, httplib::Response& res,
                        const httplib::ContentReader& reader) {
    HandleVerb(req, res, reader);
    RecordRequest(req.path, res.status);
  });

  svr.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
    const Route* route = FindRoute(req.path);
    if (route == nullptr || route->method != "GET") {
      ReplyError(res, 404, absl::StrCat("no route for GET ", Printable(req.path)));
    } else {
      route->get(req, res);
    }
    // cpp-httplib does not read bodies of GET requests; do not reuse the connection.
    if (HasBody(req)) CloseConnection(res);
    RecordRequest(req.path, res.status);
  });

  // Fills in a JSON body for errors that the library answers itself (400 for a malformed
  // request, 413 for an oversized Content-Length, 414); answers we wrote stay as they are.
  svr.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        res.set_content(ErrorJson(StatusText(res.status)), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));

  svr.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        std::fprintf(stderr, "gpu-slice-extender: %s %s failed: %s\n", req.method.c_str(),
                     Printable(req.path).c_str(), what.c_str());
        res = httplib::Response();
        ReplyError(res, 500, absl::StrCat("internal error: ", what));
        // The handler may have stopped in the middle of the body.
        CloseConnection(res);
        t_request.outcome = "error";
        RecordRequest(req.path, res.status);
      });

  // Called once per answered request, after the answer is written. Answers the library
  // makes itself (a malformed request, an oversized Content-Length) are recorded here.
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    RecordRequest(req.path, res.status);
    t_request.recorded = false;
    t_request.outcome.clear();
    if (t_request.active) {
      t_request.active = false;
      in_flight_.fetch_sub(1);
    }
  });

  // A client that announces a too large body with "Expect: 100-continue" (curl does for big
  // uploads) gets 413 before sending it.
  svr.set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    size_t declared = 0;
    if (absl::SimpleAtoi(req.get_header_value("Content-Length"), &declared) &&
        declared > options_.max_body_bytes) {
      // cpp-httplib 0.11 writes res as it is for anything but 100: fill it in here.
      ReplyError(res, 413,
                 absl::StrCat("request body of ", declared,
                              " bytes exceeds --max-body-bytes=", options_.max_body_bytes));
      CloseConnection(res);
      RecordRequest(req.path, res.status);
      return 413;
    }
    return 100;
  });
}

void HttpServer::HandleVerb(const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader& reader) {
  const Route* route = FindRoute(req.path);
  if (route == nullptr || route->method != "POST") {
    ReplyError(res, 404, absl::StrCat("no route for POST ", Printable(req.path)));
    CloseConnection(res);
    return;
  }
  const size_t limit = options_.max_body_bytes;
  std::string body;
  size_t declared = 0;
  if (absl::SimpleAtoi(req.get_header_value("Content-Length"), &declared) && declared <= limit) {
    body.reserve(declared);
  }
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t n) {
    if (n > limit - body.size()) {
      too_large = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (!read) {
    CloseConnection(res);
    if (too_large || res.status == 413) {
      ReplyError(res, 413, absl::StrCat("request body exceeds --max-body-bytes=", limit, " bytes"));
    } else {
      const int status = res.status >= 400 ? res.status : 400;
      ReplyError(res, status,
                 absl::StrCat("could not read the request body: ", StatusText(status)));
    }
    return;
  }
  // A bind takes one of max_concurrent_binds places, or is answered at once without one.
  const bool bind = route->label == "bind";
  if (bind && binds_in_flight_.fetch_add(1) >= options_.max_concurrent_binds) {
    binds_in_flight_.fetch_sub(1);
    VerbResult refused = OverloadedBind(std::move(body));
    res.status = refused.status;
    res.body = std::move(refused.body);
    res.set_header("Content-Type", kJson);
    t_request.outcome = std::move(refused.outcome);
    return;
  }
  // Until the answer is ready; RAII so that a handler that throws is counted out too.
  struct InFlight {
    HttpServer* server;
    const std::string& verb;
    bool bind;
    ~InFlight() {
      if (bind) server->binds_in_flight_.fetch_sub(1);
      if (server->metrics_ != nullptr) server->metrics_->AddRequestsInFlight(verb, -1);
    }
  } in_flight{this, route->label, bind};
  if (metrics_ != nullptr) metrics_->AddRequestsInFlight(route->label, 1);
  VerbResult result = bind && bind_workers_ != nullptr
                          ? BindOnBindWorker(std::move(body))
                          : verb_handlers_.at(route->label)(std::move(body));
  res.status = result.status;
  res.body = std::move(result.body);
  res.set_header("Content-Type", kJson);
  t_request.outcome = std::move(result.outcome);
}

VerbResult HttpServer::BindOnBindWorker(std::string body) {
  VerbResult result;
  std::exception_ptr error;
  absl::Notification done;
  // The connection's worker blocks here (no CPU) until the bind worker has the answer; the
  // references stay valid because nothing returns before `done`.
  bind_workers_->Enqueue([&] {
    try {
      result = verb_handlers_.at("bind")(std::move(body));
    } catch (...) {
      error = std::current_exception();
    }
    done.Notify();
  });
  done.WaitForNotification();
  if (error) std::rethrow_exception(error);
  return result;
}

VerbResult HttpServer::OverloadedBind(std::string body) const {
  // Not attempted: nothing was reserved or sent, so the pod is definitely not bound and
  // kube-scheduler retries it. Beyond this many binds a worker would otherwise be held by a
  // bind that the API server is not answering fast enough anyway.
  return service_->RefuseBind(
      std::move(body), "overloaded",
      absl::StrCat("bind not attempted: ", options_.max_concurrent_binds,
                   " binds are in flight, the most this extender serves at once "
                   "(--max-concurrent-binds); the pod is not bound, retry"));
}

HttpServer::WorkerStats HttpServer::Workers() const {
  absl::MutexLock lock(&workers_mu_);
  WorkerStats out;
  if (workers_ == nullptr) return out;
  const ElasticThreadPool::Stats s = workers_->stats();
  out.threads = s.threads;
  out.busy = s.busy;
  out.queued = s.queued;
  out.started = s.started;
  out.waited_at_max = s.waited_at_max;
  return out;
}

void HttpServer::RecordRequest(const std::string& path, int status) {
  if (t_request.recorded) return;
  t_request.recorded = true;
  const double seconds =
      t_request.active
          ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t_request.start)
                .count()
          : 0;
  if (metrics_ == nullptr) return;
  const Route* route = FindRoute(path);
  metrics_->ObserveRequest(route != nullptr ? route->label : "other", status,
                           t_request.outcome.empty() ? OutcomeOfStatus(status) : t_request.outcome,
                           seconds);
}

const HttpServer::Route* HttpServer::FindRoute(const std::string& path) const {
  auto it = routes_.find(path);
  return it == routes_.end() ? nullptr : it->second.get();
}

void HttpServer::SetVerbHandlerForTesting(absl::string_view verb, VerbHandler handler) {
  verb_handlers_.at(std::string(verb)) = std::move(handler);
}

std::string HttpServer::BaseUrl() const {
  in6_addr v6;
  const bool ipv6 = inet_pton(AF_INET6, options_.host.c_str(), &v6) == 1;
  return absl::StrCat(tls_ ? "https://" : "http://", ipv6 ? "[" : "", options_.host,
                      ipv6 ? "]" : "", ":", port_ >= 0 ? port_ : options_.port, options_.prefix);
}

void HttpServer::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    absl::MutexLock done(&mu_);
    finished_ = true;
  });
}

bool HttpServer::Finished() {
  absl::MutexLock lock(&mu_);
  return finished_;
}

// Stop() and Wait() poll instead of using absl::Mutex::AwaitWithTimeout: Debian's Abseil is
// not built with ThreadSanitizer, and the TSan build can only annotate its plain lock calls
// (cmake/tsan_absl_sync.cc). Both are rare and a millisecond of latency is nothing here.
void HttpServer::Stop() {
  stop_requested_.store(true);
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return;
  }
  // httplib's stop() does nothing until the accept loop runs: wait for it (or its end).
  while (!server_->is_running()) {
    if (Finished()) return;
    absl::SleepFor(absl::Milliseconds(1));
  }
  server_->stop();
}

bool HttpServer::Wait(absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return true;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (!Finished()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  absl::MutexLock lock(&join_mu_);
  if (thread_.joinable()) thread_.join();  // the thread has ended: joining is immediate
  return true;
}

HttpServer::~HttpServer() {
  if (server_ == nullptr) return;  // Init() failed before the socket existed
  // A server that never started still holds its bound socket: run it briefly to close it.
  bool started;
  {
    absl::MutexLock lock(&mu_);
    started = started_;
  }
  if (!started && port_ > 0) Start();
  Stop();
  Wait();
  // Every connection worker has ended, so no bind is running or will be enqueued.
  if (bind_workers_ != nullptr) bind_workers_->Shutdown();
}

}  // namespace gse
