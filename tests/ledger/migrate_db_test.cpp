#include "gmock/gmock.h"
#include "idemledger/core/event_status.hpp"
#include "idemledger/ledger/hold.hpp"
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

}  // namespace
}  // namespace idemledger::testing
