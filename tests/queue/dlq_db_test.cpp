// Dead letters when the database cannot take them: spool, drain, exactly once.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "idemledger/queue/dlq.hpp"
#include "src/core/internal/text.hpp"
#include "src/queue/internal/hmac.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::Contains;

class Dlq : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    spool_path_ = scratch("dlq.spool");
    quarantine_path_ = spool_path_ + ".quarantine";
  }
  DeadLetterQueue queue(std::string spool_path = "", std::string key = kTestSpoolKey) {
    return DeadLetterQueue({.schema = schema_,
                            .spool_path = spool_path.empty() ? spool_path_ : spool_path,
                            .spool_key = std::move(key),
                            .alerts = &alerts_});
  }
  // A line as the spool writes one, sealed with `key`, around `json`.
  static std::string sealed(const std::string& json, const std::string& key = kTestSpoolKey) {
    return internal::to_hex(internal::hmac_sha256(key, {json})) + " " + json + "\n";
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void append(const std::string& text) { std::ofstream(spool_path_, std::ios::app) << text; }
  long lines(const std::string& path) {
    const std::string text = read(path);
    return std::count(text.begin(), text.end(), '\n');
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
  std::string spool_content() { return read(spool_path_); }
  long rows() { return count("SELECT count(*) FROM {schema}.dead_letter_queue"); }

  std::string spool_path_;
  std::string quarantine_path_;
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

TEST_F(Dlq, ATornLineIsQuarantinedAndTheLettersAroundItStillDrain) {
  ASSERT_TRUE(queue().spool(letter("e1")));
  append(R"(0123 {"spool_id":"abc","event_id":"e2","ev)");  // a writer died mid-line
  ASSERT_TRUE(queue().spool(letter("e3")));                 // starts on a line of its own
  EXPECT_EQ(*queue().drain_spool(*conn_), 2);
  EXPECT_EQ(scalar("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM "
                   "{schema}.dead_letter_queue"),
            "e1,e3");
  EXPECT_EQ(lines(quarantine_path_), 1);
  EXPECT_THAT(read(quarantine_path_), ::testing::HasSubstr(R"(\"event_id\":\"e2\",\"ev)"));
  EXPECT_THAT(alerts_.keys(), Contains("dead_letter_spool_quarantined:" + spool_path_));
  EXPECT_EQ(spool_content(), "");
}

TEST_F(Dlq, AForgedLineNeverBecomesADeadLetter) {
  ASSERT_TRUE(queue().spool(letter("genuine")));
  const std::string forged =
      R"({"spool_id":"f1","event_id":"forged","event_type":"deposit","user_id":7,"asset":"",)"
      R"("amount":"1000000","reason":"x","error":"x","trace_id":"t"})";
  append(forged + "\n");                               // unsealed (the old format)
  append(std::string(64, '0') + " " + forged + "\n");  // a made-up seal
  append(sealed(forged, std::string(32, 'x')));        // another key's seal
  std::string altered = sealed(forged);                // a real seal, then edited
  altered.replace(altered.find("1000000"), 7, "9000000");
  append(altered);
  EXPECT_EQ(*queue().drain_spool(*conn_), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'forged'"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'genuine'"), 1);
  EXPECT_EQ(lines(quarantine_path_), 4);
  EXPECT_THAT(read(quarantine_path_), ::testing::HasSubstr("seal does not match"));
  EXPECT_THAT(read(quarantine_path_), ::testing::HasSubstr("no seal"));
}

TEST_F(Dlq, ASealedLineWithWrongTypesIsQuarantinedNotThrown) {
  ASSERT_TRUE(queue().spool(letter("e1")));  // creates the spool as it must be
  append(sealed(R"({"spool_id":"s1","event_id":123,"event_type":"deposit","user_id":7,)"
                R"("asset":"","amount":"1","reason":"x","error":"x","trace_id":"t"})"));
  append(sealed(R"({"spool_id":"s2","event_id":"e","event_type":"deposit","user_id":"7",)"
                R"("asset":"","amount":"1","reason":"x","error":"x","trace_id":"t"})"));
  append(sealed(R"(["not", "an", "object"])"));
  append(sealed(R"({"spool_id":"s3","event_id":"e")"));  // sealed, but not JSON
  absl::StatusOr<int> moved = queue().drain_spool(*conn_);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 1);
  EXPECT_EQ(rows(), 1);
  EXPECT_EQ(lines(quarantine_path_), 4);
  EXPECT_THAT(read(quarantine_path_), ::testing::HasSubstr("wrong type"));
}

