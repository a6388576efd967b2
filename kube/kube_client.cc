// KubeClient: see kube_client.h for the contract.
//
// cpp-httplib notes (shared/BUILD-NOTES.md): every client gets set_tcp_nodelay(true) and
// explicit timeouts; one httplib client serialises its requests, so unary calls draw from a
// small pool and each watch owns a connection; ClientImpl::stop() is the only way to abort a
// blocked read from another thread.
#include "kube/kube_client.h"

#include <sys/stat.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "state/json_reader.h"

namespace gse {
namespace {

constexpr absl::string_view kErrorPayloadUrl = "type.googleapis.com/gse.KubeError";
constexpr absl::string_view kRetryAfterPayloadUrl = "type.googleapis.com/gse.RetryAfter";
// KubeError reason of a write the limiter could not send in time (IsNotSent).
constexpr absl::string_view kNotSentReason = "NotSent";
// KubeError reason of a write its WriteDeadline::may_send kept from being sent (IsFenced).
constexpr absl::string_view kFencedReason = "Fenced";
constexpr size_t kMaxBodyBytes = 256u << 20;    // a list page or a single object
constexpr size_t kMaxWatchLineBytes = 64u << 20;  // one watch event
constexpr size_t kMaxErrorBodyBytes = 64u << 10;

absl::Status WithKubeError(absl::Status status, int http_code, absl::string_view reason,
                           absl::string_view message) {
  status.SetPayload(kErrorPayloadUrl,
                    absl::Cord(absl::StrCat(http_code, "\n", reason, "\n", message)));
  return status;
}

absl::StatusCode CodeForHttp(int http_code, absl::string_view reason) {
  switch (http_code) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kFailedPrecondition;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return http_code >= 500 ? absl::StatusCode::kInternal : absl::StatusCode::kUnknown;
  }
}

std::string ReadFileToString(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = std::strerror(errno);
    return "";
  }
  std::ostringstream out;
  out << in.rdbuf();
  error->clear();
  return out.str();
}

// Stamp that changes when the file is replaced or rewritten (kubelet swaps a symlink).
std::string FileStamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".",
                      st.st_mtim.tv_nsec);
}

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data found";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// Counts the certificates in a PEM bundle; error when there is none or one is malformed.
absl::Status ValidateCertificates(const std::string& pem, absl::string_view field) {
  ERR_clear_error();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  int count = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_free(cert);
    ++count;
  }
  BIO_free(bio);
  // Reading past the last certificate leaves a "no start line" error: that is the normal end.
  unsigned long last = ERR_peek_last_error();
  bool clean_end = last == 0 || ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  std::string detail = clean_end ? "no PEM certificate found" : OpenSslError();
  ERR_clear_error();
  if (count == 0 || !clean_end) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": not a valid PEM certificate (",
                                                   detail, ")"));
  }
  return absl::OkStatus();
}

X509_STORE* BuildStore(const std::string& pem) {
  X509_STORE* store = X509_STORE_new();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, cert);
    X509_free(cert);
  }
  BIO_free(bio);
  ERR_clear_error();
  return store;
}

// "https://host:port/prefix" -> parts. Only http and https.
absl::Status ParseServer(const std::string& server, std::string* scheme, std::string* host,
                         int* port, std::string* base_path) {
  absl::string_view rest = server;
  if (absl::ConsumePrefix(&rest, "https://")) {
    *scheme = "https";
    *port = 443;
  } else if (absl::ConsumePrefix(&rest, "http://")) {
    *scheme = "http";
    *port = 80;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "server: \"", server, "\" must start with https:// (or http:// for local tests)"));
  }
  size_t slash = rest.find('/');
  absl::string_view hostport = rest.substr(0, slash);
  *base_path = slash == absl::string_view::npos ? "" : std::string(rest.substr(slash));
  while (!base_path->empty() && base_path->back() == '/') base_path->pop_back();
  absl::string_view h = hostport;
  absl::string_view p;
  if (absl::StartsWith(hostport, "[")) {  // IPv6 literal
    size_t close = hostport.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("server: \"", server, "\": unclosed ["));
    }
    h = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size() && hostport[close + 1] == ':') p = hostport.substr(close + 2);
  } else if (size_t colon = hostport.rfind(':'); colon != absl::string_view::npos) {
    h = hostport.substr(0, colon);
    p = hostport.substr(colon + 1);
  }
  if (h.empty()) return absl::InvalidArgumentError(absl::StrCat("server: \"", server, "\": no host"));
  if (!p.empty() && (!absl::SimpleAtoi(p, port) || *port <= 0 || *port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("server: \"", server, "\": bad port"));
  }
  *host = std::string(h);
  return absl::OkStatus();
}

