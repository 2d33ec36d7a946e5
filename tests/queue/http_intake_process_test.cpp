// The webhook_intake example as a real process on loopback, driven over HTTP:
// every status code, signatures over raw bytes, concurrent redeliveries, and
// a graceful SIGTERM. Every answer is also held against the API contract,
// docs/openapi.yaml (support/openapi_contract.hpp).
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/queue/dispatcher.hpp"
#include "idemledger/queue/intake.hpp"
#include "tests/support/openapi_contract.hpp"
#include "tests/support/prometheus_text.hpp"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

const std::string kSecret(40, 's');

using ::testing::IsEmpty;

// An answer as httplib received it, held against the contract's operation.
httplib::Result in_contract(std::string_view operation, httplib::Result r) {
  if (r) {
    HttpAnswer answer{.status = r->status, .body = r->body};
    for (const auto& [name, value] : r->headers)
      answer.headers[absl::AsciiStrToLower(name)] = value;
    EXPECT_THAT(OpenApiContract::intake().violations(operation, answer), IsEmpty());
  }
  return r;
}

class IntakeProcess : public ServiceProcess {
 public:
  IntakeProcess(const Schema& schema, long rate_limit)
      : ServiceProcess(IDEMLEDGER_WEBHOOK_INTAKE_BINARY, schema,
                       {{"IDEMLEDGER_WEBHOOK_SECRET", kSecret},
                        {"IDEMLEDGER_LISTEN_PORT", "0"},
                        {"IDEMLEDGER_RATE_LIMIT_RPS", std::to_string(rate_limit)}},
                       "listening") {}
};

class HttpIntake : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    open_account(1, "0");
    exec("INSERT INTO {schema}.deposit_addresses VALUES ('0xaaa', 1)");
  }
  static std::string deposit(const std::string& id, const std::string& amount = "\"5\"") {
    return R"({"event_id":")" + id + R"(","event_type":"deposit","amount":)" + amount +
           R"(,"to_address":"0xaaa"})";
  }
  static httplib::Result post(httplib::Client& c, const std::string& body,
                              std::string signature = "use-valid", httplib::Headers extra = {}) {
    if (signature == "use-valid") signature = WebhookVerifier::create(kSecret)->sign(body);
    extra.emplace("X-Signature", signature);
    return in_contract("recordPaymentWebhook",
                       c.Post("/webhooks/payments", extra, body, "application/json"));
  }
};

