// Test-time TLS for the net and vision tests: a CA and server certificates made with OpenSSL's C
// API while the test runs (EC P-256 keys, valid from an hour ago for a day), so no key material
// is committed, the CA written to a temporary PEM file for HttpClientOptions::tls_ca_file, and
// an HTTPS server (Beast's ssl_stream over RawServer's connections, one thread each) that answers
// through a function and records the SNI each handshake carried.
//
//   TestCa ca;
//   TlsServer server(ca.Issue("localhost", "DNS:localhost,IP:127.0.0.1"),
//                    [](const HttpRequest& r) { return HttpResponse::WithBody(200, "text/plain", "hi"); });
//   client options: .tls_ca_file = ca.ca_file()
#pragma once

#include <gtest/gtest.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>

#include <atomic>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ladle/net/http.h"
#include "raw_server.h"

namespace ladle::net::testing {

struct TlsKeyPair {
  std::string cert_pem;  // the certificate (the leaf only: the client must know the CA)
  std::string key_pem;
};

namespace tls_detail {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* x) const { X509_free(x); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

inline Key NewKey() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr);
  EVP_PKEY* key = nullptr;
  const bool ok = ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 &&
                  EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, NID_X9_62_prime256v1) == 1 &&
                  EVP_PKEY_keygen(ctx, &key) == 1;
  EVP_PKEY_CTX_free(ctx);
  EXPECT_TRUE(ok) << "EC key generation failed";
  return Key(key);
}

inline void AddExt(X509* cert, X509V3_CTX* v3, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, v3, nid, value.c_str());
  ASSERT_NE(ext, nullptr) << "extension " << nid << " = " << value;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `cn`: self-signed (issuer null) as a CA, or a server certificate
// for `sans` signed by issuer/issuer_key.
inline Cert NewCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, const std::string& sans,
                    long serial) {
  Cert cert(X509_new());
  X509* x = cert.get();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer != nullptr ? issuer : x, x, nullptr, nullptr, 0);
  if (issuer == nullptr) {
    AddExt(x, &v3, NID_basic_constraints, "critical,CA:TRUE");
    AddExt(x, &v3, NID_key_usage, "critical,keyCertSign,cRLSign");
    AddExt(x, &v3, NID_subject_key_identifier, "hash");
  } else {
    AddExt(x, &v3, NID_basic_constraints, "critical,CA:FALSE");
    AddExt(x, &v3, NID_key_usage, "critical,digitalSignature");
    AddExt(x, &v3, NID_ext_key_usage, "serverAuth");
    AddExt(x, &v3, NID_authority_key_identifier, "keyid:always");
    if (!sans.empty()) AddExt(x, &v3, NID_subject_alt_name, sans);
  }
  EXPECT_GT(X509_sign(x, issuer_key != nullptr ? issuer_key : key, EVP_sha256()), 0) << "X509_sign failed";
  return cert;
}

inline std::string Pem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

inline std::string Pem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

}  // namespace tls_detail

// A self-signed CA, its certificate in a file of a fresh temporary directory (removed with it).
class TestCa {
 public:
  explicit TestCa(std::string name = "ladle test CA") : key_(tls_detail::NewKey()) {
    cert_ = tls_detail::NewCert(key_.get(), name, nullptr, nullptr, "", 1);
    std::string dir = (std::filesystem::temp_directory_path() / "ladle-tls-XXXXXX").string();
    EXPECT_NE(::mkdtemp(dir.data()), nullptr);
    dir_ = dir;
    ca_file_ = dir_ + "/ca.pem";
    std::ofstream(ca_file_) << tls_detail::Pem(cert_.get());
  }
  ~TestCa() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  // A server certificate signed by this CA; sans as OpenSSL writes them ("DNS:a,IP:127.0.0.1").
  TlsKeyPair Issue(const std::string& cn, const std::string& sans) {
    tls_detail::Key key = tls_detail::NewKey();
    tls_detail::Cert cert = tls_detail::NewCert(key.get(), cn, cert_.get(), key_.get(), sans, ++serial_);
    return {tls_detail::Pem(cert.get()), tls_detail::Pem(key.get())};
  }
  const std::string& ca_file() const { return ca_file_; }
  const std::string& dir() const { return dir_; }

 private:
  tls_detail::Key key_;
  tls_detail::Cert cert_;
  long serial_ = 1;
  std::string dir_, ca_file_;
};

