// PostgreSQL as the queue: claims, leases, durable retries, dead letters and
// recovery after a worker is killed, on a real server with real processes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "gmock/gmock.h"
#include "idemledger/core/log.hpp"
#include "idemledger/core/retry.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "idemledger/queue/dispatcher.hpp"
#include "idemledger/queue/intake.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::Contains;

class DispatcherTest : public LedgerTest {
 protected:
  DispatcherOptions dispatch_options(DispatcherOptions base = {}) {
    base.schema = schema_;
    base.alerts = &alerts_;
    return base;
  }
  void record_pending(int n, std::string_view amount = "1", EventType type = EventType::kDeposit) {
    for (int i = 0; i < n; ++i)
      record_event(event("q_" + std::to_string(i), type, 1, amount), "pending");
  }
  // User 1 with no funds, owner of deposit address 0xaaa.
  void open_deposit_address() {
    open_account(1, "0");
    exec("INSERT INTO {schema}.deposit_addresses VALUES ('0xaaa', 1)");
  }
  // A provider's webhook body: a deposit to 0xaaa, naming its chain
  // transaction when `tx_hash` is given.
  static std::string deposit_body(const std::string& id, const std::string& amount,
                                  const std::string& tx_hash = "") {
    return R"({"event_id":")" + id + R"(","event_type":"deposit","amount":")" + amount +
           R"(","to_address":"0xaaa")" +
           (tx_hash.empty() ? std::string() : R"(,"tx_hash":")" + tx_hash + "\"") + "}";
  }
  // What intake does with a verified body.
  absl::StatusOr<RecordResult> deliver(const std::string& body, const std::string& trace_id = "") {
    return record_webhook_event(*conn_, schema_, *parse_webhook(body), trace_id, body);
  }
  // What a surviving worker does after another died: recover expired leases
  // and process until every event is terminal; then each must be applied once.
  void recover_and_drain_expecting_all_applied(const Dispatcher& d, long events) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (non_terminal() > 0 && absl::Now() < deadline) {
      ASSERT_TRUE(d.recover_stale(*conn_).ok());
      ASSERT_TRUE(d.run_once(*conn_).ok());
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_EQ(non_terminal(), 0);
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"),
              events);
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), events);
  }
  // Runs d.run_once() on this test's session until `events` events were
  // applied (true) or `patience` ran out.
  bool run_once_until_applied(const Dispatcher& d, int events, absl::Duration patience) {
    int applied = 0;
    return eventually(
        [&] {
          absl::StatusOr<int> n = d.run_once(*conn_);
          applied += n.ok() ? *n : 0;
          return applied == events;
        },
        patience);
  }
  // `events` deposits of `amount` to user 1, each confirmed on its first
  // try (no retry, no lease recovered), one ledger entry each, no dead letter.
  void expect_each_applied_once_first_try(int events, int amount) {
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed' AND "
                    "retry_count = 0 AND recovery_count = 0"),
              events);
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), events);
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 0);
    EXPECT_EQ(balance(1), std::to_string(amount * events));
    expect_reconciled();
  }
  long non_terminal() {
    return count(
        "SELECT count(*) FROM {schema}.payment_events WHERE status NOT IN ('confirmed', 'failed')");
  }
};

TEST_F(DispatcherTest, ConcurrentClaimsAreDisjointAndLeased) {
  open_account(1, "0");
  record_pending(10);
  Dispatcher d(*ledger_, dispatch_options({.batch_size = 6}));
  std::unique_ptr<pg::Connection> other = connect();
  absl::StatusOr<std::vector<ClaimedEvent>> a = d.claim(*conn_);
  absl::StatusOr<std::vector<ClaimedEvent>> b = d.claim(*other);
  ASSERT_TRUE(a.ok() && b.ok());
  std::set<std::string> ids;
  for (const auto* batch : {&*a, &*b}) {
    for (const ClaimedEvent& c : *batch)
      EXPECT_TRUE(ids.insert(c.event.event_id).second) << c.event.event_id;
  }
  EXPECT_EQ(ids.size(), 10u);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'enqueued' "
                  "AND lease_until > now()"),
            10);
  EXPECT_TRUE(d.claim(*conn_)->empty());
}

TEST_F(DispatcherTest, ClaimSkipsRowsLockedByAnotherWorker) {
  open_account(1, "0");
  record_pending(3);
  std::unique_ptr<pg::Connection> holder =
      hold_locks("SELECT 1 FROM {schema}.payment_events WHERE event_id = 'q_1' FOR UPDATE");
  Dispatcher d(*ledger_, dispatch_options());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*conn_);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "SKIP LOCKED must not wait";
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->size(), 2u);
  EXPECT_EQ(status_of("q_1"), "pending");
}

