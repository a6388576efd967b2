// FakeApiServer: a local Kubernetes API server for tests, speaking the wire format of a real
// kube-apiserver 1.26 (shared/protocol/kube-api-1.26/): it is how the live-cluster code is
// tested without a cluster, and how a replay can drive an extender "in a cluster".
//
// What it serves (HTTP on a free loopback port, or HTTPS with a generated CA):
//   GET  /version
//   GET  /api/v1/{nodes,pods,namespaces,resourcequotas}   list (limit/continue pagination,
//        resourceVersion + resourceVersionMatch=Exact, 410 when compacted) or, with watch=1,
//        a chunked watch stream: one JSON event per line, BOOKMARKs with allowWatchBookmarks,
//        closed at timeoutSeconds, an ERROR event with code 410 for a compacted resourceVersion
//   GET/DELETE /api/v1/namespaces/{ns}/pods/{name}, GET /api/v1/nodes/{name}
//   PATCH /api/v1/namespaces/{ns}/pods/{name}             JSON merge patch (application/merge-
//        patch+json, else 415); metadata.resourceVersion in the patch is a precondition (409
//        Conflict); a patch that changes nothing writes nothing (no event); 404, 422 (uid/name)
//   PATCH /api/v1/nodes/{name}   merge patch (application/merge-patch+json, RFC 7386;
//        strategic-merge-patch+json is merged the same way, which equals the real semantics
//        for the annotation maps our clients patch); 415 for other content types, 404 on a
//        missing node, 400 on a body that is not a JSON object, 422 for another metadata.uid
//   fieldSelector on pod lists and watches: spec.nodeName, status.phase, metadata.name/
//        namespace with =, ==, != (comma = and); another field is 400 "field label not
//        supported". A watch sends the events of matching pods with their own type (a real
//        server sends ADDED when a pod starts to match: our clients treat ADDED and MODIFIED
//        alike)
//   POST /api/v1/namespaces/{ns}/pods                     create a pod
//   POST /api/v1/namespaces/{ns}/pods/{name}/binding      sets spec.nodeName and merges the
//        Binding's metadata.annotations in one write; 409 on UID mismatch or an already bound
//        pod, 404 on a missing pod (bodies as recorded)
//   GET/PUT /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}, POST .../leases
//        (resourceVersion preconditions: 409 on a stale PUT, 409 AlreadyExists on create)
//   POST /api/v1/namespaces/{ns}/events                    core/v1 Event (kept for Events())
// Every request needs "Authorization: Bearer <one of tokens>" (else 401, recorded body),
// except in client-certificate mode.
// Fault injection: status answers (500...), delays before or after the write commits, requests
// held until the test releases them (a stalled API server, deterministically), dropped
// watches, truncated watch events and truncated list bodies.
// Load (Options): a latency per write (POST/PUT/DELETE, before it commits, as etcd's), and a
// server-side token bucket on writes that answers 429 exactly as kube-apiserver's
// max-in-flight and priority-and-fairness filters do (Retry-After: 1, a plain-text body).
// Audit: Pods() reads every pod's node and annotations straight from the store, independent
// of any extender code.
// Thread-safe: one absl::Mutex guards the store; tests call any method from any thread.
#ifndef GSE_TESTSUPPORT_FAKE_APISERVER_H_
#define GSE_TESTSUPPORT_FAKE_APISERVER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rapidjson/document.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace gse::testing {

// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, all PEM.
struct TestPki {
  std::string ca_pem, ca_key_pem;
  std::string server_cert_pem, server_key_pem;
  std::string client_cert_pem, client_key_pem;
};
// Generates fresh keys (EC P-256) and certificates valid for a year.
TestPki MakeTestPki();

// A scratch directory for kubeconfigs, tokens and certificates, removed with its files.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::string& path() const { return path_; }
  std::string File(absl::string_view name) const;
  // Writes (replaces) a file: a new inode, as the kubelet's atomic token rotation does.
  void Write(absl::string_view name, absl::string_view content) const;

 private:
  std::string path_;
};

