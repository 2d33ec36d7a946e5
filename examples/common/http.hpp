// Shared by the example services' HTTP endpoints: binding on loopback, and
// GET /metrics in Prometheus text (MetricsEndpoint), with the database-derived
// gauges (queue depth, open dead letters, last reconciliation) refreshed on
// each scrape (serve_metrics).
#ifndef IDEMLEDGER_EXAMPLES_COMMON_HTTP_HPP
#define IDEMLEDGER_EXAMPLES_COMMON_HTTP_HPP

#include <httplib.h>

#include <functional>
#include <string>
#include <thread>

#include "idemledger/ledger/metrics.hpp"
#include "idemledger/pg/pool.hpp"
#include "metrics.hpp"
#include "service.hpp"

namespace example {

// Binds `server` to 127.0.0.1:`port` (0: any free port) and returns the port;
// a port that cannot be had is a configuration error.
inline int bind_loopback(httplib::Server& server, long port) {
  const int bound =
      port == 0 ? server.bind_to_any_port("127.0.0.1")
                : (server.bind_to_port("127.0.0.1", static_cast<int>(port)) ? static_cast<int>(port)
                                                                            : -1);
  if (bound < 0) config_error("cannot listen on 127.0.0.1:" + std::to_string(port));
  return bound;
}

// Answers a scrape (common/metrics.hpp).
inline void serve_metrics(httplib::Response& res, prometheus::Registry& registry,
                          idemledger::LedgerMetrics& metrics, idemledger::pg::Pool& pool,
                          const idemledger::Schema& schema) {
  res.set_content(scrape_text(registry, metrics, pool, schema), kPrometheusContentType);
}

// GET /metrics on 127.0.0.1:`port` in a thread of its own, answered by
// `handler`; port < 0 serves nothing, 0 takes a free port. Logs the port as
// "metrics listening"; stops when destroyed.
class MetricsEndpoint {
 public:
  MetricsEndpoint(long port, std::function<void(httplib::Response&)> handler) {
    if (port < 0) return;
    server_.Get("/metrics", [handler = std::move(handler)](
                                const httplib::Request&, httplib::Response& res) { handler(res); });
    const int bound = bind_loopback(server_, port);
    log("info", {{"msg", "metrics listening"}, {"port", bound}});
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~MetricsEndpoint() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

 private:
  httplib::Server server_;
  std::thread thread_;
};

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_COMMON_HTTP_HPP