// A debit in flight holds its user row; claiming (whose updates re-check the
// foreign key to users) must not wait for it.
TEST_F(DispatcherTest, ClaimIsNotBlockedByADebitHoldingTheUserRow) {
  open_account(1, "100");
  record_pending(2);
  std::unique_ptr<pg::Connection> debit = connect();
  ASSERT_TRUE(debit->execute("BEGIN").ok());
  Ledger in_flight(options());
  ASSERT_EQ(*in_flight.process_withdrawal(*debit, event("w", EventType::kWithdrawal, 1, "1")),
            Outcome::kApplied);
  // A wait must become a failure, not a hang; transaction-scoped, so nothing
  // leaks into a session PgBouncer hands to another test.
  exec("BEGIN");
  exec("SET LOCAL statement_timeout = '2s'");
  Dispatcher d(*ledger_, dispatch_options());
  absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*conn_);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->size(), 2u);
  exec("COMMIT");
  ASSERT_TRUE(debit->execute("COMMIT").ok());
}

TEST_F(DispatcherTest, RunOnceAppliesEveryClaimedEventOnce) {
  open_account(1, "0");
  record_pending(5, "2.5");
  Dispatcher d(*ledger_, dispatch_options());
  EXPECT_EQ(*d.run_once(*conn_), 5);
  EXPECT_EQ(*d.run_once(*conn_), 0);
  EXPECT_EQ(balance(1), "12.5");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"), 5);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 5);
  expect_reconciled();
}

// A claim's single-phase events are applied in one transaction (every
// posting carries one timestamp); a poisoned one among them still ends alone,
// failed with its dead letter, and an overdraft is its own outcome. (now()
// is the transaction's start: one created_at for all the postings.)
TEST_F(DispatcherTest, RunOnceAppliesAClaimInOneTransaction_APoisonedEventEndsAlone) {
  open_account(1, "0");
  record_pending(5, "2.5");
  record_event(event("q_w", EventType::kWithdrawal, 1, "100"), "pending");
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset) "
      "VALUES ('" +
      idempotency_key("q_2", "deposit") +
      "', 'someone else''s fingerprint', 'success', 'DEFAULT')");
  Dispatcher d(*ledger_, dispatch_options());
  EXPECT_EQ(*d.run_once(*conn_), 6);
  EXPECT_EQ(balance(1), "10");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"), 4);
  EXPECT_EQ(status_of("q_2"), "failed");
  EXPECT_EQ(status_of("q_w"), "failed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'q_2' AND "
                  "reason = 'already_exists'"),
            1);
  EXPECT_EQ(count("SELECT count(DISTINCT created_at) FROM {schema}.balance_events"), 1)
      << "one transaction for the claim";
  expect_reconciled();

  // One by one when asked: a transaction each.
  for (int i = 0; i < 3; ++i) {
    record_event(event("r_" + std::to_string(i), EventType::kDeposit, 1, "1"), "pending");
  }
  Dispatcher alone(*ledger_, dispatch_options({.apply_in_batches = false}));
  EXPECT_EQ(*alone.run_once(*conn_), 3);
  EXPECT_EQ(count("SELECT count(DISTINCT created_at) FROM {schema}.balance_events"), 4);
  EXPECT_EQ(balance(1), "13");
}

// Claimed deposits to accounts the claim does not debit are applied and
// settled set-based, with no call of the one-event procedure; a claimed
// event whose key someone else holds leaves that path to the one-by-one
// step, and every other event of the claim is still applied with it.
TEST_F(DispatcherTest, AClaimsDepositsAreSettledSetBased_AConflictFallsBackAlone) {
  IDEMLEDGER_NEEDS_OWN_SESSION("function statistics are per session");
  open_account(1, "0");
  open_account(2, "0");
  exec("SET track_functions = 'pl'");
  record_pending(4, "2.5");
  record_event(event("u2", EventType::kDeposit, 2, "1"), "pending", 3);
  Dispatcher d(*ledger_, dispatch_options());
  EXPECT_EQ(*d.run_once(*conn_), 5);
  EXPECT_EQ(function_calls("apply_event"), "0");
  EXPECT_EQ(function_calls("transition_events"), "2") << "one to claim, one to settle";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed' AND "
                  "retry_count = 0"),
            5);
  EXPECT_EQ(balance(1), "10");
  EXPECT_EQ(balance(2), "1");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.system_entries"), 5);

  record_event(event("n_1", EventType::kDeposit, 1, "1"), "pending");
  record_event(event("n_2", EventType::kDeposit, 1, "1"), "pending");
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset) "
      "VALUES ('" +
      idempotency_key("n_2", "deposit") +
      "', 'someone else''s fingerprint', 'success', 'DEFAULT')");
  record_event(event("u2b", EventType::kDeposit, 2, "1"), "pending");
  EXPECT_EQ(*d.run_once(*conn_), 3);
  EXPECT_EQ(status_of("n_1"), "confirmed");
  EXPECT_EQ(status_of("n_2"), "failed");
  EXPECT_EQ(status_of("u2b"), "confirmed");
  // The conflict sends the claim one by one: n_1 and u2b are counted (a call
  // that raises, n_2's, is not).
  EXPECT_EQ(function_calls("apply_event"), "2");
  EXPECT_EQ(balance(1), "11");
  EXPECT_EQ(balance(2), "2");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'n_2' AND "
                  "reason = 'already_exists'"),
            1);
  expect_reconciled();
}