// What a test needs to know about a pod to audit it, read from the store.
struct PodView {
  std::string key;  // namespace/name
  std::string uid;
  std::string node;  // spec.nodeName
  std::string phase;
  bool terminating = false;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> requests;  // of the first container
};

// A pod built from the recorded Pod (shared/protocol/pod-mig-1g.5gb.json).
struct PodSpec {
  std::string namespace_name = "team-a";
  std::string name;
  std::string uid;  // empty: generated by the server on create
  std::map<std::string, std::string> requests;  // e.g. {"nvidia.com/mig-1g.5gb", "1"}
  std::string node;  // spec.nodeName: already bound (by someone else) when set
  std::map<std::string, std::string> annotations;
  std::string phase = "Pending";
};
std::string PodJson(const PodSpec& spec);

class FakeApiServer {
 public:
  struct Options {
    bool tls = false;
    bool require_client_cert = false;  // TLS only: client certificates replace tokens
    std::vector<std::string> tokens = {"test-token"};
    absl::Duration bookmark_interval = absl::Seconds(1);
    absl::Duration default_watch_timeout = absl::Seconds(60);  // when timeoutSeconds is absent
    int threads = 64;
    size_t event_log_limit = 100000;  // events kept; older ones are compacted
    // Every write waits this long before it is handled (outside the store lock).
    absl::Duration write_latency = absl::ZeroDuration();
    // Writes per second the server accepts (a token bucket of write_burst); beyond it they are
    // answered 429. <= 0: no limit.
    double write_qps = 0;
    int write_burst = 1;
  };

  // A fault applies to the next `times` requests that match (times < 0: all).
  struct Fault {
    std::string method;          // "GET", "POST", "PUT", "DELETE"; "" = any
    std::string path_contains;   // substring of the path (without query); "" = any
    std::string query_contains;  // substring of the query string, e.g. "watch=1"
    int times = 1;
    int status = 0;  // non-zero: answer this code with a v1.Status body; nothing is written
    absl::Duration delay_before = absl::ZeroDuration();  // before the request is handled
    absl::Duration delay_after = absl::ZeroDuration();   // after it committed, before answering
    bool truncate_body = false;  // cut the answer's body in half (invalid JSON)
    // Hold the request (before it is handled) until ReleaseHeld() or Stop().
    bool hold = false;
  };

  explicit FakeApiServer(Options options);
  FakeApiServer() : FakeApiServer(Options()) {}
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Binds a free loopback port and serves until Stop().
  absl::Status Start();
  void Stop();
  int port() const { return port_; }
  std::string url() const;  // "http://127.0.0.1:PORT" or "https://..."
  const TestPki& pki() const { return pki_; }
  // A kubeconfig (YAML) for this server with certificate-authority-data and the first token.
  std::string Kubeconfig() const;

  // ---- the store (resource: nodes, pods, namespaces, resourcequotas, leases)
  // Creates or replaces one object, or every item of a *List document. An object without
  // metadata.uid gets one. Each write bumps the resourceVersion and emits a watch event.
  absl::Status Apply(absl::string_view resource, absl::string_view json);
  absl::Status ApplyFile(absl::string_view resource, const std::string& path);
  // The recorded objects: nodes of nodelist-2-gpu-nodes.json and list-nodes.json, namespaces,
  // resource quotas and pods of kube-api-1.26/.
  absl::Status LoadRecordedCluster();
  bool Delete(absl::string_view resource, absl::string_view namespace_name,
              absl::string_view name);
  std::optional<std::string> Get(absl::string_view resource, absl::string_view namespace_name,
                                 absl::string_view name) const;
  // Changes an object in place (as a kubelet or controller would) and emits MODIFIED.
  absl::Status Mutate(absl::string_view resource, absl::string_view namespace_name,
                      absl::string_view name, const std::function<void(rapidjson::Document&)>& fn);
  absl::Status SetPodPhase(absl::string_view namespace_name, absl::string_view name,
                           absl::string_view phase);
  std::string resource_version() const;
  // Forgets the event history: watches and lists from an older resourceVersion get 410.
  void Compact();

