// The TLS half of HttpClient (private to src/net): the client context every TLS connection of
// one client shares, and the per-connection settings and error reading around a handshake.
#pragma once

#include <boost/asio/ssl.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "ladle/core/result.h"

namespace ladle::net {

// TLS 1.2 and up, peer verification on, the system's default CA paths plus `ca_file` (PEM; empty:
// none). kInvalidArgument when ca_file cannot be read or holds no certificate.
Result<std::unique_ptr<boost::asio::ssl::context>> MakeTlsClientContext(const std::string& ca_file);

// Before one connection's handshake: SNI (for a name; RFC 6066 has no SNI for an address) and
// the name or address the certificate must carry, checked by OpenSSL during verification.
Status PrepareTlsConnection(SSL* ssl, const std::string& host);

// A failed handshake as a Status: a certificate that did not verify says so with OpenSSL's
// reason; anything else names the step's error. `where` prefixes the message (host:port).
Status TlsHandshakeError(SSL* ssl, const std::string& name, const boost::system::error_code& ec,
                         std::string_view where);

}  // namespace ladle::net