// A claim's hold steps join its batch: the deposit, the holds, the post and
// the void are applied in claim order in one transaction (a hold sees the
// deposit claimed ahead of it); a step the hold no longer allows still ends
// failed alone, with its dead letter and the ledger's alert.
TEST_F(DispatcherTest, HoldStepsJoinTheClaimsBatch_ARefusedStepEndsAlone) {
  open_account(1, "0");
  // Claimed in next_attempt_at order: d1, w1, c1, w2, f2, c2.
  exec(
      "INSERT INTO {schema}.payment_events (event_id, user_id, asset, amount, fee, hold_id, "
      "expires_at, event_type, status, next_attempt_at) "
      "SELECT id, 1, 'DEFAULT', amt, fee, hold, exp, typ, 'pending', "
      "       now() - (10 - ord) * interval '1 millisecond' "
      "  FROM (VALUES (1, 'd1', 10::numeric, NULL::numeric, NULL, NULL::timestamptz, 'deposit'), "
      "               (2, 'w1', 4, 1, NULL, now() + interval '1 hour', 'withdrawal_requested'), "
      "               (3, 'c1', NULL, NULL, 'w1', NULL, 'withdrawal_confirmed'), "
      "               (4, 'w2', 3, 0, NULL, now() + interval '1 hour', 'withdrawal_requested'), "
      "               (5, 'f2', NULL, NULL, 'w2', NULL, 'withdrawal_failed'), "
      "               (6, 'c2', NULL, NULL, 'w2', NULL, 'withdrawal_confirmed')) "
      "       AS v(ord, id, amt, fee, hold, exp, typ)");
  Dispatcher d(*ledger_, dispatch_options());
  EXPECT_EQ(*d.run_once(*conn_), 6);
  EXPECT_EQ(scalar("SELECT string_agg(event_id || ':' || status, ',' ORDER BY event_id) "
                   "FROM {schema}.payment_events"),
            "c1:confirmed,c2:failed,d1:confirmed,f2:confirmed,w1:confirmed,w2:confirmed");
  EXPECT_EQ(scalar("SELECT string_agg(event_id || ':' || state, ',' ORDER BY event_id) "
                   "FROM {schema}.holds"),
            "w1:posted,w2:voided");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'c2' AND "
                  "reason = 'failed_precondition'"),
            1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 1);
  EXPECT_THAT(alerts_.keys(), Contains("hold_refused:w2"));
  EXPECT_EQ(balance(1), "5");  // 10 - 4 - fee 1
  EXPECT_EQ(scalar("SELECT held FROM {schema}.accounts WHERE user_id = 1"), "0.000000000000000000");
  EXPECT_EQ(count("SELECT count(DISTINCT created_at) FROM {schema}.balance_events"), 1)
      << "one transaction for the claim";
  expect_reconciled();
}

// The batch fails as a whole (its accounts stay locked past lock_timeout):
// each event then takes its own turn and gets its own durable retry.
TEST_F(DispatcherTest, ABatchTimingOutWholeFallsBackToEachEvent) {
  open_account(1, "0");
  record_pending(3, "1");
  std::unique_ptr<pg::Connection> holder =
      hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR NO KEY UPDATE");
  const Ledger impatient(options({.lock_timeout = absl::Milliseconds(100)}));
  Dispatcher d(impatient, dispatch_options({.retry_base = absl::Seconds(10)}));
  EXPECT_EQ(*d.run_once(*conn_), 3);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'pending' AND "
                  "retry_count = 1 AND last_error LIKE '%55P03%'"),
            3);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 0);
  ASSERT_TRUE(holder->execute("ROLLBACK").ok());
  exec("UPDATE {schema}.payment_events SET next_attempt_at = now()");
  EXPECT_EQ(*d.run_once(*conn_), 3);
  EXPECT_EQ(balance(1), "3");
  expect_reconciled();
}

TEST_F(DispatcherTest, TransientFailureIsRetriedDurablyWithBackoff) {
  open_account(1, "100");
  record_pending(1, "10", EventType::kWithdrawal);
  std::unique_ptr<pg::Connection> holder =
      hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR NO KEY UPDATE");
  Dispatcher d(*ledger_,
               dispatch_options({.retry_base = absl::Seconds(10), .retry_cap = absl::Seconds(60)}));
  absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*conn_);
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ(*d.process(*conn_, (*batch)[0]), Disposition::kRetryScheduled);
  EXPECT_EQ(status_of("q_0"), "pending");
  EXPECT_EQ(scalar("SELECT retry_count FROM {schema}.payment_events"), "1");
  EXPECT_EQ(scalar("SELECT last_error LIKE '%55P03%' FROM {schema}.payment_events"), "t");
  EXPECT_EQ(scalar("SELECT next_attempt_at BETWEEN now() AND now() + interval '10 seconds' "
                   "FROM {schema}.payment_events"),
            "t");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 0);
  // Once due and unblocked, it is applied.
  ASSERT_TRUE(holder->execute("ROLLBACK").ok());
  exec("UPDATE {schema}.payment_events SET next_attempt_at = now()");
  EXPECT_EQ(*d.run_once(*conn_), 1);
  EXPECT_EQ(status_of("q_0"), "confirmed");
  EXPECT_EQ(scalar("SELECT retry_count FROM {schema}.payment_events"), "0") << "reset on success";
  EXPECT_EQ(balance(1), "90");
}