  // ---- audit
  std::vector<PodView> Pods() const;
  // Events POSTed so far (the request bodies, as the server stored them), oldest first.
  std::vector<std::string> Events() const;

  // ---- faults
  void AddFault(Fault fault);
  void ClearFaults();
  void SetTokens(std::vector<std::string> tokens);
  // Ends every open watch abruptly (no final chunk), as a dying apiserver or proxy would.
  void DropWatches();
  // The next `n` watch events are sent cut in half (not valid JSON) and the stream closed.
  void TruncateWatchEvents(int n);
  // Lets every request held by a `hold` fault go on; later ones are held again.
  void ReleaseHeld();
  // Requests held right now.
  int held() const;
  // Writes answered 429 by the server-side limit (Options::write_qps).
  int64_t throttled() const;

  // ---- observation
  int64_t RequestCount(absl::string_view method, absl::string_view path_contains) const;
  int open_watches() const;
  int64_t watches_started() const;

 private:
  struct Stored {
    std::string full;  // with kind/apiVersion (GET, watch)
    std::string item;  // without (list items)
    int64_t rv = 0;
  };
  struct Event {
    int64_t rv;
    std::string resource;
    std::string line;  // {"type":..,"object":..}
  };
  struct ListSnapshot {
    int64_t rv;
    std::vector<std::string> items;
  };
  struct Exchange;  // one HTTP request/response pair

  void Route(const Exchange& ex);
  void ServeList(const Exchange& ex, const std::string& resource);
  void ServeWatch(const Exchange& ex, const std::string& resource);
  void ServeBinding(const Exchange& ex, const std::string& ns, const std::string& name);
  void ServeLease(const Exchange& ex, const std::string& ns, const std::string& name);
  void ServePodPatch(const Exchange& ex, const std::string& ns, const std::string& name);
  void ServeObject(const Exchange& ex, const std::string& resource, const std::string& ns,
                   const std::string& name);
  // PATCH of a node (merge or strategic merge; the pods' PATCH is ServePodPatch).
  void ServeNodePatch(const Exchange& ex, const std::string& name);
  void ServeEventCreate(const Exchange& ex, const std::string& ns);

  absl::Status ApplyDocLocked(const std::string& resource, rapidjson::Document& doc,
                              const std::string& type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CommitLocked(const std::string& resource, const std::string& key, rapidjson::Document& doc,
                    const std::string& type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MatchFault(const std::string& method, const std::string& path, const std::string& query,
                  Fault* out);
  bool Authorized(const std::string& authorization) const;
  void SleepUnlessStopping(absl::Duration d) const;
  // Waits until ReleaseHeld() is called (or Stop()).
  void Hold();
  // The server-side write limit: true when this write may proceed.
  bool AdmitWrite();

  const Options options_;
  TestPki pki_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t rv_ ABSL_GUARDED_BY(mu_) = 1000;
  int64_t compacted_rv_ ABSL_GUARDED_BY(mu_) = 0;  // events at or below are forgotten
  int64_t uid_counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::map<std::string, Stored>> objects_ ABSL_GUARDED_BY(mu_);
  std::deque<Event> log_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ListSnapshot> snapshots_ ABSL_GUARDED_BY(mu_);
  int64_t snapshot_counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Fault> faults_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> tokens_ ABSL_GUARDED_BY(mu_);
  int64_t drop_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int truncate_events_ ABSL_GUARDED_BY(mu_) = 0;
  int open_watches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t watches_started_ ABSL_GUARDED_BY(mu_) = 0;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t release_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t throttled_ ABSL_GUARDED_BY(mu_) = 0;
  double write_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time write_tokens_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::map<std::string, int64_t> request_counts_ ABSL_GUARDED_BY(mu_);  // "METHOD path"
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);  // core/v1 Events POSTed
};

}  // namespace gse::testing

#endif  // GSE_TESTSUPPORT_FAKE_APISERVER_H_
