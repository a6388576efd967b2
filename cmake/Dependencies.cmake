# Finds the Debian-packaged libraries and papers over their packaging traps (shared/BUILD-NOTES.md).
find_package(PkgConfig REQUIRED)
# cpp-httplib ships no CMake config, and it is a compiled library whose ABI depends on the
# OPENSSL/ZLIB/BROTLI defines: only ever link it through this pkg-config target.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib>=0.11)
add_library(httplib::httplib ALIAS PkgConfig::HTTPLIB)

find_package(RapidJSON CONFIG REQUIRED)
add_library(gse_rapidjson INTERFACE)
target_include_directories(gse_rapidjson SYSTEM INTERFACE ${RAPIDJSON_INCLUDE_DIRS})
# Accept std::string in RapidJSON's API.
target_compile_definitions(gse_rapidjson INTERFACE RAPIDJSON_HAS_STDSTRING=1)
# SSE2 (part of every x86-64) speeds up whitespace skipping, in-situ string parsing and string
# writing; it matters at 5,000-node filter bodies. RapidJSON's SIMD loads are 16-byte aligned
# and may touch bytes past the end of the buffer within the same 16 bytes (never another
# page), which AddressSanitizer reports: sanitizer builds parse without it.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND GSE_SANITIZE STREQUAL "")
  target_compile_definitions(gse_rapidjson INTERFACE RAPIDJSON_SSE2)
endif()

find_package(absl CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)
find_package(benchmark CONFIG REQUIRED)
find_package(Threads REQUIRED)
# TLS for the Kubernetes client (state/kube_client.cc) and the HTTPS server.
find_package(OpenSSL REQUIRED)

# gse_sanitizer_support: every library of ours links it. In ThreadSanitizer builds it carries
# the wrappers that make Debian's uninstrumented absl::Mutex/CondVar/Notification visible to
# TSan (cmake/tsan_absl_sync.cc explains why) and the suppressions for uninstrumented Debian
# libraries (cmake/tsan_suppressions.cc); otherwise it is empty.
add_library(gse_sanitizer_support INTERFACE)
if(GSE_SANITIZE STREQUAL "thread")
  add_library(gse_tsan_absl STATIC ${CMAKE_CURRENT_LIST_DIR}/tsan_absl_sync.cc
                            ${CMAKE_CURRENT_LIST_DIR}/tsan_suppressions.cc)
  set(GSE_TSAN_WRAPPED_SYMBOLS
    _ZN4absl7debian35Mutex4LockEv
    _ZN4absl7debian35Mutex6UnlockEv
    _ZN4absl7debian35Mutex10ReaderLockEv
    _ZN4absl7debian35Mutex12ReaderUnlockEv
    _ZN4absl7debian35Mutex7TryLockEv
    _ZN4absl7debian35Mutex13ReaderTryLockEv
    _ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE
    _ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE
    _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE
    _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE
    _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE
    _ZN4absl7debian312Notification6NotifyEv
    _ZNK4absl7debian312Notification19WaitForNotificationEv)
  foreach(sym ${GSE_TSAN_WRAPPED_SYMBOLS})
    target_link_options(gse_sanitizer_support INTERFACE "LINKER:--wrap=${sym}")
  endforeach()
  # Whole archive: every executable must define the __wrap_ symbols, also those whose own
  # objects never lock a Mutex but link an Abseil DSO that does (ld then checks the DSO's
  # wrapped references against the executable).
  target_link_libraries(gse_sanitizer_support INTERFACE "$<LINK_LIBRARY:WHOLE_ARCHIVE,gse_tsan_absl>")
endif()

# gRPC and protobuf for kubelet's device plugin and pod-resources APIs (the node agent, agent/).
# Debian's gRPC 1.51 is built against the same Debian Abseil, so there is one Abseil in the
# process. gRPCConfig.cmake finds Protobuf (protobuf::libprotobuf, protobuf::protoc) itself.
find_package(gRPC CONFIG REQUIRED)
find_program(GSE_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