TEST_F(DispatcherTest, RetriesExhaustedEndFailedWithOneDeadLetter) {
  open_account(1, "100");
  record_event(event("q_0", EventType::kWithdrawal, 1, "10"), "pending", /*retry_count=*/5);
  std::unique_ptr<pg::Connection> holder =
      hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR NO KEY UPDATE");
  Dispatcher d(*ledger_, dispatch_options({.max_retries = 5}));
  absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*conn_);
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ(*d.process(*conn_, (*batch)[0]), Disposition::kFailed);
  EXPECT_EQ(status_of("q_0"), "failed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'q_0' "
                  "AND reason = 'retries_exhausted' AND error LIKE '%55P03%'"),
            1);
  EXPECT_EQ(balance(1), "100");
}

TEST_F(DispatcherTest, PermanentFailureEndsFailedWithDeadLetterAtOnce) {
  open_account(1, "0");
  record_event(event("q_0", EventType::kDeposit, 1, "1"), "pending");
  // A conflicting record: the ledger refuses it (kAlreadyExists), which no retry fixes.
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset) "
      "VALUES ('" +
      idempotency_key("q_0", "deposit") +
      "', 'someone else''s fingerprint', 'success', 'DEFAULT')");
  Dispatcher d(*ledger_, dispatch_options());
  absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*conn_);
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ(*d.process(*conn_, (*batch)[0]), Disposition::kFailed);
  EXPECT_EQ(status_of("q_0"), "failed");
  EXPECT_EQ(
      count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE reason = 'already_exists'"), 1);
  EXPECT_EQ(scalar("SELECT retry_count FROM {schema}.payment_events"), "0")
      << "no retry for a conflict";
}

TEST_F(DispatcherTest, ExpiredLeaseIsRecoveredThenFailedAfterTheLimit) {
  open_account(1, "0");
  record_pending(2);
  exec("UPDATE {schema}.payment_events SET recovery_count = 10 WHERE event_id = 'q_1'");
  Dispatcher d(*ledger_, dispatch_options({.lease = absl::Milliseconds(1), .max_recoveries = 10}));
  ASSERT_EQ(d.claim(*conn_)->size(), 2u);
  absl::SleepFor(absl::Milliseconds(20));
  absl::StatusOr<RecoveryReport> report = d.recover_stale(*conn_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->recovered, 1);
  EXPECT_EQ(report->failed, 1);
  EXPECT_EQ(status_of("q_0"), "pending");
  EXPECT_EQ(scalar("SELECT recovery_count FROM {schema}.payment_events WHERE event_id = 'q_0'"),
            "1");
  EXPECT_EQ(status_of("q_1"), "failed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'q_1' "
                  "AND reason = 'stale_recoveries_exhausted'"),
            1);
  EXPECT_THAT(alerts_.keys(), Contains("stale_recoveries_exhausted:q_1"));
  EXPECT_EQ(balance(1), "0");
}

// The session dies while a worker holds a claim: the failure cannot be
// recorded in the database, so it is spooled; the lease brings the event back.
TEST_F(DispatcherTest, SessionLostMidProcess_FailureSpooledAndEventRecovered) {
  IDEMLEDGER_NEEDS_OWN_SESSION("pg_terminate_backend of the worker's backend");
  open_account(1, "0");
  record_pending(1, "3");
  const std::string spool = scratch("dispatch.spool");
  DeadLetterQueue dlq(
      {.schema = schema_, .spool_path = spool, .spool_key = kTestSpoolKey, .alerts = &alerts_});
  Dispatcher d(*ledger_,
               dispatch_options({.lease = absl::Milliseconds(100), .dead_letters = &dlq}));
  std::unique_ptr<pg::Connection> worker = connect();
  absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*worker);
  ASSERT_EQ(batch->size(), 1u);
  ASSERT_EQ(scalar("SELECT pg_terminate_backend(" + std::to_string(worker->backend_pid()) + ")"),
            "t");
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(d.process(*worker, (*batch)[0]).ok());

  EXPECT_EQ(*dlq.drain_spool(*conn_), 1);
  EXPECT_EQ(
      count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE reason = 'failure_unrecorded' "
            "AND event_id = 'q_0'"),
      1);
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_EQ(d.recover_stale(*conn_)->recovered, 1);
  EXPECT_EQ(*d.run_once(*conn_), 1);
  EXPECT_EQ(status_of("q_0"), "confirmed");
  EXPECT_EQ(balance(1), "3");
}

