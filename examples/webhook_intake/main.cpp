// webhook_intake — the HTTP front door: verify, parse, record, answer fast.
//
//   POST /webhooks/payments   X-Signature: <hex HMAC-SHA256>  [X-Timestamp: <unix s>]
//     401 bad or missing signature     400 bad payload (the rule broken)
//     409 same event id, other content 429 over the provider's rate limit
//     411 no Content-Length, or chunked  413 body over 64 KiB (nothing read)
//     415 any Content-Encoding          431 headers over 8 KiB or 64 fields
//     408 request not complete within IDEMLEDGER_REQUEST_TIMEOUT_MS
//     200 {"result":"accepted"|"duplicate"|"unmatched_address","trace_id":...}
//   On the admin listener (IDEMLEDGER_ADMIN_LISTEN), apart from the traffic:
//   GET /healthz               200 if the database answers, 503 otherwise
//   GET /metrics               Prometheus text: requests by status, results,
//                              queue depth, open dead letters, last reconciliation
//
// It holds by itself, with no proxy in front (common/http_server.hpp): limits
// before any body byte is read, one deadline per request, slow clients cost a
// socket and not a thread, a bounded number of connections (the longest idle
// closed first). The signature is checked before the rate limit, so unsigned
// traffic never spends the provider's budget. Error bodies name the rule the
// sender broke and nothing else: no SQLSTATE, no recorded amount, no
// exception text.
//
// Configuration (environment): IDEMLEDGER_DSN, IDEMLEDGER_WEBHOOK_SECRET (>= 32
// bytes), IDEMLEDGER_SCHEMA (idemledger), IDEMLEDGER_LISTEN_PORT (0 = any; the
// chosen port is logged), IDEMLEDGER_ADMIN_LISTEN ([host:]port, 127.0.0.1:0),
// IDEMLEDGER_TIMESTAMP_TOLERANCE_S (0 = unsigned timestamps not required),
// IDEMLEDGER_RATE_LIMIT_RPS (per provider, 200), IDEMLEDGER_RECORDER_THREADS
// (threads that record = database sessions, 4), IDEMLEDGER_IO_THREADS (1),
// IDEMLEDGER_MAX_CONNECTIONS (1024), IDEMLEDGER_REQUEST_TIMEOUT_MS (10000),
// IDEMLEDGER_PREPARED_STATEMENTS (1; 0 behind PgBouncer < 1.21),
// IDEMLEDGER_GROUP_COMMIT_MAX (deliveries per transaction, 32; 0 = each its
// own), IDEMLEDGER_GROUP_COMMIT_MS (the longest a batch gathers, 2),
// IDEMLEDGER_GROUP_COMMIT_IN_FLIGHT (batches recorded at once before the next
// one gathers, 1; 0 = always gather for _MS). Every value,
// the schema and the secret are checked at startup (exit 2 naming the rule).
// SIGTERM stops accepting and drains.
#include <algorithm>
#include <random>

#include "../common/http.hpp"
#include "../common/http_server.hpp"
#include "../common/metrics.hpp"
#include "../common/service.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "idemledger.hpp"
#include "idemledger/core/mutex.hpp"
#include "idemledger/pg/pool.hpp"
#include "recorder.hpp"

