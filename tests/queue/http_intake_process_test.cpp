// The webhook_intake example as a real process on loopback, driven over HTTP:
// every status code, signatures over raw bytes, concurrent redeliveries, and
// a graceful SIGTERM.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "idemledger/queue/dispatcher.hpp"
#include "idemledger/queue/intake.hpp"
#include "tests/support/prometheus_text.hpp"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

const std::string kSecret(40, 's');

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
    return c.Post("/webhooks/payments", extra, body, "application/json");
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

  r = c.Get("/healthz");
  EXPECT_EQ(r->status, 200);
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
    httplib::Result r = m.Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    absl::StatusOr<PrometheusSamples> parsed = parse_prometheus_text(r ? r->body : "");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : PrometheusSamples{};
  };
  PrometheusSamples s = scrape(intake.port());
  EXPECT_EQ(s["idemledger_webhook_requests_total{status=\"200\",result=\"accepted\"}"], "20");
  EXPECT_EQ(s["idemledger_webhook_requests_total{status=\"200\",result=\"duplicate\"}"], "5");
  EXPECT_EQ(s["idemledger_webhook_requests_total{status=\"401\",result=\"refused\"}"], "1");
  EXPECT_EQ(s["idemledger_queue_events{status=\"pending\"}"], "20");
  EXPECT_EQ(s["idemledger_metrics_database_up"], "1");

  ServiceProcess worker(
      IDEMLEDGER_OUTBOX_WORKER_BINARY, schema_,
      {{"IDEMLEDGER_METRICS_PORT", "0"},
       {"IDEMLEDGER_POLL_MS", "20"},
       {"IDEMLEDGER_DLQ_SPOOL", ::testing::TempDir() + "/" + schema_name_ + ".spool"}},
      "metrics listening");
  ASSERT_GT(worker.port(), 0);
  // Counters move just after each commit, so wait on the scrape itself.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while ((s = scrape(worker.port()))["idemledger_time_to_confirm_seconds_count"] != "20" &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(s["idemledger_ledger_outcomes_total{outcome=\"applied\"}"], "20");
  EXPECT_EQ(s["idemledger_time_to_confirm_seconds_count"], "20");
  EXPECT_EQ(s["idemledger_apply_duration_seconds_count"], "20");
  EXPECT_EQ(s["idemledger_queue_events{status=\"pending\"}"], "0");
  EXPECT_EQ(balance(1), "100");
  EXPECT_EQ(worker.stop(), 0);
}

}  // namespace
}  // namespace idemledger::testing