// kill -9 of a worker that holds claims, some already applied: after lease
// expiry and recovery every event is applied exactly once.
TEST_F(DispatcherTest, WorkerKilledHoldingClaims_EveryEventAppliedOnce) {
  constexpr int kEvents = 40;
  open_account(1, "0");
  record_pending(kEvents, "1");
  const DispatcherOptions opts =
      dispatch_options({.batch_size = kEvents, .lease = absl::Milliseconds(300)});
  const LedgerOptions ledger_opts = options();
  const std::vector<int> codes = run_forked(1, [&](int) {
    std::unique_ptr<pg::Connection> c = connect();
    Ledger ledger(ledger_opts);
    Dispatcher d(ledger, opts);
    absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*c);
    if (!batch.ok()) return 1;
    for (int i = 0; i < kEvents / 2; ++i)
      (void)d.process(*c, (*batch)[static_cast<std::size_t>(i)]);
    raise(SIGKILL);  // dies holding the other half of its claims
    return 2;
  });
  ASSERT_EQ(codes[0], 128 + SIGKILL);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'enqueued'"),
            kEvents / 2);

  recover_and_drain_expecting_all_applied(Dispatcher(*ledger_, opts), kEvents);
  EXPECT_EQ(balance(1), std::to_string(kEvents));
  expect_reconciled();
}

// kill -9 while the worker's ledger transaction is inside the server: the
// child blocks on a user row the parent holds, with its batch (and Sync)
// already sent. Whether the orphaned transaction commits or not, recovery and
// a second worker end every event applied exactly once.
TEST_F(DispatcherTest, WorkerKilledMidTransaction_EveryEventAppliedOnce) {
  constexpr int kEvents = 6;
  open_account(1, "0");
  record_pending(kEvents, "2");
  const DispatcherOptions opts =
      dispatch_options({.batch_size = kEvents, .lease = absl::Milliseconds(300)});
  const LedgerOptions ledger_opts = options({.lock_timeout = absl::Seconds(30)});
  std::unique_ptr<pg::Connection> holder =
      hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR NO KEY UPDATE");
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<pg::Connection> c = connect();
    Ledger ledger(ledger_opts);
    Dispatcher d(ledger, opts);
    absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*c);
    const char ready = batch.ok() && batch->size() == kEvents ? 'y' : 'n';
    (void)!write(pipe_fds[1], &ready, 1);
    (void)d.process(*c, (*batch)[0]);  // blocks in the server on the held row
    _exit(0);
  }
  char ready = 0;
  ASSERT_EQ(read(pipe_fds[0], &ready, 1), 1);
  ASSERT_EQ(ready, 'y');
  // Wait until the child's transaction is really waiting on the lock.
  // (This test's own schema only: the suite's other passes run beside it.)
  ASSERT_EQ(lock_waiters("apply_event", absl::Seconds(2)), 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(holder->execute("ROLLBACK").ok());  // the orphaned transaction may now finish

  recover_and_drain_expecting_all_applied(Dispatcher(*ledger_, opts), kEvents);
  EXPECT_EQ(balance(1), std::to_string(2 * kEvents));
  expect_reconciled();
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

// run_once() claims and applies in one transaction: the claim's lease and
// the postings carry one now() (lease_until = created_at + lease). Apart
// (apply_with_claim off), the apply's transaction starts after the claim's.
TEST_F(DispatcherTest, RunOnceClaimsAndAppliesInOneTransaction) {
  open_account(1, "0");
  record_pending(4, "2");
  const auto sharing = [&] {
    return count(
        "SELECT count(*) FROM {schema}.payment_events e JOIN {schema}.balance_events b "
        "ON b.source_event_id = e.event_id "
        "WHERE e.status = 'confirmed' AND e.lease_until = b.created_at + interval '30 seconds'");
  };
  Dispatcher together(*ledger_, dispatch_options({.lease = absl::Seconds(30)}));
  EXPECT_EQ(*together.run_once(*conn_), 4);
  EXPECT_EQ(sharing(), 4);
  EXPECT_EQ(balance(1), "8");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"), 4);

  for (int i = 0; i < 3; ++i) {
    record_event(event("r_" + std::to_string(i), EventType::kDeposit, 1, "1"), "pending");
  }
  Dispatcher apart(*ledger_,
                   dispatch_options({.lease = absl::Seconds(30), .apply_with_claim = false}));
  EXPECT_EQ(*apart.run_once(*conn_), 3);
  EXPECT_EQ(sharing(), 4) << "the claim committed before the apply began";
  EXPECT_EQ(balance(1), "11");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"), 7);
  expect_reconciled();
}

// kill -9 of a worker inside run_once()'s transaction (claimed, the apply
// waiting on an account row): the claim never committed. Other workers
// cannot claim the events meanwhile (locked), and after the kill they are
// pending again at once — no lease to wait out, no recovery or retry counted
// — and applied exactly once without recover_stale().
TEST_F(DispatcherTest, WorkerKilledBeforeTheClaimCommits_EventsPendingAtOnceAppliedOnce) {
  constexpr int kEvents = 5;
  open_account(1, "0");
  record_pending(kEvents, "3");
  const DispatcherOptions opts = dispatch_options({.lease = absl::Minutes(10)});
  const LedgerOptions ledger_opts = options({.lock_timeout = absl::Seconds(30)});
  std::unique_ptr<pg::Connection> holder =
      hold_locks("SELECT 1 FROM {schema}.accounts WHERE user_id = 1 FOR NO KEY UPDATE");
  const pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<pg::Connection> c = connect();
    Ledger ledger(ledger_opts);
    Dispatcher d(ledger, opts);
    (void)d.run_once(*c);  // blocks in the server on the held row
    _exit(0);
  }
  ASSERT_EQ(lock_waiters("apply_steps", absl::Seconds(5)), 1);
  Dispatcher d(*ledger_, opts);
  std::unique_ptr<pg::Connection> other = connect();
  absl::StatusOr<std::vector<ClaimedEvent>> meanwhile = d.claim(*other);
  ASSERT_TRUE(meanwhile.ok()) << meanwhile.status();
  EXPECT_TRUE(meanwhile->empty()) << "claimed by the worker, not yet committed";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'pending'"),
            kEvents);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(holder->execute("ROLLBACK").ok());

  // The orphaned backend finishes its statement, finds its client gone and
  // rolls back; then the events are claimable at once.
  ASSERT_TRUE(run_once_until_applied(d, kEvents, absl::Seconds(10)));
  expect_each_applied_once_first_try(kEvents, 3);
}

