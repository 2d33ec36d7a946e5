// The text of a /metrics scrape, whatever serves it: the process's counters,
// with the database-derived gauges (queue depth, open dead letters, last
// reconciliation) refreshed first. If the database is unreachable the
// counters are still served (they live in this process); the gauges keep
// their last values and idemledger_metrics_database_up says 0.
#ifndef IDEMLEDGER_EXAMPLES_COMMON_METRICS_HPP
#define IDEMLEDGER_EXAMPLES_COMMON_METRICS_HPP

#include <string>

#include "idemledger/core/metrics.hpp"
#include "idemledger/ledger/metrics.hpp"
#include "idemledger/pg/pool.hpp"

namespace example {

inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

inline std::string scrape_text(prometheus::Registry& registry, idemledger::LedgerMetrics& metrics,
                               idemledger::pg::Pool& pool, const idemledger::Schema& schema) {
  absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
  const bool up = conn.ok() && idemledger::refresh_queue_gauges(**conn, schema, metrics).ok();
  idemledger::gauge(registry, "idemledger_metrics_database_up",
                    "1 if the last scrape read the queue gauges from the database.")
      .Set(up ? 1 : 0);
  return idemledger::render(registry);
}

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_COMMON_METRICS_HPP
