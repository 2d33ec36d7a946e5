#include "gmock/gmock.h"
#include "idemledger/core/event_status.hpp"
#include "idemledger/ledger/hold.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/ledger/migrate.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using Migrate = LedgerTest;

TEST_F(Migrate, IsIdempotentAndRecordsTheVersion) {
  EXPECT_EQ(*current_schema_version(*conn_, schema_), latest_schema_version());
  ASSERT_TRUE(migrate(*conn_, schema_).ok());
  ASSERT_TRUE(migrate(*conn_, schema_).ok());
  EXPECT_EQ(*current_schema_version(*conn_, schema_), latest_schema_version());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.schema_migrations"), latest_schema_version());
}

TEST_F(Migrate, TheDatabaseFsmTableIsTheLibrarysTable) {
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.event_transitions"),
            static_cast<long>(kValidTransitions.size() + kOperatorTransitions.size()));
  const auto expect_edge = [&](EventStatus from, EventStatus to, bool operator_only) {
    EXPECT_EQ(
        count("SELECT count(*) FROM {schema}.event_transitions WHERE from_status = '" +
              std::string(to_string(from)) + "' AND to_status = '" + std::string(to_string(to)) +
              "' AND operator_only = " + (operator_only ? "true" : "false")),
        1);
  };
  for (const auto& [from, to] : kValidTransitions) expect_edge(from, to, false);
  for (const auto& [from, to] : kOperatorTransitions) expect_edge(from, to, true);
}

TEST_F(Migrate, TheDatabaseHoldTableIsTheLibrarysTable) {
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.hold_transitions"),
            static_cast<long>(kHoldTransitions.size()));
  for (const auto& [from, to] : kHoldTransitions) {
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.hold_transitions WHERE from_state = '" +
                    std::string(to_string(from)) + "' AND to_state = '" +
                    std::string(to_string(to)) + "'"),
              1);
  }
  // And transition_hold() refuses an edge the table does not list.
  const absl::StatusOr<Result> r = conn_->execute(
      schema_.qualify("SELECT {schema}.transition_hold('nope', 'voided', 'posted')"));
  EXPECT_THAT(r.status().ToString(), ::testing::HasSubstr("invalid hold state transition"));
}

TEST_F(Migrate, ConcurrentRunsFromManyProcessesAllSucceedOnce) {
  const std::string fresh_name = schema_name_ + "_c";
  const Schema fresh = *Schema::create(fresh_name);
  const std::vector<int> codes = run_forked(6, [&](int) {
    std::unique_ptr<pg::Connection> c = connect();
    absl::Status s = migrate(*c, fresh);
    if (!s.ok()) std::fprintf(stderr, "migrate: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  });
  for (int code : codes) EXPECT_EQ(code, 0);
  EXPECT_EQ(*current_schema_version(*conn_, fresh), latest_schema_version());
  EXPECT_EQ(count("SELECT count(*) FROM " + fresh_name + ".schema_migrations"),
            latest_schema_version());
  exec("DROP SCHEMA " + fresh_name + " CASCADE");
}

TEST_F(Migrate, TheLongestSchemaNamePostgresTakesWorks) {
  // Named after this test's schema: the direct, PgBouncer and partitioned
  // copies of this test run at the same time and must not share it.
  const std::string longest = schema_name_ + std::string(63 - schema_name_.size(), 'a');
  absl::StatusOr<Schema> schema = Schema::create(longest);
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_TRUE(migrate(*conn_, *schema).ok()) << "63 characters is PostgreSQL's limit, and fine";
  exec("DROP SCHEMA " + longest + " CASCADE");
  EXPECT_EQ(current_schema_version(*conn_, "never_migrated_here").value_or(-1), 0);
}

TEST_F(Migrate, RecordsEachVersionsChecksum) {
  for (const MigrationInfo& m : migration_catalog()) {
    EXPECT_EQ(scalar("SELECT checksum FROM {schema}.schema_migrations WHERE version = " +
                     std::to_string(m.version)),
              m.checksum)
        << "version " << m.version;
  }
}

TEST_F(Migrate, RefusesADatabaseMigratedByAnotherTextUnderTheSameNumber) {
  exec("UPDATE {schema}.schema_migrations SET checksum = 'edited' WHERE version = 2");
  const absl::Status s = migrate(*conn_, schema_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("migration 2"));
  EXPECT_EQ(scalar("SELECT checksum FROM {schema}.schema_migrations WHERE version = 2"), "edited")
      << "nothing changed";
}

TEST_F(Migrate, FillsInTheChecksumsOfVersionsAppliedBeforeTheyWereRecorded) {
  exec("UPDATE {schema}.schema_migrations SET checksum = NULL");
  ASSERT_TRUE(migrate(*conn_, schema_).ok());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.schema_migrations WHERE checksum IS NULL"), 0);
}

// Each single-column rule of the hot tables (migration 11: domains) and the
// two-column one (a CHECK) refuses a bad write in `schema`, naming itself,
// and the row is as it was. Needs user 1's account and event "e_1".
void expect_rules_hold(Connection& conn, const Schema& schema) {
  const auto refused = [&](const std::string& sql, const std::string& rule) {
    const absl::StatusOr<Result> r = conn.execute(schema.qualify(sql));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << sql;
    EXPECT_THAT(r.status().ToString(), ::testing::HasSubstr("\"" + rule + "\"")) << sql;
  };
  refused("UPDATE {schema}.accounts SET held = -1 WHERE user_id = 1", "amount_non_negative");
  refused("UPDATE {schema}.accounts SET balance = -1, held = -2 WHERE user_id = 1",
          "amount_non_negative");
  refused("UPDATE {schema}.accounts SET initial_balance = -1 WHERE user_id = 1",
          "amount_non_negative");
  refused("UPDATE {schema}.accounts SET held = balance + 1 WHERE user_id = 1",
          "account_held_within_balance");
  refused("UPDATE {schema}.payment_events SET event_id = '' WHERE event_id = 'e_1'",
          "event_id_length");
  refused("UPDATE {schema}.payment_events SET event_id = repeat('x', 129) WHERE event_id = 'e_1'",
          "event_id_length");
  refused("UPDATE {schema}.payment_events SET event_type = 'gift' WHERE event_id = 'e_1'",
          "event_type_known");
  refused("UPDATE {schema}.payment_events SET status = 'lost' WHERE event_id = 'e_1'",
          "event_status_known");
  refused("UPDATE {schema}.payment_events SET amount = 0 WHERE event_id = 'e_1'",
          "amount_positive");
  refused("UPDATE {schema}.payment_events SET fee = -0.000000000000000001 WHERE event_id = 'e_1'",
          "amount_non_negative");
  refused("UPDATE {schema}.processed_events SET outcome = 'maybe'", "outcome_known");
  refused(
      "INSERT INTO {schema}.system_entries (asset, account, amount, event_type, source_event_id) "
      "SELECT code, 'treasury', 1, 'deposit', 'x' FROM {schema}.assets WHERE is_default",
      "system_account_known");
}

TEST_F(Migrate, TheHotTablesRulesRefuseBadWrites) {
  open_account(1, "10");
  record_event(event("e_1", EventType::kDeposit, 1, "5"), "pending");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "2")),
            Outcome::kApplied);
  expect_rules_hold(*conn_, schema_);
  EXPECT_EQ(balance(1), "12");
  EXPECT_EQ(scalar("SELECT status || ' ' || amount::text FROM {schema}.payment_events "
                   "WHERE event_id = 'e_1'"),
            "pending 5.000000000000000000");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.system_entries WHERE source_event_id = 'x'"), 0);
}

