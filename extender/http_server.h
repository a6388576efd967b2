// HttpServer: serves an ExtenderService to kube-scheduler over HTTP/1.1 or HTTPS (cpp-httplib).
//
// Routes (prefix normalised by NormalizePrefix: leading '/', no trailing '/'):
//   POST {prefix}/filter | /prioritize | /bind | /preempt   ExtenderService verbs (JSON)
//   GET  /healthz      200 "ok" (text/plain) while the server is serving
//   GET  /readyz       200 {"ready":true} when ExtenderService::Ready(), else 503 with why
//                      (reason not_synced|not_leader|stopping, the leader, the Error text)
//   GET  /metrics      ExtenderMetrics::Serialize() (text/plain; version=0.0.4)
//   GET  /debug/state  ExtenderService::DebugStateJson()
// HTTPS with a client CA (TlsOptions::client_ca_file): the handshake requests a client
// certificate and fails for one the CA did not sign, but accepts a client without one, so
// that kubelet probes and Prometheus reach /healthz, /readyz and /metrics; the verbs and
// /debug/state answer 403 (JSON) on a connection without a verified client certificate.
// Errors, each answered with a JSON body {"Error": "..."} and the server keeps serving:
//   403 verb or /debug/state without a verified client certificate (--client-ca only),
//   404 unknown path, 405 known path with another method (Allow header), 411 POST without
//   Content-Length or chunked framing, 413 body over max_body_bytes however it is framed
//   (Content-Length, chunked, compressed: the limit is on the decoded body), 400 unreadable
//   body, 500 when a handler throws. Answers after which unread body bytes may remain on the
//   connection carry "Connection: close".
// Every request is counted once in ExtenderMetrics::ObserveRequest (verb, code, outcome,
// latency from the end of the request headers to the answer being ready), before the answer
// is sent: a client that has its answer finds it counted in /metrics.
//
// Execution (issue 14): a worker serves one connection for its keep-alive life (cpp-httplib),
// and a bind holds its worker while it waits for the API write limiter or the API server.
// So that filter, prioritize and preempt never wait behind binds, workers come from an
// ElasticThreadPool (extender/elastic_thread_pool.h): `threads` are kept ready, and beyond
// them kSpareConnectionWorkers idle ones, started by the pool's keeper thread rather than on
// the accept thread, so that a new connection is handed to a running thread and never waits
// for one to be created; a connection that still finds none idle (a burst faster than the
// keeper) gets one started for it. At most `threads + max_concurrent_binds` workers.
// At most `max_concurrent_binds` binds run at once; a bind beyond that
// is answered at once with the protocol Error "not attempted" (gse_bind_total
// outcome="overloaded", not bound, kube-scheduler retries it) instead of holding a worker. So
// binds never hold more than max_concurrent_binds workers, and at least `threads` remain for
// everything else.
// Not waiting for a worker is not enough on a machine short of CPU: binds also use CPU
// (decoding, the reservation, the binding POST and its answer), and every runnable thread
// gets an equal share. With bind_nice > 0 the bind handler runs on a bind worker, a thread of
// its own whose nice value is raised by bind_nice (CFS gives a nice-10 thread about a tenth of
// the weight of a nice-0 one), while the connection's worker only reads the request and writes
// the answer. Bind workers are started on demand (at most max_concurrent_binds, the binds
// admitted) and kept while used; a thread cannot lower its nice value again without
// CAP_SYS_NICE, which is why they are threads of their own and not the connection workers.
// Their writes to the mirror never queue on its lock (Mirror::YieldToReadersOnThisThread), so
// that the verbs' reader locks never wait for a deprioritised bind (priority inversion).
// Thread-safety: Create() and SetVerbHandlerForTesting() before Start(); Stop(), InFlight(),
// BindsInFlight(), Workers(), port() and the rest from any thread.
#ifndef GSE_EXTENDER_HTTP_SERVER_H_
#define GSE_EXTENDER_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "extender/elastic_thread_pool.h"
#include "extender/extender_service.h"
#include "extender/metrics.h"

namespace httplib {
class ContentReader;
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace gse {

// HTTPS material. Both cert and key, or neither; client_ca only with them.
struct TlsOptions {
  std::string cert_file;       // --tls-cert: PEM certificate (chain) of the server
  std::string key_file;        // --tls-key: PEM private key matching cert_file
  std::string client_ca_file;  // --client-ca: PEM CA(s) that must sign the verbs' client certs
  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // IPv4 or IPv6 literal (without brackets) or a host name
  int port = 8888;                 // 0: any free port, see HttpServer::port()
  std::string prefix;              // URL prefix of the verbs, normalised by Create()
  int threads = 0;                 // workers kept ready; 0: DefaultThreadCount()
  int max_concurrent_binds = 1024;  // binds served at once (1-65536); more answer "overloaded"
  // --bind-nice (0-19): bind handlers run on threads of their own whose nice value is this much
  // above the rest of the process (capped at 19), so that on a busy machine the CPU goes to
  // filter, prioritize and preempt first. 0: binds run on their connection's worker, at the
  // process's priority. See "Bind workers" in http_server.cc.
  int bind_nice = 10;
  // Workers started beyond `threads` end after this long without a connection.
  absl::Duration worker_idle_timeout = absl::Seconds(60);
  size_t max_body_bytes = size_t{64} << 20;
  absl::Duration read_timeout = absl::Seconds(10);
  absl::Duration write_timeout = absl::Seconds(10);
  // Idle time before a keep-alive connection is closed; also bounds how long Wait() may take
  // after Stop() while clients hold idle connections.
  absl::Duration keep_alive_timeout = absl::Seconds(5);
  size_t keep_alive_max_count = 100000;
  TlsOptions tls;
};

// "" or "/" -> ""; "gpu-extender/" -> "/gpu-extender". InvalidArgument for characters that
// cannot appear in a URL path (space, '?', '#', control characters) or an empty segment ("//").
absl::StatusOr<std::string> NormalizePrefix(absl::string_view prefix);

// "HOST:PORT" with an IPv4 address or host name, or "[IPV6]:PORT"; port 0..65535.
struct ListenAddress {
  std::string host;  // brackets removed
  int port = 0;
  bool ipv6 = false;  // host is an IPv6 literal
};
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view listen);

// max(64, 4 x hardware threads): see the comment in http_server.cc.
int DefaultThreadCount();

// Checks what HTTPS needs before the server is built, with errors that name the flag and the
// file: both files readable, a PEM certificate, a PEM private key that matches it, and at
// least one PEM certificate in the client CA file. OK when TLS is not configured.
absl::Status CheckTlsFiles(const TlsOptions& tls);

// Keeps glibc's malloc from returning the multi-megabyte buffers of one request (bodies,
// parsed documents, answers) to the kernel and page-faulting them back in on the next: large
// blocks come from the heap, not mmap, and the heap is not trimmed below 256 MiB. Process-
// wide; the binary calls it before serving (and extender_bench, which runs the same service,
// too). A no-op under sanitizers, which bring their own allocator.
void TuneMallocForLargeBodies();

class HttpServer {
 public:
  using VerbHandler = std::function<VerbResult(std::string body)>;