std::string UrlEncode(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

absl::Status ParseBody(std::string& body, rapidjson::Document& doc, absl::string_view what) {
  if (body.size() > kMaxBodyBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": body of ", body.size(),
                                                     " bytes exceeds the limit"));
  }
  // Strict (json_reader.h): a body with trailing text, raw control characters or invalid
  // UTF-8 is not what an API server sends; it is a broken or hostile stream.
  if (absl::Status s = ParseJsonInSituLimited(&body[0], body.size(), doc); !s.ok()) {
    return absl::DataLossError(absl::StrCat(what, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------- errors

KubeError KubeErrorOf(const absl::Status& status) {
  KubeError e;
  auto payload = status.GetPayload(kErrorPayloadUrl);
  if (!payload) return e;
  std::string text(*payload);
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('\n', 2));
  if (parts.size() == 3) {
    (void)absl::SimpleAtoi(parts[0], &e.http_code);
    e.reason = parts[1];
    e.message = parts[2];
  }
  if (auto retry = status.GetPayload(kRetryAfterPayloadUrl)) {
    int64_t ms = 0;
    if (absl::SimpleAtoi(std::string(*retry), &ms) && ms > 0) e.retry_after = absl::Milliseconds(ms);
  }
  return e;
}

bool IsNotSent(const absl::Status& status) {
  KubeError e = KubeErrorOf(status);
  return e.http_code == 0 && e.reason == kNotSentReason;
}

bool IsFenced(const absl::Status& status) {
  KubeError e = KubeErrorOf(status);
  return e.http_code == 0 && e.reason == kFencedReason;
}

bool IsExpired(const absl::Status& status) {
  KubeError e = KubeErrorOf(status);
  return e.http_code == 410 || e.reason == "Expired" || e.reason == "Gone";
}

absl::Status StatusFromKubeStatus(absl::string_view what, int http_code, absl::string_view body) {
  std::string reason;
  std::string message;
  int code = http_code;
  rapidjson::Document doc;
  if (ParseJsonLimited(body, doc).ok() && doc.IsObject()) {
    auto str = [&](const char* key) -> std::string {
      auto it = doc.FindMember(key);
      return it != doc.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
    };
    reason = str("reason");
    message = str("message");
    auto c = doc.FindMember("code");
    if (code == 200 && c != doc.MemberEnd() && c->value.IsInt()) code = c->value.GetInt();
  }
  if (message.empty()) {
    // Not a v1.Status (a proxy's HTML page, an empty body): keep a bounded excerpt.
    message = std::string(body.substr(0, 200));
    if (message.empty()) message = "(empty body)";
  }
  if (reason.empty()) reason = absl::StrCat("HTTP", code);
  return WithKubeError(absl::Status(CodeForHttp(code, reason),
                                    absl::StrCat(what, ": HTTP ", code, " ", reason, ": ", message)),
                       code, reason, message);
}

// ---------------------------------------------------------------- configuration

bool InClusterEnvironment() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  return host != nullptr && *host != '\0';
}

absl::StatusOr<KubeConfig> LoadInClusterConfig(const InClusterPaths& paths) {
  std::string host = paths.host;
  std::string port = paths.port;
  if (host.empty()) {
    const char* h = std::getenv("KUBERNETES_SERVICE_HOST");
    host = h ? h : "";
  }
  if (port.empty()) {
    const char* p = std::getenv("KUBERNETES_SERVICE_PORT");
    port = p ? p : "443";
  }
  if (host.empty()) {
    return absl::FailedPreconditionError(
        "in-cluster configuration: KUBERNETES_SERVICE_HOST is not set (not running in a pod? "
        "use --kubeconfig)");
  }
  KubeConfig config;
  config.source = "in-cluster service account";
  config.server = absl::StrCat("https://", absl::StrContains(host, ":") ? "[" : "", host,
                               absl::StrContains(host, ":") ? "]" : "", ":", port);
  std::string error;
  std::string token = ReadFileToString(paths.token, &error);
  if (!error.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "in-cluster configuration: service account token ", paths.token, ": ", error));
  }
  if (absl::StripAsciiWhitespace(token).empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "in-cluster configuration: service account token ", paths.token, ": empty"));
  }
  config.token_file = paths.token;
  config.ca_pem = ReadFileToString(paths.ca, &error);
  if (!error.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("in-cluster configuration: service account CA ", paths.ca, ": ", error));
  }
  if (absl::Status s = ValidateCertificates(config.ca_pem, paths.ca); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("in-cluster configuration: ", s.message()));
  }
  std::string ns = ReadFileToString(paths.namespace_file, &error);
  config.namespace_name =
      error.empty() ? std::string(absl::StripAsciiWhitespace(ns)) : std::string("default");
  return config;
}