// Migration 11 changes column types of populated tables: no table is
// rewritten (same files), every balance stays, and the rules hold after.
TEST_F(Migrate, Version11KeepsEveryRowAndFileAndTheRules) {
  const std::string name = schema_name_ + "_v10";
  const Schema v10 = *Schema::create(name);
  ASSERT_TRUE(migrate(*conn_, {.schema = v10, .target_version = 10}).ok());
  // This library on a version-10 schema: only calls whose SQL version 10
  // already had (process_deposit tries migration 13's statement first).
  const Ledger ledger({.schema = v10, .alerts = &alerts_});
  ASSERT_TRUE(ledger.open_account(*conn_, 1, *Amount::parse("10")).ok());
  ASSERT_EQ(*ledger.process_event(*conn_, event("d_1", EventType::kDeposit, 1, "2.5")),
            Outcome::kApplied);
  absl::StatusOr<HoldResult> h =
      ledger.hold(*conn_, {.event_id = "h_1", .user_id = 1, .amount = *Amount::parse("3")});
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(conn_
                  ->execute(v10.qualify("INSERT INTO {schema}.payment_events (event_id, user_id, "
                                        "amount, event_type, status, retry_count, asset) VALUES "
                                        "('e_1', 1, 5, 'deposit', 'pending', 0, 'DEFAULT')"))
                  .ok());
  // Tables and every index but the partial ones whose predicate names a
  // changed column (status, outcome: rebuilt, a read of their table each).
  const std::string files =
      "SELECT string_agg(c.relname || '=' || c.relfilenode, ',' ORDER BY c.relname) FROM pg_class "
      "c LEFT JOIN pg_index i ON i.indexrelid = c.oid WHERE c.relnamespace = '" +
      name + "'::regnamespace AND (c.relkind = 'r' OR (c.relkind = 'i' AND i.indpred IS NULL))";
  const std::string accounts =
      "SELECT string_agg(trim_scale(balance) || '/' || trim_scale(held) || '/' || "
      "trim_scale(initial_balance), ',') FROM " +
      name + ".accounts";
  const std::string files_before = scalar(files);
  const std::string accounts_before = scalar(accounts);
  EXPECT_EQ(accounts_before, "12.5/3/10");

  ASSERT_TRUE(migrate(*conn_, v10).ok());
  EXPECT_EQ(*current_schema_version(*conn_, v10), latest_schema_version());
  EXPECT_EQ(scalar(files), files_before) << "no table or index rewritten";
  EXPECT_EQ(scalar(accounts), accounts_before);
  EXPECT_EQ(count("SELECT count(*) FROM pg_constraint WHERE contype = 'c' AND conrelid IN ('" +
                  name + ".payment_events'::regclass, '" + name + ".accounts'::regclass, '" + name +
                  ".processed_events'::regclass, '" + name + ".system_entries'::regclass)"),
            1)
      << "only held <= balance stays a CHECK";
  EXPECT_EQ(count("SELECT count(*) FROM pg_constraint WHERE contype = 'c' AND convalidated AND "
                  "connamespace = '" +
                  name + "'::regnamespace AND contypid <> 0"),
            7)
      << "seven domain rules, each checked against the rows already there";
  expect_rules_hold(*conn_, v10);
  // What returns the changed columns still answers.
  EXPECT_TRUE(ledger.open_account(*conn_, 1, *Amount::parse("10")).ok());
  EXPECT_EQ(ledger.open_account(*conn_, 1, *Amount::parse("11")).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*ledger.process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "2.5")),
            Outcome::kAlreadyApplied);
  EXPECT_EQ(count("SELECT count(*) FROM " + name + ".claim_events(10, 1000)"), 1);
  exec("DROP SCHEMA " + name + " CASCADE");
}

