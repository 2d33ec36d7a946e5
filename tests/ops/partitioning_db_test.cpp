// Monthly partitions of balance_events, processed_events and system_entries:
// the conversion keeps every row, the months come and go, and no replay is
// applied twice, across months included. (The whole integration suite also runs on
// partitioned schemas: the "partitioned." pass.)
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/metrics.hpp"
#include "idemledger/ledger/migrate.hpp"
#include "idemledger/ops/cleanup.hpp"
#include "idemledger/ops/monitor.hpp"
#include "idemledger/ops/partitioning.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::Contains;
using ::testing::Each;
using ::testing::Not;

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
  // The suffix of the month partition `months` from now (negative: back),
  // e.g. "y2026m07", spelt here rather than by the schema's month_partition().
  std::string month_suffix(int months) {
    return scalar("SELECT to_char(now() AT TIME ZONE 'UTC' + interval '" + std::to_string(months) +
                  " months', '\"y\"YYYY\"m\"MM')");
  }
  // Deposits `amount` to user 1 as events <prefix>0 .. <prefix>(n - 1), each
  // answered `expected`.
  void deposit_each(const std::string& prefix, int n, const char* amount, Outcome expected) {
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(*ledger_->process_deposit(
                    *conn_, event(prefix + std::to_string(i), EventType::kDeposit, 1, amount)),
                expected)
          << prefix << i;
    }
  }
  // Every asset's legs, user and system, sum to zero.
  void expect_assets_balance() {
    EXPECT_EQ(count("SELECT count(*) FROM (SELECT asset FROM (SELECT asset, amount FROM "
                    "{schema}.balance_events UNION ALL SELECT asset, amount FROM "
                    "{schema}.system_entries) l GROUP BY asset HAVING sum(amount) <> 0) s"),
              0);
  }
};

TEST_F(Partitioning, ConversionKeepsEveryRowAndEveryGuarantee) {
  open_account(1, "0");
  deposit_each("d", 20, "1", Outcome::kApplied);
  // History: some of it from five months ago.
  exec(
      "UPDATE {schema}.balance_events SET created_at = now() - interval '5 months' "
      "WHERE source_event_id IN ('d0', 'd1', 'd2')");
  exec(
      "UPDATE {schema}.processed_events SET created_at = now() - interval '5 months' "
      "WHERE created_at = (SELECT min(created_at) FROM {schema}.processed_events)");
  exec(
      "UPDATE {schema}.system_entries SET created_at = now() - interval '5 months' "
      "WHERE source_event_id IN ('d0', 'd1', 'd2')");
  const long system_legs = count("SELECT count(*) FROM {schema}.system_entries");
  EXPECT_GE(system_legs, 20);
  EXPECT_FALSE(*is_partitioned(*conn_, schema_));

  absl::StatusOr<int> created = enable();
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*is_partitioned(*conn_, schema_));
  // Five months back, last month, this month and three ahead, for each table.
  EXPECT_EQ(partitions("balance_events"), 6);
  EXPECT_EQ(partitions("processed_events"), 6);
  EXPECT_EQ(partitions("system_entries"), 6);
  EXPECT_EQ(*created, 18);
  EXPECT_EQ(*enable(), 0) << "idempotent";
  EXPECT_EQ(count("SELECT count(*) FROM pg_class WHERE relnamespace = '{schema}'::regnamespace "
                  "AND relname LIKE '%unpartitioned%'"),
            0)
      << "the old tables and their indexes are gone";

  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 20);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_event_keys"), 20);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 20);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events_" + month_suffix(-5)), 3);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.system_entries"), system_legs);
  EXPECT_EQ(count("SELECT count(DISTINCT source_event_id) FROM {schema}.system_entries_" +
                  month_suffix(-5)),
            3);
  expect_reconciled();
  expect_assets_balance();
  // Every old event is still refused, and new ones apply.
  deposit_each("d", 20, "1", Outcome::kAlreadyApplied);
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("new", EventType::kDeposit, 1, "1")),
            Outcome::kApplied);
  EXPECT_EQ(balance(1), "21");
  EXPECT_EQ(scalar("SELECT last_value FROM {schema}.balance_events_id_seq"),
            scalar("SELECT max(id) FROM {schema}.balance_events"))
      << "the id sequence moved with the table";
  EXPECT_EQ(scalar("SELECT last_value FROM {schema}.system_entries_id_seq"),
            scalar("SELECT max(id) FROM {schema}.system_entries"));
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_depend WHERE objid = "
                   "'{schema}.system_entries_id_seq'::regclass AND refobjid = "
                   "'{schema}.system_entries'::regclass AND deptype = 'a'"),
            "1")
      << "the sequence belongs to the new table, so dropping the old one kept it";
  expect_assets_balance();
}