namespace {

// Finds `name` in a kubeconfig list (clusters, contexts, users) and returns its index.
int FindNamed(const YAML::Node& list, const std::string& name) {
  if (!list || !list.IsSequence()) return -1;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node& n = list[i]["name"];
    if (n && n.IsScalar() && n.Scalar() == name) return static_cast<int>(i);
  }
  return -1;
}

std::string Scalar(const YAML::Node& map, const char* key) {
  if (!map || !map.IsMap()) return "";
  YAML::Node v = map[key];
  return v && v.IsScalar() ? v.Scalar() : "";
}

std::string ResolvePath(const std::string& origin, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  size_t slash = origin.rfind('/');
  return slash == std::string::npos ? path : origin.substr(0, slash + 1) + path;
}

// Reads `<key>-data` (base64) or `<key>` (a file) into `out`.
absl::Status ReadPemField(const YAML::Node& map, const std::string& prefix, const char* key,
                          const std::string& origin, std::string* out) {
  std::string data_key = absl::StrCat(key, "-data");
  std::string data = Scalar(map, data_key.c_str());
  if (!data.empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(data, &decoded)) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ".", data_key, ": not valid base64"));
    }
    *out = std::move(decoded);
    return absl::OkStatus();
  }
  std::string file = Scalar(map, key);
  if (file.empty()) return absl::OkStatus();
  std::string path = ResolvePath(origin, file);
  std::string error;
  *out = ReadFileToString(path, &error);
  if (!error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".", key, ": ", path, ": ", error));
  }
  return absl::OkStatus();
}

absl::Status ValidateKey(const std::string& pem, absl::string_view field) {
  ERR_clear_error();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not a valid PEM private key (", OpenSslError(), ")"));
  }
  EVP_PKEY_free(key);
  return absl::OkStatus();
}

