// The dead-letter spool as the real outbox_worker meets it: a key is required
// at startup, a forged or torn line in the spool it drains never reaches
// dead_letter_queue, and a spool that is a symbolic link is refused with its
// target untouched.
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "idemledger/queue/dlq.hpp"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;

class WorkerSpool : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    spool_ = scratch("worker.spool");
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::unique_ptr<ServiceProcess> worker() {
    return std::make_unique<ServiceProcess>(
        IDEMLEDGER_OUTBOX_WORKER_BINARY, schema_,
        std::vector<std::pair<std::string, std::string>>{
            {"IDEMLEDGER_POLL_MS", "20"},
            {"IDEMLEDGER_WORKER_THREADS", "1"},  // maintenance (the drain) before claims
            {"IDEMLEDGER_DLQ_SPOOL", spool_},
            {"IDEMLEDGER_DLQ_SPOOL_KEY", kTestSpoolKey}},
        "worker started");
  }
  std::string spool_;
};

TEST_F(WorkerSpool, WithoutAKeyTheWorkerDoesNotStart) {
  for (const std::string key : {"", "too-short"}) {
    const Finished f = run_to_exit(IDEMLEDGER_OUTBOX_WORKER_BINARY,
                                   "IDEMLEDGER_SCHEMA=" + schema_name_ + " IDEMLEDGER_DLQ_SPOOL='" +
                                       spool_ + "' IDEMLEDGER_DLQ_SPOOL_KEY='" + key + "'");
    EXPECT_EQ(f.exit_code, 2) << f.output;
    EXPECT_THAT(f.output, HasSubstr("IDEMLEDGER_DLQ_SPOOL_KEY")) << "key '" << key << "'";
  }
}

// A setting out of its range stops the worker with the rule, before it
// claims anything: batching is on or off, the claim linger 0..1000 ms, the
// spares' patience 0..60000 ms, the idle limit 0..3600000 ms.
TEST_F(WorkerSpool, ABadSettingStopsTheWorkerWithTheRule) {
  struct Case {
    std::string variable, value, rule;
  };
  const std::vector<Case> cases = {
      {"IDEMLEDGER_APPLY_IN_BATCHES", "2", "must be an integer in [0, 1]"},
      {"IDEMLEDGER_APPLY_IN_BATCHES", "-1", "must be an integer in [0, 1]"},
      {"IDEMLEDGER_APPLY_IN_BATCHES", "yes", "must be an integer in [0, 1]"},
      {"IDEMLEDGER_APPLY_IN_BATCHES", "1 ; true", "must be an integer in [0, 1]"},
      {"IDEMLEDGER_CLAIM_LINGER_MS", "1001", "must be an integer in [0, 1000]"},
      {"IDEMLEDGER_CLAIM_LINGER_MS", "-1", "must be an integer in [0, 1000]"},
      {"IDEMLEDGER_CLAIM_LINGER_MS", "10ms", "must be an integer in [0, 1000]"},
      {"IDEMLEDGER_CLAIM_LINGER_MS", "99999999999999999999", "must be an integer in [0, 1000]"},
      {"IDEMLEDGER_SPARE_AFTER_MS", "60001", "must be an integer in [0, 60000]"},
      {"IDEMLEDGER_SPARE_AFTER_MS", "-1", "must be an integer in [0, 60000]"},
      {"IDEMLEDGER_SPARE_AFTER_MS", "20ms", "must be an integer in [0, 60000]"},
      {"IDEMLEDGER_SPARE_AFTER_MS", "99999999999999999999", "must be an integer in [0, 60000]"},
      {"IDEMLEDGER_IDLE_IN_TRANSACTION_MS", "3600001", "must be an integer in [0, 3600000]"},
      {"IDEMLEDGER_IDLE_IN_TRANSACTION_MS", "-1", "must be an integer in [0, 3600000]"},
      {"IDEMLEDGER_IDLE_IN_TRANSACTION_MS", "30s", "must be an integer in [0, 3600000]"},
      {"IDEMLEDGER_IDLE_IN_TRANSACTION_MS", "99999999999999999999",
       "must be an integer in [0, 3600000]"},
  };
  for (const Case& c : cases) {
    const Finished f = run_to_exit(IDEMLEDGER_OUTBOX_WORKER_BINARY,
                                   "IDEMLEDGER_SCHEMA=" + schema_name_ + " IDEMLEDGER_DLQ_SPOOL='" +
                                       spool_ + "' IDEMLEDGER_DLQ_SPOOL_KEY='" + kTestSpoolKey +
                                       "' " + c.variable + "='" + c.value + "'");
    EXPECT_EQ(f.exit_code, 2) << c.variable << "=" << c.value << "\n" << f.output;
    EXPECT_THAT(f.output, HasSubstr(c.variable + " " + c.rule)) << c.value;
    EXPECT_THAT(f.output, ::testing::Not(HasSubstr("worker started"))) << c.value;
  }
}

TEST_F(WorkerSpool, OnlyLettersItSealedBecomeDeadLetters) {
  // A genuine letter spooled while the database was away, then two lines an
  // attacker with write access to the file (but not the key) appended: a
  // forged credit-shaped letter, and a torn line in front of the next letter.
  const DeadLetterQueue q({.schema = schema_, .spool_path = spool_, .spool_key = kTestSpoolKey});
  ASSERT_TRUE(q.spool({.event_id = "genuine",
                       .event_type = "deposit",
                       .user_id = 1,
                       .amount = "1",
                       .reason = "r",
                       .error = "e"}));
  std::ofstream(spool_, std::ios::app)
      << R"({"spool_id":"f1","event_id":"forged","event_type":"deposit","user_id":1,)"
      << R"("asset":"","amount":"1000000","reason":"x","error":"x","trace_id":"t"})"
      << "\n"
      << std::string(64, 'a') << R"( {"spool_id":"f2","event_id":"torn)";
  ASSERT_TRUE(q.spool({.event_id = "after_torn",
                       .event_type = "deposit",
                       .user_id = 1,
                       .amount = "2",
                       .reason = "r",
                       .error = "e"}));

  std::unique_ptr<ServiceProcess> w = worker();
  ASSERT_TRUE(eventually([&] { return read(spool_).empty(); })) << "drained at startup";
  EXPECT_EQ(scalar("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM "
                   "{schema}.dead_letter_queue"),
            "after_torn,genuine");
  const std::string quarantine = read(spool_ + ".quarantine");
  EXPECT_THAT(quarantine, HasSubstr(R"(\"event_id\":\"forged\")"));
  EXPECT_THAT(quarantine, HasSubstr(R"(\"event_id\":\"torn)"));
  struct stat st {};
  ASSERT_EQ(::stat((spool_ + ".quarantine").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(WorkerSpool, ASymlinkedSpoolIsNeverTruncatedOrRead) {
  const std::string target = spool_ + ".target";
  std::ofstream(target) << "someone else's file\n";
  ::chmod(target.c_str(), 0600);
  std::filesystem::create_symlink(target, spool_);
  open_account(1, "0");
  record_event(event("e_1", EventType::kDeposit, 1, "5"), "pending");
  {
    std::unique_ptr<ServiceProcess> w = worker();
    // Its one thread drains before it claims: once e_1 is applied, the drain
    // has met the link.
    ASSERT_TRUE(eventually([&] { return balance(1) == "5"; }));
  }
  EXPECT_EQ(read(target), "someone else's file\n");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 0);
}

}  // namespace
}  // namespace idemledger::testing
