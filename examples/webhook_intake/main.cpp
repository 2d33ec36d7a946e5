// webhook_intake — the HTTP front door: verify, parse, record, answer fast.
//
//   POST /webhooks/payments   X-Signature: <hex HMAC-SHA256>  [X-Timestamp: <unix s>]
//     401 bad or missing signature     400 bad payload (the rule broken)
//     409 same event id, other content 429 over the per-client rate limit
//     200 {"result":"accepted"|"duplicate"|"unmatched_address","trace_id":...}
//   GET /healthz               200 if the database answers, 503 otherwise
//   GET /metrics               Prometheus text: requests by status, results,
//                              queue depth, open dead letters, last reconciliation
//
// Configuration (environment): IDEMLEDGER_DSN, IDEMLEDGER_WEBHOOK_SECRET (>= 32
// bytes), IDEMLEDGER_SCHEMA (idemledger), IDEMLEDGER_LISTEN_PORT (0 = any; the
// chosen port is logged), IDEMLEDGER_TIMESTAMP_TOLERANCE_S (0 = unsigned
// timestamps not required), IDEMLEDGER_RATE_LIMIT_RPS (per client, 200),
// IDEMLEDGER_HTTP_THREADS (32), IDEMLEDGER_PREPARED_STATEMENTS (1; 0 behind
// PgBouncer < 1.21). SIGTERM stops accepting and drains.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "../common/http.hpp"
#include "../common/service.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "idemledger.hpp"
#include "idemledger/pg/pool.hpp"

namespace {

// Token bucket per client address: `rate` requests per second, bursts of the
// same size. The table is bounded: when full, idle clients are forgotten.
class RateLimiter {
 public:
  explicit RateLimiter(long rate) : rate_(rate) {}
  bool allow(const std::string& client) {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (buckets_.size() >= kMaxClients && !buckets_.contains(client)) {
      absl::erase_if(buckets_,
                     [&](const auto& kv) { return now - kv.second.updated > absl::Seconds(10); });
      if (buckets_.size() >= kMaxClients) return false;
    }
    Bucket& b = buckets_.try_emplace(client, Bucket{rate_ * 1000, now}).first->second;
    // Milli-tokens keep the arithmetic in integers.
    const std::int64_t refill = absl::ToInt64Milliseconds(now - b.updated) * rate_;
    b.milli_tokens = std::min<std::int64_t>(rate_ * 1000, b.milli_tokens + refill);
    b.updated = now;
    if (b.milli_tokens < 1000) return false;
    b.milli_tokens -= 1000;
    return true;
  }