absl::StatusOr<KubeConfig> ParseKubeconfigNode(const YAML::Node& root, const std::string& origin,
                                               const std::string& wanted_context) {
  auto err = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", origin, ": ", what));
  };
  if (!root || !root.IsMap()) return err("not a YAML mapping");
  std::string context_name = wanted_context;
  if (context_name.empty()) context_name = Scalar(root, "current-context");
  if (context_name.empty()) {
    return err("current-context: not set (and no context was given)");
  }
  YAML::Node contexts = root["contexts"];
  int ci = FindNamed(contexts, context_name);
  if (ci < 0) return err(absl::StrCat("contexts: no context named \"", context_name, "\""));
  std::string cpath = absl::StrCat("contexts[", ci, "].context");
  YAML::Node context = contexts[static_cast<size_t>(ci)]["context"];
  std::string cluster_name = Scalar(context, "cluster");
  std::string user_name = Scalar(context, "user");
  if (cluster_name.empty()) return err(absl::StrCat(cpath, ".cluster: missing"));

  KubeConfig config;
  config.source = absl::StrCat("kubeconfig ", origin, " (context ", context_name, ")");
  config.namespace_name = Scalar(context, "namespace");
  if (config.namespace_name.empty()) config.namespace_name = "default";

  YAML::Node clusters = root["clusters"];
  int k = FindNamed(clusters, cluster_name);
  if (k < 0) return err(absl::StrCat("clusters: no cluster named \"", cluster_name, "\""));
  std::string kpath = absl::StrCat("clusters[", k, "].cluster");
  YAML::Node cluster = clusters[static_cast<size_t>(k)]["cluster"];
  config.server = Scalar(cluster, "server");
  if (config.server.empty()) return err(absl::StrCat(kpath, ".server: missing"));
  std::string scheme, host, base;
  int port = 0;
  if (absl::Status s = ParseServer(config.server, &scheme, &host, &port, &base); !s.ok()) {
    return err(absl::StrCat(kpath, ".", s.message()));
  }
  std::string insecure = Scalar(cluster, "insecure-skip-tls-verify");
  config.insecure_skip_tls_verify = insecure == "true";
  if (absl::Status s = ReadPemField(cluster, kpath, "certificate-authority", origin, &config.ca_pem);
      !s.ok()) {
    return err(std::string(s.message()));
  }
  if (!config.ca_pem.empty()) {
    std::string field = absl::StrCat(
        kpath, Scalar(cluster, "certificate-authority-data").empty() ? ".certificate-authority"
                                                                       : ".certificate-authority-data");
    if (absl::Status s = ValidateCertificates(config.ca_pem, field); !s.ok()) {
      return err(std::string(s.message()));
    }
  }

  if (!user_name.empty()) {
    YAML::Node users = root["users"];
    int u = FindNamed(users, user_name);
    if (u < 0) return err(absl::StrCat("users: no user named \"", user_name, "\""));
    std::string upath = absl::StrCat("users[", u, "].user");
    YAML::Node user = users[static_cast<size_t>(u)]["user"];
    if (user && user.IsMap()) {
      if (user["exec"]) {
        return err(absl::StrCat(upath, ".exec: exec credential plugins are not supported; use a "
                                       "token, tokenFile or client certificate"));
      }
      if (user["auth-provider"]) {
        return err(absl::StrCat(upath, ".auth-provider: not supported"));
      }
      config.token = Scalar(user, "token");
      std::string token_file = Scalar(user, "tokenFile");
      if (!token_file.empty()) {
        config.token_file = ResolvePath(origin, token_file);
        std::string error;
        ReadFileToString(config.token_file, &error);
        if (!error.empty()) {
          return err(absl::StrCat(upath, ".tokenFile: ", config.token_file, ": ", error));
        }
      }
      if (absl::Status s = ReadPemField(user, upath, "client-certificate", origin,
                                        &config.client_cert_pem);
          !s.ok()) {
        return err(std::string(s.message()));
      }
      if (absl::Status s =
              ReadPemField(user, upath, "client-key", origin, &config.client_key_pem);
          !s.ok()) {
        return err(std::string(s.message()));
      }
      if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
        return err(absl::StrCat(upath, ": client-certificate and client-key must be given together"));
      }
      if (!config.client_cert_pem.empty()) {
        if (absl::Status s = ValidateCertificates(config.client_cert_pem,
                                                  absl::StrCat(upath, ".client-certificate"));
            !s.ok()) {
          return err(std::string(s.message()));
        }
        if (absl::Status s =
                ValidateKey(config.client_key_pem, absl::StrCat(upath, ".client-key"));
            !s.ok()) {
          return err(std::string(s.message()));
        }
      }
    }
  }
  return config;
}

}  // namespace

absl::StatusOr<KubeConfig> ParseKubeconfig(absl::string_view yaml, const std::string& origin,
                                           const std::string& context) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", origin, ": line ",
                                                   e.mark.line + 1, ": ", e.msg));
  }
  try {
    return ParseKubeconfigNode(root, origin, context);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", origin, ": ", e.what()));
  }
}

absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  std::string error;
  std::string text = ReadFileToString(path, &error);
  if (!error.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("kubeconfig ", path, ": ", error));
  }
  return ParseKubeconfig(text, path, context);
}

// ---------------------------------------------------------------- stopper

void WatchStopper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  // httplib's stop() only aborts a request that is already in flight; a watch that is still
  // connecting would miss it, so keep aborting until the watch has returned.
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!running_) return;
      if (abort_) abort_();
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

bool WatchStopper::stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

// ---------------------------------------------------------------- client internals

struct KubeClient::Tls {
  X509* client_cert = nullptr;
  EVP_PKEY* client_key = nullptr;
  ~Tls() {
    if (client_cert) X509_free(client_cert);
    if (client_key) EVP_PKEY_free(client_key);
  }
};

// Idle keep-alive connections for unary calls.
class KubeClient::Pool {
 public:
  std::unique_ptr<httplib::ClientImpl> Take() {
    absl::MutexLock lock(&mu_);
    if (idle_.empty()) return nullptr;
    auto c = std::move(idle_.back());
    idle_.pop_back();
    return c;
  }
  void Give(std::unique_ptr<httplib::ClientImpl> c) {
    absl::MutexLock lock(&mu_);
    if (idle_.size() < 16) idle_.push_back(std::move(c));
  }

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<httplib::ClientImpl>> idle_ ABSL_GUARDED_BY(mu_);
};

