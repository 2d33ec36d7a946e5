// Shared by the example services' admin endpoints: GET /metrics in
// Prometheus text (and GET /healthz where a service has one), served by the
// same hardened server as the front door (http_server.hpp): its limits hold
// before a byte of a body is read, and idle or slow clients cost a socket,
// never the thread a scrape needs. MetricsEndpoint is the outbox worker's and
// the notification relay's whole listener; webhook_intake serves
// admin_handler on its admin listener.
//
// Thread-safety: the scrape and health functions are called on the server's
// handler threads (one at a time on a MetricsEndpoint); construct and destroy
// a MetricsEndpoint on one thread.
#ifndef IDEMLEDGER_EXAMPLES_COMMON_HTTP_HPP
#define IDEMLEDGER_EXAMPLES_COMMON_HTTP_HPP

#include <functional>
#include <optional>
#include <string>

#include "http_server.hpp"
#include "metrics.hpp"
#include "service.hpp"

namespace example {

// An admin listener reads no body, and keeps fewer connections than a front
// door: at 64 the longest idle goes for a newcomer.
inline constexpr http::Limits kAdminLimits{.max_body = 0, .max_connections = 64};

using Scrape = std::function<std::string()>;          // the /metrics text
using HealthCheck = std::function<http::Response()>;  // the /healthz answer

// GET /metrics answered with `scrape()`, and GET /healthz with `healthz()`
// if given; another method 405, another path 404.
inline http::Handler admin_handler(Scrape scrape, HealthCheck healthz = nullptr) {
  return [scrape = std::move(scrape),
          healthz = std::move(healthz)](const http::Request& req) -> http::Response {
    if (req.method != "GET") return {.status = 405, .body = R"({"error":"GET only"})"};
    if (req.target == "/metrics") {
      return {.content_type = kPrometheusContentType, .body = scrape()};
    }
    if (req.target == "/healthz" && healthz) return healthz();
    return {.status = 404, .body = R"({"error":"not found"})"};
  };
}

// GET /metrics on 127.0.0.1:`port`, answered by `scrape` on one handler
// thread (a scrape holds one database session at most); port < 0 serves
// nothing, 0 takes a free port. Logs the port as "metrics listening"; a port
// that cannot be had exits 2. Stops when destroyed.
class MetricsEndpoint {
 public:
  MetricsEndpoint(long port, Scrape scrape) {
    if (port < 0) return;
    server_.emplace("metrics", kAdminLimits, 1, admin_handler(std::move(scrape)));
    log("info", {{"msg", "metrics listening"}, {"port", server_->start("127.0.0.1", port, 1)}});
  }

 private:
  std::optional<http::Server> server_;
};

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_COMMON_HTTP_HPP