// A schema partitioned by a library before migration 23 kept system_entries
// as one table. The health check warns (without calling the schema
// unhealthy), and enable_monthly_partitioning() run once more converts it
// alone, keeping every leg.
TEST_F(Partitioning, ASchemaPartitionedBeforeItsSystemLegsWereConvertsThemOnTheNextEnable) {
  exec("DROP SCHEMA {schema} CASCADE");
  ASSERT_TRUE(migrate(*conn_, {.schema = schema_, .target_version = 22}).ok());
  ASSERT_TRUE(enable().ok());
  ASSERT_TRUE(migrate(*conn_, schema_).ok());
  ASSERT_TRUE(*is_partitioned(*conn_, schema_));
  EXPECT_EQ(partitions("system_entries"), 0);

  open_account(1, "0");
  deposit_each("u", 6, "2", Outcome::kApplied);
  exec(
      "UPDATE {schema}.system_entries SET created_at = now() - interval '2 months' "
      "WHERE source_event_id IN ('u0', 'u1')");
  const long system_legs = count("SELECT count(*) FROM {schema}.system_entries");

  MonitorOptions monitor{.schema = schema_, .alerts = &alerts_};
  absl::StatusOr<HealthReport> h = check_health(*conn_, monitor);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->partitioning_incomplete);
  EXPECT_TRUE(h->healthy()) << "a table that still grows as one is not an outage";
  EXPECT_FALSE(h->next_month_partition_missing);
  EXPECT_THAT(alerts_.keys(), Contains("partitioning_incomplete"));
  EXPECT_EQ(*ensure_monthly_partitions(*conn_, {.schema = schema_}), 0)
      << "ensuring months never converts a table";
  prometheus::Registry registry;
  LedgerMetrics metrics(registry);
  ASSERT_TRUE(refresh_queue_gauges(*conn_, schema_, metrics).ok());
  EXPECT_EQ(metrics.partitioning_incomplete.Value(), 1) << "what the warning alert rule reads";

  absl::StatusOr<int> created = enable();
  ASSERT_TRUE(created.ok()) << created.status();
  // Two months back, last month, this month and three ahead.
  EXPECT_EQ(*created, 6);
  EXPECT_EQ(partitions("system_entries"), 6);
  EXPECT_EQ(partitions("balance_events"), 5) << "the ledger's months are as they were";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.system_entries"), system_legs);
  EXPECT_EQ(count("SELECT count(DISTINCT source_event_id) FROM {schema}.system_entries_" +
                  month_suffix(-2)),
            2);
  EXPECT_EQ(*enable(), 0);
  EXPECT_FALSE(check_health(*conn_, monitor)->partitioning_incomplete);
  ASSERT_TRUE(refresh_queue_gauges(*conn_, schema_, metrics).ok());
  EXPECT_EQ(metrics.partitioning_incomplete.Value(), 0);

  deposit_each("u", 6, "2", Outcome::kAlreadyApplied);
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("u6", EventType::kDeposit, 1, "2")),
            Outcome::kApplied);
  EXPECT_EQ(balance(1), "14");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.system_entries"), system_legs + 1);
  expect_reconciled();
  expect_assets_balance();
}