TEST_F(HttpIntake, AnswersEveryStatusCodeByTheRule) {
  IntakeProcess intake(schema_, 100'000);
  ASSERT_GT(intake.port(), 0);
  httplib::Client c("127.0.0.1", intake.port());

  httplib::Result r = post(c, deposit("e1"), "use-valid", {{"X-Request-ID", "trace-abc"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(nlohmann::json::parse(r->body)["result"], "accepted");
  EXPECT_EQ(r->get_header_value("X-Request-ID"), "trace-abc");
  EXPECT_EQ(scalar("SELECT trace_id FROM {schema}.payment_events WHERE event_id = 'e1'"),
            "trace-abc");
  r = post(c, deposit("e1"));
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(nlohmann::json::parse(r->body)["result"], "duplicate");
  EXPECT_FALSE(r->get_header_value("X-Request-ID").empty())
      << "a trace id is generated when none is sent";
  r = post(c, deposit("e1"), "use-valid", {{"X-Request-ID", "trace id; <b>x</b>"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->get_header_value("X-Request-ID"), ::testing::MatchesRegex("[0-9a-f]{32}"))
      << "a trace id with other characters is replaced, never echoed or stored";

  EXPECT_EQ(post(c, deposit("e2"), "")->status, 401);
  std::string tampered = WebhookVerifier::create(kSecret)->sign(deposit("e2"));
  tampered[0] = tampered[0] == 'a' ? 'b' : 'a';
  EXPECT_EQ(post(c, deposit("e2"), tampered)->status, 401);
  // Signed bytes re-serialised (same JSON meaning, other bytes) must fail.
  const std::string signed_body = deposit("e2");
  const std::string reserialised = nlohmann::json::parse(signed_body).dump(1);
  EXPECT_EQ(post(c, reserialised, WebhookVerifier::create(kSecret)->sign(signed_body))->status,
            401);

  r = post(c, deposit("e3", "5.5"));
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("must be a JSON string, not a number"), std::string::npos) << r->body;
  EXPECT_EQ(post(c, R"({"event_id":"e4","event_type":"refund","amount":"5","to_address":"0xaaa"})")
                ->status,
            400);
  EXPECT_EQ(post(c, "not json")->status, 400);
  r = post(c, deposit("e1", "\"6\""));
  EXPECT_EQ(r->status, 409);
  EXPECT_NE(r->body.find("conflicting replay"), std::string::npos) << r->body;

  // What the listener answers outside the one operation is in the contract too.
  EXPECT_EQ(in_contract("recordPaymentWebhook", c.Get("/webhooks/payments"))->status, 405);
  EXPECT_EQ(in_contract("recordPaymentWebhook", c.Post("/other", "{}", "application/json"))->status,
            404);

  httplib::Client admin("127.0.0.1", intake.admin_port());
  r = in_contract("health", admin.Get("/healthz"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(in_contract("metrics", admin.Get("/metrics"))->status, 200);
  EXPECT_EQ(in_contract("health", admin.Post("/healthz", "", "text/plain"))->status, 405);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 1)
      << "nothing written for a rejected request";
  EXPECT_EQ(intake.stop(), 0) << "SIGTERM: drained and exited cleanly";
}

TEST_F(HttpIntake, PerClientRateLimitAnswers429) {
  IntakeProcess intake(schema_, 5);
  httplib::Client c("127.0.0.1", intake.port());
  int limited = 0;
  for (int i = 0; i < 20; ++i) limited += post(c, deposit("r" + std::to_string(i)))->status == 429;
  EXPECT_GE(limited, 10);
  EXPECT_LE(count("SELECT count(*) FROM {schema}.payment_events"), 10);
}

// 1,000 concurrent deliveries of 300 distinct events -> 300 rows, each applied once.
TEST_F(HttpIntake, ThousandConcurrentDeliveriesOfThreeHundredEvents) {
  IntakeProcess intake(schema_, 100'000);
  constexpr int kEvents = 300, kDeliveries = 1000, kSenders = 16;
  std::atomic<int> next{0}, accepted{0}, duplicates{0}, other{0}, redelivered{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < kSenders; ++t) {
    senders.emplace_back([&] {
      httplib::Client c("127.0.0.1", intake.port());
      c.set_tcp_nodelay(true);
      for (int i; (i = next++) < kDeliveries;) {
        httplib::Result r = post(c, deposit("c" + std::to_string(i % kEvents), "\"1.5\""));
        // A connection closed under a request leaves its outcome unknown: the
        // provider delivers again, as at-least-once delivery does.
        for (int again = 0; !r && again < 5; ++again, ++redelivered) {
          r = post(c, deposit("c" + std::to_string(i % kEvents), "\"1.5\""));
        }
        if (!r || r->status != 200) {
          ++other;
          continue;
        }
        (nlohmann::json::parse(r->body)["result"] == "accepted" ? accepted : duplicates)++;
      }
    });
  }
  for (auto& s : senders) s.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(accepted.load() + duplicates.load(), kDeliveries) << "every delivery answered 200";
  // An "accepted" answer lost with its connection comes back as "duplicate".
  EXPECT_LE(accepted.load(), kEvents);
  EXPECT_GE(accepted.load(), kEvents - redelivered.load());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), kEvents);

  Dispatcher d(*ledger_, {.schema = schema_, .batch_size = 64, .alerts = &alerts_});
  while (*d.run_once(*conn_) > 0) {
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), kEvents);
  EXPECT_EQ(balance(1), "450");
  expect_reconciled();
}

// Both services serve /metrics that a Prometheus server would accept, and
// the counters follow the traffic: intake answers, worker outcomes, queue.
TEST_F(HttpIntake, MetricsFollowTheEventsThroughIntakeAndWorker) {
  IntakeProcess intake(schema_, 100'000);
  httplib::Client c("127.0.0.1", intake.port());
  for (int i = 0; i < 20; ++i) ASSERT_EQ(post(c, deposit("m" + std::to_string(i)))->status, 200);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(post(c, deposit("m" + std::to_string(i)))->status, 200);
  ASSERT_EQ(post(c, deposit("m0"), "")->status, 401);

  const auto scrape = [](int port) {
    httplib::Client m("127.0.0.1", port);
    httplib::Result r = in_contract("metrics", m.Get("/metrics"));
    EXPECT_TRUE(r && r->status == 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    absl::StatusOr<PrometheusSamples> parsed = parse_prometheus_text(r ? r->body : "");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : PrometheusSamples{};
  };
  PrometheusSamples s = scrape(intake.admin_port());
  EXPECT_EQ(s["idemledger_webhook_requests_total{result=\"accepted\",status=\"200\"}"], "20");
  EXPECT_EQ(s["idemledger_webhook_requests_total{result=\"duplicate\",status=\"200\"}"], "5");
  EXPECT_EQ(s["idemledger_webhook_requests_total{result=\"refused\",status=\"401\"}"], "1");
  // One sender waiting for each answer: 25 group commits of one delivery
  // each (the refused one never reached the recorder), each timed.
  EXPECT_EQ(s["idemledger_intake_batch_deliveries_count"], "25");
  EXPECT_EQ(s["idemledger_intake_batch_deliveries_sum"], "25");
  EXPECT_EQ(s["idemledger_intake_batch_deliveries_bucket{le=\"1\"}"], "25");
  EXPECT_EQ(s["idemledger_intake_batch_wait_seconds_count"], "25");
  EXPECT_EQ(s["idemledger_intake_batch_record_seconds_count"], "25");
  double recording = 0;
  EXPECT_TRUE(absl::SimpleAtod(s["idemledger_intake_batch_record_seconds_sum"], &recording));
  EXPECT_GT(recording, 0);
  EXPECT_EQ(s["idemledger_queue_events{status=\"pending\"}"], "20");
  EXPECT_EQ(s["idemledger_metrics_database_up"], "1");

  ServiceProcess worker(IDEMLEDGER_OUTBOX_WORKER_BINARY, schema_,
                        {{"IDEMLEDGER_METRICS_PORT", "0"},
                         {"IDEMLEDGER_POLL_MS", "20"},
                         {"IDEMLEDGER_DLQ_SPOOL", scratch("worker.spool")},
                         {"IDEMLEDGER_DLQ_SPOOL_KEY", std::string(32, 'k')}},
                        "metrics listening");
  ASSERT_GT(worker.port(), 0);
  // Counters move just after each commit, so wait on the scrape itself —
  // for both: a scrape reads the queue gauge from the database before it
  // renders the counters, so a claim that commits in between (claim and
  // apply share one commit: its events are pending until then) shows 20
  // confirmed beside 20 pending in that one scrape.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  const auto settled = [](PrometheusSamples& m) {
    return m["idemledger_time_to_confirm_seconds_count"] == "20" &&
           m["idemledger_queue_events{status=\"pending\"}"] == "0";
  };
  while (!settled(s = scrape(worker.port())) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(s["idemledger_ledger_outcomes_total{outcome=\"applied\"}"], "20");
  EXPECT_EQ(s["idemledger_time_to_confirm_seconds_count"], "20");
  // One observation per Ledger call: the worker applies each claim's events
  // in one process_batch, so 1..20 calls for 20 events.
  const int calls = std::stoi(s["idemledger_apply_duration_seconds_count"].empty()
                                  ? "0"
                                  : s["idemledger_apply_duration_seconds_count"]);
  EXPECT_GE(calls, 1);
  EXPECT_LE(calls, 20);
  EXPECT_EQ(s["idemledger_queue_events{status=\"pending\"}"], "0");
  EXPECT_EQ(balance(1), "100");
  EXPECT_EQ(worker.stop(), 0);
}

// Assets and two-phase withdrawals through the real binaries: intake refuses
// an unknown, disabled or too-precise asset with a 400 naming it; the worker
// holds, posts, voids, and sweeps the hold nobody settled.
TEST_F(HttpIntake, AssetsAndWithdrawalStepsThroughIntakeAndWorker) {
  ASSERT_TRUE(add_asset(*conn_, schema_, {.code = "USDC", .decimals = 6}).ok());
  ASSERT_TRUE(add_asset(*conn_, schema_, {.code = "OLD", .decimals = 2, .enabled = false}).ok());
  IntakeProcess intake(schema_, 100'000);
  httplib::Client c("127.0.0.1", intake.port());
  const auto send = [&](const std::string& body) {
    httplib::Result r = post(c, body);
    EXPECT_TRUE(r);
    return r ? std::pair(r->status, r->body) : std::pair(0, std::string());
  };
  const auto usdc_deposit = [](const std::string& id, const std::string& amount,
                               const std::string& asset = "USDC") {
    return R"({"event_id":")" + id + R"(","event_type":"deposit","amount":")" + amount +
           R"(","to_address":"0xaaa","asset":")" + asset + R"("})";
  };
  auto [status, body] = send(usdc_deposit("d1", "100"));
  EXPECT_EQ(status, 200) << body;
  std::tie(status, body) = send(usdc_deposit("d2", "1", "DOGE"));
  EXPECT_EQ(status, 400);
  EXPECT_THAT(body, ::testing::HasSubstr("unknown asset DOGE"));
  std::tie(status, body) = send(usdc_deposit("d3", "1", "OLD"));
  EXPECT_EQ(status, 400);
  EXPECT_THAT(body, ::testing::HasSubstr("asset OLD is disabled"));
  std::tie(status, body) = send(usdc_deposit("d4", "0.0000001"));
  EXPECT_EQ(status, 400);
  EXPECT_THAT(body, ::testing::HasSubstr("USDC allows 6"));
  const auto request = [](const std::string& id, const std::string& amount, int expires_s) {
    return R"({"event_id":")" + id + R"(","event_type":"withdrawal_requested","amount":")" +
           amount + R"(","fee":"1","user_id":1,"asset":"USDC","expires_in_s":)" +
           std::to_string(expires_s) + "}";
  };
  for (const std::string& b : {request("w_post", "10", 3600), request("w_void", "20", 3600),
                               request("w_expire", "30", 1), request("w_broke", "1000", 3600)}) {
    EXPECT_EQ(send(b).first, 200) << b;
  }

  ServiceProcess worker(IDEMLEDGER_OUTBOX_WORKER_BINARY, schema_,
                        {{"IDEMLEDGER_POLL_MS", "20"},
                         {"IDEMLEDGER_DLQ_SPOOL", scratch("worker.spool")},
                         {"IDEMLEDGER_DLQ_SPOOL_KEY", std::string(32, 'k')}},
                        "worker started");
  const auto wait_for = [&](const std::string& sql, const std::string& want) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    std::string got;
    while ((got = scalar(sql)) != want && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    return got;
  };
  const std::string states =
      "SELECT string_agg(event_id || ' ' || state, ', ' ORDER BY event_id) FROM {schema}.holds";
  // w_expire may already be swept by now (a slow build): its turn comes below.
  EXPECT_EQ(wait_for("SELECT string_agg(event_id || ' ' || state, ', ' ORDER BY event_id) FROM "
                     "{schema}.holds WHERE event_id <> 'w_expire'",
                     "w_broke rejected, w_post held, w_void held"),
            "w_broke rejected, w_post held, w_void held");
  EXPECT_EQ(send(R"({"event_id":"c1","event_type":"withdrawal_confirmed","withdrawal_id":"w_post",)"
                 R"("user_id":1})")
                .first,
            200);
  EXPECT_EQ(send(R"({"event_id":"f1","event_type":"withdrawal_failed","withdrawal_id":"w_void",)"
                 R"("user_id":1})")
                .first,
            200);
  // w_expire: nobody settles it; the worker's sweeper releases it.
  EXPECT_EQ(wait_for(states, "w_broke rejected, w_expire expired, w_post posted, w_void voided"),
            "w_broke rejected, w_expire expired, w_post posted, w_void voided");
  absl::StatusOr<Account> a = ledger_->account(*conn_, 1, AssetCode("USDC"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->balance.to_string(), "89");
  EXPECT_EQ(a->held.to_string(), "0");
  EXPECT_EQ(wait_for("SELECT count(*) FROM {schema}.payment_events WHERE status NOT IN "
                     "('confirmed', 'failed')",
                     "0"),
            "0");
  EXPECT_EQ(scalar("SELECT string_agg(event_id || ' ' || status, ', ' ORDER BY event_id) FROM "
                   "{schema}.payment_events WHERE event_type <> 'deposit'"),
            "c1 confirmed, f1 confirmed, w_broke failed, w_expire confirmed, w_post confirmed, "
            "w_void confirmed");
  EXPECT_EQ(worker.stop(), 0);
  expect_reconciled();
}

// The contract check itself: it names what an answer does not document.
TEST(IntakeContract, NamesWhatAnAnswerDoesNotDocument) {
  const OpenApiContract& contract = OpenApiContract::intake();
  const auto answer = [](int status, std::string body, std::string type = "application/json") {
    return HttpAnswer{.status = status,
                      .headers = {{"content-type", type}, {"x-request-id", "t1"}},
                      .body = std::move(body)};
  };
  const auto first = [&](const HttpAnswer& a) {
    const std::vector<std::string> v = contract.violations("recordPaymentWebhook", a);
    return v.empty() ? std::string() : v.front();
  };
  EXPECT_EQ(first(answer(200, R"({"result":"accepted","trace_id":"t1"})")), "");
  EXPECT_THAT(first(answer(418, "{}")), ::testing::HasSubstr("does not document this status"));
  EXPECT_THAT(first(answer(200, R"({"result":"credited","trace_id":"t1"})")),
              ::testing::HasSubstr("is not one of"));
  EXPECT_THAT(first(answer(409, R"({"error":"conflicting replay"})")),
              ::testing::HasSubstr("the required \"trace_id\" is missing"));
  EXPECT_THAT(first(answer(200, R"({"result":"accepted","trace_id":"t1"})", "text/html")),
              ::testing::HasSubstr("content type \"text/html\""));
  EXPECT_THAT(first(answer(200, "accepted")), ::testing::HasSubstr("not JSON"));
  HttpAnswer no_trace = answer(200, R"({"result":"accepted","trace_id":"t1"})");
  no_trace.headers.erase("x-request-id");
  EXPECT_THAT(first(no_trace), ::testing::HasSubstr("X-Request-ID is missing"));

  const HttpAnswer raw = parse_raw_answer(
      "HTTP/1.1 411 Length Required\r\nContent-Type: application/json\r\nContent-Length: 38\r\n"
      "\r\n{\"error\":\"Content-Length is required\"}");
  EXPECT_EQ(raw.status, 411);
  EXPECT_TRUE(raw.body_complete);
  EXPECT_THAT(contract.violations("recordPaymentWebhook", raw), IsEmpty());
}

}  // namespace
}  // namespace idemledger::testing
