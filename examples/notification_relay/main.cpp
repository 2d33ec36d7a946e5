// notification_relay — delivers the ledger's outbox to an external HTTP API.
//
// Run as many replicas as you like: they share the claim leases, the DLQ and
// the downstream-unavailable marker through PostgreSQL (idemledger/relay.hpp
// has the whole contract). What it POSTs and how it reads the answer:
// examples/common/http_client.hpp.
//
// Policies: "credited" waits in the DLQ at most RELAY_CREDIT_DEADLINE_MS and
// is resent only while the ledger still holds the credit (a reorg
// compensation makes it obsolete); every other ledger topic (debited,
// insufficient_funds, and a hold's held, posted, voided, expired) has a budget
// of RELAY_MAX_RETRIES dead-letterings. A message without a string event_id is
// quarantined. SIGTERM: claim nothing more, finish what is in flight, exit.
//
// Configuration (environment): IDEMLEDGER_DSN, IDEMLEDGER_SCHEMA (idemledger),
// RELAY_URL (required, http://host:port/path), RELAY_MAX_IN_FLIGHT (8),
// RELAY_DRAIN_CONCURRENCY (2), RELAY_TIMEOUT_MS (2000), RELAY_ATTEMPTS (3),
// RELAY_MARKER_TTL_MS (5000), RELAY_FAILURE_THRESHOLD (3), RELAY_MAX_RETRIES (5),
// RELAY_DLQ_BACKOFF_MS (2000), RELAY_CREDIT_DEADLINE_MS (86400000),
// RELAY_POLL_MS (200), IDEMLEDGER_METRICS_PORT (-1 = none; 0 = any free, logged),
// IDEMLEDGER_PREPARED_STATEMENTS (1).

#include <memory>
#include <thread>

#include "../common/http.hpp"
#include "../common/http_client.hpp"
#include "../common/service.hpp"
#include "idemledger.hpp"
#include "idemledger/pg/pool.hpp"