KubeClient::KubeClient(KubeConfig config, KubeClientOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      pool_(std::make_unique<Pool>()),
      limiter_(std::make_unique<WriteLimiter>(options_.write_qps, options_.write_burst)) {}

KubeClient::~KubeClient() = default;

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::Create(KubeConfig config,
                                                               KubeClientOptions options) {
  std::unique_ptr<KubeClient> client(new KubeClient(std::move(config), std::move(options)));
  if (absl::Status s = client->Init(); !s.ok()) return s;
  return client;
}

absl::Status KubeClient::Init() {
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(config_.source.empty() ? "kube config" : config_.source,
                                                   ": ", what));
  };
  if (absl::Status s = ParseServer(config_.server, &scheme_, &host_, &port_, &base_path_); !s.ok()) {
    return fail(s.message());
  }
  if (!config_.ca_pem.empty()) {
    if (absl::Status s = ValidateCertificates(config_.ca_pem, "certificate authority"); !s.ok()) {
      return fail(s.message());
    }
  }
  tls_ = std::make_unique<Tls>();
  if (!config_.client_cert_pem.empty() || !config_.client_key_pem.empty()) {
    if (scheme_ != "https") return fail("client certificates need an https:// server");
    if (config_.client_cert_pem.empty() || config_.client_key_pem.empty()) {
      return fail("client certificate and key must be given together");
    }
    BIO* bio = BIO_new_mem_buf(config_.client_cert_pem.data(),
                               static_cast<int>(config_.client_cert_pem.size()));
    tls_->client_cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    bio = BIO_new_mem_buf(config_.client_key_pem.data(),
                          static_cast<int>(config_.client_key_pem.size()));
    tls_->client_key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (!tls_->client_cert) return fail(absl::StrCat("client certificate: ", OpenSslError()));
    if (!tls_->client_key) return fail(absl::StrCat("client key: ", OpenSslError()));
    if (X509_check_private_key(tls_->client_cert, tls_->client_key) != 1) {
      ERR_clear_error();
      return fail("client key does not match the client certificate");
    }
  }
  absl::MutexLock lock(&token_mu_);
  token_ = config_.token;
  if (!config_.token_file.empty()) {
    std::string error;
    std::string t = ReadFileToString(config_.token_file, &error);
    if (!error.empty()) return fail(absl::StrCat("token file ", config_.token_file, ": ", error));
    token_ = std::string(absl::StripAsciiWhitespace(t));
    token_stamp_ = FileStamp(config_.token_file);
  }
  return absl::OkStatus();
}

std::string KubeClient::Token(bool force) {
  absl::MutexLock lock(&token_mu_);
  if (config_.token_file.empty()) return token_;
  std::string stamp = FileStamp(config_.token_file);
  if (force || stamp != token_stamp_) {
    std::string error;
    std::string t = ReadFileToString(config_.token_file, &error);
    // A failed read (file being swapped) keeps the last good token.
    if (error.empty()) {
      std::string fresh(absl::StripAsciiWhitespace(t));
      if (!fresh.empty() && fresh != token_) {
        token_ = std::move(fresh);
        ++token_reloads_;
      }
      token_stamp_ = stamp;
    }
  }
  return token_;
}

int64_t KubeClient::token_reloads() const {
  absl::MutexLock lock(&token_mu_);
  return token_reloads_;
}

namespace {
void SetTimeout(httplib::ClientImpl& c, absl::Duration d, bool read) {
  int64_t us = std::max<int64_t>(1000, absl::ToInt64Microseconds(d));
  if (read) {
    c.set_read_timeout(static_cast<time_t>(us / 1000000), static_cast<time_t>(us % 1000000));
  } else {
    c.set_write_timeout(static_cast<time_t>(us / 1000000), static_cast<time_t>(us % 1000000));
  }
}
}  // namespace

std::unique_ptr<httplib::ClientImpl> KubeClient::NewConnection(absl::Duration read_timeout) const {
  std::unique_ptr<httplib::ClientImpl> c;
  if (scheme_ == "https") {
    auto ssl = std::make_unique<httplib::SSLClient>(host_, port_, tls_->client_cert, tls_->client_key);
    ssl->enable_server_certificate_verification(!config_.insecure_skip_tls_verify);
    if (!config_.ca_pem.empty()) ssl->set_ca_cert_store(BuildStore(config_.ca_pem));
    c = std::move(ssl);
  } else {
    c = std::make_unique<httplib::ClientImpl>(host_, port_);
  }
  c->set_tcp_nodelay(true);
  c->set_keep_alive(true);
  int64_t cus = std::max<int64_t>(1000, absl::ToInt64Microseconds(options_.connect_timeout));
  c->set_connection_timeout(static_cast<time_t>(cus / 1000000), static_cast<time_t>(cus % 1000000));
  SetTimeout(*c, read_timeout, /*read=*/true);
  SetTimeout(*c, options_.request_timeout, /*read=*/false);
  return c;
}

