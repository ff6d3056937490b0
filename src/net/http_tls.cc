// HttpClient's TLS pieces: the verifying client context, per-connection SNI and name checks, and
// handshake failures as Statuses. The name check is OpenSSL's own (SSL_set1_host /
// X509_VERIFY_PARAM_set1_ip_asc) rather than a verify callback, so a mismatch fails
// verification with a reason OpenSSL can name ("hostname mismatch") like every other failure.
#include "http_tls.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

namespace ladle::net {

namespace asio = boost::asio;

Result<std::unique_ptr<asio::ssl::context>> MakeTlsClientContext(const std::string& ca_file) {
  std::unique_ptr<asio::ssl::context> ctx;
  try {  // Asio throws when OpenSSL cannot make an SSL_CTX (out of memory)
    ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  } catch (const std::exception& e) {
    return Internal(fmt::format("TLS: cannot create a client context: {}", e.what()));
  }
  // TLS 1.0 and 1.1 are deprecated (RFC 8996) and a downgrade target; nothing older is offered.
  if (SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION) != 1) {
    return Internal("TLS: cannot require TLS 1.2");
  }
  boost::system::error_code ec;
  ctx->set_verify_mode(asio::ssl::verify_peer, ec);
  if (!ec) ctx->set_default_verify_paths(ec);
  if (ec) return Internal(fmt::format("TLS: cannot set up certificate verification: {}", ec.message()));
  if (!ca_file.empty()) {
    // Read errors first, in the system's words: OpenSSL 3 files them under a reason with no text.
    std::FILE* f = std::fopen(ca_file.c_str(), "r");
    if (f == nullptr) {
      return InvalidArgument(fmt::format("TLS CA file '{}' cannot be read: {}", ca_file, std::strerror(errno)));
    }
    std::fclose(f);
    ERR_clear_error();
    if (SSL_CTX_load_verify_locations(ctx->native_handle(), ca_file.c_str(), nullptr) != 1) {
      const char* reason = ERR_reason_error_string(ERR_peek_last_error());
      ERR_clear_error();
      return InvalidArgument(fmt::format("TLS CA file '{}' holds no usable certificate: {}", ca_file,
                                         reason != nullptr ? reason : "unknown OpenSSL error"));
    }
  }
  return ctx;
}

Status PrepareTlsConnection(SSL* ssl, const std::string& host) {
  // "example.com." is the same host, but SNI carries no trailing dot (RFC 6066 §3).
  const std::string name = !host.empty() && host.back() == '.' ? host.substr(0, host.size() - 1) : host;
  // An empty name would turn the host check off, and one with a NUL would check a prefix.
  if (name.empty() || name.find('\0') != std::string::npos) {
    return InvalidArgument("TLS endpoint without a usable host name to verify");
  }
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  boost::system::error_code ec;
  asio::ip::make_address(name, ec);
  if (!ec) {
    // A numeric address: matched against the certificate's IP SANs (the zone is no part of it).
    const std::string ip = name.substr(0, name.find('%'));
    if (X509_VERIFY_PARAM_set1_ip_asc(param, ip.c_str()) != 1) {
      return InvalidArgument(fmt::format("TLS: cannot check a certificate against address {}", name));
    }
    return Status();
  }
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (SSL_set1_host(ssl, name.c_str()) != 1) {
    return InvalidArgument(fmt::format("TLS: cannot check a certificate against host {}", name));
  }
  if (SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    return InvalidArgument(fmt::format("TLS: host name {} cannot be sent as SNI", name));
  }
  return Status();
}

Status TlsHandshakeError(SSL* ssl, const std::string& name, const boost::system::error_code& ec,
                         std::string_view where) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    return Status(StatusCode::kUnavailable, fmt::format("{}: TLS certificate verification failed for host {}: {}",
                                                        where, name, X509_verify_cert_error_string(verify)));
  }
  return Status(StatusCode::kUnavailable,
                fmt::format("{}: TLS handshake with {} failed: {}", where, name, ec.message()));
}

}  // namespace ladle::net