  // Validates the options, loads TLS material and binds the listening socket (so port() is
  // known and connections queue from here on). `service` and `metrics` (may be null) must
  // outlive the server. Errors name the option's flag (--listen, --prefix, --tls-cert, ...).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(ExtenderService* service,
                                                            ExtenderMetrics* metrics,
                                                            HttpServerOptions options);
  ~HttpServer();  // Stop() and Wait()

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Starts serving on a background thread. Call once.
  void Start();
  // Stops accepting connections; requests in flight are answered, then their connections are
  // closed. Idempotent, thread-safe, returns at once.
  void Stop();
  // Blocks until the server has stopped and every worker has finished (after Stop(): the
  // requests in flight, plus idle keep-alive connections timing out). Returns false on
  // timeout.
  bool Wait(absl::Duration timeout = absl::InfiniteDuration());
  // Requests whose headers have been read and whose answer is not written yet.
  int64_t InFlight() const { return in_flight_.load(); }
  // Bind requests admitted and not answered yet (at most max_concurrent_binds).
  int64_t BindsInFlight() const { return binds_in_flight_.load(); }
  // The connection workers while serving (zeros before Start() and after the server ended).
  struct WorkerStats {
    size_t threads = 0;  // alive
    size_t busy = 0;     // serving a connection
    size_t queued = 0;   // connections waiting for a worker (momentarily, or at the maximum)
    int64_t started = 0;
    int64_t waited_at_max = 0;  // connections that found every one of the most workers busy
  };
  WorkerStats Workers() const;

  int port() const { return port_; }
  bool tls() const { return tls_; }
  const std::string& prefix() const { return options_.prefix; }
  int threads() const { return options_.threads; }
  int max_concurrent_binds() const { return options_.max_concurrent_binds; }
  int bind_nice() const { return options_.bind_nice; }
  // "http://127.0.0.1:8888/prefix" (IPv6 hosts in brackets).
  std::string BaseUrl() const;

  // Test hook: replaces the handler of one verb ("filter", "prioritize", "bind", "preempt"),
  // e.g. with one that throws, to exercise the error paths through the real dispatch. Before
  // Start() only.
  void SetVerbHandlerForTesting(absl::string_view verb, VerbHandler handler);

 private:
  struct Route;
  class WorkerQueue;
  HttpServer(ExtenderService* service, ExtenderMetrics* metrics, HttpServerOptions options);
  absl::Status Init();
  void InstallRoutes();
  const Route* FindRoute(const std::string& path) const;
  bool Finished();  // the serving thread has ended
  // POST {prefix}/<verb>: reads the body within max_body_bytes, calls the verb handler.
  void HandleVerb(const httplib::Request& req, httplib::Response& res,
                  const httplib::ContentReader& reader);
  // ObserveRequest once per request, as soon as its answer is ready.
  void RecordRequest(const std::string& path, int status);
  // The answer to a bind beyond max_concurrent_binds (counted and logged by the service).
  VerbResult OverloadedBind(std::string body) const;
  // Runs the bind handler on a bind worker (bind_nice > 0) and waits for its answer; an
  // exception of the handler is rethrown here, on the connection's worker.
  VerbResult BindOnBindWorker(std::string body);

  ExtenderService* const service_;
  ExtenderMetrics* const metrics_;
  HttpServerOptions options_;
  bool tls_ = false;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::map<std::string, std::unique_ptr<Route>> routes_;  // by exact path
  std::map<std::string, VerbHandler> verb_handlers_;      // by verb

  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> binds_in_flight_{0};
  // The pool of the running accept loop (created and destroyed by cpp-httplib's listen).
  mutable absl::Mutex workers_mu_;
  WorkerQueue* workers_ ABSL_GUARDED_BY(workers_mu_) = nullptr;
  std::atomic<bool> stop_requested_{false};
  // The niced threads that run bind handlers (null when bind_nice is 0). Created by Init(),
  // shut down by the destructor after every connection worker has ended; internally locked.
  std::unique_ptr<ElasticThreadPool> bind_workers_;
  absl::Mutex join_mu_;
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);  // started under mu_ before any Wait()
  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gse

#endif  // GSE_EXTENDER_HTTP_SERVER_H_