// A worker's session that freezes the whole worker process (SIGSTOP) right
// after its claim returns, inside run_once()'s transaction: a host paused,
// or cut off, between two round trips. Its socket stays open, so the server
// sees a client that simply says nothing. The rest is forwarded, pipelining
// included.
class FreezesAfterClaim : public ForwardingConnection {
 public:
  using Connection::execute;
  using ForwardingConnection::ForwardingConnection;
  absl::StatusOr<Result> execute(std::string_view sql, std::span<const Param> params) override {
    absl::StatusOr<Result> r = real_.execute(sql, params);
    if (sql.find("claim_events") != std::string_view::npos) raise(SIGSTOP);
    return r;
  }
  absl::StatusOr<Result> execute_atomically(std::span<const Statement> statements) override {
    return real_.execute_atomically(statements);
  }
  absl::StatusOr<Result> open_transaction(std::string_view begin_sql,
                                          std::span<const Statement> then) override {
    return real_.open_transaction(begin_sql, then);
  }
};

// A forked worker that runs run_once() with `limit` and freezes after its
// claim; its exit code says how run_once() ended: 0 its session was gone
// (retryable, not in doubt), 2 it applied `events`, 1 anything else.
pid_t frozen_worker(const LedgerOptions& ledger_opts, const DispatcherOptions& opts, int events) {
  const pid_t child = fork();
  if (child != 0) return child;
  std::unique_ptr<pg::Connection> c = connect();
  FreezesAfterClaim frozen(*c);
  Ledger ledger(ledger_opts);
  absl::StatusOr<int> n = Dispatcher(ledger, opts).run_once(frozen);
  if (!n.ok()) {
    _exit(connection_broken(n.status()) && is_retryable(n.status()) && !commit_in_doubt(n.status())
              ? 0
              : 1);
  }
  _exit(*n == events ? 2 : 1);
}