// Migration 18: the rows events insert name their user without a key check,
// whether the schema was partitioned before the migration or after; users
// are kept instead, and an unknown user is still refused by every path.
TEST_F(Migrate, Version18DropsTheUserKeysOfTheHotRowsAndKeepsEveryUser) {
  const std::string name = schema_name_ + "_v17";
  const Schema v17 = *Schema::create(name);
  ASSERT_TRUE(migrate(*conn_, {.schema = v17, .target_version = 17}).ok());
  const auto user_keys = [&](const std::string& schema_name) {
    return count("SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND confrelid = '" +
                 schema_name +
                 ".users'::regclass AND conrelid IN (SELECT oid FROM pg_class WHERE "
                 "relnamespace = '" +
                 schema_name +
                 "'::regnamespace AND (relname LIKE 'payment_events%' OR relname LIKE "
                 "'balance_events%' OR relname = 'holds'))");
  };
  const Ledger ledger({.schema = v17, .alerts = &alerts_});
  ASSERT_TRUE(ledger.open_account(*conn_, 1, *Amount::parse("10")).ok());
  ASSERT_EQ(*ledger.process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "2")),
            Outcome::kApplied);
  exec("SELECT " + name + ".enable_monthly_partitioning(1)");
  EXPECT_GT(user_keys(name), 0) << "version 17 checks the user of every partition's rows";

  ASSERT_TRUE(migrate(*conn_, v17).ok());
  EXPECT_EQ(user_keys(name), 0);
  EXPECT_EQ(scalar("SELECT trim_scale(balance)::text FROM " + name + ".accounts"), "12");
  exec("DROP SCHEMA " + name + " CASCADE");

  // Migrated from scratch, then partitioned: the conversion adds no key.
  EXPECT_EQ(user_keys(schema_name_), 0);
  open_account(1, "10");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "2")),
            Outcome::kApplied);
  exec("SELECT {schema}.enable_monthly_partitioning(1)");
  EXPECT_EQ(user_keys(schema_name_), 0);

  // Every way in still refuses a user who does not exist, and writes nothing.
  const absl::StatusOr<Outcome> credit =
      ledger_->process_deposit(*conn_, event("d_2", EventType::kDeposit, 42, "1"));
  EXPECT_EQ(credit.status().code(), absl::StatusCode::kNotFound) << credit.status();
  const absl::StatusOr<Outcome> debit =
      ledger_->process_withdrawal(*conn_, event("w_2", EventType::kWithdrawal, 42, "1"));
  EXPECT_EQ(debit.status().code(), absl::StatusCode::kNotFound) << debit.status();
  const absl::StatusOr<HoldResult> hold =
      ledger_->hold(*conn_, {.event_id = "h_2", .user_id = 42, .amount = *Amount::parse("1")});
  EXPECT_EQ(hold.status().code(), absl::StatusCode::kNotFound) << hold.status();
  const absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> batch =
      ledger_->process_batch(*conn_, std::vector{event("d_3", EventType::kDeposit, 42, "1"),
                                                 event("d_4", EventType::kDeposit, 1, "1")});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ((*batch)[0].status().code(), absl::StatusCode::kNotFound) << (*batch)[0].status();
  EXPECT_EQ(*(*batch)[1], Outcome::kApplied);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE user_id = 42"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events WHERE user_id = 42"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.holds WHERE user_id = 42"), 0);

  // And no user is deleted, or emptied out with the table.
  for (const char* sql :
       {"DELETE FROM {schema}.users WHERE id = 1", "TRUNCATE {schema}.users CASCADE"}) {
    const absl::StatusOr<Result> r = conn_->execute(schema_.qualify(sql));
    EXPECT_THAT(r.status().ToString(), ::testing::HasSubstr("[SQLSTATE IL042]")) << sql;
  }
  EXPECT_EQ(balance(1), "13");
  record_event(event("e_1", EventType::kDeposit, 1, "5"), "pending");
  expect_rules_hold(*conn_, schema_);
}

}  // namespace
}  // namespace idemledger::testing
