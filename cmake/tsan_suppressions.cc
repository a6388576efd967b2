// ThreadSanitizer suppressions for every executable of a -DGSE_SANITIZE=thread build (linked
// whole-archive through gse_sanitizer_support, see cmake/Dependencies.cmake). TSan reads them
// through its __tsan_default_suppressions hook, so `ctest` needs no TSAN_OPTIONS for them. This
// is the only definition of the hook; executables that use gRPC get gRPC's lines through it too
// (cmake/tsan_suppressions.h says how, cmake/tsan_grpc_suppressions.cc why).
//
// cpp-httplib: Debian's libcpp-httplib.so is built without TSan, so the synchronization inside
// it is invisible, but the libc calls it makes (memcpy, send) are intercepted. CI reported
// "data race ... in httplib::detail::send_socket" in kube_reflector_test when two watch streams
// of testsupport/fake_apiserver.cc ended at once: one worker memcpy'd into a static of the
// library (its .bss at +0x8e710, not an exported symbol, so most likely a function-local static
// of the chunked writer) and another worker send()s from it. Both accesses are the library's,
// both stacks had only httplib frames on top, and the hand-off between them is the library's
// own (e.g. a static's initialization guard, whose fast path TSan cannot see).
//
// Suppressed narrowly: a race report is dropped only when one of its two stacks runs on a
// worker of httplib's own ThreadPool (httplib::ThreadPool::worker). Only the test peers use
// that pool (testsupport/fake_apiserver.cc, the local API server); the extender's HttpServer
// serves on its own ElasticThreadPool, so races in the extender's handlers are still
// reported. (The agent's small /metrics and /healthz server, agent/agent_http.cc, does use
// httplib's pool: races whose stack runs through its two handlers are hidden too.)
// Library-only reports seen on those workers: the send_socket one above (CI), and a memcmp in
// the library against a memcpy of another worker (failover_test, live_cluster_test; both
// stacks only library frames under ThreadPool::worker). Not
// `called_from_lib:libcpp-httplib`: that also hides the library's pthread_mutex calls, while
// httplib's inline header code (instrumented, in our objects) unlocks the same mutexes, and
// TSan then reports "unlock of an unlocked mutex" (measured: kube_client.cc's watch stopper).
#include "tsan_suppressions.h"

// Null unless gse_tsan_grpc is linked (an executable that uses gRPC).
extern "C" const char* gse_tsan_grpc_suppressions() __attribute__((weak));

// Not instrumented: TSan calls the hook while it initializes, and an instrumented function that
// calls another gets __tsan_func_entry, which then crashes every executable (SEGV in TSan's
// thread state, measured in every TSan test before this attribute).
extern "C" __attribute__((no_sanitize("thread"))) const char* __tsan_default_suppressions() {
  if (gse_tsan_grpc_suppressions != nullptr) return gse_tsan_grpc_suppressions();
  return GSE_TSAN_SUPPRESSIONS_FOR_EVERY_EXECUTABLE;
}
