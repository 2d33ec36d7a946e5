// The library's metrics move with what really happened in the database, and
// the rendered text stays valid Prometheus exposition.
#include "idemledger/core/metrics.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "idemledger/ops/reconcile.hpp"
#include "idemledger/queue/dispatcher.hpp"
#include "tests/support/prometheus_text.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

class MetricsTest : public LedgerTest {
 protected:
  prometheus::Registry registry_;
  LedgerMetrics metrics_{registry_};

  PrometheusSamples scrape() {
    EXPECT_TRUE(refresh_queue_gauges(*conn_, schema_, metrics_).ok());
    absl::StatusOr<PrometheusSamples> parsed = parse_prometheus_text(render(registry_));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : PrometheusSamples{};
  }
  static std::string outcome(const std::string& o) {
    return "idemledger_ledger_outcomes_total{outcome=\"" + o + "\"}";
  }
};

TEST_F(MetricsTest, LedgerOutcomesAndLatencyCountEveryCall) {
  open_account(1, "10");
  Ledger ledger(options({.metrics = &metrics_}));
  ASSERT_EQ(*ledger.process_deposit(*conn_, event("d1", EventType::kDeposit, 1, "5")),
            Outcome::kApplied);
  ASSERT_EQ(*ledger.process_deposit(*conn_, event("d1", EventType::kDeposit, 1, "5")),
            Outcome::kAlreadyApplied);
  ASSERT_EQ(
      ledger.process_deposit(*conn_, event("d1", EventType::kDeposit, 1, "6")).status().code(),
      absl::StatusCode::kAlreadyExists);
  ASSERT_EQ(*ledger.process_withdrawal(*conn_, event("w1", EventType::kWithdrawal, 1, "100")),
            Outcome::kInsufficientFunds);
  ASSERT_FALSE(ledger.process_deposit(*conn_, event("d2", EventType::kDeposit, 99, "1")).ok());

  const PrometheusSamples s = scrape();
  EXPECT_EQ(s.at(outcome("applied")), "1");
  EXPECT_EQ(s.at(outcome("duplicate")), "1");
  EXPECT_EQ(s.at(outcome("conflict")), "1");
  EXPECT_EQ(s.at(outcome("insufficient_funds")), "1");
  EXPECT_EQ(s.at(outcome("error")), "1");
  EXPECT_EQ(s.at("idemledger_apply_duration_seconds_count"), "5");
  // And what the database says agrees with the counters.
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
}

TEST_F(MetricsTest, DispatcherCountsRetriesDeadLettersRecoveriesAndTimeToConfirm) {
  open_account(1, "100");
  for (int i = 0; i < 3; ++i) {
    record_event(event("q" + std::to_string(i), EventType::kDeposit, 1, "1"), "pending");
  }
  record_event(event("conflict", EventType::kDeposit, 1, "1"), "pending");
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset) "
      "VALUES ('" +
      idempotency_key("conflict", "deposit") + "', 'another fingerprint', 'success', 'DEFAULT')");
  record_event(event("locked", EventType::kWithdrawal, 1, "1"), "pending");
  exec("UPDATE {schema}.payment_events SET created_at = now() - interval '2 seconds'");

  Ledger ledger(options({.metrics = &metrics_}));
  Dispatcher d(ledger, {.schema = schema_, .alerts = &alerts_, .metrics = &metrics_});
  {
    std::unique_ptr<pg::Connection> holder =
        hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR NO KEY UPDATE");
    // Deposits wait up to lock_timeout for the row; the withdrawal NOWAITs.
    absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*conn_);
    ASSERT_EQ(batch->size(), 5u);
    for (const ClaimedEvent& c : *batch) {
      if (c.event.event_id == "locked") {
        EXPECT_EQ(*d.process(*conn_, c), Disposition::kRetryScheduled);
        EXPECT_GE(c.age_at_claim, absl::Seconds(2)) << "age comes from the server's created_at";
      }
    }
    ASSERT_TRUE(holder->execute("ROLLBACK").ok());
    for (const ClaimedEvent& c : *batch) {
      if (c.event.event_id != "locked") (void)d.process(*conn_, c);
    }
  }
  // A claim whose lease expired comes back through recover_stale(). The retried
  // withdrawal is pushed out of reach first: its full-jitter backoff can be ~0.
  exec(
      "UPDATE {schema}.payment_events SET next_attempt_at = now() + interval '1 hour' "
      "WHERE event_id = 'locked'");
  record_event(event("stale", EventType::kDeposit, 1, "1"), "pending");
  Dispatcher short_lease(ledger, {.schema = schema_,
                                  .lease = absl::Milliseconds(1),
                                  .alerts = &alerts_,
                                  .metrics = &metrics_});
  ASSERT_EQ(short_lease.claim(*conn_)->size(), 1u);
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_EQ(short_lease.recover_stale(*conn_)->recovered, 1);

  const PrometheusSamples s = scrape();
  EXPECT_EQ(s.at("idemledger_retries_scheduled_total"), "1");
  EXPECT_EQ(s.at("idemledger_dead_lettered_total{reason=\"failed\"}"), "1");
  EXPECT_EQ(s.at("idemledger_recovered_total"), "1");
  EXPECT_EQ(s.at(outcome("applied")), "3");
  EXPECT_EQ(s.at(outcome("conflict")), "1");
  // 3 confirmed + 1 failed; none faster than the 2 s they had waited.
  EXPECT_EQ(s.at("idemledger_time_to_confirm_seconds_count"), "4");
  EXPECT_EQ(s.at("idemledger_time_to_confirm_seconds_bucket{le=\"1\"}"), "0");
  // Gauges read from the database: the retried withdrawal and the recovered
  // deposit are pending again; one open dead letter.
  EXPECT_EQ(s.at("idemledger_queue_events{status=\"pending\"}"), "2");
  EXPECT_EQ(s.at("idemledger_queue_events{status=\"enqueued\"}"), "0");
  EXPECT_EQ(s.at("idemledger_dead_letters_open"), "1");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 1);
}

