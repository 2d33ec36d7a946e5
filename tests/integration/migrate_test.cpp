#include "idemledger/migrate.hpp"

#include "gmock/gmock.h"
#include "idemledger/event_status.hpp"
#include "tests/integration/test_db.hpp"

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

TEST_F(Migrate, ConcurrentRunsFromManyProcessesAllSucceedOnce) {
  const std::string fresh = schema_ + "_c";
  const std::vector<int> codes = run_forked(6, [&](int) {
    std::unique_ptr<pg::Connection> c = connect();
    absl::Status s = migrate(*c, fresh);
    if (!s.ok()) std::fprintf(stderr, "migrate: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  });
  for (int code : codes) EXPECT_EQ(code, 0);
  EXPECT_EQ(*current_schema_version(*conn_, fresh), latest_schema_version());
  EXPECT_EQ(count("SELECT count(*) FROM " + fresh + ".schema_migrations"), latest_schema_version());
  exec("DROP SCHEMA " + fresh + " CASCADE");
}

TEST_F(Migrate, RefusesUnsafeSchemaNames) {
  for (const std::string& bad :
       {std::string(), std::string("Public"), std::string("x; DROP TABLE users"),
        std::string("a-b"), std::string("1abc"), std::string(64, 'a')}) {
    absl::Status s = migrate(*conn_, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("[a-z_][a-z0-9_]{0,62}"));
  }
  // Named after this test's schema: the direct, PgBouncer and partitioned
  // copies of this test run at the same time and must not share it.
  const std::string longest = schema_ + std::string(63 - schema_.size(), 'a');
  EXPECT_TRUE(migrate(*conn_, longest).ok()) << "63 characters is PostgreSQL's limit, and fine";
  exec("DROP SCHEMA " + longest + " CASCADE");
  EXPECT_EQ(current_schema_version(*conn_, "never_migrated_here").value_or(-1), 0);
}

}  // namespace
}  // namespace idemledger::testing
