// Monthly partitions of balance_events and processed_events: the conversion
// keeps every row, the months come and go, and no replay is applied twice,
// across months included. (The whole integration suite also runs on
// partitioned schemas: the "partitioned." pass.)
#include "gmock/gmock.h"
#include "idemledger/ops/cleanup.hpp"
#include "idemledger/ops/monitor.hpp"
#include "idemledger/ops/partitioning.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::Contains;

class Partitioning : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    if (partitioned_schemas()) GTEST_SKIP() << "converts its own schema; runs in the plain passes";
  }
  absl::StatusOr<int> enable() { return enable_monthly_partitioning(*conn_, {.schema = schema_}); }
  long partitions(const std::string& table) {
    return count("SELECT count(*) FROM pg_inherits WHERE inhparent = '{schema}." + table +
                 "'::regclass");
  }
};

TEST_F(Partitioning, ConversionKeepsEveryRowAndEveryGuarantee) {
  open_account(1, "0");
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(*ledger_->process_deposit(
                  *conn_, event("d" + std::to_string(i), EventType::kDeposit, 1, "1")),
              Outcome::kApplied);
  }
  // History: some of it from five months ago.
  exec(
      "UPDATE {schema}.balance_events SET created_at = now() - interval '5 months' "
      "WHERE source_event_id IN ('d0', 'd1', 'd2')");
  exec(
      "UPDATE {schema}.processed_events SET created_at = now() - interval '5 months' "
      "WHERE created_at = (SELECT min(created_at) FROM {schema}.processed_events)");
  EXPECT_FALSE(*is_partitioned(*conn_, schema_));

  absl::StatusOr<int> created = enable();
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*is_partitioned(*conn_, schema_));
  // Five months back, last month, this month and three ahead, for each table.
  EXPECT_EQ(partitions("balance_events"), 6);
  EXPECT_EQ(partitions("processed_events"), 6);
  EXPECT_EQ(*created, 12);
  EXPECT_EQ(*enable(), 0) << "idempotent";

  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 20);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_event_keys"), 20);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 20);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events_y" +
                  scalar("SELECT to_char(now() AT TIME ZONE 'UTC' - interval '5 months', "
                         "'YYYY\"m\"MM')")),
            3);
  expect_reconciled();
  // Every old event is still refused, and new ones apply.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(*ledger_->process_deposit(
                  *conn_, event("d" + std::to_string(i), EventType::kDeposit, 1, "1")),
              Outcome::kAlreadyApplied);
  }
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("new", EventType::kDeposit, 1, "1")),
            Outcome::kApplied);
  EXPECT_EQ(balance(1), "21");
  EXPECT_EQ(scalar("SELECT last_value FROM {schema}.balance_events_id_seq"),
            scalar("SELECT max(id) FROM {schema}.balance_events"))
      << "the id sequence moved with the table";
}

TEST_F(Partitioning, AReplayInALaterMonthIsStillAppliedOnce) {
  ASSERT_TRUE(enable().ok());
  open_account(1, "0");
  const PaymentEvent e = event("late", EventType::kDeposit, 1, "5");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kApplied);
  // Its idempotency record belongs to last month (the replay comes a month later).
  exec("UPDATE {schema}.processed_events SET month = month - interval '1 month'");
  EXPECT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kAlreadyApplied)
      << "the event's status answers";

  // With its idempotency months dropped and the event row gone too, the
  // ledger keys still refuse a second entry.
  exec("DELETE FROM {schema}.processed_events");
  exec("DELETE FROM {schema}.payment_events");
  EXPECT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kAlreadyApplied);
  EXPECT_THAT(alerts_.keys(), Contains("guard_without_record:late"));
  EXPECT_EQ(balance(1), "5");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
}

TEST_F(Partitioning, CleanupDropsExpiredMonthsButNeverOneWithAPendingRecord) {
  ASSERT_TRUE(enable().ok());
  for (const char* back : {"3 months", "4 months"}) {
    exec(std::string("SELECT {schema}.create_month_partition('processed_events', now() - "
                     "interval '") +
         back + "')");
  }
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, created_at, "
      "month, asset) VALUES "
      "('old_done', 'f', 'success', now() - interval '4 months', "
      " date_trunc('month', now() - interval '4 months')::date, 'DEFAULT'), "
      "('old_pending', 'f', 'pending', now() - interval '3 months', "
      " date_trunc('month', now() - interval '3 months')::date, 'DEFAULT'), "
      "('old_done_2', 'f', 'insufficient_funds', now() - interval '3 months', "
      " date_trunc('month', now() - interval '3 months')::date, 'DEFAULT')");
  const long before = partitions("processed_events");
  absl::StatusOr<CleanupReport> r = cleanup_idempotency_records(
      *conn_, {.schema = schema_, .ttl = absl::Hours(24 * 30), .pause = absl::ZeroDuration()});
  ASSERT_TRUE(r.ok()) << r.status();
  // Four months back (and last month, if empty and past the TTL) go whole;
  // three months back keeps its partition for the pending record, and its
  // final record goes by the batch delete.
  EXPECT_GE(r->partitions_dropped, 1);
  EXPECT_EQ(partitions("processed_events"), before - r->partitions_dropped);
  EXPECT_EQ(scalar("SELECT string_agg(idempotency_key, ',') FROM {schema}.processed_events"),
            "old_pending");
  EXPECT_EQ(r->deleted, 1);
}

TEST_F(Partitioning, AMissingNextMonthIsAHealthFindingUntilEnsured) {
  ASSERT_TRUE(enable().ok());
  MonitorOptions monitor{.schema = schema_, .alerts = &alerts_};
  EXPECT_FALSE(check_health(*conn_, monitor)->next_month_partition_missing);
  for (const char* table : {"balance_events", "processed_events"}) {
    exec(std::string("DROP TABLE {schema}.") + table + "_" +
         scalar("SELECT to_char(now() AT TIME ZONE 'UTC' + interval '1 month', "
                "'\"y\"YYYY\"m\"MM')"));
  }
  absl::StatusOr<HealthReport> h = check_health(*conn_, monitor);
  EXPECT_TRUE(h->next_month_partition_missing);
  EXPECT_FALSE(h->healthy());
  EXPECT_THAT(alerts_.keys(), Contains("partition_missing"));
  EXPECT_EQ(*ensure_monthly_partitions(*conn_, {.schema = schema_, .months_ahead = 3}), 2);
  EXPECT_TRUE(check_health(*conn_, monitor)->healthy());
  EXPECT_EQ(*ensure_monthly_partitions(*conn_, {.schema = schema_}), 0);
}

TEST_F(Partitioning, ARowForAMonthNobodyCreatedIsRefusedNotHidden) {
  ASSERT_TRUE(enable().ok());
  open_account(1, "0");
  absl::StatusOr<Result> r =
      conn_->execute("INSERT INTO " + schema_name_ +
                     ".balance_events (user_id, amount, event_type, source_event_id, created_at) "
                     "VALUES (1, 1, 'deposit', 'future', now() + interval '2 years')");
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.status().ToString(), ::testing::HasSubstr("no partition"));
  EXPECT_EQ(
      ensure_monthly_partitions(*conn_, {.schema = schema_, .months_ahead = 121}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace idemledger::testing
