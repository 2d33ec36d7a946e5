// The relay's HTTP call (idemledger::DeliveryTransport) over cpp-httplib,
// shared by notification_relay and the relay benchmark.
//
// POSTs {"topic": ..., "message": <the outbox row's JSON, unchanged>} with
// Idempotency-Key (outbox-<id>), X-Relay-Topic and X-Relay-Dlq-Retries, and
// maps the answer onto the transport contract: 2xx OK; 408, 429, 5xx, a
// refused connection kUnavailable; no answer in time kDeadlineExceeded (both
// retried, then dead-lettered); any other 4xx kInvalidArgument (dropped).
#ifndef IDEMLEDGER_EXAMPLES_COMMON_RELAY_TRANSPORT_HPP
#define IDEMLEDGER_EXAMPLES_COMMON_RELAY_TRANSPORT_HPP

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "idemledger/relay.hpp"
#include "service.hpp"

namespace example {

class HttpRelayTransport {
 public:
  // `url`: http://host:port/path; a malformed one is a configuration error.
  HttpRelayTransport(const std::string& url, long timeout_ms) : timeout_ms_(timeout_ms) {
    const std::size_t scheme = url.find("://");
    const std::size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    if (scheme == std::string::npos || url.compare(0, scheme, "http") != 0 ||
        path == std::string::npos) {
      config_error("the relay URL must look like http://host:port/path, got \"" + url + "\"");
    }
    base_ = url.substr(0, path);
    path_ = url.substr(path);
  }

  absl::Status operator()(const idemledger::RelayMessage& m) const {
    // One client per thread (httplib clients are not shared safely), kept
    // between calls for keep-alive, replaced after a failure.
    thread_local std::unique_ptr<httplib::Client> client;
    thread_local std::string client_base;
    if (!client || client_base != base_) {
      client = std::make_unique<httplib::Client>(base_);
      client_base = base_;
      const time_t s = timeout_ms_ / 1000, us = (timeout_ms_ % 1000) * 1000;
      client->set_connection_timeout(s, us);
      client->set_read_timeout(s, us);
      client->set_write_timeout(s, us);
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
    absl::Status answer = classify(client->Post(path_, headers, body, "application/json"));
    if (!answer.ok()) client.reset();
    return answer;
  }

  static absl::Status classify(const httplib::Result& res) {
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

  const std::string& base() const { return base_; }
  const std::string& path() const { return path_; }

 private:
  std::string base_;
  std::string path_;
  long timeout_ms_;
};

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_COMMON_RELAY_TRANSPORT_HPP