namespace {

// Token bucket per key (the authenticated provider): `rate` requests per
// second, bursts of the same size. The table is bounded: when full, idle keys
// are forgotten.
class RateLimiter {
 public:
  explicit RateLimiter(long rate) : rate_(rate) {}
  bool allow(const std::string& client) {
    idemledger::MutexLock lock(&mu_);
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
  idemledger::Mutex mu_;
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

// The text of a refusal the sender may read: the rule it broke, never a
// SQLSTATE or a server detail.
std::string public_text(const absl::Status& s) {
  std::string text(s.message());
  if (const std::size_t at = text.find(" [SQLSTATE"); at != std::string::npos) text.resize(at);
  if (text.size() > 200) text.resize(200);
  return text;
}

example::http::Response json_response(int status, const nlohmann::json& body) {
  return {.status = status,
          .body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

// IDEMLEDGER_ADMIN_LISTEN: "port" or "host:port" (host an IP address).
std::pair<std::string, long> admin_listen() {
  const std::string v = example::env_string("IDEMLEDGER_ADMIN_LISTEN", "127.0.0.1:0");
  const std::size_t colon = v.rfind(':');
  const std::string host = colon == std::string::npos ? "127.0.0.1" : v.substr(0, colon);
  const std::string port = colon == std::string::npos ? v : v.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535 || host.empty()) {
    example::config_error("IDEMLEDGER_ADMIN_LISTEN must be [host:]port, got \"" + v + "\"");
  }
  return {host, p};
}

int run() {
  const std::string dsn = example::env_string("IDEMLEDGER_DSN");
  const idemledger::Schema schema = example::env_schema();
  const long port = example::env_long("IDEMLEDGER_LISTEN_PORT", 8080, 0, 65535);
  const auto [admin_host, admin_port] = admin_listen();
  const long tolerance_s = example::env_long("IDEMLEDGER_TIMESTAMP_TOLERANCE_S", 0, 0, 86400);
  const long rate = example::env_long("IDEMLEDGER_RATE_LIMIT_RPS", 200, 1, 1'000'000);
  // This intake once had handler threads, one waiting per delivery; a
  // setting for them would now mean nothing, so it stops the start instead.
  if (std::getenv("IDEMLEDGER_HTTP_THREADS") != nullptr) {
    example::config_error(
        "IDEMLEDGER_HTTP_THREADS is gone: no thread waits per delivery any more; "
        "IDEMLEDGER_RECORDER_THREADS sets how many record (1..64, 4)");
  }
  const long threads = example::env_long("IDEMLEDGER_RECORDER_THREADS", 4, 1, 64);
  const long io_threads = example::env_long("IDEMLEDGER_IO_THREADS", 1, 1, 64);
  const example::http::Limits limits{.max_body = idemledger::kMaxWebhookBodyLength,
                                     .request_timeout = std::chrono::milliseconds(example::env_long(
                                         "IDEMLEDGER_REQUEST_TIMEOUT_MS", 10'000, 100, 600'000)),
                                     .max_connections = static_cast<std::size_t>(example::env_long(
                                         "IDEMLEDGER_MAX_CONNECTIONS", 1024, 1, 1'000'000))};
  absl::StatusOr<idemledger::WebhookVerifier> verifier = idemledger::WebhookVerifier::create(
      example::env_string("IDEMLEDGER_WEBHOOK_SECRET"), absl::Seconds(tolerance_s));
  if (!verifier.ok()) {
    example::config_error("IDEMLEDGER_WEBHOOK_SECRET: " + std::string(verifier.status().message()));
  }

  idemledger::pg::Pool pool({.dsn = dsn,
                             .max_size = static_cast<std::size_t>(threads + 2),
                             .connection = example::env_connection_options("webhook_intake")});
  // Group commit: concurrent deliveries share one transaction (0: each its own).
  const long group_max = example::env_long("IDEMLEDGER_GROUP_COMMIT_MAX", 32, 0,
                                           static_cast<long>(idemledger::kMaxRecordBatch));
  const long group_ms = example::env_long("IDEMLEDGER_GROUP_COMMIT_MS", 2, 0, 100);
  const long group_in_flight = example::env_long("IDEMLEDGER_GROUP_COMMIT_IN_FLIGHT", 1, 0, 8);
  RateLimiter limiter(rate);
  prometheus::Registry registry;
  idemledger::LedgerMetrics queue_metrics(registry);
  const auto count_request = [&registry](int status, std::string_view result) {
    idemledger::counter(registry, "idemledger_webhook_requests_total",
                        "Webhook deliveries answered, by status.",
                        {{"status", std::to_string(status)}, {"result", std::string(result)}})
        .Increment();
  };

  // A delivery's answer, whichever thread gives it: counted, logged with
  // what the handler learnt, and sent with its trace id.
  struct Reply {
    std::string trace_id;
    nlohmann::json log;
    example::http::Responder respond;
  };
  const auto answer = [&count_request](Reply& reply, int status, nlohmann::json body) {
    count_request(status, body.value("result", "refused"));
    body["trace_id"] = reply.trace_id;
    reply.log["status"] = status;
    reply.log.update(body);
    example::log(status >= 500 ? "error" : "info", reply.log);
    example::http::Response r = json_response(status, body);
    r.headers.emplace_back("X-Request-ID", reply.trace_id);
    reply.respond(std::move(r));
  };
  const auto recorded_answer = [&answer](Reply& reply,
                                         const absl::StatusOr<idemledger::RecordResult>& recorded) {
    if (recorded.ok())
      return answer(reply, 200, {{"result", std::string(idemledger::to_string(*recorded))}});
    switch (recorded.status().code()) {
      case absl::StatusCode::kAlreadyExists:  // what was recorded is not the sender's to read
        reply.log["detail"] = public_text(recorded.status());
        return answer(
            reply, 409,
            {{"error", "conflicting replay: this event id was recorded with other content"}});
      case absl::StatusCode::kNotFound:            // unknown user
      case absl::StatusCode::kInvalidArgument:     // unknown asset, too many decimals
      case absl::StatusCode::kFailedPrecondition:  // disabled asset
        return answer(reply, 400, {{"error", public_text(recorded.status())}});
      default:
        reply.log["detail"] = recorded.status().ToString();  // for the operator, not the sender
        return answer(reply, 503, {{"error", "temporarily unavailable; retry"}});  // it redelivers
    }
  };

  // Declared after what its callbacks use, before what submits to it.
  example::Recorder recorder(
      pool,
      {.schema = schema,
       .threads = static_cast<int>(threads),
       .max_batch = static_cast<std::size_t>(std::max<long>(group_max, 1)),
       .max_wait = absl::Milliseconds(group_max > 0 ? group_ms : 0),
       .max_in_flight = group_max > 0 ? static_cast<int>(group_in_flight) : 1,
       .instruments = {
           .batch_deliveries = &idemledger::histogram(
               registry, "idemledger_intake_batch_deliveries",
               "Deliveries recorded per group commit (one transaction).", {1, 2, 4, 8, 16, 32, 64}),
           .wait_seconds = &idemledger::histogram(
               registry, "idemledger_intake_batch_wait_seconds",
               "Per delivery: from its check to the start of its group commit's transaction.",
               idemledger::default_latency_buckets()),
           .record_seconds = &idemledger::histogram(
               registry, "idemledger_intake_batch_record_seconds",
               "Per group commit: from the start of its transaction to every delivery's answer.",
               idemledger::default_latency_buckets()),
       }});

  // On the I/O thread that read the request: everything up to the record is
  // CPU only, and the record is the recorder's.
  const auto webhook = [&](example::http::Request req, example::http::Responder respond) {
    std::string trace_id = req.header("X-Request-ID");
    if (!is_plain_trace_id(trace_id)) trace_id = new_trace_id();
    Reply reply{.trace_id = trace_id,
                .log = {{"msg", "webhook"}, {"trace_id", trace_id}, {"client", req.peer}},
                .respond = std::move(respond)};
    if (req.method != "POST") return answer(reply, 405, {{"error", "POST only"}});
    // The signature is checked over the raw bytes, before any parsing, and
    // before the rate limit: a flood without the secret spends nobody's budget.
    if (absl::Status s = verifier->verify(req.body, req.header("X-Signature"),
                                          req.header("X-Timestamp"), absl::Now());
        !s.ok()) {
      return answer(reply, 401, {{"error", public_text(s)}});
    }
    if (!limiter.allow("provider")) return answer(reply, 429, {{"error", "rate limit exceeded"}});
    absl::StatusOr<idemledger::WebhookEvent> event = idemledger::parse_webhook(req.body);
    if (!event.ok()) return answer(reply, 400, {{"error", public_text(event.status())}});
    reply.log["event_id"] = event->event_id;
    // 200 only after the transaction holding this delivery committed.
    recorder.submit(*std::move(event), std::move(trace_id), std::move(req.body),
                    [&recorded_answer, reply = std::move(reply)](
                        const absl::StatusOr<idemledger::RecordResult>& recorded) mutable {
                      recorded_answer(reply, recorded);
                    });
  };
  const example::http::Handler admin = example::admin_handler(
      [&] { return example::scrape_text(registry, queue_metrics, pool, schema); },
      [&] {
        absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
        const bool up = conn.ok() && (*conn)->execute("SELECT 1").ok();
        return json_response(up ? 200 : 503, {{"database", up ? "up" : "down"}});
      });

  example::http::Server server("webhook", limits,
                               [&](example::http::Request req, example::http::Responder respond) {
                                 if (req.target != "/webhooks/payments")
                                   return respond(json_response(404, {{"error", "not found"}}));
                                 webhook(std::move(req), std::move(respond));
                               });
  example::http::Server admin_server("admin", example::kAdminLimits, 2, admin);
  example::install_stop_handlers();
  const int admin_bound = admin_server.start(admin_host, admin_port, 1);
  const int bound = server.start("127.0.0.1", port, static_cast<int>(io_threads));
  example::log("info", {{"msg", "admin listening"}, {"port", admin_bound}});
  example::log("info", {{"msg", "listening"},
                        {"port", bound},
                        {"admin_port", admin_bound},
                        {"schema", schema.name()}});
  while (!example::stop_requested) absl::SleepFor(absl::Milliseconds(100));
  server.stop();    // stops accepting; requests in hand finish
  recorder.stop();  // (all of them answered by now, unless the grace ran out)
  admin_server.stop();
  example::log("info", {{"msg", "stopped"}, {"usage", example::resource_usage()}});
  return 0;
}

}  // namespace

int main() { return example::guarded_main("webhook_intake", run); }