TEST_F(MetricsTest, ReconciliationRunsAndTheirTime) {
  open_account(1, "10");
  EXPECT_EQ(scrape().at("idemledger_last_reconciliation_timestamp_seconds"), "0");
  const std::int64_t before = absl::ToUnixSeconds(absl::Now());
  Reconciler reconciler({.schema = schema_, .alerts = &alerts_, .metrics = &metrics_});
  ASSERT_TRUE(reconciler.full(*conn_).ok());
  exec("UPDATE {schema}.accounts SET balance = balance + 1");
  ASSERT_TRUE(reconciler.full(*conn_).ok());
  const PrometheusSamples s = scrape();
  EXPECT_EQ(s.at("idemledger_reconciliation_runs_total{result=\"clean\"}"), "1");
  EXPECT_EQ(s.at("idemledger_reconciliation_runs_total{result=\"findings\"}"), "1");
  EXPECT_GE(std::stoll(s.at("idemledger_last_reconciliation_timestamp_seconds")), before - 1);
  EXPECT_EQ(s.at("idemledger_last_reconciliation_findings"), "1") << "the last run's, not a sum";
  exec("UPDATE {schema}.accounts SET balance = balance - 1");
  ASSERT_TRUE(reconciler.full(*conn_).ok());
  EXPECT_EQ(scrape().at("idemledger_last_reconciliation_findings"), "0");
}

// What the alert rules of deploy/prometheus/ read: how long things have not
// moved, as the monitor (ops/monitor.hpp) reads them.
TEST_F(MetricsTest, AgesOfWhatHasNotMovedAreGauges) {
  open_account(1, "10");
  PrometheusSamples s = scrape();
  for (const char* status : {"pending", "enqueued", "processing"}) {
    EXPECT_EQ(s.at(std::string("idemledger_queue_oldest_seconds{status=\"") + status + "\"}"), "0");
  }
  EXPECT_EQ(s.at("idemledger_idempotency_pending_oldest_seconds"), "0");
  EXPECT_EQ(s.at("idemledger_next_month_partition_missing"), "0");
  EXPECT_EQ(s.at("idemledger_partitioning_incomplete"), "0");

  record_event(event("old", EventType::kDeposit, 1, "1"), "pending");
  record_event(event("new", EventType::kDeposit, 1, "1"), "pending");
  record_event(event("stuck", EventType::kDeposit, 1, "1"), "pending");
  exec(
      "UPDATE {schema}.payment_events SET updated_at = now() - interval '20 minutes' "
      "WHERE event_id = 'old'");
  exec(
      "UPDATE {schema}.payment_events SET status = 'enqueued', "
      "lease_until = now() + interval '1 minute', updated_at = now() - interval '3 minutes' "
      "WHERE event_id = 'stuck'");
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset, "
      "created_at) VALUES ('k', 'f', 'pending', 'DEFAULT', now() - interval '7 minutes')");
  s = scrape();
  const auto seconds = [&](const std::string& series) { return std::stoll(s.at(series)); };
  EXPECT_NEAR(seconds("idemledger_queue_oldest_seconds{status=\"pending\"}"), 1200, 5);
  EXPECT_NEAR(seconds("idemledger_queue_oldest_seconds{status=\"enqueued\"}"), 180, 5);
  EXPECT_EQ(seconds("idemledger_queue_oldest_seconds{status=\"processing\"}"), 0);
  EXPECT_NEAR(seconds("idemledger_idempotency_pending_oldest_seconds"), 420, 5);
}

}  // namespace
}  // namespace idemledger::testing
