// relay_load — the delivery relay's throughput against mock_downstream, side
// by side in one run on one server and one mock:
//   1. the API alone: the same number of HTTP clients posting directly, no
//      database (the ceiling the relay is measured against);
//   2. the relay delivering N outbox rows, 0% failures;
//   3. the same with the mock failing 20% of requests at random;
//   4. draining a DLQ of D dead letters, at drain_concurrency 2 (the default
//      that spares a recovering API) and at the full in-flight bound.
// Flags: --dsn (or IDEMLEDGER_TEST_DSN), --url http://127.0.0.1:PORT/notify,
// --messages 20000, --in-flight 16, --dlq 10000.
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "examples/common/http_client.hpp"
#include "idemledger/ledger/migrate.hpp"
#include "idemledger/pg/pool.hpp"
#include "idemledger/relay/relay.hpp"

namespace {

constexpr const char* kSchema = "relay_bench";

void run(idemledger::Connection& c, const std::string& sql) {
  if (absl::StatusOr<idemledger::Result> r = c.execute(sql); !r.ok()) {
    std::fprintf(stderr, "%s: %s\n", sql.c_str(), r.status().ToString().c_str());
    std::exit(1);
  }
}

long number(idemledger::Connection& c, const std::string& sql) {
  absl::StatusOr<idemledger::Result> r = c.execute(sql);
  if (!r.ok()) std::exit(1);
  long n = 0;
  if (!absl::SimpleAtoi(r->at(0, 0).value_or(""), &n)) std::exit(1);
  return n;
}

void seed_outbox(idemledger::Connection& c, long n) {
  run(c,
      "INSERT INTO relay_bench.outbox (topic, payload) SELECT 'credited', "
      "jsonb_build_object('event_id', 'bench-' || g, 'amount', '1.5') "
      "FROM generate_series(1, " +
          std::to_string(n) + ") g");
}

// Requests per second of `clients` threads posting `n` messages straight to the API.
double api_alone(const example::HttpRelayTransport& post, long n, int clients) {
  std::atomic<long> next{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(clients));
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&] {
      for (long i; (i = next++) < n;) {
        const idemledger::RelayMessage m{.outbox_id = 1'000'000'000 + i,
                                         .topic = "credited",
                                         .payload = R"({"event_id": "direct", "amount": "1.5"})"};
        while (!post(m).ok()) {
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return static_cast<double>(n) / absl::ToDoubleSeconds(absl::Now() - start);
}

// One number from the mock's GET /stats (-1 if it does not answer).
long mock_stat(httplib::Client& mock, const char* key) {
  const httplib::Result r = mock.Get("/stats");
  const nlohmann::json stats =
      r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
  return stats.is_object() ? stats.value(key, -1L) : -1L;
}

struct RelayRun {
  double seconds;
  long api_calls;
};

// Runs one Relay until the outbox and the DLQ are settled.
RelayRun relay_until_settled(idemledger::pg::Pool& pool, idemledger::Connection& c,
                             const example::HttpRelayTransport& post, int in_flight, int drain,
                             httplib::Client& mock) {
  const long calls_before = mock_stat(mock, "requests");
  const std::unique_ptr<idemledger::Relay> created =
      *idemledger::Relay::create({.schema = kSchema,
                                  .transport = post,
                                  .policies = {{"credited", idemledger::RelayPolicy::retries(5)}},
                                  .max_in_flight = in_flight,
                                  .drain_concurrency = drain,
                                  .dlq_backoff = absl::Milliseconds(100),
                                  .marker_ttl = absl::Seconds(1),
                                  .poll_interval = absl::Milliseconds(5)});
  idemledger::Relay& relay = *created;
  std::atomic<bool> stop{false};
  const absl::Time start = absl::Now();
  std::thread runner([&] { relay.run(pool.lender(), [&] { return stop.load(); }); });
  while (number(c,
                "SELECT (SELECT count(*) FROM relay_bench.outbox WHERE published_at IS NULL "
                "AND diverted_at IS NULL) + (SELECT count(*) FROM "
                "relay_bench.relay_dead_letters WHERE resolution IS NULL)") > 0) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  stop = true;
  runner.join();
  const long calls_after = mock_stat(mock, "requests");
  return {seconds, calls_after - calls_before};
}

int run_benchmark(int argc, char** argv) {
  const char* env_dsn = std::getenv("IDEMLEDGER_TEST_DSN");
  std::string dsn = env_dsn != nullptr ? env_dsn : "", url;
  long messages = 20'000, dlq = 10'000;
  int in_flight = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--dsn") dsn = v;
    if (a == "--url") url = v;
    if (a == "--messages") messages = std::atol(v.c_str());
    if (a == "--dlq") dlq = std::atol(v.c_str());
    if (a == "--in-flight") in_flight = std::atoi(v.c_str());
  }
  const example::HttpRelayTransport post(url, 2'000);
  const example::Url parsed(url);
  httplib::Client mock(parsed.host, std::atoi(parsed.port.c_str()));
  idemledger::pg::Pool pool({.dsn = dsn, .max_size = static_cast<std::size_t>(in_flight) + 2});
  absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
  if (!conn.ok()) {
    std::fprintf(stderr, "%s\n", conn.status().ToString().c_str());
    return 1;
  }
  idemledger::Connection& c = **conn;
  run(c, "DROP SCHEMA IF EXISTS relay_bench CASCADE");
  if (!idemledger::migrate(c, kSchema).ok()) return 1;

  std::printf("relay_load: %ld messages, %d deliveries in flight, DLQ of %ld\n", messages,
              in_flight, dlq);
  const double alone = api_alone(post, messages, in_flight);
  std::printf("  the API alone (%d HTTP clients, no database)  %8.0f requests/s\n", in_flight,
              alone);

  seed_outbox(c, messages);
  const RelayRun clean = relay_until_settled(pool, c, post, in_flight, 2, mock);
  const double clean_rate = static_cast<double>(messages) / clean.seconds;
  std::printf(
      "  relay, 0%% failures                            %8.0f deliveries/s  (%.2fx the API "
      "alone)\n",
      clean_rate, clean_rate / alone);

  mock.Post("/control?failure_percent=20");
  const long dead_before = number(c, "SELECT count(*) FROM relay_bench.relay_dead_letters");
  seed_outbox(c, messages);
  const RelayRun flaky = relay_until_settled(pool, c, post, in_flight, 2, mock);
  mock.Post("/control?failure_percent=0");
  const double flaky_rate = static_cast<double>(messages) / flaky.seconds;
  std::printf(
      "  relay, 20%% failures                           %8.0f deliveries/s  (%.2fx of 0%%; "
      "%ld API calls for %ld messages, %ld dead-lettered then resent)\n",
      flaky_rate, flaky_rate / clean_rate, flaky.api_calls, messages,
      number(c, "SELECT count(*) FROM relay_bench.relay_dead_letters") - dead_before);

  for (const int drain : {2, in_flight}) {
    seed_outbox(c, dlq);
    run(c,
        "WITH moved AS (UPDATE relay_bench.outbox SET diverted_at = now() "
        "WHERE published_at IS NULL AND diverted_at IS NULL RETURNING id, topic, payload) "
        "INSERT INTO relay_bench.relay_dead_letters (outbox_id, topic, message, dlq_retries, "
        "reason) SELECT id, topic, payload, 1, 'bench' FROM moved");
    const RelayRun drained = relay_until_settled(pool, c, post, in_flight, drain, mock);
    std::printf("  drain a %ld-message DLQ, drain_concurrency %2d  %8.2f s  (%.0f resends/s)\n",
                dlq, drain, drained.seconds, static_cast<double>(dlq) / drained.seconds);
  }
  const long undelivered =
      number(c, "SELECT count(*) FROM relay_bench.outbox WHERE published_at IS NULL");
  const long duplicates = mock_stat(mock, "duplicates");
  const long unexplained = mock_stat(mock, "duplicates_unexplained");
  std::printf(
      "  check: %ld undelivered, %ld delivered twice (%ld not explained by a 2xx given after the "
      "relay's deadline)\n",
      undelivered, duplicates, unexplained);
  return undelivered == 0 && unexplained == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {  // cpp-httplib's client parses its base URL with std::regex, which may throw
    return run_benchmark(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "relay_load: %s\n", e.what());
    return 1;
  }
}