TEST_F(Dlq, ASymlinkedSpoolIsRefusedAndItsTargetUntouched) {
  const std::string target = spool_path_ + ".target";
  std::ofstream(target) << "precious\n";
  std::filesystem::create_symlink(target, spool_path_);
  EXPECT_FALSE(queue().spool(letter("e1")));
  const absl::StatusOr<int> drained = queue().drain_spool(*conn_);
  EXPECT_EQ(drained.status().code(), absl::StatusCode::kFailedPrecondition) << drained.status();
  EXPECT_THAT(drained.status().message(), ::testing::HasSubstr("symbolic link"));
  EXPECT_EQ(read(target), "precious\n") << "neither appended to nor truncated";
  EXPECT_THAT(alerts_.keys(), Contains("dead_letter_spool_refused:" + spool_path_));
  EXPECT_EQ(rows(), 0);
  std::filesystem::remove(target);
}

TEST_F(Dlq, ASpoolOthersCouldWriteOrReachIsRefused) {
  // Pre-created by someone else, world-writable, with a line sealed by the
  // right key (as if the key leaked, the file must still not be trusted).
  ASSERT_TRUE(queue().spool(letter("e1")));
  ASSERT_EQ(::chmod(spool_path_.c_str(), 0666), 0);
  const std::string before = spool_content();
  absl::StatusOr<int> drained = queue().drain_spool(*conn_);
  EXPECT_EQ(drained.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(drained.status().message(), ::testing::HasSubstr("mode is 0666"));
  EXPECT_EQ(spool_content(), before);
  EXPECT_EQ(rows(), 0);

  // A second name for the file (a hard link): truncating it would truncate both.
  ASSERT_EQ(::chmod(spool_path_.c_str(), 0600), 0);
  const std::string other = spool_path_ + ".link";
  std::filesystem::create_hard_link(spool_path_, other);
  drained = queue().drain_spool(*conn_);
  EXPECT_THAT(drained.status().message(), ::testing::HasSubstr("hard links"));
  std::filesystem::remove(other);

  // Owned by another user (only root can make one).
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(spool_path_.c_str(), 65534, 65534), 0);
    drained = queue().drain_spool(*conn_);
    EXPECT_THAT(drained.status().message(), ::testing::HasSubstr("owned by uid 65534"));
    ASSERT_EQ(::chown(spool_path_.c_str(), 0, 0), 0);
  }
  EXPECT_EQ(rows(), 0);
  EXPECT_EQ(*queue().drain_spool(*conn_), 1) << "ours again: drained";
}

TEST_F(Dlq, NoKeyNoSpoolAndALongSpoolIsNotRead) {
  DeadLetterQueue keyless = queue("", "short");
  EXPECT_EQ(keyless.check_options().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(keyless.check_options().message(), ::testing::HasSubstr("at least 32 bytes"));
  EXPECT_FALSE(keyless.spool(letter("e1")));
  EXPECT_EQ(keyless.drain_spool(*conn_).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(queue().check_options().ok());

  ASSERT_TRUE(queue().spool(letter("e1")));
  ASSERT_TRUE(queue().spool(letter("e2")));
  const std::string before = spool_content();
  DeadLetterQueue small({.schema = schema_,
                         .spool_path = spool_path_,
                         .spool_key = kTestSpoolKey,
                         .max_spool_bytes = 100,
                         .alerts = &alerts_});
  EXPECT_EQ(small.drain_spool(*conn_).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(spool_content(), before);
  EXPECT_EQ(rows(), 0);
}

TEST_F(Dlq, ABadLineWithNowhereToGoHoldsTheDrain) {
  ASSERT_TRUE(queue().spool(letter("e1")));
  append("garbage\n");
  const std::string target = spool_path_ + ".target";
  std::ofstream(target) << "";
  std::filesystem::create_symlink(target, quarantine_path_);
  const std::string before = spool_content();
  EXPECT_EQ(queue().drain_spool(*conn_).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(spool_content(), before) << "nothing drained, nothing lost";
  EXPECT_EQ(rows(), 0);
  EXPECT_EQ(read(target), "");
  std::filesystem::remove(target);
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