// The ledger keeps writing while the conversion runs: single deposits,
// batches of deposits, and withdrawals each wait for the conversion's locks or
// land before them; neither side is ever failed as a deadlock, nothing is
// lost, and every asset's legs still sum to zero.
TEST_F(Partitioning, TheLedgerWritingDuringTheConversionWaitsAndLandsOnce) {
  for (const std::int64_t user : {1, 2, 3}) open_account(user, "0");
  constexpr int kRounds = 200;  // per writer: 2 deposits, 2 batched deposits, 1 withdrawal
  const LedgerOptions opts = options();
  const std::vector<int> codes = run_forked(4, [&](int child) {
    std::unique_ptr<pg::Connection> c = connect();
    if (child == 0) {  // converts once a hundred legs are in
      for (int polls = 0; polls < 1000; ++polls) {
        absl::StatusOr<Result> n =
            c->execute(schema_.qualify("SELECT count(*) >= 100 FROM {schema}.balance_events"));
        if (!n.ok()) return 3;
        if (n->at(0, 0) == "t") {
          absl::StatusOr<int> created = enable_monthly_partitioning(*c, {.schema = schema_});
          if (created.ok()) return 0;
          std::fprintf(stderr, "conversion: %s\n", created.status().ToString().c_str());
          return 1;
        }
        absl::SleepFor(absl::Milliseconds(2));
      }
      return 4;
    }
    Ledger ledger(opts);
    // A lock wait past the ledger's bound may be retried; a deadlock may not.
    const auto settled = [](const absl::Status& s) {
      return s.ok() || !is_retryable(s) || absl::StrContains(s.message(), "40P01");
    };
    const auto apply = [&](const std::function<absl::StatusOr<Outcome>()>& call) {
      absl::StatusOr<Outcome> r = call();
      for (int attempt = 0; attempt < 50 && !settled(r.status()); ++attempt) {
        absl::SleepFor(absl::Milliseconds(5));
        r = call();
      }
      if (!r.ok()) std::fprintf(stderr, "writer %d: %s\n", child, r.status().ToString().c_str());
      return r.ok() && *r == Outcome::kApplied;
    };
    for (int k = 0; k < kRounds; ++k) {
      const std::string id = absl::StrCat("c", child, "_", k);
      if (child == 1) {  // single deposits
        if (!apply([&] {
              return ledger.process_deposit(*c, event(id, EventType::kDeposit, 1, "1"));
            })) {
          return 2;
        }
      } else if (child == 2) {  // batches of two deposits
        const std::vector<PaymentEvent> batch{event(id + "a", EventType::kDeposit, 2, "1"),
                                              event(id + "b", EventType::kDeposit, 2, "1")};
        absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> r = ledger.process_batch(*c, batch);
        for (int attempt = 0; attempt < 50 && !settled(r.status()); ++attempt) {
          absl::SleepFor(absl::Milliseconds(5));
          r = ledger.process_batch(*c, batch);
        }
        if (!r.ok()) std::fprintf(stderr, "batch: %s\n", r.status().ToString().c_str());
        if (!r.ok() || r->size() != 2) return 2;
        for (const absl::StatusOr<Outcome>& one : *r) {
          if (!one.ok() || *one != Outcome::kApplied) return 2;
        }
      } else {  // a deposit of 2, then a withdrawal of 1
        if (!apply([&] {
              return ledger.process_deposit(*c, event(id + "d", EventType::kDeposit, 3, "2"));
            }) ||
            !apply([&] {
              return ledger.process_withdrawal(*c, event(id + "w", EventType::kWithdrawal, 3, "1"));
            })) {
          return 2;
        }
      }
    }
    return 0;
  });
  EXPECT_THAT(codes, Each(0));
  EXPECT_TRUE(*is_partitioned(*conn_, schema_));
  EXPECT_EQ(partitions("system_entries"), 5) << "last month, this month and three ahead";
  for (const std::int64_t user : {1, 3}) EXPECT_EQ(balance(user), std::to_string(kRounds));
  EXPECT_EQ(balance(2), std::to_string(2 * kRounds));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 5 * kRounds);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_event_keys"), 5 * kRounds);
  EXPECT_EQ(count("SELECT count(DISTINCT source_event_id) FROM {schema}.system_entries"),
            5 * kRounds);
  expect_reconciled();
  expect_assets_balance();
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
  EXPECT_FALSE(check_health(*conn_, monitor)->partitioning_incomplete);
  for (const char* table : {"balance_events", "processed_events", "system_entries"}) {
    exec(std::string("DROP TABLE {schema}.") + table + "_" + month_suffix(1));
  }
  absl::StatusOr<HealthReport> h = check_health(*conn_, monitor);
  EXPECT_TRUE(h->next_month_partition_missing);
  EXPECT_FALSE(h->healthy());
  EXPECT_THAT(alerts_.keys(), Contains("partition_missing"));
  EXPECT_THAT(alerts_.keys(), Not(Contains("partitioning_incomplete")));
  EXPECT_EQ(*ensure_monthly_partitions(*conn_, {.schema = schema_, .months_ahead = 3}), 3);
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
