// ThreadSanitizer suppressions for every executable of a -DGSE_SANITIZE=thread build (linked
// whole-archive through gse_sanitizer_support, see cmake/Dependencies.cmake). TSan reads them
// through its __tsan_default_suppressions hook, so `ctest` needs no TSAN_OPTIONS for them.
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
// called_from_lib:<soname> makes TSan ignore the libc interceptors *called from* that library.
// Our own code is linked statically and is never "called from" it, so accesses made by our
// handlers on httplib's threads (and by httplib's inline header code, which is instrumented)
// are still checked.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libcpp-httplib.so.0.11\n";
}
