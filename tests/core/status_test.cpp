#include "idemledger/core/status.hpp"

#include "gtest/gtest.h"

namespace idemledger {
namespace {

struct Case {
  const char* sqlstate;
  absl::StatusCode code;
  bool retryable;
  bool breaks_connection;
};

TEST(StatusFromSqlstate, MapsEveryStateTheSpecNames) {
  const Case cases[] = {
      {"55P03", absl::StatusCode::kUnavailable, true, false},       // lock_not_available
      {"57014", absl::StatusCode::kDeadlineExceeded, true, false},  // query_canceled
      {"40P01", absl::StatusCode::kAborted, true, false},           // deadlock_detected
      {"40001", absl::StatusCode::kAborted, true, false},           // serialization_failure
      {"08000", absl::StatusCode::kUnavailable, true, true},        // connection_exception
      {"08003", absl::StatusCode::kUnavailable, true, true},        // connection_does_not_exist
      {"08006", absl::StatusCode::kUnavailable, true, true},        // connection_failure
      {"57P01", absl::StatusCode::kUnavailable, true, true},        // admin_shutdown
      {"57P02", absl::StatusCode::kUnavailable, true, true},        // crash_shutdown
      {"57P03", absl::StatusCode::kUnavailable, true, true},        // cannot_connect_now
      {"25006", absl::StatusCode::kUnavailable, true, true},        // read_only_sql_transaction
      {"25P03", absl::StatusCode::kUnavailable, true, true},  // idle_in_transaction_session_timeout
      {"25P04", absl::StatusCode::kUnavailable, true, true},  // transaction_timeout
      {"57P05", absl::StatusCode::kUnavailable, true, true},  // idle_session_timeout
      {"40003", absl::StatusCode::kUnavailable, false, false},    // completion unknown: see below
      {"23505", absl::StatusCode::kAlreadyExists, false, false},  // unique_violation
      {"23514", absl::StatusCode::kFailedPrecondition, false, false},  // check_violation
      {"22P02", absl::StatusCode::kInvalidArgument, false, false},  // invalid_text_representation
      {"42P01", absl::StatusCode::kInternal, false, false},         // undefined_table
  };
  for (const Case& c : cases) {
    const absl::Status s = status_from_sqlstate(c.sqlstate, "boom");
    EXPECT_EQ(s.code(), c.code) << c.sqlstate;
    EXPECT_EQ(is_retryable(s), c.retryable) << c.sqlstate;
    EXPECT_EQ(connection_broken(s), c.breaks_connection) << c.sqlstate;
    EXPECT_EQ(sqlstate(s), c.sqlstate) << "the SQLSTATE travels with the status";
    EXPECT_NE(std::string(s.message()).find(c.sqlstate), std::string::npos);
  }
  EXPECT_TRUE(commit_in_doubt(status_from_sqlstate("40003", "x")));
  EXPECT_FALSE(commit_in_doubt(status_from_sqlstate("40001", "x")));
}

TEST(IsRetryable, OnlyTransientCodes) {
  EXPECT_TRUE(is_retryable(absl::UnavailableError("")));
  EXPECT_TRUE(is_retryable(absl::AbortedError("")));
  EXPECT_TRUE(is_retryable(absl::DeadlineExceededError("")));
  EXPECT_FALSE(is_retryable(absl::OkStatus()));
  EXPECT_FALSE(is_retryable(absl::InvalidArgumentError("")));
  EXPECT_FALSE(is_retryable(absl::AlreadyExistsError("")));
  EXPECT_FALSE(is_retryable(absl::FailedPreconditionError("")));
  EXPECT_FALSE(is_retryable(absl::NotFoundError("")));
  EXPECT_FALSE(is_retryable(absl::InternalError("")));
}

// A commit in doubt may have landed: running the same work again is safe only
// for a keyed operation, which says so by marking its status.
TEST(IsRetryable, AnInDoubtCommitOnlyForKeyedOperations) {
  absl::Status in_doubt = absl::UnavailableError("connection lost during COMMIT");
  mark_commit_in_doubt(in_doubt);
  EXPECT_FALSE(is_retryable(in_doubt)) << "not keyed: it could apply twice";
  const absl::Status keyed = mark_idempotent(in_doubt);
  EXPECT_TRUE(idempotent_operation(keyed));
  EXPECT_TRUE(is_retryable(keyed));
  EXPECT_TRUE(commit_in_doubt(keyed)) << "the mark adds, never hides";
  EXPECT_TRUE(mark_idempotent(absl::OkStatus()).ok());
  EXPECT_FALSE(is_retryable(mark_idempotent(absl::InvalidArgumentError("bad"))))
      << "keyed or not, bad input stays bad input";
}

}  // namespace
}  // namespace idemledger