namespace {

int run() {
  const std::string dsn = example::env_string("IDEMLEDGER_DSN");
  const idemledger::Schema schema = example::env_schema();
  const long max_in_flight = example::env_long("RELAY_MAX_IN_FLIGHT", 8, 1, 1024);
  const long drain = example::env_long("RELAY_DRAIN_CONCURRENCY", 2, 1, 1024);
  const long timeout_ms = example::env_long("RELAY_TIMEOUT_MS", 2'000, 10, 600'000);
  const long attempts = example::env_long("RELAY_ATTEMPTS", 3, 1, 100);
  const long max_retries = example::env_long("RELAY_MAX_RETRIES", 5, 0, 1'000'000);
  const long credit_deadline_ms =
      example::env_long("RELAY_CREDIT_DEADLINE_MS", 86'400'000, 1, 31L * 86'400'000);
  const long metrics_port = example::env_long("IDEMLEDGER_METRICS_PORT", -1, -1, 65535);
  if (drain > max_in_flight) {
    example::config_error("RELAY_DRAIN_CONCURRENCY must not exceed RELAY_MAX_IN_FLIGHT");
  }

  const example::HttpRelayTransport post(example::env_string("RELAY_URL"), timeout_ms);
  const idemledger::MessageValidator needs_event_id = [](const idemledger::RelayMessage& m) {
    const nlohmann::json payload = nlohmann::json::parse(m.payload, nullptr, false);
    return payload.is_object() && payload.contains("event_id") && payload["event_id"].is_string()
               ? absl::OkStatus()
               : absl::InvalidArgumentError("a string event_id is required");
  };

  prometheus::Registry registry;
  idemledger::JsonLineLogSink logs(stdout);
  idemledger::RelayOptions options{
      .schema = schema,
      .transport = post,
      .policies =
          {{std::string(to_string(idemledger::OutboxTopic::kCredited)),
            idemledger::RelayPolicy::deadline(absl::Milliseconds(credit_deadline_ms),
                                              idemledger::ledger_relevance(schema),
                                              needs_event_id)},
           {std::string(to_string(idemledger::OutboxTopic::kDebited)),
            idemledger::RelayPolicy::retries(static_cast<int>(max_retries), needs_event_id)},
           {std::string(to_string(idemledger::OutboxTopic::kInsufficientFunds)),
            idemledger::RelayPolicy::retries(static_cast<int>(max_retries), needs_event_id)},
           // A hold's steps: each is news even after a later one (the API
           // orders them by the hold's event_id), so each gets the budget.
           {std::string(to_string(idemledger::OutboxTopic::kHeld)),
            idemledger::RelayPolicy::retries(static_cast<int>(max_retries), needs_event_id)},
           {std::string(to_string(idemledger::OutboxTopic::kPosted)),
            idemledger::RelayPolicy::retries(static_cast<int>(max_retries), needs_event_id)},
           {std::string(to_string(idemledger::OutboxTopic::kVoided)),
            idemledger::RelayPolicy::retries(static_cast<int>(max_retries), needs_event_id)},
           {std::string(to_string(idemledger::OutboxTopic::kExpired)),
            idemledger::RelayPolicy::retries(static_cast<int>(max_retries), needs_event_id)}},
      .max_in_flight = static_cast<int>(max_in_flight),
      .drain_concurrency = static_cast<int>(drain),
      .retry = {.max_attempts = static_cast<int>(attempts),
                .base_delay = absl::Milliseconds(50),
                .max_delay = absl::Seconds(1)},
      .dlq_backoff =
          absl::Milliseconds(example::env_long("RELAY_DLQ_BACKOFF_MS", 2'000, 0, 3'600'000)),
      .marker_ttl =
          absl::Milliseconds(example::env_long("RELAY_MARKER_TTL_MS", 5'000, 10, 3'600'000)),
      .failure_threshold =
          static_cast<int>(example::env_long("RELAY_FAILURE_THRESHOLD", 3, 1, 1'000)),
      .poll_interval = absl::Milliseconds(example::env_long("RELAY_POLL_MS", 200, 1, 60'000)),
      .metrics = &registry,
      .log = &logs};
  // A claim must outlast its whole delivery: every attempt timing out, plus backoff.
  // Each attempt is bounded as a whole (common/http_client.hpp), so this is
  // the worst case by construction (a name lookup included: see there);
  // checked, because a second replica delivering a message whose lease ran
  // out is a duplicate notification.
  options.lease = absl::Milliseconds(attempts * (timeout_ms + 1'000)) + absl::Seconds(10);
  if (options.lease <= absl::Milliseconds(attempts * post.worst_case_ms())) {
    example::config_error("the claim lease must outlast every attempt of a delivery");
  }
  absl::StatusOr<std::unique_ptr<idemledger::Relay>> created =
      idemledger::Relay::create(std::move(options));
  if (!created.ok()) example::config_error(std::string(created.status().message()));
  idemledger::Relay& relay = **created;

  // One session per delivery thread, one for the loop, one for scrapes.
  idemledger::pg::Pool pool({.dsn = dsn,
                             .max_size = static_cast<std::size_t>(max_in_flight) + 2,
                             .connection = example::env_connection_options("notification_relay")});
  example::install_stop_handlers();

  const example::MetricsEndpoint metrics_endpoint(metrics_port,
                                                  [&] { return idemledger::render(registry); });

  example::log("info", {{"msg", "relay started"},
                        {"owner", relay.owner()},
                        {"url", post.url()},
                        {"max_in_flight", max_in_flight}});
  relay.run(pool.lender(), [] { return example::stop_requested.load(); });
  example::log("info",
               {{"msg", "relay stopped"}, {"in_flight", 0}, {"usage", example::resource_usage()}});
  return 0;
}

}  // namespace

int main() { return example::guarded_main("notification_relay", run); }
