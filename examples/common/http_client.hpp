// The library's outbound HTTP calls, which the host provides, over
// cpp-httplib: the relay's delivery (idemledger::DeliveryTransport, used by
// notification_relay and the relay benchmark) and the finality oracle's
// JSON-RPC POST (idemledger::JsonRpcTransport, used by outbox_worker).
//
// Both map an answer the same way: 2xx OK; 408, 429, 5xx, a refused
// connection kUnavailable; no answer in time kDeadlineExceeded (retryable);
// any other 4xx kInvalidArgument (a refusal).
#ifndef IDEMLEDGER_EXAMPLES_COMMON_HTTP_CLIENT_HPP
#define IDEMLEDGER_EXAMPLES_COMMON_HTTP_CLIENT_HPP

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "idemledger/eth/finality.hpp"
#include "idemledger/relay/relay.hpp"
#include "service.hpp"

namespace example {

// "http://host:port/path" as httplib wants it: the client's base and the
// path; a malformed URL is a configuration error.
struct HttpEndpoint {
  std::string base;
  std::string path;

  explicit HttpEndpoint(const std::string& url) {
    const std::size_t scheme = url.find("://");
    const std::size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    if (scheme == std::string::npos || url.compare(0, scheme, "http") != 0 ||
        slash == std::string::npos) {
      config_error("a URL must look like http://host:port/path, got \"" + url + "\"");
    }
    base = url.substr(0, slash);
    path = url.substr(slash);
  }
};

// The answer as the transports' contract wants it (see the top of the file).
inline absl::Status classify_http(const httplib::Result& res) {
  if (!res) {
    const std::string why = httplib::to_string(res.error());
    return res.error() == httplib::Error::Read || res.error() == httplib::Error::Write
               ? absl::DeadlineExceededError("no answer in time: " + why)
               : absl::UnavailableError("connection failed: " + why);
  }
  const int status = res->status;
  if (status >= 200 && status < 300) return absl::OkStatus();
  const std::string what = "HTTP " + std::to_string(status);
  if (status == 408 || status == 429 || status >= 500) return absl::UnavailableError(what);
  return absl::InvalidArgumentError(what);
}

inline void set_timeouts(httplib::Client& client, long timeout_ms) {
  const time_t s = timeout_ms / 1000, us = (timeout_ms % 1000) * 1000;
  client.set_connection_timeout(s, us);
  client.set_read_timeout(s, us);
  client.set_write_timeout(s, us);
}

// POSTs {"topic": ..., "message": <the outbox row's JSON, unchanged>} with
// Idempotency-Key (outbox-<id>), X-Relay-Topic and X-Relay-Dlq-Retries.
class HttpRelayTransport {
 public:
  HttpRelayTransport(const std::string& url, long timeout_ms)
      : endpoint_(url), timeout_ms_(timeout_ms) {}

  absl::Status operator()(const idemledger::RelayMessage& m) const {
    // One client per thread (httplib clients are not shared safely), kept
    // between calls for keep-alive, replaced after a failure.
    thread_local std::unique_ptr<httplib::Client> client;
    thread_local std::string client_base;
    if (!client || client_base != endpoint_.base) {
      client = std::make_unique<httplib::Client>(endpoint_.base);
      client_base = endpoint_.base;
      set_timeouts(*client, timeout_ms_);
      // One connection per thread for many calls: cheaper, and a burst of
      // new connections can overflow a small listen backlog (SYN retried
      // after a second).
      client->set_keep_alive(true);
      client->set_tcp_nodelay(true);  // headers and body leave at once, no Nagle wait
    }
    const httplib::Headers headers = {{"Idempotency-Key", "outbox-" + std::to_string(m.outbox_id)},
                                      {"X-Relay-Topic", m.topic},
                                      {"X-Relay-Dlq-Retries", std::to_string(m.dlq_retries)}};
    const std::string body =
        R"({"topic":)" + nlohmann::json(m.topic).dump() + R"(,"message":)" + m.payload + "}";
    absl::Status answer =
        classify_http(client->Post(endpoint_.path, headers, body, "application/json"));
    if (!answer.ok()) client.reset();
    return answer;
  }

  const HttpEndpoint& endpoint() const { return endpoint_; }

 private:
  HttpEndpoint endpoint_;
  long timeout_ms_;
};

// A JSON-RPC POST for EthFinalityOracle: the request body in, the response
// body out; a refusal is reported as the node being unusable (kUnavailable).
inline idemledger::JsonRpcTransport json_rpc_over_http(const std::string& url, long timeout_ms) {
  return [endpoint = HttpEndpoint(url),
          timeout_ms](std::string_view body) -> absl::StatusOr<std::string> {
    httplib::Client client(endpoint.base);
    set_timeouts(client, timeout_ms);
    const httplib::Result res = client.Post(endpoint.path, std::string(body), "application/json");
    if (absl::Status s = classify_http(res); !s.ok()) {
      return absl::IsInvalidArgument(s) ? absl::UnavailableError(s.message()) : s;
    }
    return res->body;
  };
}

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_COMMON_HTTP_CLIENT_HPP