// The child's exit code once it ends (after SIGCONT), or -1.
int exit_code(pid_t child) {
  kill(child, SIGCONT);
  int st = 0;
  if (waitpid(child, &st, 0) != child || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

// A worker (forked) frozen right after its claim of kEvents deposits of 3,
// inside run_once()'s transaction, with `idle_limit`.
class FrozenWorker : public DispatcherTest {
 protected:
  static constexpr int kEvents = 5;
  pid_t start(absl::Duration idle_limit) {
    open_account(1, "0");
    record_pending(kEvents, "3");
    opts_ = dispatch_options({.lease = absl::Minutes(10), .idle_in_transaction_limit = idle_limit});
    const pid_t child = frozen_worker(options(), opts_, kEvents);
    int st = 0;
    EXPECT_EQ(waitpid(child, &st, WUNTRACED), child);
    EXPECT_TRUE(WIFSTOPPED(st)) << "the worker froze after its claim";
    return child;
  }
  DispatcherOptions opts_;
};

// A worker frozen between its claim and its apply (run_once(), one
// transaction) holds the claimed events locked, so other workers' claims
// pass them by. With the idle limit the server ends its transaction after
// that long: the events are pending again, unleased, and another worker
// applies each exactly once, with no lease to wait out. The frozen worker,
// thawed, learns its session is gone, and nothing it did committed.
TEST_F(FrozenWorker, OthersTakeItsEventsAfterTheIdleLimit) {
  IDEMLEDGER_NEEDS_OWN_SESSION("the server ends the frozen worker's session");
  // 1.5 s: room for a loaded machine between the claim and the check below.
  const pid_t child = start(absl::Milliseconds(1500));
  const absl::Time frozen_at = absl::Now();
  // The worker that takes over keeps the default limit: a 1.5-s one of its
  // own could end its session too on a loaded machine, and retry.
  DispatcherOptions others = opts_;
  others.idle_in_transaction_limit = kIdleInTransactionLimit;
  Dispatcher d(*ledger_, others);
  EXPECT_EQ(*d.run_once(*conn_), 0) << "claimed by the frozen worker, locked";
  ASSERT_TRUE(run_once_until_applied(d, kEvents, absl::Seconds(10)));
  const absl::Duration took = absl::Now() - frozen_at;
  EXPECT_GE(took, absl::Milliseconds(1400));
  EXPECT_LT(took, absl::Seconds(5)) << "a 1.5-s idle limit, and a 10-min lease never waited out";
  EXPECT_EQ(exit_code(child), 0) << "the thawed worker's session is gone, nothing in doubt";
  expect_each_applied_once_first_try(kEvents, 3);
}

// The control, so the case above can fail: without the limit, the frozen
// worker's claim still holds the events 4 s later; thawed, it applies them.
TEST_F(FrozenWorker, WithoutTheLimitItHoldsItsClaim) {
  IDEMLEDGER_NEEDS_OWN_SESSION("the same frozen session as the case above");
  const pid_t child = start(absl::ZeroDuration());
  absl::SleepFor(absl::Seconds(4));
  EXPECT_EQ(*Dispatcher(*ledger_, opts_).run_once(*conn_), 0) << "still locked by the frozen claim";
  EXPECT_EQ(exit_code(child), 2) << "thawed, the worker applied its claim";
  expect_each_applied_once_first_try(kEvents, 3);
}

// Several worker processes draining one queue of mixed events.
TEST_F(DispatcherTest, FourWorkerProcessesDrainTheQueueExactlyOnce) {
  constexpr int kEvents = 400;
  for (int u = 1; u <= 10; ++u) open_account(u, "50");
  for (int i = 0; i < kEvents; ++i) {
    const EventType type = i % 3 == 0 ? EventType::kWithdrawal : EventType::kDeposit;
    record_event(event("m_" + std::to_string(i), type, 1 + i % 10, std::to_string(1 + i % 40)),
                 "pending");
  }
  const DispatcherOptions opts = dispatch_options({.batch_size = 16,
                                                   .max_retries = 50,
                                                   .retry_base = absl::Milliseconds(5),
                                                   .retry_cap = absl::Milliseconds(50)});
  const LedgerOptions ledger_opts = options();
  const std::vector<int> codes = run_forked(4, [&](int) {
    std::unique_ptr<pg::Connection> c = connect();
    Ledger ledger(ledger_opts);
    Dispatcher d(ledger, opts);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      absl::StatusOr<Result> left =
          c->execute("SELECT count(*) FROM " + schema_name_ +
                     ".payment_events WHERE status NOT IN ('confirmed','failed')");
      if (!left.ok()) return 1;
      if (left->at(0, 0) == "0") return 0;
      if (!d.run_once(*c).ok()) return 1;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return 3;
  });
  for (int code : codes) EXPECT_EQ(code, 0);
  EXPECT_EQ(non_terminal(), 0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"),
            count("SELECT count(*) FROM {schema}.payment_events WHERE status = 'confirmed'"));
  expect_reconciled();
}

// The trace id intake assigned follows the event into the worker's log line
// and into its dead letter.
TEST_F(DispatcherTest, LogsEachEventWithIntakesTraceId) {
  open_deposit_address();
  ASSERT_TRUE(deliver(deposit_body("t1", "2"), "trace-t1").ok());
  record_event(event("t2", EventType::kDeposit, 1, "1"), "pending");
  exec("UPDATE {schema}.payment_events SET trace_id = 'trace-t2' WHERE event_id = 't2'");
  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset) "
      "VALUES ('" +
      idempotency_key("t2", "deposit") + "', 'another fingerprint', 'success', 'DEFAULT')");

  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    JsonLineLogSink logs(out);
    Dispatcher d(*ledger_, dispatch_options({.log = &logs}));
    ASSERT_EQ(*d.run_once(*conn_), 2);
  }
  std::rewind(out);
  std::map<std::string, nlohmann::json> by_event;
  char line[8192];
  while (std::fgets(line, sizeof line, out) != nullptr) {
    nlohmann::json j = nlohmann::json::parse(line);
    by_event[j.value("event_id", "")] = j;
  }
  std::fclose(out);
  ASSERT_EQ(by_event.size(), 2u);
  EXPECT_EQ(by_event["t1"]["trace_id"], "trace-t1");
  EXPECT_EQ(by_event["t1"]["level"], "info");
  EXPECT_EQ(by_event["t1"]["result"], "applied");
  EXPECT_EQ(by_event["t1"]["amount"], "2");
  EXPECT_EQ(by_event["t2"]["trace_id"], "trace-t2");
  EXPECT_EQ(by_event["t2"]["level"], "error");
  EXPECT_EQ(by_event["t2"]["result"], "failed");
  EXPECT_NE(by_event["t2"]["error"].get<std::string>().find("conflicting replay"),
            std::string::npos);
  EXPECT_EQ(scalar("SELECT trace_id FROM {schema}.dead_letter_queue WHERE event_id = 't2'"),
            "trace-t2");
}

