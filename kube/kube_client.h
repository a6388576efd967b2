// KubeClient: a small Kubernetes REST client (cpp-httplib, HTTPS with CA verification) for the
// calls the extender and the node agent make: paged lists, streaming watches, binding and Event
// POSTs, Lease get/create/update and merge PATCHes (the take-over requeue, annotations).
//
// Contract:
//  * Configuration comes from the pod's service account (in-cluster) or a kubeconfig file.
//    Loading validates everything it can before any connection (files exist, PEM parses,
//    current context exists) and names the file and field that is wrong.
//  * Every call has a connect timeout and a read/write timeout. Writes (POST, PUT, PATCH) pass the
//    client's WriteLimiter (kube/write_limiter.h: qps, burst, first come first served) before
//    they are sent, and the timeout starts when the write is sent (as client-go throttles
//    before it applies its timeout). A write waits for the limiter until its `send_by` (by
//    default: its timeout from the call); one that cannot be sent by then is not sent and
//    answers IsNotSent() at once: definitely not applied, and no API error.
//  * An API error body (v1.Status) becomes an absl::Status whose message carries the HTTP code,
//    `reason` and `message`; KubeErrorOf() gives them back as values (e.g. 410 Expired).
//  * A bearer token read from a file is re-read when the file changes (service account tokens
//    rotate); a 401 also forces one re-read and retry.
//  * Thread-safe: any number of threads may call at once (unary calls use a small connection
//    pool; each watch uses its own connection). A WatchStopper ends a running watch from
//    another thread.
#ifndef GSE_KUBE_KUBE_CLIENT_H_
#define GSE_KUBE_KUBE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/write_limiter.h"
#include "rapidjson/document.h"

namespace httplib {
class ClientImpl;
}  // namespace httplib

namespace gse {

// Where and how to reach the API server. PEM material is held in memory (files are read at
// load time), except the token file, which is re-read when it changes.
struct KubeConfig {
  std::string server;  // "https://10.96.0.1:443"; "http://..." only for local tests
  std::string ca_pem;  // trusted CA bundle; empty => system CAs
  bool insecure_skip_tls_verify = false;
  std::string token;       // static bearer token
  std::string token_file;  // bearer token file, re-read on change (wins over `token`)
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string namespace_name;  // the pod's namespace (in-cluster) or the context's namespace
  // Where the configuration came from, for error messages ("kubeconfig /x (context prod)").
  std::string source;
};

// In-cluster configuration. Paths and environment are overridable for tests.
struct InClusterPaths {
  std::string token = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
  // Empty: read KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT from the environment.
  std::string host;
  std::string port;
};
bool InClusterEnvironment();  // KUBERNETES_SERVICE_HOST is set
absl::StatusOr<KubeConfig> LoadInClusterConfig(const InClusterPaths& paths = {});

// Parses a kubeconfig file (yaml-cpp). `context` empty = current-context. Relative file paths
// inside the kubeconfig are resolved against the kubeconfig's directory, as kubectl does.
absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path,
                                          const std::string& context = "");
// The same from text; `origin` names the file in errors and anchors relative paths.
absl::StatusOr<KubeConfig> ParseKubeconfig(absl::string_view yaml, const std::string& origin,
                                           const std::string& context = "");

struct KubeClientOptions {
  // Token-bucket refill per second for POST/PUT (<= 0: unlimited) and its depth. The defaults
  // are the extender's --api-qps/--api-burst defaults; see extender/live_cluster.cc for why
  // they are above kube-scheduler's own clientConnection defaults (50/100).
  double write_qps = 500;
  int write_burst = 1000;
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration request_timeout = absl::Seconds(10);  // read and write timeout of unary calls
  int64_t list_page_size = 500;                        // `limit` of list pages
  std::string user_agent = "gpu-slice-extender";
  // Called once per write after the limiter decided (sent or not, and how long it waited),
  // on the writing thread; e.g. for the gse_api_write_wait_seconds histogram. May be empty.
  std::function<void(bool sent, absl::Duration waited)> on_write_paced;
};

// When a write must go out and be answered: a bind must be answered within kube-scheduler's
// extender timeout, so neither its wait for the limiter nor its exchange may run past that.
struct WriteDeadline {
  // The limiter may hold the write until then; if its turn comes later it is not sent.
  absl::Time send_by = absl::InfiniteFuture();
  // The exchange's read timeout is cut so that it ends by then.
  absl::Time answer_by = absl::InfiniteFuture();
  // Fencing: when set, asked right before the write goes on the wire (after the limiter's
  // turn, and before a resend); false: the write is not sent, IsFenced(). Must be cheap and
  // callable from the writing thread (ApiBinder passes LeaderElector::LeaseValid).
  std::function<bool()> may_send;
};

// An API failure as the server described it. http_code 0 = transport failure (no response).
struct KubeError {
  int http_code = 0;
  std::string reason;  // v1.Status reason ("Conflict", "Expired", ...), or the transport error
  std::string message;
  // The answer's Retry-After (429 from kube-apiserver's max-in-flight or priority-and-fairness
  // filter, some 5xx); zero when absent.
  absl::Duration retry_after = absl::ZeroDuration();
};
// Reads back what KubeClient attached to a non-OK status (http_code 0 when none).
KubeError KubeErrorOf(const absl::Status& status);
// True for 410 Gone / reason Expired: the resourceVersion is compacted, relist.
bool IsExpired(const absl::Status& status);
// True when a write was never sent: the write limiter could not send it by its send_by. Such
// a call is definitely not applied and is not an API error (KubeError reason "NotSent").
bool IsNotSent(const absl::Status& status);
// True when a write was never sent because its WriteDeadline::may_send said no (KubeError
// reason "Fenced"): definitely not applied, not an API error.
bool IsFenced(const absl::Status& status);
// Builds the status for a decoded v1.Status body (exposed for the watch ERROR event).
absl::Status StatusFromKubeStatus(absl::string_view what, int http_code, absl::string_view body);

