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
//   GET /apis/coordination.k8s.io/v1/namespaces/{ns}/leases  list (LeaseList) or watch of the
//        namespace's Leases, paged and with bookmarks as the core lists and watches
//   POST /api/v1/namespaces/{ns}/events                    core/v1 Event (kept for Events())
//   GET  /apis/resource.k8s.io/v1/{deviceclasses,resourceslices,resourceclaims}   list or watch,
//        as the core lists above (pagination, Exact, 410, bookmarks); GET/DELETE of
//        .../{deviceclasses,resourceslices}/{name} and .../namespaces/{ns}/resourceclaims/{name}.
//        The objects are the DRA fact sheet's (shared/protocol/dra/), applied by the test.
//   GET  /apis/resource.k8s.io/v1   discovery (APIResourceList; 404 without Options::serve_dra)
// Every request needs "Authorization: Bearer <one of tokens>" (else 401, recorded body),
// except in client-certificate mode.
// Fault injection: status answers (500...) before the request is handled or after its write
// committed, delays before or after the write commits, requests held until the test releases
// them (a stalled API server, deterministically), dropped watches, held watches (a lagging
// watch cache), truncated watch events and truncated list bodies; each fault may carry a
// label under which FaultHits() counts how often it fired.
// Load (Options): a latency per write (POST/PUT/DELETE, before it commits, as etcd's), and a
// server-side token bucket on writes that answers 429 exactly as kube-apiserver's
// max-in-flight and priority-and-fairness filters do (Retry-After: 1, a plain-text body).
// Audit: Pods() and Objects() read the objects straight from the store, independent of any
// extender code.
// Quiescence: InFlightRequests() counts requests still being handled (injected delays
// included), WatchesCaughtUp() says whether every open watch was sent every event so far.
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
#include "testsupport/test_pki.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace gse::testing {

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
    // Discovery GET /apis/resource.k8s.io/v1 answers its APIResourceList; false: 404, as a
    // server that does not serve the group version (before 1.34).
    bool serve_dra = true;
    // Seconds an idle keep-alive connection stays open (Stop() waits this long for them). A
    // client that reuses a connection just as the server closes it sees a transport error,
    // so a test whose client idles for about this long between requests raises it.
    int keep_alive_seconds = 1;
  };

  // A fault applies to the next `times` requests that match (times < 0: all).
  struct Fault {
    std::string method;          // "GET", "POST", "PUT", "DELETE"; "" = any
    std::string path_contains;   // substring of the path (without query); "" = any
    std::string query_contains;  // substring of the query string, e.g. "watch=1"
    int times = 1;
    // Non-zero: answer this code with a v1.Status body whose reason is kube-apiserver's for
    // it (409 Conflict, 410 Expired, 429 TooManyRequests, 503 ServiceUnavailable, 504
    // Timeout, other 5xx InternalError, other 4xx BadRequest); nothing is written.
    int status = 0;
    // With `status`: the request is handled first (a write commits, as the answer would have
    // said) and the answer is then replaced by `status` — a server or proxy failing after
    // the commit, which the client cannot tell from a failure before it.
    bool status_after_commit = false;
    absl::Duration delay_before = absl::ZeroDuration();  // before the request is handled
    absl::Duration delay_after = absl::ZeroDuration();   // after it committed, before answering
    bool truncate_body = false;  // cut the answer's body in half (invalid JSON)
    // Hold the request (before it is handled) until ReleaseHeld() or Stop().
    bool hold = false;
    std::string label;           // non-empty: FaultHits()[label] counts each time it fires
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

  // ---- the store (resource: nodes, pods, namespaces, resourcequotas, leases, deviceclasses,
  // resourceslices, resourceclaims)
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
  int64_t resource_version_number() const;
  // Forgets the event history: watches and lists from an older resourceVersion get 410.
  void Compact();

  // ---- audit
  std::vector<PodView> Pods() const;
  // Every stored object of `resource` (with kind and apiVersion, as GET returns it), in key
  // order (namespace/name or name).
  std::vector<std::string> Objects(absl::string_view resource) const;
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
  // Holds watch delivery after the current resourceVersion (true) or releases it (false):
  // open and new watches send nothing later (no events, no bookmarks, no 410; a watch that
  // reaches its timeoutSeconds ends), as a lagging watch cache would; the events are kept and
  // sent in order once released. Lists, gets and writes are served as usual.
  void HoldWatches(bool hold);
  // Releases held watches up to `resource_version` (an earlier value of resource_version()):
  // they send the events up to it and hold the later ones.
  void HoldWatchesAfter(int64_t resource_version);

  // ---- observation
  int64_t RequestCount(absl::string_view method, absl::string_view path_contains) const;
  int open_watches() const;
  // Open watches of one resource ("pods", "leases"...): a barrier that waits for every client's
  // watch of each kind it needs (a total count lets one client's extra watch hide another's
  // missing one).
  int open_watches(absl::string_view resource) const;
  int64_t watches_started() const;
  // label -> times a labelled fault fired (its request matched it).
  std::map<std::string, int64_t> FaultHits() const;
  // Each time a labelled fault fired, in order: its label and the request ("POST /api/...");
  // the oldest are forgotten beyond 100,000.
  struct FaultHit {
    std::string label;
    std::string request;
  };
  std::vector<FaultHit> FaultLog() const;
  // Requests other than watches that are still being handled, injected delays included: 0
  // means no held write can still commit.
  int InFlightRequests() const;
  // True when every open watch has been sent every event up to the current resourceVersion
  // (false while watches are held and events wait).
  bool WatchesCaughtUp() const;

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
  // `ns` non-empty: only that namespace's objects (a namespaced list or watch URL).
  void ServeList(const Exchange& ex, const std::string& resource, const std::string& ns = "");
  void ServeWatch(const Exchange& ex, const std::string& resource, const std::string& ns = "");
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
  int64_t hold_after_rv_ ABSL_GUARDED_BY(mu_) = -1;  // watches send nothing later; -1: none
  int open_watches_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int, std::less<>> open_watches_by_resource_ ABSL_GUARDED_BY(mu_);
  int64_t watches_started_ ABSL_GUARDED_BY(mu_) = 0;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t release_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t throttled_ ABSL_GUARDED_BY(mu_) = 0;
  double write_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time write_tokens_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Open watches by id -> the resourceVersion up to which each was sent the event log.
  std::map<int64_t, int64_t> watch_positions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> fault_hits_ ABSL_GUARDED_BY(mu_);
  std::deque<FaultHit> fault_log_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> request_counts_ ABSL_GUARDED_BY(mu_);  // "METHOD path"
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);  // core/v1 Events POSTed
};

}  // namespace gse::testing

#endif  // GSE_TESTSUPPORT_FAKE_APISERVER_H_
