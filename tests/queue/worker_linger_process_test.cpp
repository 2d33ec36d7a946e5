// The claim linger as the real outbox_worker runs it: after a claim that came
// back short, the worker lets new events gather before it claims again, so
// events recorded one by one meanwhile are applied together in one claim and
// one transaction — and each exactly once.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

class WorkerLinger : public LedgerTest {
 protected:
  std::unique_ptr<ServiceProcess> worker(const std::string& linger_ms) {
    return std::make_unique<ServiceProcess>(IDEMLEDGER_OUTBOX_WORKER_BINARY, schema_,
                                            std::vector<std::pair<std::string, std::string>>{
                                                {"IDEMLEDGER_POLL_MS", "20"},
                                                {"IDEMLEDGER_WORKER_THREADS", "1"},
                                                {"IDEMLEDGER_CLAIM_LINGER_MS", linger_ms},
                                                {"IDEMLEDGER_DLQ_SPOOL", scratch("worker.spool")},
                                                {"IDEMLEDGER_DLQ_SPOOL_KEY", kTestSpoolKey}},
                                            "worker started");
  }
  void record(const std::string& id) {
    record_event(event(id, EventType::kDeposit, 1, "1"), "pending");
  }
  long confirmed(const std::string& like) {
    return count(
        "SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed' AND "
        "event_id LIKE '" +
        like + "'");
  }
};

TEST_F(WorkerLinger, EventsRecordedWhileItLingersAreAppliedInOneClaim) {
  open_account(1, "0");
  std::unique_ptr<ServiceProcess> w = worker("1000");
  // A claim of one: short of the batch size, so the worker now lingers 1 s.
  record("first");
  ASSERT_TRUE(eventually([&] { return confirmed("first") == 1; }));
  // Five events, each in its own transaction, well inside that second.
  for (int i = 0; i < 5; ++i) record("later_" + std::to_string(i));
  ASSERT_TRUE(eventually([&] { return confirmed("later\\_%") == 5; }));

  // One claim, one transaction: every one of them settled at the same
  // transaction time. (With IDEMLEDGER_CLAIM_LINGER_MS=0 the worker claims
  // the first of them alone, and this fails.)
  EXPECT_EQ(count("SELECT count(DISTINCT updated_at) FROM {schema}.payment_events "
                  "WHERE event_id LIKE 'later\\_%'"),
            1);
  // Each applied once: six credits, six postings, nothing dead-lettered.
  EXPECT_EQ(balance(1), "6");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events WHERE user_id = 1"), 6);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 0);
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
