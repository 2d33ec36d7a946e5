// Which of the real outbox_worker's threads claim (examples/outbox_worker/
// claimers.hpp): thread 0 always; a spare only while the queue is deep or
// thread 0 has spent longer than IDEMLEDGER_SPARE_AFTER_MS in one claim. Here
// thread 0 waits on a lock this test holds, with one event claimed; another
// event arrives for another user.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

class WorkerThreads : public LedgerTest {
 protected:
  std::unique_ptr<ServiceProcess> worker(std::vector<std::pair<std::string, std::string>> env) {
    env.emplace_back("IDEMLEDGER_POLL_MS", "20");
    env.emplace_back("IDEMLEDGER_DLQ_SPOOL", scratch("worker.spool"));
    env.emplace_back("IDEMLEDGER_DLQ_SPOOL_KEY", kTestSpoolKey);
    return std::make_unique<ServiceProcess>(IDEMLEDGER_OUTBOX_WORKER_BINARY, schema_, env,
                                            "worker started");
  }

  // Thread 0 claims "stuck" (user 1) and waits on user 1's account, locked
  // here; then "free" (user 2) is recorded. Returns the lock's holder.
  std::unique_ptr<pg::Connection> first_claimer_stuck() {
    open_account(1, "0");
    open_account(2, "0");
    record_event(event("stuck", EventType::kDeposit, 1, "1"), "pending");
    return hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR UPDATE");
  }
  void record_free() { record_event(event("free", EventType::kDeposit, 2, "1"), "pending"); }

  // Both applied once in the end, whoever claimed them.
  void expect_both_applied_once() {
    ASSERT_TRUE(eventually(
        [&] { return status_of("stuck") == "confirmed" && status_of("free") == "confirmed"; }));
    EXPECT_EQ(balance(1), "1");
    EXPECT_EQ(balance(2), "1");
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 2);
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 0);
    expect_reconciled();
  }
};

TEST_F(WorkerThreads, ASpareClaimsWhileTheFirstClaimerWaits) {
  std::unique_ptr<pg::Connection> holder = first_claimer_stuck();
  std::unique_ptr<ServiceProcess> w = worker({});  // the defaults
  EXPECT_EQ(w->ready_line().value("threads", 0), 2);
  EXPECT_EQ(w->ready_line().value("spare_after_ms", 0), 20);
  ASSERT_EQ(lock_waiters("apply_steps", absl::Seconds(10)), 1);
  record_free();
  // The lock times out after 2 s (LedgerOptions::lock_timeout); the spare
  // applies "free" long before, while "stuck" waits (pending to everyone
  // else, or, on a slow machine past that timeout, claimed again alone).
  EXPECT_TRUE(
      eventually([&] { return status_of("free") == "confirmed"; }, absl::Milliseconds(1500)));
  EXPECT_NE(status_of("stuck"), "confirmed");
  holder.reset();
  expect_both_applied_once();
  EXPECT_EQ(w->stop(), 0);
}

TEST_F(WorkerThreads, ASpareStandsByWhileTheFirstClaimerKeepsUp) {
  std::unique_ptr<pg::Connection> holder = first_claimer_stuck();
  // Thread 0 counts as keeping up for a minute: the spare stays in standby.
  std::unique_ptr<ServiceProcess> w = worker({{"IDEMLEDGER_SPARE_AFTER_MS", "60000"}});
  ASSERT_EQ(lock_waiters("apply_steps", absl::Seconds(10)), 1);
  record_free();
  absl::SleepFor(absl::Milliseconds(1000));
  EXPECT_EQ(status_of("free"), "pending");
  holder.reset();
  expect_both_applied_once();
  EXPECT_EQ(w->stop(), 0);
}

}  // namespace
}  // namespace idemledger::testing
