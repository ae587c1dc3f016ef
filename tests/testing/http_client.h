// A one-request HTTP(S) client for tests of ktuned's HTTP endpoint, on
// Boost.Beast: connects, sends one GET (or another method), reads the
// answer. TLS without verifying the certificate (the tests' own).
#ifndef KTUNE_TESTS_TESTING_HTTP_CLIENT_H_
#define KTUNE_TESTS_TESTING_HTTP_CLIENT_H_

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <map>
#include <string>
#include <utility>

namespace ktune::testing {

struct HttpAnswer {
  int status = 0;  // 0: no answer (connection refused, TLS failed, ...)
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string error;
};

inline HttpAnswer HttpFetch(const std::string& address, const std::string& target,
                            const std::map<std::string, std::string>& headers = {},
                            bool tls = false, const std::string& method = "GET") {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace http = beast::http;
  HttpAnswer out;
  try {
    const std::size_t colon = address.rfind(':');
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    const auto at = resolver.resolve(address.substr(0, colon), address.substr(colon + 1));
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, address);
    for (const auto& [k, v] : headers) req.set(k, v);
    http::response<http::string_body> res;
    beast::flat_buffer buffer;
    if (tls) {
      asio::ssl::context ctx(asio::ssl::context::tls_client);
      ctx.set_verify_mode(asio::ssl::verify_none);
      beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
      beast::get_lowest_layer(stream).connect(at);
      stream.handshake(asio::ssl::stream_base::client);
      http::write(stream, req);
      http::read(stream, buffer, res);
    } else {
      beast::tcp_stream stream(io);
      stream.connect(at);
      http::write(stream, req);
      if (method == "HEAD") {
        http::response_parser<http::string_body> p;
        p.skip(true);
        http::read(stream, buffer, p);
        res = p.release();
      } else {
        http::read(stream, buffer, res);
      }
    }
    out.status = static_cast<int>(res.result_int());
    out.body = res.body();
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_HTTP_CLIENT_H_
