// The ThreadSanitizer suppressions of a -DGSE_SANITIZE=thread build, in one place.
//
// TSan reads suppressions from exactly one hook, __tsan_default_suppressions. It is defined once,
// in cmake/tsan_suppressions.cc, which every executable links (whole-archive, through
// gse_sanitizer_support). A second definition elsewhere would be a duplicate symbol, or one of
// the two would silently win, so libraries that need more lines do not define the hook:
//  * GSE_TSAN_SUPPRESSIONS_FOR_EVERY_EXECUTABLE: the lines every executable needs (the reasons
//    are in cmake/tsan_suppressions.cc).
//  * gse_tsan_grpc_suppressions(): defined only by gse_tsan_grpc (cmake/tsan_grpc_suppressions.cc,
//    linked whole-archive into the executables that use gRPC); returns the lines above followed
//    by gRPC's. The hook declares it weak: in an executable without gRPC it is null, and the
//    hook returns the common lines alone, so that TSan keeps watching the Abseil libraries that
//    gRPC's lines exempt.
// The lists are concatenated at compile time: TSan calls the hook while it initializes, before
// our constructors run and before it can run instrumented code, so the hook copies nothing and
// both functions are built without TSan instrumentation (no_sanitize("thread")).
#ifndef GSE_CMAKE_TSAN_SUPPRESSIONS_H_
#define GSE_CMAKE_TSAN_SUPPRESSIONS_H_

#define GSE_TSAN_SUPPRESSIONS_FOR_EVERY_EXECUTABLE "race:httplib::ThreadPool::worker\n"

extern "C" const char* gse_tsan_grpc_suppressions();

#endif  // GSE_CMAKE_TSAN_SUPPRESSIONS_H_
