// ThreadSanitizer suppressions for Debian's uninstrumented gRPC (linked into every executable
// that uses gRPC, i.e. links gse_kubelet_proto, in -DGSE_SANITIZE=thread builds only; see
// agent/CMakeLists.txt). TSan has one hook, __tsan_default_suppressions, defined once for every
// executable in cmake/tsan_suppressions.cc; that hook returns this list where this file is
// linked (cmake/tsan_suppressions.h says how), so `ctest` needs no TSAN_OPTIONS for them, and
// executables without gRPC keep TSan's full view of the Abseil libraries listed below.
//
// Why they are needed: libgrpc, libgpr, libgrpc++ and the Abseil, protobuf, upb, re2 and c-ares
// libraries they run on are Debian builds without TSan. gRPC hands work and buffers between its
// threads (the event engine's poller, the sync server's thread pool, completion queues) through
// synchronization inside those libraries (absl::Mutex, absl::CondVar, lock-free queues), which
// TSan cannot see: cmake/tsan_absl_sync.cc annotates our own calls to absl::Mutex, but gRPC's
// calls from inside libgrpc never reach those wrappers. TSan does see the libc calls these
// libraries make (malloc/free, memcpy/memmove, epoll and other fd operations), and without the
// hand-offs it reports them as races. Measured in agent_admission_test before these lines:
// epoll_create1 (main thread) vs epoll_wait (gRPC's event_engine thread) on the poller's fd;
// GraphCycles::GetId's memmove in libabsl_graphcycles_internal on two threads; a request
// buffer that libgrpc++ allocated on one thread and gRPC's inline method handler filled on a
// server thread; an absl::Status payload allocated in libabsl_cord and freed by libabsl_status
// on another thread; a status message string written on gRPC's thread and read by
// CallOpClientRecvStatus::FinishOp after CompletionQueue::Pluck. Every report had only gRPC
// and library frames or gRPC's own inline code at the top, none a frame of ours.
//
// Scope, kept narrow:
//  * called_from_lib:<soname> makes TSan ignore the libc interceptors *called from* that
//    library (allocation, memcpy and fd effects inside gRPC and the libraries it runs on).
//    Accesses made by our code are still checked, also when gRPC's threads run our handlers:
//    our code is linked statically and is never "called from" these libraries. The list is
//    exactly gRPC's and protobuf's dependency closure among Debian's libraries (readelf -d,
//    NEEDED, transitively); each entry must name one library (TSan aborts otherwise).
//  * race_top:^grpc:: suppresses a race only when the racing access itself (the top frame) is
//    gRPC's own inline code from its headers (namespace grpc::, e.g.
//    grpc::internal::CallOpClientRecvStatus::FinishOp), instantiated in our translation units
//    and therefore instrumented, touching gRPC's own call state. A race in one of our handlers
//    or in our use of gRPC objects has a top frame in gse:: (or std::, v1beta1::) and is still
//    reported.
#include "tsan_suppressions.h"

// Not instrumented: called by the hook while TSan initializes (cmake/tsan_suppressions.cc).
extern "C" __attribute__((no_sanitize("thread"))) const char* gse_tsan_grpc_suppressions() {
  return GSE_TSAN_SUPPRESSIONS_FOR_EVERY_EXECUTABLE
      "called_from_lib:libgrpc.so.29\n"
      "called_from_lib:libgrpc++.so.1.51\n"
      "called_from_lib:libgpr.so.29\n"
      "called_from_lib:libupb.so.29\n"
      "called_from_lib:libaddress_sorting.so.29\n"
      "called_from_lib:libre2.so.9\n"
      "called_from_lib:libcares.so.2\n"
      "called_from_lib:libprotobuf.so.32\n"
      "called_from_lib:libabsl_bad_optional_access.so.20220623\n"
      "called_from_lib:libabsl_bad_variant_access.so.20220623\n"
      "called_from_lib:libabsl_base.so.20220623\n"
      "called_from_lib:libabsl_city.so.20220623\n"
      "called_from_lib:libabsl_cord.so.20220623\n"
      "called_from_lib:libabsl_cord_internal.so.20220623\n"
      "called_from_lib:libabsl_cordz_functions.so.20220623\n"
      "called_from_lib:libabsl_cordz_handle.so.20220623\n"
      "called_from_lib:libabsl_cordz_info.so.20220623\n"
      "called_from_lib:libabsl_debugging_internal.so.20220623\n"
      "called_from_lib:libabsl_demangle_internal.so.20220623\n"
      "called_from_lib:libabsl_exponential_biased.so.20220623\n"
      "called_from_lib:libabsl_graphcycles_internal.so.20220623\n"
      "called_from_lib:libabsl_hash.so.20220623\n"
      "called_from_lib:libabsl_int128.so.20220623\n"
      "called_from_lib:libabsl_low_level_hash.so.20220623\n"
      "called_from_lib:libabsl_malloc_internal.so.20220623\n"
      "called_from_lib:libabsl_random_internal_platform.so.20220623\n"
      "called_from_lib:libabsl_random_internal_pool_urbg.so.20220623\n"
      "called_from_lib:libabsl_random_internal_randen.so.20220623\n"
      "called_from_lib:libabsl_random_internal_randen_hwaes.so.20220623\n"
      "called_from_lib:libabsl_random_internal_randen_hwaes_impl.so.20220623\n"
      "called_from_lib:libabsl_random_internal_randen_slow.so.20220623\n"
      "called_from_lib:libabsl_random_internal_seed_material.so.20220623\n"
      "called_from_lib:libabsl_random_seed_gen_exception.so.20220623\n"
      "called_from_lib:libabsl_raw_hash_set.so.20220623\n"
      "called_from_lib:libabsl_raw_logging_internal.so.20220623\n"
      "called_from_lib:libabsl_spinlock_wait.so.20220623\n"
      "called_from_lib:libabsl_stacktrace.so.20220623\n"
      "called_from_lib:libabsl_status.so.20220623\n"
      "called_from_lib:libabsl_statusor.so.20220623\n"
      "called_from_lib:libabsl_str_format_internal.so.20220623\n"
      "called_from_lib:libabsl_strerror.so.20220623\n"
      "called_from_lib:libabsl_strings.so.20220623\n"
      "called_from_lib:libabsl_strings_internal.so.20220623\n"
      "called_from_lib:libabsl_symbolize.so.20220623\n"
      "called_from_lib:libabsl_synchronization.so.20220623\n"
      "called_from_lib:libabsl_throw_delegate.so.20220623\n"
      "called_from_lib:libabsl_time.so.20220623\n"
      "called_from_lib:libabsl_time_zone.so.20220623\n"
      "race_top:^grpc::\n";
}