namespace {
absl::Status TransportError(absl::string_view what, httplib::Error error, absl::Duration elapsed,
                            absl::Duration timeout, long verify_result) {
  std::string name = httplib::to_string(error);
  std::string detail = name;
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  if (error == httplib::Error::SSLServerVerification) {
    detail = absl::StrCat("server certificate verification failed (",
                          X509_verify_cert_error_string(verify_result), ")");
    code = absl::StatusCode::kFailedPrecondition;
  } else if (error == httplib::Error::ConnectionTimeout ||
             ((error == httplib::Error::Read || error == httplib::Error::Write) &&
              elapsed + absl::Milliseconds(50) >= timeout)) {
    detail = absl::StrCat("timed out after ", absl::FormatDuration(elapsed), " (", name, ")");
    code = absl::StatusCode::kDeadlineExceeded;
  } else if (error == httplib::Error::Connection) {
    detail = "connection failed (refused or unreachable)";
  } else if (error == httplib::Error::SSLConnection) {
    detail = "TLS handshake failed";
  }
  return WithKubeError(absl::Status(code, absl::StrCat(what, ": ", detail)), 0, name, detail);
}
}  // namespace

absl::StatusOr<std::string> KubeClient::Unary(const std::string& method, const std::string& path,
                                              const std::string* body, absl::Duration read_timeout,
                                              WriteDeadline deadline, const char* content_type) {
  if (content_type == nullptr) {
    content_type = method == "PATCH" ? kMergePatch : "application/json";
  }
  std::string what = absl::StrCat(method, " ", path);
  if (body != nullptr) {
    // Throttled before the timeout starts (client-go does the same): a paced write is not a
    // slow one. Without a send_by of its own a write waits at most its timeout.
    const absl::Time send_by = deadline.send_by == absl::InfiniteFuture()
                                   ? absl::Now() + read_timeout
                                   : deadline.send_by;
    const WriteLimiter::Grant grant = limiter_->Acquire(send_by);
    if (options_.on_write_paced) options_.on_write_paced(grant.sent, grant.waited);
    if (!grant.sent) {
      return WithKubeError(
          absl::DeadlineExceededError(absl::StrCat(
              what, ": not sent: the client's write limit (", options_.write_qps, " qps, burst ",
              options_.write_burst, ") had no turn for it before its deadline")),
          0, kNotSentReason, "the write limiter had no turn before the deadline");
    }
    if (deadline.answer_by != absl::InfiniteFuture()) {
      read_timeout = std::min(read_timeout, deadline.answer_by - absl::Now());
    }
  }
  for (int attempt = 0;; ++attempt) {
    if (body != nullptr && deadline.may_send && !deadline.may_send()) {
      return WithKubeError(
          absl::FailedPreconditionError(
              absl::StrCat(what, ": not sent: the writer may no longer write (fenced)")),
          0, kFencedReason, "the writer may no longer write");
    }
    std::unique_ptr<httplib::ClientImpl> c = pool_->Take();
    const bool reused = c != nullptr;
    if (!c) c = NewConnection(read_timeout);
    SetTimeout(*c, read_timeout, /*read=*/true);
    httplib::Headers headers = {{"Accept", "application/json"},
                                {"User-Agent", options_.user_agent}};
    std::string token = Token(/*force=*/false);
    if (!token.empty()) headers.emplace("Authorization", absl::StrCat("Bearer ", token));
    std::string full = base_path_ + path;
    absl::Time start = absl::Now();
    httplib::Result r = method == "GET"     ? c->Get(full, headers)
                        : method == "POST"  ? c->Post(full, headers, *body, content_type)
                        : method == "PATCH" ? c->Patch(full, headers, *body, content_type)
                                            : c->Put(full, headers, *body, content_type);
    if (!r) {
      long verify = 0;
      if (auto* ssl = dynamic_cast<httplib::SSLClient*>(c.get())) verify = ssl->get_openssl_verify_result();
      // The connection is in an unknown state: drop it rather than pool it.
      const absl::Duration elapsed = absl::Now() - start;
      // A server (or a proxy before it) may close a keep-alive connection while it sits idle
      // in the pool; the next request on it then fails at once with Read or Write. A GET is
      // idempotent, so it is sent once more on a new connection, as Go's http.Transport does
      // for a request on a reused connection that the server had closed. A write is not
      // retried here: it may have reached the server, and its caller decides (bind's
      // outcome is then unknown, see ApiBinder).
      if (reused && body == nullptr &&
          (r.error() == httplib::Error::Read || r.error() == httplib::Error::Write) &&
          elapsed + absl::Milliseconds(50) < read_timeout) {
        continue;
      }
      return TransportError(what, r.error(), elapsed, read_timeout, verify);
    }
    int status = r->status;
    std::string response = std::move(r->body);
    pool_->Give(std::move(c));
    if (status == 401 && attempt == 0 && !config_.token_file.empty()) {
      // The token may have rotated since the last stat: re-read and try once more.
      std::string before = token;
      if (Token(/*force=*/true) != before) continue;
    }
    if (status >= 200 && status < 300) return response;
    absl::Status error = StatusFromKubeStatus(what, status, response);
    // kube-apiserver answers 429 (and some 5xx) with Retry-After in whole seconds.
    int64_t retry_seconds = 0;
    if (absl::SimpleAtoi(r->get_header_value("Retry-After"), &retry_seconds) && retry_seconds > 0) {
      error.SetPayload(kRetryAfterPayloadUrl,
                       absl::Cord(absl::StrCat(std::min<int64_t>(retry_seconds, 3600) * 1000)));
    }
    return error;
  }
}