// An HTTPS/1.1 server on 127.0.0.1 with keep-alive. A handler's response with status 0 is never
// sent (the connection waits until the client goes or the server stops).
class TlsServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  struct Options {
    bool handshake = true;     // false: accept and never answer the ClientHello
    bool close_after = false;  // after each response (that said keep-alive): close
    int max_version = 0;       // e.g. TLS1_1_VERSION: a server stuck on an old protocol
  };

  TlsServer(const TlsKeyPair& cert, Handler handler) : TlsServer(cert, std::move(handler), Options()) {}
  TlsServer(const TlsKeyPair& cert, Handler handler, Options options)
      : ctx_(boost::asio::ssl::context::tls_server), handler_(std::move(handler)), options_(options) {
    boost::system::error_code ec;
    ctx_.use_certificate_chain(boost::asio::buffer(cert.cert_pem), ec);
    EXPECT_FALSE(ec) << ec.message();
    ctx_.use_private_key(boost::asio::buffer(cert.key_pem), boost::asio::ssl::context::pem, ec);
    EXPECT_FALSE(ec) << ec.message();
    if (options_.max_version != 0) {
      SSL_CTX_set_security_level(ctx_.native_handle(), 0);  // old protocols need the old ciphers
      SSL_CTX_set_cipher_list(ctx_.native_handle(), "DEFAULT:@SECLEVEL=0");
      SSL_CTX_set_min_proto_version(ctx_.native_handle(), TLS1_VERSION);
      SSL_CTX_set_max_proto_version(ctx_.native_handle(), options_.max_version);
    }
    raw_ = std::make_unique<RawServer>([this](tcp::socket& s) { Serve(s); });
  }
  ~TlsServer() { raw_.reset(); }  // joins the connection threads before the context goes

  uint16_t port() const { return raw_->port(); }
  uint64_t accepted() const { return raw_->accepted(); }
  int handshakes() const { return handshakes_.load(); }
  int failed_handshakes() const { return failed_handshakes_.load(); }
  // The SNI each completed handshake carried, "" for none.
  std::vector<std::string> sni() const {
    std::lock_guard lock(mu_);
    return sni_;
  }
  std::vector<HttpRequest> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void Serve(tcp::socket& socket) {
    namespace http = boost::beast::http;
    if (!options_.handshake) {
      RawServer::WaitForClose(socket);
      return;
    }
    boost::beast::ssl_stream<tcp::socket&> tls(socket, ctx_);
    boost::system::error_code ec;
    tls.handshake(boost::asio::ssl::stream_base::server, ec);
    if (ec) {
      ++failed_handshakes_;
      return;
    }
    ++handshakes_;
    {
      const char* name = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
      std::lock_guard lock(mu_);
      sni_.emplace_back(name != nullptr ? name : "");
    }
    boost::beast::flat_buffer buffer;
    while (true) {
      http::request<http::string_body> req;
      http::read(tls, buffer, req, ec);
      if (ec) return;  // the client went (or the server stops)
      HttpRequest in;
      in.method = std::string(req.method_string());
      in.target = std::string(req.target());
      for (const auto& f : req) in.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      in.body = req.body();
      {
        std::lock_guard lock(mu_);
        seen_.push_back(in);
      }
      const HttpResponse out = handler_(in);
      if (out.status == 0) {
        RawServer::WaitForClose(socket);
        return;
      }
      http::response<http::string_body> res{static_cast<http::status>(out.status), 11};
      for (const auto& [k, v] : out.headers) res.insert(k, v);
      res.body() = out.body;
      res.prepare_payload();
      res.keep_alive(req.keep_alive());
      http::write(tls, res, ec);
      if (ec) return;
      if (options_.close_after || !res.keep_alive()) {
        // A FIN without close_notify: what a server dropping an idle connection often does, and
        // all a blocking handshake-free close can do here (asio's shutdown waits for the peer).
        socket.shutdown(tcp::socket::shutdown_both, ec);
        return;
      }
    }
  }

  boost::asio::ssl::context ctx_;
  Handler handler_;
  Options options_;
  mutable std::mutex mu_;
  std::vector<std::string> sni_;
  std::vector<HttpRequest> seen_;
  std::atomic<int> handshakes_{0}, failed_handshakes_{0};
  std::unique_ptr<RawServer> raw_;
};

}  // namespace ladle::net::testing
