// TestPki and ScratchDir: see test_pki.h.
#include "testsupport/test_pki.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace gse::testing {
namespace {

std::string PemOf(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

std::string PemOf(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

void AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) throw std::runtime_error(absl::StrCat("X509 extension ", value));
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

X509* MakeCert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, int kind,
               long serial) {
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 365L * 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : x;
  X509_set_issuer_name(x, X509_get_subject_name(signer));
  AddExt(x, signer, NID_subject_key_identifier, "hash");
  if (kind == 0) {  // CA
    AddExt(x, signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExt(x, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExt(x, signer, NID_basic_constraints, "critical,CA:FALSE");
    AddExt(x, signer, NID_key_usage, "critical,digitalSignature,keyEncipherment");
    AddExt(x, signer, NID_authority_key_identifier, "keyid:always");
    if (kind == 1) {
      AddExt(x, signer, NID_ext_key_usage, "serverAuth");
      AddExt(x, signer, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    } else {
      AddExt(x, signer, NID_ext_key_usage, "clientAuth");
    }
  }
  X509_sign(x, issuer_key != nullptr ? issuer_key : key, EVP_sha256());
  return x;
}

}  // namespace

ScratchDir::ScratchDir() {
  char tmpl[] = "/tmp/gse-fake-XXXXXX";
  char* dir = mkdtemp(tmpl);
  if (dir == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = dir;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ScratchDir::File(absl::string_view name) const { return absl::StrCat(path_, "/", name); }

void ScratchDir::Write(absl::string_view name, absl::string_view content) const {
  const std::string tmp = File(absl::StrCat(".", name, ".tmp"));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
  }
  std::filesystem::rename(tmp, File(name));
}

TestPki MakeTestPki() {
  TestPki pki;
  EVP_PKEY* ca_key = EVP_EC_gen("P-256");
  EVP_PKEY* server_key = EVP_EC_gen("P-256");
  EVP_PKEY* client_key = EVP_EC_gen("P-256");
  X509* ca = MakeCert(ca_key, "fake-apiserver-ca", nullptr, nullptr, 0, 1);
  X509* server = MakeCert(server_key, "kube-apiserver", ca, ca_key, 1, 2);
  X509* client = MakeCert(client_key, "system:kube-scheduler", ca, ca_key, 2, 3);
  pki.ca_pem = PemOf(ca);
  pki.ca_key_pem = PemOf(ca_key);
  pki.server_cert_pem = PemOf(server);
  pki.server_key_pem = PemOf(server_key);
  pki.client_cert_pem = PemOf(client);
  pki.client_key_pem = PemOf(client_key);
  X509_free(ca);
  X509_free(server);
  X509_free(client);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(server_key);
  EVP_PKEY_free(client_key);
  return pki;
}

}  // namespace gse::testing