absl::StatusOr<std::string> KubeClient::Get(const std::string& path) {
  return Unary("GET", path, nullptr, options_.request_timeout);
}
absl::StatusOr<std::string> KubeClient::Post(const std::string& path, const std::string& body) {
  return Unary("POST", path, &body, options_.request_timeout);
}
absl::StatusOr<std::string> KubeClient::Put(const std::string& path, const std::string& body) {
  return Unary("PUT", path, &body, options_.request_timeout);
}
absl::StatusOr<std::string> KubeClient::Patch(const std::string& path, const std::string& body,
                                              const char* content_type) {
  return Unary("PATCH", path, &body, options_.request_timeout, {}, content_type);
}
absl::StatusOr<std::string> KubeClient::GetWithTimeout(const std::string& path,
                                                       absl::Duration timeout) {
  return Unary("GET", path, nullptr, timeout);
}
absl::StatusOr<std::string> KubeClient::PostWithTimeout(const std::string& path,
                                                        const std::string& body,
                                                        absl::Duration timeout) {
  return Unary("POST", path, &body, timeout);
}

absl::StatusOr<std::string> KubeClient::PostWithin(const std::string& path,
                                                    const std::string& body,
                                                    absl::Duration timeout,
                                                    const WriteDeadline& deadline) {
  return Unary("POST", path, &body, timeout, deadline);
}

absl::StatusOr<std::string> KubeClient::PutWithTimeout(const std::string& path,
                                                       const std::string& body,
                                                       absl::Duration timeout) {
  return Unary("PUT", path, &body, timeout);
}

absl::StatusOr<std::string> KubeClient::MergePatchWithTimeout(const std::string& path,
                                                              const std::string& patch,
                                                              absl::Duration timeout) {
  return Unary("PATCH", path, &patch, timeout);
}

absl::Status KubeClient::CheckReachable(int attempts, absl::Duration initial_backoff) {
  absl::Duration backoff = initial_backoff;
  absl::Status last;
  for (int i = 1; i <= std::max(1, attempts); ++i) {
    absl::StatusOr<std::string> r = Get("/version");
    if (r.ok()) return absl::OkStatus();
    last = r.status();
    KubeError e = KubeErrorOf(last);
    if (e.http_code == 401 || e.http_code == 403) {
      return absl::Status(last.code(), absl::StrCat(config_.server, " (", config_.source,
                                                    ") rejected the credentials: ", last.message()));
    }
    if (last.code() == absl::StatusCode::kFailedPrecondition && e.http_code == 0) {
      // TLS verification: retrying cannot help.
      return absl::FailedPreconditionError(absl::StrCat(
          config_.server, " (", config_.source, "): ", last.message(),
          config_.ca_pem.empty() ? " against the system CAs" : " against the configured CA"));
    }
    if (e.http_code != 0) return absl::OkStatus();  // it answered: reachable (e.g. 404)
    if (i < attempts) {
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(30));
    }
  }
  return absl::UnavailableError(absl::StrCat("cannot reach API server ", config_.server, " (",
                                             config_.source, ") after ", attempts,
                                             " attempts: ", last.message()));
}

