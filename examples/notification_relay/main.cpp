// notification_relay — delivers the ledger's outbox to an external HTTP API.
//
// Run as many replicas as you like: they share the claim leases, the DLQ and
// the downstream-unavailable marker through PostgreSQL (idemledger/relay.hpp
// has the whole contract). Each POSTs {"topic": ..., "message": <the outbox
// row's JSON, unchanged>} with the headers Idempotency-Key (outbox-<id>),
// X-Relay-Topic and X-Relay-Dlq-Retries. 2xx delivers; 408, 429, 5xx, a
// refused connection or a timeout is retried and then dead-lettered; any
// other 4xx drops the message with the answer as reason.
//
// Policies: "credited" waits in the DLQ at most RELAY_CREDIT_DEADLINE_MS and
// is resent only while the ledger still holds the credit (a reorg
// compensation makes it obsolete); every other ledger topic has a budget of
// RELAY_MAX_RETRIES dead-letterings. A message without a string event_id is
// quarantined. SIGTERM: claim nothing more, finish what is in flight, exit.
//
// Configuration (environment): IDEMLEDGER_DSN, IDEMLEDGER_SCHEMA (idemledger),
// RELAY_URL (required, http://host:port/path), RELAY_MAX_IN_FLIGHT (8),
// RELAY_DRAIN_CONCURRENCY (2), RELAY_TIMEOUT_MS (2000), RELAY_ATTEMPTS (3),
// RELAY_MARKER_TTL_MS (5000), RELAY_FAILURE_THRESHOLD (3), RELAY_MAX_RETRIES (5),
// RELAY_DLQ_BACKOFF_MS (2000), RELAY_CREDIT_DEADLINE_MS (86400000),
// RELAY_POLL_MS (200), IDEMLEDGER_METRICS_PORT (-1 = none; 0 = any free, logged),
// IDEMLEDGER_PREPARED_STATEMENTS (1).
#include <httplib.h>

#include <memory>
#include <thread>

#include "../common/http.hpp"
#include "../common/service.hpp"
#include "idemledger.hpp"
#include "idemledger/pg/pool.hpp"

namespace {

// "http://host:port/path" split for httplib: the client's base and the path.
struct Endpoint {
  std::string base;
  std::string path;
};

Endpoint parse_url(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (scheme == std::string::npos || url.compare(0, scheme, "http") != 0 ||
      path == std::string::npos) {
    example::config_error("RELAY_URL must look like http://host:port/path, got \"" + url + "\"");
  }
  return {url.substr(0, path), url.substr(path)};
}

// The HTTP answer as the relay's transport contract wants it.
absl::Status classify(const httplib::Result& res) {
  if (!res) {
    return res.error() == httplib::Error::Read || res.error() == httplib::Error::Write
               ? absl::DeadlineExceededError("no answer in time: " +
                                             httplib::to_string(res.error()))
               : absl::UnavailableError("connection failed: " + httplib::to_string(res.error()));
  }
  const int status = res->status;
  if (status >= 200 && status < 300) return absl::OkStatus();
  const std::string what = "HTTP " + std::to_string(status);
  if (status == 408 || status == 429 || status >= 500) return absl::UnavailableError(what);
  return absl::InvalidArgumentError(what);
}

}  // namespace

int main() {
  const std::string dsn = example::env_string("IDEMLEDGER_DSN");
  const std::string schema = example::env_string("IDEMLEDGER_SCHEMA", "idemledger");
  const Endpoint endpoint = parse_url(example::env_string("RELAY_URL"));
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

  // One client per delivery thread: httplib clients are not shared safely.
  const auto post = [&](const idemledger::RelayMessage& m) {
    thread_local std::unique_ptr<httplib::Client> client;
    if (!client) {
      client = std::make_unique<httplib::Client>(endpoint.base);
      client->set_connection_timeout(0, static_cast<time_t>(timeout_ms) * 1000);
      client->set_read_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
      client->set_write_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
    }
    const httplib::Headers headers = {{"Idempotency-Key", "outbox-" + std::to_string(m.outbox_id)},
                                      {"X-Relay-Topic", m.topic},
                                      {"X-Relay-Dlq-Retries", std::to_string(m.dlq_retries)}};
    // The message goes out exactly as the outbox holds it.
    const std::string body =
        R"({"topic":)" + nlohmann::json(m.topic).dump() + R"(,"message":)" + m.payload + "}";
    const absl::Status answer =
        classify(client->Post(endpoint.path, headers, body, "application/json"));
    if (!answer.ok()) client.reset();  // a fresh connection for the next try
    return answer;
  };
  const idemledger::MessageValidator needs_event_id = [](const idemledger::RelayMessage& m) {
    const nlohmann::json payload = nlohmann::json::parse(m.payload, nullptr, false);
    return payload.is_object() && payload.contains("event_id") && payload["event_id"].is_string()
               ? absl::OkStatus()
               : absl::InvalidArgumentError("a string event_id is required");
  };

  idemledger::MetricsRegistry registry;
  idemledger::JsonLineLogSink logs(stdout);
  idemledger::RelayOptions options{
      .schema = schema,
      .transport = post,
      .policies = {{"credited", idemledger::RelayPolicy::deadline(
                                    absl::Milliseconds(credit_deadline_ms),
                                    idemledger::ledger_relevance(schema), needs_event_id)},
                   {"debited", idemledger::RelayPolicy::retries(static_cast<int>(max_retries),
                                                                needs_event_id)},
                   {"insufficient_funds", idemledger::RelayPolicy::retries(
                                              static_cast<int>(max_retries), needs_event_id)}},
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
  options.lease = absl::Milliseconds(attempts * (timeout_ms + 1'000)) + absl::Seconds(10);
  idemledger::Relay relay(std::move(options));

  // One session per delivery thread, one for the loop, one for scrapes.
  idemledger::pg::Pool pool(
      {.dsn = dsn,
       .max_size = static_cast<std::size_t>(max_in_flight) + 2,
       .connection = {.prepared_statements = example::env_prepared_statements()}});
  example::install_stop_handlers();

  httplib::Server metrics_server;
  std::thread metrics_thread;
  if (metrics_port >= 0) {
    metrics_server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
      res.set_content(registry.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    const int bound = example::bind_loopback(metrics_server, metrics_port);
    example::log("info", {{"msg", "metrics listening"}, {"port", bound}});
    metrics_thread = std::thread([&] { metrics_server.listen_after_bind(); });
  }

  example::log("info", {{"msg", "relay started"},
                        {"owner", relay.owner()},
                        {"url", endpoint.base + endpoint.path},
                        {"max_in_flight", max_in_flight}});
  const absl::Status ran = relay.run(
      [&pool](const std::function<void(idemledger::Connection&)>& work) -> absl::Status {
        absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
        if (!conn.ok()) return conn.status();
        work(**conn);
        return absl::OkStatus();
      },
      [] { return example::stop_requested != 0; });
  if (metrics_port >= 0) {
    metrics_server.stop();
    metrics_thread.join();
  }
  if (!ran.ok()) example::config_error(std::string(ran.message()));
  example::log("info", {{"msg", "relay stopped"}, {"in_flight", 0}});
  return 0;
}