// Ends a running Watch from another thread. One stopper may serve successive watches; once
// stopped it stays stopped (a Watch with a stopped stopper returns Cancelled at once).
class WatchStopper {
 public:
  void Stop();
  bool stopped() const;

 private:
  friend class KubeClient;
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> abort_ ABSL_GUARDED_BY(mu_);  // set while a watch runs
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

class KubeClient {
 public:
  // Validates the configuration (server URL, PEM material) without connecting.
  static absl::StatusOr<std::unique_ptr<KubeClient>> Create(KubeConfig config,
                                                            KubeClientOptions options = {});
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  // Start-up check: GET /version until it answers, up to `attempts` tries with exponential
  // backoff. Errors that retrying cannot fix (TLS verification, 401/403) fail at once.
  absl::Status CheckReachable(int attempts = 5, absl::Duration initial_backoff = absl::Seconds(1));

  // Unary calls. Path includes the query. The body of a 2xx answer is returned.
  absl::StatusOr<std::string> Get(const std::string& path);
  absl::StatusOr<std::string> Post(const std::string& path, const std::string& body);
  absl::StatusOr<std::string> Put(const std::string& path, const std::string& body);
  // PATCH with the given patch type: kMergePatch (RFC 7386) or kStrategicMergePatch.
  absl::StatusOr<std::string> Patch(const std::string& path, const std::string& body,
                                    const char* content_type = kMergePatch);
  static constexpr const char* kMergePatch = "application/merge-patch+json";
  static constexpr const char* kStrategicMergePatch = "application/strategic-merge-patch+json";
  // Like Get/Post but with a per-call read timeout (bind must answer within kube-scheduler's).
  absl::StatusOr<std::string> GetWithTimeout(const std::string& path, absl::Duration timeout);
  absl::StatusOr<std::string> PostWithTimeout(const std::string& path, const std::string& body,
                                              absl::Duration timeout);
  absl::StatusOr<std::string> PutWithTimeout(const std::string& path, const std::string& body,
                                             absl::Duration timeout);
  // A POST whose wait for the limiter and whose exchange are bounded by `deadline` (and the
  // exchange by `timeout` from when it is sent). IsNotSent() when it could not be sent in time.
  absl::StatusOr<std::string> PostWithin(const std::string& path, const std::string& body,
                                         absl::Duration timeout, const WriteDeadline& deadline);
  // PATCH with a JSON merge patch (RFC 7386, Content-Type application/merge-patch+json). A
  // metadata.resourceVersion in the patch is a precondition: 409 Conflict when the object
  // changed since. A write: passes the limiter like POST and PUT.
  absl::StatusOr<std::string> MergePatchWithTimeout(const std::string& path,
                                                    const std::string& patch,
                                                    absl::Duration timeout);

  // Lists `path` (e.g. "/api/v1/pods") page by page (limit + continue). `on_page` gets each
  // parsed page (a *List object with `items`); an error from it ends the list. The list's
  // resourceVersion (of the first page: later pages are served from the same snapshot) is
  // returned.
  absl::StatusOr<std::string> List(const std::string& path,
                                   const std::function<absl::Status(const rapidjson::Value& page)>& on_page);

  // Streams `path` (must carry watch=1 and its parameters) and calls `on_line` once per
  // newline-terminated line (one watch event), whatever the chunking. `on_line` returning
  // false ends the watch (OK). Returns OK when the server ends the stream cleanly, Cancelled
  // when `stopper` stopped it, DataLoss when the stream ended inside a line, and the API's
  // status for a non-200 answer. The read timeout is `idle_timeout`.
  absl::Status Watch(const std::string& path, absl::Duration idle_timeout,
                     const std::function<bool(absl::string_view line)>& on_line,
                     WatchStopper* stopper);

  const KubeConfig& config() const { return config_; }
  const KubeClientOptions& options() const { return options_; }
  // Count of token-file re-reads that changed the token (tests, metrics).
  int64_t token_reloads() const;

 private:
  struct Tls;
  class Pool;
  KubeClient(KubeConfig config, KubeClientOptions options);

  absl::Status Init();
  // Builds an httplib client for this server; `read_timeout` for its reads.
  std::unique_ptr<httplib::ClientImpl> NewConnection(absl::Duration read_timeout) const;
  // `deadline` matters for writes only (reads are not paced). `content_type` of the body:
  // nullptr = application/json, for PATCH kMergePatch.
  absl::StatusOr<std::string> Unary(const std::string& method, const std::string& path,
                                    const std::string* body, absl::Duration read_timeout,
                                    WriteDeadline deadline = {},
                                    const char* content_type = nullptr);
  // The current bearer token (re-reads token_file when it changed). `force` re-reads always.
  std::string Token(bool force);

  KubeConfig config_;
  KubeClientOptions options_;
  std::string scheme_, host_, base_path_;
  int port_ = 0;
  std::unique_ptr<Tls> tls_;
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<WriteLimiter> limiter_;

  mutable absl::Mutex token_mu_;
  std::string token_ ABSL_GUARDED_BY(token_mu_);
  std::string token_stamp_ ABSL_GUARDED_BY(token_mu_);  // mtime+size+inode of token_file
  int64_t token_reloads_ ABSL_GUARDED_BY(token_mu_) = 0;
};

}  // namespace gse

#endif  // GSE_KUBE_KUBE_CLIENT_H_