absl::StatusOr<std::string> KubeClient::List(
    const std::string& path, const std::function<absl::Status(const rapidjson::Value& page)>& on_page) {
  std::string resource_version;
  std::string cont;
  const char* sep = absl::StrContains(path, "?") ? "&" : "?";
  for (int page = 0;; ++page) {
    std::string url = absl::StrCat(path, sep, "limit=", options_.list_page_size);
    if (!cont.empty()) absl::StrAppend(&url, "&continue=", UrlEncode(cont));
    absl::StatusOr<std::string> body = Get(url);
    if (!body.ok()) return body.status();
    rapidjson::Document doc;
    if (absl::Status s = ParseBody(*body, doc, absl::StrCat("GET ", url)); !s.ok()) return s;
    if (!doc.IsObject() || !doc.HasMember("items")) {
      return absl::DataLossError(absl::StrCat("GET ", url, ": not a list (no items)"));
    }
    std::string rv;
    std::string next;
    auto meta = doc.FindMember("metadata");
    if (meta != doc.MemberEnd() && meta->value.IsObject()) {
      auto r = meta->value.FindMember("resourceVersion");
      if (r != meta->value.MemberEnd() && r->value.IsString()) rv = r->value.GetString();
      auto c = meta->value.FindMember("continue");
      if (c != meta->value.MemberEnd() && c->value.IsString()) next = c->value.GetString();
    }
    if (page == 0) resource_version = rv;
    if (absl::Status s = on_page(doc); !s.ok()) return s;
    if (next.empty()) break;
    cont = std::move(next);
  }
  return resource_version;
}

absl::Status KubeClient::Watch(const std::string& path, absl::Duration idle_timeout,
                               const std::function<bool(absl::string_view line)>& on_line,
                               WatchStopper* stopper) {
  std::string what = absl::StrCat("watch ", path);
  std::unique_ptr<httplib::ClientImpl> c = NewConnection(idle_timeout);
  c->set_keep_alive(false);
  {
    absl::MutexLock lock(&stopper->mu_);
    if (stopper->stopped_) return absl::CancelledError(absl::StrCat(what, ": stopped"));
    httplib::ClientImpl* raw = c.get();
    stopper->abort_ = [raw] { raw->stop(); };
    stopper->running_ = true;
  }
  httplib::Headers headers = {{"Accept", "application/json"}, {"User-Agent", options_.user_agent}};
  std::string token = Token(/*force=*/false);
  if (!token.empty()) headers.emplace("Authorization", absl::StrCat("Bearer ", token));

  int status = 0;
  std::string error_body;
  std::string pending;
  bool ended_by_callback = false;
  bool line_too_long = false;
  httplib::Result r = c->Get(
      base_path_ + path, headers,
      [&](const httplib::Response& response) {
        status = response.status;
        return true;
      },
      [&](const char* data, size_t length) {
        if (status != 200) {
          if (error_body.size() < kMaxErrorBodyBytes) error_body.append(data, length);
          return true;
        }
        size_t scanned = pending.size();
        pending.append(data, length);
        size_t start = 0;
        for (size_t nl; (nl = pending.find('\n', scanned)) != std::string::npos; scanned = nl + 1) {
          absl::string_view line(pending.data() + start, nl - start);
          start = nl + 1;
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          if (line.empty()) continue;
          if (!on_line(line)) {
            ended_by_callback = true;
            return false;
          }
        }
        pending.erase(0, start);
        if (pending.size() > kMaxWatchLineBytes) {
          line_too_long = true;
          return false;
        }
        return !stopper->stopped();
      });
  {
    absl::MutexLock lock(&stopper->mu_);
    stopper->running_ = false;
    stopper->abort_ = nullptr;
  }
  if (ended_by_callback) return absl::OkStatus();
  if (stopper->stopped()) return absl::CancelledError(absl::StrCat(what, ": stopped"));
  if (line_too_long) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": an event exceeds ",
                                                     kMaxWatchLineBytes, " bytes"));
  }
  if (!r) {
    long verify = 0;
    if (auto* ssl = dynamic_cast<httplib::SSLClient*>(c.get())) verify = ssl->get_openssl_verify_result();
    return TransportError(what, r.error(), absl::ZeroDuration(), idle_timeout, verify);
  }
  if (r->status != 200) {
    return StatusFromKubeStatus(what, r->status, error_body.empty() ? r->body : error_body);
  }
  if (!pending.empty()) {
    return absl::DataLossError(absl::StrCat(what, ": stream ended inside an event (",
                                            pending.size(), " bytes without a newline)"));
  }
  return absl::OkStatus();
}

}  // namespace gse
