// Test certificates and scratch directories for the local API server and the suites that
// talk TLS or write kubeconfigs: a CA with a server certificate for 127.0.0.1/localhost and a
// client certificate (fresh EC P-256 keys), and a directory removed with its files.
// Thread-compatible: each object is used by its owner.
#ifndef GSE_TESTSUPPORT_TEST_PKI_H_
#define GSE_TESTSUPPORT_TEST_PKI_H_

#include <string>

#include "absl/strings/string_view.h"

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

}  // namespace gse::testing

#endif  // GSE_TESTSUPPORT_TEST_PKI_H_