 private:
  static constexpr std::size_t kMaxClients = 10'000;
  struct Bucket {
    std::int64_t milli_tokens;
    absl::Time updated;
  };
  const long rate_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

std::string new_trace_id() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

// A caller's X-Request-ID is kept only if it is [A-Za-z0-9._-]{1,64}: it is
// echoed, logged and stored, and later printed on operators' terminals.
bool is_plain_trace_id(std::string_view id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

void reply(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

}  // namespace

int main() {
  const std::string dsn = example::env_string("IDEMLEDGER_DSN");
  const idemledger::Schema schema = example::env_schema();
  const long port = example::env_long("IDEMLEDGER_LISTEN_PORT", 8080, 0, 65535);
  const long tolerance_s = example::env_long("IDEMLEDGER_TIMESTAMP_TOLERANCE_S", 0, 0, 86400);
  const long rate = example::env_long("IDEMLEDGER_RATE_LIMIT_RPS", 200, 1, 1'000'000);
  // Each keep-alive client connection holds a server thread while open, so
  // this bounds concurrent clients, not just concurrent requests.
  const long threads = example::env_long("IDEMLEDGER_HTTP_THREADS", 32, 1, 256);
  absl::StatusOr<idemledger::WebhookVerifier> verifier = idemledger::WebhookVerifier::create(
      example::env_string("IDEMLEDGER_WEBHOOK_SECRET"), absl::Seconds(tolerance_s));
  if (!verifier.ok()) example::config_error(std::string(verifier.status().message()));

  idemledger::pg::Pool pool(
      {.dsn = dsn,
       .max_size = static_cast<std::size_t>(threads),
       .connection = {.prepared_statements = example::env_prepared_statements()}});
  RateLimiter limiter(rate);
  idemledger::MetricsRegistry registry;
  idemledger::LedgerMetrics queue_metrics(registry);
  const auto count_request = [&registry](int status, std::string_view result) {
    registry
        .counter("idemledger_webhook_requests_total", "Webhook deliveries answered, by status.",
                 {{"status", std::to_string(status)}, {"result", std::string(result)}})
        .increment();
  };
  httplib::Server server;
  server.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<std::size_t>(threads));
  };
  server.set_payload_max_length(idemledger::kMaxWebhookBodyLength + 1);
  server.set_tcp_nodelay(true);
  // httplib closes a keep-alive connection after 5 requests by default; a
  // client sending just then sees a reset and must redeliver.
  server.set_keep_alive_max_count(
      10'000);  // small JSON answers: Nagle + delayed ACK would add ~40 ms each

  server.Post("/webhooks/payments", [&](const httplib::Request& req, httplib::Response& res) {
    std::string trace_id = req.get_header_value("X-Request-ID");
    if (!is_plain_trace_id(trace_id)) trace_id = new_trace_id();
    res.set_header("X-Request-ID", trace_id);
    nlohmann::json log = {{"msg", "webhook"}, {"trace_id", trace_id}, {"client", req.remote_addr}};
    const auto answer = [&](int status, nlohmann::json body) {
      count_request(status, body.value("result", "refused"));
      body["trace_id"] = trace_id;
      log["status"] = status;
      log.update(body);
      example::log(status >= 500 ? "error" : "info", log);
      reply(res, status, body);
    };
    if (!limiter.allow(req.remote_addr)) return answer(429, {{"error", "rate limit exceeded"}});
    // The signature is checked over the raw bytes, before any parsing.
    if (absl::Status s = verifier->verify(req.body, req.get_header_value("X-Signature"),
                                          req.get_header_value("X-Timestamp"), absl::Now());
        !s.ok()) {
      return answer(401, {{"error", std::string(s.message())}});
    }
    absl::StatusOr<idemledger::WebhookEvent> event = idemledger::parse_webhook(req.body);
    if (!event.ok()) return answer(400, {{"error", std::string(event.status().message())}});
    log["event_id"] = event->event_id;
    absl::StatusOr<idemledger::RecordResult> recorded = idemledger::with_retries(
        {.max_attempts = 4}, [&]() -> absl::StatusOr<idemledger::RecordResult> {
          absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
          if (!conn.ok()) return conn.status();
          return idemledger::record_webhook_event(**conn, schema, *event, trace_id, req.body);
        });
    if (recorded.ok())
      return answer(200, {{"result", std::string(idemledger::to_string(*recorded))}});
    switch (recorded.status().code()) {
      case absl::StatusCode::kAlreadyExists:
        return answer(409, {{"error", std::string(recorded.status().message())}});
      case absl::StatusCode::kNotFound:            // unknown user
      case absl::StatusCode::kInvalidArgument:     // unknown asset, too many decimals
      case absl::StatusCode::kFailedPrecondition:  // disabled asset
        return answer(400, {{"error", std::string(recorded.status().message())}});
      default:
        return answer(503,
                      {{"error", "temporarily unavailable; retry"}});  // the provider redelivers
    }
  });

  server.Get("/healthz", [&](const httplib::Request&, httplib::Response& res) {
    absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
    const bool up = conn.ok() && (*conn)->execute("SELECT 1").ok();
    reply(res, up ? 200 : 503, {{"database", up ? "up" : "down"}});
  });

  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    example::serve_metrics(res, registry, queue_metrics, pool, schema);
  });

  example::install_stop_handlers();
  const int bound = example::bind_loopback(server, port);
  std::thread stopper([&] {
    while (!example::stop_requested) absl::SleepFor(absl::Milliseconds(100));
    server.stop();  // stops accepting; in-flight requests finish
  });
  example::log("info", {{"msg", "listening"}, {"port", bound}, {"schema", schema.name()}});
  server.listen_after_bind();
  stopper.join();
  example::log("info", {{"msg", "stopped"}});
  return 0;
}
