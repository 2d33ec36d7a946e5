// Dead letters when the database cannot take them: spool, drain, exactly once.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "idemledger/queue/dlq.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::Contains;

class Dlq : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    spool_path_ = ::testing::TempDir() + "/dlq_" + schema_name_ + ".spool";
    std::filesystem::remove(spool_path_);
  }
  void TearDown() override {
    std::filesystem::remove(spool_path_);
    LedgerTest::TearDown();
  }
  DeadLetterQueue queue(std::string spool_path = "") {
    return DeadLetterQueue({.schema = schema_,
                            .spool_path = spool_path.empty() ? spool_path_ : spool_path,
                            .alerts = &alerts_});
  }
  static DeadLetter letter(std::string id) {
    return {.event_id = std::move(id),
            .event_type = "withdrawal",
            .user_id = 7,
            .amount = "12.5",
            .reason = "retries_exhausted",
            .error = "lock not available [SQLSTATE 55P03]",
            .trace_id = "t-1"};
  }
  // A connection the server has already killed: every write on it fails.
  std::unique_ptr<pg::Connection> dead_connection() {
    std::unique_ptr<pg::Connection> victim = connect();
    EXPECT_EQ(scalar("SELECT pg_terminate_backend(" + std::to_string(victim->backend_pid()) + ")"),
              "t");
    absl::SleepFor(absl::Milliseconds(50));
    return victim;
  }
  std::string spool_content() {
    std::ifstream in(spool_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  long rows() { return count("SELECT count(*) FROM {schema}.dead_letter_queue"); }

  std::string spool_path_;
};

TEST_F(Dlq, GoesToTheTableWhileTheDatabaseIsUp) {
  EXPECT_EQ(queue().record(*conn_, letter("e1")), DeadLetterQueue::Destination::kTable);
  EXPECT_EQ(queue().record(*conn_, letter("e1")), DeadLetterQueue::Destination::kTable);
  EXPECT_EQ(
      scalar("SELECT string_agg(attempt::text, ',' ORDER BY id) FROM {schema}.dead_letter_queue"),
      "1,2")
      << "every attempt kept";
  EXPECT_EQ(scalar("SELECT reason || ' ' || amount::text || ' ' || trace_id FROM "
                   "{schema}.dead_letter_queue LIMIT 1"),
            "retries_exhausted 12.500000000000000000 t-1");
  EXPECT_EQ(spool_content(), "");
}

TEST_F(Dlq, DatabaseGone_SpooledThenDrainedExactlyOnce) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session the server killed");
  std::unique_ptr<pg::Connection> gone = dead_connection();
  EXPECT_EQ(queue().record(*gone, letter("e1")), DeadLetterQueue::Destination::kSpool);
  EXPECT_EQ(queue().record(*gone, letter("e2")), DeadLetterQueue::Destination::kSpool);
  const std::string spooled = spool_content();
  EXPECT_EQ(std::count(spooled.begin(), spooled.end(), '\n'), 2);
  EXPECT_EQ(rows(), 0);

  EXPECT_EQ(*queue().drain_spool(*conn_), 2);
  EXPECT_EQ(rows(), 2);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE spool_id IS NOT NULL "
                  "AND error LIKE '%55P03%' AND user_id = 7"),
            2);
  EXPECT_EQ(spool_content(), "");
  EXPECT_EQ(*queue().drain_spool(*conn_), 0);
  EXPECT_EQ(rows(), 2);
}

TEST_F(Dlq, CrashBetweenDrainCommitAndTruncate_NothingDoubled) {
  ASSERT_TRUE(queue().spool(letter("e1")));
  ASSERT_TRUE(queue().spool(letter("e2")));
  const std::string before = spool_content();
  ASSERT_EQ(*queue().drain_spool(*conn_), 2);
  std::ofstream(spool_path_) << before;  // as if the truncation never happened
  ASSERT_TRUE(queue().drain_spool(*conn_).ok());
  EXPECT_EQ(rows(), 2);
}

TEST_F(Dlq, TornLastLineIsSkippedNotFatal) {
  ASSERT_TRUE(queue().spool(letter("e1")));
  std::ofstream(spool_path_, std::ios::app) << R"({"spool_id":"abc","event_id":"e2","ev)";
  EXPECT_EQ(*queue().drain_spool(*conn_), 1);
  EXPECT_EQ(rows(), 1);
}

TEST_F(Dlq, SpoolUnwritable_CriticalAlertCarriesTheRecord) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session the server killed");
  std::unique_ptr<pg::Connection> gone = dead_connection();
  DeadLetterQueue q = queue("/nonexistent-dir/dlq.spool");
  EXPECT_EQ(q.record(*gone, letter("e1")), DeadLetterQueue::Destination::kAlertOnly);
  EXPECT_THAT(alerts_.keys(), Contains("dead_letter_unwritable:e1"));
}

TEST_F(Dlq, ManyProcessesAppendingLoseNothing) {
  const std::vector<int> codes = run_forked(4, [&](int p) {
    DeadLetterQueue q = queue();
    for (int i = 0; i < 50; ++i) {
      if (!q.spool(letter("p" + std::to_string(p) + "_" + std::to_string(i)))) return 1;
    }
    return 0;
  });
  for (int code : codes) ASSERT_EQ(code, 0);
  EXPECT_EQ(*queue().drain_spool(*conn_), 200);
  EXPECT_EQ(count("SELECT count(DISTINCT event_id) FROM {schema}.dead_letter_queue"), 200);
}

}  // namespace
}  // namespace idemledger::testing