// An oracle that answers what the test says (the JSON-RPC one is tested
// against a fake node in finality_test.cpp).
class ScriptedOracle : public FinalityOracle {
 public:
  absl::StatusOr<bool> answer = false;
  int asked = 0;
  absl::StatusOr<bool> is_finalized(std::string_view) override {
    ++asked;
    return answer;
  }
};

TEST_F(DispatcherTest, CreditsWaitForFinalityWithoutSpendingRetries) {
  open_deposit_address();
  const std::string hash = "0x" + std::string(64, 'f');
  ASSERT_TRUE(deliver(deposit_body("chain", "5", hash)).ok());
  ASSERT_TRUE(deliver(deposit_body("plain", "5")).ok());  // no hash: nothing to wait for
  EXPECT_EQ(scalar("SELECT tx_hash FROM {schema}.payment_events WHERE event_id = 'chain'"), hash);

  ScriptedOracle oracle;
  Dispatcher d(*ledger_,
               dispatch_options({.finality = &oracle, .finality_recheck = absl::Milliseconds(1)}));
  for (const absl::StatusOr<bool>& answer :
       {absl::StatusOr<bool>(false), absl::StatusOr<bool>(absl::UnavailableError("node down"))}) {
    oracle.answer = answer;
    absl::StatusOr<std::vector<ClaimedEvent>> batch = d.claim(*conn_);
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (const ClaimedEvent& c : *batch) {
      EXPECT_EQ(*d.process(*conn_, c),
                c.event.event_id == "chain" ? Disposition::kDeferred : Disposition::kApplied);
    }
    EXPECT_EQ(status_of("chain"), "pending");
    EXPECT_EQ(scalar("SELECT retry_count FROM {schema}.payment_events WHERE event_id = 'chain'"),
              "0")
        << "waiting for finality is not a failure";
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(balance(1), "5") << "only the plain deposit so far";
  oracle.answer = true;
  EXPECT_EQ(*d.run_once(*conn_), 1);
  EXPECT_EQ(status_of("chain"), "confirmed");
  EXPECT_EQ(balance(1), "10");
  EXPECT_EQ(oracle.asked, 3) << "asked for the hashed deposit only";
  expect_reconciled();
}

TEST_F(DispatcherTest, ARevertedDepositFailsWithADeadLetterAndCreditsNothing) {
  open_deposit_address();
  ASSERT_TRUE(deliver(deposit_body("r", "5", "0x" + std::string(64, 'e')), "t-r").ok());
  // The same event naming another transaction is a conflicting replay.
  EXPECT_EQ(deliver(deposit_body("r", "5", "0x" + std::string(64, 'd'))).status().code(),
            absl::StatusCode::kAlreadyExists);
  ScriptedOracle oracle;
  oracle.answer = absl::FailedPreconditionError("transaction reverted");
  Dispatcher d(*ledger_, dispatch_options({.finality = &oracle}));
  EXPECT_EQ(*d.run_once(*conn_), 1);
  EXPECT_EQ(status_of("r"), "failed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'r' AND "
                  "reason = 'reverted' AND trace_id = 't-r'"),
            1);
  EXPECT_EQ(balance(1), "0");
}

TEST_F(DispatcherTest, ACreditNeverFinalGivesUpAtTheDeadline) {
  open_deposit_address();
  ASSERT_TRUE(deliver(deposit_body("slow", "5", "0x" + std::string(64, 'c'))).ok());
  exec("UPDATE {schema}.payment_events SET created_at = now() - interval '2 hours'");
  ScriptedOracle oracle;  // never final
  Dispatcher d(*ledger_,
               dispatch_options({.finality = &oracle, .finality_deadline = absl::Hours(1)}));
  EXPECT_EQ(*d.run_once(*conn_), 1);
  EXPECT_EQ(status_of("slow"), "failed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE reason = "
                  "'not_final_in_time'"),
            1);
  EXPECT_EQ(balance(1), "0");
}

}  // namespace
}  // namespace idemledger::testing
