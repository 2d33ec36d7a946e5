// process_deposit / process_withdrawal / process_compensation against a real
// PostgreSQL: every test checks the balance AND balance_events AND the
// idempotency record AND the payment event's status.
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

class Ledger_ : public LedgerTest {
 protected:
  std::string outcome_of(const PaymentEvent& e) {
    return scalar("SELECT outcome FROM {schema}.processed_events WHERE idempotency_key = '" +
                  idempotency_key(e.event_id, to_string(e.type)) + "'");
  }
  long ledger_rows(const std::string& event_id) {
    return count("SELECT count(*) FROM {schema}.balance_events WHERE source_event_id = '" +
                 event_id + "'");
  }
  void expect_nothing_written() {
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 0);
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 0);
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 0);
  }
};

TEST_F(Ledger_, Deposit_FirstTime_CreditsAndRecordsEverything) {
  open_account(1, "100");
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "50.000000000000000001");
  absl::StatusOr<Outcome> r = ledger_->process_deposit(*conn_, e);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, Outcome::kApplied);
  EXPECT_EQ(balance(1), "150.000000000000000001");
  EXPECT_EQ(ledger_rows("evt_1"), 1);
  EXPECT_EQ(outcome_of(e), "success");
  EXPECT_EQ(status_of("evt_1"), "confirmed");
  EXPECT_EQ(scalar("SELECT retry_count FROM {schema}.payment_events"), "0");
  expect_reconciled();
}

// process_deposit's common case — a new credit to an open account — is one
// statement without apply_event(); everything else finds that statement
// wrote nothing and goes through apply_event() (ledger.cpp, kFastCreditSql).
TEST_F(Ledger_, Deposit_NewCreditToAnOpenAccount_OneStatementElseTheProcedure) {
  open_account(1, "100");
  const auto procedure_calls = [&] {
    return count(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
        "WHERE schemaname = '" +
        schema_name_ + "' AND funcname = 'apply_event'");
  };
  exec("BEGIN");
  exec("SET LOCAL track_functions = 'pl'");
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "50");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kApplied);
  EXPECT_EQ(procedure_calls(), 0) << "the common case needs no procedure";
  EXPECT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kAlreadyApplied);
  EXPECT_EQ(procedure_calls(), 1) << "a replay is the procedure's to answer";
  // A first credit in another asset opens its account: the procedure's too.
  exec("INSERT INTO {schema}.assets (code, decimals) VALUES ('USDC', 6)");
  PaymentEvent usdc = event("evt_2", EventType::kDeposit, 1, "2.5");
  usdc.asset = AssetCode("USDC");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, usdc), Outcome::kApplied);
  EXPECT_EQ(procedure_calls(), 2);
  usdc.event_id = "evt_3";
  ASSERT_EQ(*ledger_->process_deposit(*conn_, usdc), Outcome::kApplied);
  EXPECT_EQ(procedure_calls(), 2) << "its second credit is the common case again";
  exec("COMMIT");
  EXPECT_EQ(balance(1), "150");
  EXPECT_EQ(ledger_rows("evt_1"), 1);
  EXPECT_EQ(ledger_rows("evt_3"), 1);
  EXPECT_EQ(outcome_of(e), "success");
  EXPECT_EQ(status_of("evt_1"), "confirmed");
  EXPECT_EQ(status_of("evt_3"), "confirmed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.system_entries WHERE source_event_id = 'evt_3' "
                  "AND account = 'external' AND amount = -2.5 AND asset = 'USDC'"),
            1);
  expect_reconciled();
}

TEST_F(Ledger_, Deposit_Replay_AlreadyAppliedAndNothingChanges) {
  open_account(1, "100");
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "50");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kApplied);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Outcome> r = ledger_->process_deposit(*conn_, e);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, Outcome::kAlreadyApplied);
  }
  // The same event with an equal amount spelled differently is a duplicate too.
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("evt_1", EventType::kDeposit, 1, "5e1")),
            Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "150");
  EXPECT_EQ(ledger_rows("evt_1"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 1);
  EXPECT_EQ(status_of("evt_1"), "confirmed");
  expect_reconciled();
}

TEST_F(Ledger_, Deposit_ConflictingReplay_RefusedAlertedAndNothingChanges) {
  open_account(1, "0");
  open_account(2, "0");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("evt_1", EventType::kDeposit, 1, "50")),
            Outcome::kApplied);
  for (const PaymentEvent& changed : {event("evt_1", EventType::kDeposit, 1, "5000"),
                                      event("evt_1", EventType::kDeposit, 2, "50"),
                                      event("evt_1", EventType::kAirdrop, 1, "50")}) {
    absl::StatusOr<Outcome> r = ledger_->process_deposit(*conn_, changed);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("conflicting replay"));
  }
  EXPECT_EQ(balance(1), "50");
  EXPECT_EQ(balance(2), "0");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 1);
  EXPECT_THAT(alerts_.keys(), Contains("conflicting_replay:evt_1"));
  expect_reconciled();
}

TEST_F(Ledger_, Deposit_UnknownUser_NotFoundAndNothingWritten) {
  absl::StatusOr<Outcome> r =
      ledger_->process_deposit(*conn_, event("evt_1", EventType::kDeposit, 42, "1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("user 42 not found"));
  expect_nothing_written();
}

// A session on a node that cannot write (a standby, or a primary demoted
// under it): every kind of call is retryable, breaks the session (a pool
// replaces it; target_session_attrs=read-write then finds the primary) and
// writes nothing — never a permanent failure, never a dead letter.
TEST_F(Ledger_, OnANodeThatCannotWrite_RetryableSessionBrokenNothingWritten) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level read-only default");
  open_account(1, "10");
  const auto read_only = [&] {
    std::unique_ptr<pg::Connection> c = connect();
    EXPECT_TRUE(c->execute("SET default_transaction_read_only = on").ok());
    return c;
  };
  const auto expect_broken = [](const absl::Status& s, std::string_view what) {
    EXPECT_EQ(sqlstate(s), "25006") << what << ": " << s;
    EXPECT_TRUE(is_retryable(s)) << what;
    EXPECT_TRUE(connection_broken(s)) << what;
  };
  std::unique_ptr<pg::Connection> c = read_only();
  expect_broken(ledger_->process_deposit(*c, event("evt_1", EventType::kDeposit, 1, "1")).status(),
                "deposit");
  EXPECT_TRUE(c->is_broken());
  c = read_only();
  expect_broken(
      ledger_->process_withdrawal(*c, event("evt_2", EventType::kWithdrawal, 1, "1")).status(),
      "withdrawal");
  c = read_only();
  const std::vector<PaymentEvent> batch = {event("evt_3", EventType::kDeposit, 1, "1")};
  expect_broken(ledger_->process_batch(*c, batch).status(), "batch");
  c = read_only();
  expect_broken(
      ledger_->hold(*c, {.event_id = "evt_4", .user_id = 1, .amount = *Amount::parse("1")})
          .status(),
      "hold");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 0);
  EXPECT_EQ(balance(1), "10");
}

TEST_F(Ledger_, Deposit_ClaimedByWorker_MovesEnqueuedToConfirmedAndResetsRetries) {
  open_account(1, "0");
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "7.5");
  record_event(e, "enqueued", 3);
  EXPECT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kApplied);
  EXPECT_EQ(status_of("evt_1"), "confirmed");
  EXPECT_EQ(scalar("SELECT retry_count FROM {schema}.payment_events"), "0");
  EXPECT_EQ(balance(1), "7.5");
  EXPECT_EQ(ledger_rows("evt_1"), 1);
  EXPECT_EQ(outcome_of(e), "success");
}

TEST_F(Ledger_, Deposit_RecordedPending_GoesThroughEnqueuedToConfirmed) {
  open_account(1, "0");
  const PaymentEvent e = event("evt_1", EventType::kAirdrop, 1, "1");
  record_event(e, "pending");
  EXPECT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kApplied);
  EXPECT_EQ(status_of("evt_1"), "confirmed");
  EXPECT_EQ(balance(1), "1");
}

TEST_F(Ledger_, Deposit_RecordedWithOtherContent_IsAConflict) {
  open_account(1, "0");
  record_event(event("evt_1", EventType::kDeposit, 1, "1"), "enqueued");
  absl::StatusOr<Outcome> r =
      ledger_->process_deposit(*conn_, event("evt_1", EventType::kDeposit, 1, "2"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(balance(1), "0");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 0);
  EXPECT_EQ(status_of("evt_1"), "enqueued");
}

TEST_F(Ledger_, Deposit_FailedEventIsTerminal) {
  open_account(1, "0");
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "1");
  record_event(e, "failed");
  absl::StatusOr<Outcome> r = ledger_->process_deposit(*conn_, e);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ(balance(1), "0");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 0);
}

TEST_F(Ledger_, Withdrawal_Success_Debits) {
  open_account(1, "100");
  const PaymentEvent e = event("w_1", EventType::kWithdrawal, 1, "30");
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, e), Outcome::kApplied);
  EXPECT_EQ(
      *ledger_->process_withdrawal(*conn_, event("fee_1", EventType::kWithdrawalFee, 1, "0.5")),
      Outcome::kApplied);
  EXPECT_EQ(balance(1), "69.5");
  EXPECT_EQ(
      scalar("SELECT amount::text FROM {schema}.balance_events WHERE source_event_id = 'w_1'"),
      "-30.000000000000000000");
  EXPECT_EQ(outcome_of(e), "success");
  EXPECT_EQ(status_of("w_1"), "confirmed");
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, e), Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "69.5");
  expect_reconciled();
}

TEST_F(Ledger_, Withdrawal_InsufficientFunds_RecordedNeverDebited) {
  open_account(1, "10");
  const PaymentEvent e = event("w_1", EventType::kWithdrawal, 1, "10.000000000000000001");
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, e), Outcome::kInsufficientFunds);
  EXPECT_EQ(balance(1), "10");
  EXPECT_EQ(ledger_rows("w_1"), 0);
  EXPECT_EQ(outcome_of(e), "insufficient_funds");
  EXPECT_EQ(status_of("w_1"), "failed");
  expect_reconciled();
}

TEST_F(Ledger_, Withdrawal_ReplayOfInsufficientFunds_NeverDebitsEvenAfterFundsArrive) {
  open_account(1, "10");
  const PaymentEvent e = event("w_1", EventType::kWithdrawal, 1, "20");
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, e), Outcome::kInsufficientFunds);
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "100")),
            Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, e), Outcome::kInsufficientFunds);
  EXPECT_EQ(balance(1), "110");
  EXPECT_EQ(ledger_rows("w_1"), 0);
  EXPECT_EQ(status_of("w_1"), "failed");
}

TEST_F(Ledger_, Withdrawal_RecordedEnqueued_InsufficientFundsMovesItToFailed) {
  open_account(1, "1");
  const PaymentEvent e = event("w_1", EventType::kWithdrawal, 1, "2");
  record_event(e, "enqueued");
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, e), Outcome::kInsufficientFunds);
  EXPECT_EQ(status_of("w_1"), "failed");
}

// The seed's crash window: the outcome was committed but the status was not
// moved (a legacy or interrupted writer). The replay path syncs the FSM.
TEST_F(Ledger_, Replay_SyncsStatusFromRecordedOutcome) {
  open_account(1, "100");
  struct Case {
    std::string id;
    EventType type;
    std::string status_before;
    std::string outcome;
    Outcome expected;
    std::string status_after;
  };
  const Case cases[] = {
      {"a", EventType::kDeposit, "enqueued", "success", Outcome::kAlreadyApplied, "confirmed"},
      {"b", EventType::kDeposit, "processing", "success", Outcome::kAlreadyApplied, "confirmed"},
      {"c", EventType::kDeposit, "pending", "success", Outcome::kAlreadyApplied, "confirmed"},
      {"d", EventType::kWithdrawal, "enqueued", "insufficient_funds", Outcome::kInsufficientFunds,
       "failed"},
      {"e", EventType::kWithdrawal, "processing", "insufficient_funds", Outcome::kInsufficientFunds,
       "failed"},
  };
  for (const Case& c : cases) {
    const PaymentEvent e = event(c.id, c.type, 1, "5");
    record_event(e, c.status_before);
    ASSERT_TRUE(
        conn_
            ->execute(
                schema_.qualify("INSERT INTO {schema}.processed_events (idempotency_key, "
                                "fingerprint, outcome, asset) VALUES ($1, $2, $3, 'DEFAULT')"),
                {Param(idempotency_key(e.event_id, to_string(e.type))),
                 Param(payload_fingerprint(1, e.amount, to_string(e.type))), Param(c.outcome)})
            .ok());
    absl::StatusOr<Outcome> r = is_credit(c.type) ? ledger_->process_deposit(*conn_, e)
                                                  : ledger_->process_withdrawal(*conn_, e);
    ASSERT_TRUE(r.ok()) << c.id << ": " << r.status();
    EXPECT_EQ(*r, c.expected) << c.id;
    EXPECT_EQ(status_of(c.id), c.status_after) << c.id;
  }
  EXPECT_EQ(balance(1), "100");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 0);
}

TEST_F(Ledger_, Replay_OrphanRecordIsAlertedNotReapplied) {
  open_account(1, "0");
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "5");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kApplied);
  exec("DELETE FROM {schema}.payment_events");
  EXPECT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "5");
  EXPECT_EQ(ledger_rows("evt_1"), 1);
  EXPECT_THAT(alerts_.keys(), Contains("orphan_deposit:evt_1"));
}

TEST_F(Ledger_, Replay_AfterIdempotencyCleanup_StillAppliedOnce) {
  open_account(1, "0");
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "5");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kApplied);
  exec("DELETE FROM {schema}.processed_events");  // what cleanup does to old records
  EXPECT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "5");
  EXPECT_EQ(ledger_rows("evt_1"), 1);
  EXPECT_EQ(outcome_of(e), "success");
}

TEST_F(Ledger_, Replay_WithOnlyBalanceEventsLeft_TheLastGuardHolds) {
  open_account(1, "0");
  const PaymentEvent e = event("evt_1", EventType::kDeposit, 1, "5");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kApplied);
  exec("DELETE FROM {schema}.processed_events");
  exec("DELETE FROM {schema}.payment_events");
  EXPECT_EQ(*ledger_->process_deposit(*conn_, e), Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "5");
  EXPECT_EQ(ledger_rows("evt_1"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 0) << "rolled back";
  EXPECT_THAT(alerts_.keys(), Contains("guard_without_record:evt_1"));
}

TEST_F(Ledger_, Compensation_WithFunds_ReversesOnceUnderItsOwnKey) {
  open_account(1, "0");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("0xabc", EventType::kDeposit, 1, "50")),
            Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_compensation(*conn_, "0xabc", 1, *Amount::parse("50")),
            Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_compensation(*conn_, "0xabc", 1, *Amount::parse("50")),
            Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "0");
  EXPECT_EQ(
      scalar(
          "SELECT amount::text FROM {schema}.balance_events WHERE source_event_id = 'reorg:0xabc' "
          "AND event_type = 'reorg_compensation'"),
      "-50.000000000000000000");
  EXPECT_EQ(status_of("reorg:0xabc"), "confirmed");
  expect_reconciled();
}

TEST_F(Ledger_, Compensation_AnySpellingOfAHashIsOneCompensation) {
  open_account(1, "100");
  const std::string lower = "0x" + std::string(60, 'a') + "beef";
  const std::string mixed = "0x" + std::string(60, 'A') + "BeEf";
  EXPECT_EQ(*ledger_->process_compensation(*conn_, mixed, 1, *Amount::parse("5")),
            Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_compensation(*conn_, lower, 1, *Amount::parse("5")),
            Outcome::kAlreadyApplied);
  EXPECT_EQ(*ledger_->process_compensation(*conn_, mixed, 1, *Amount::parse("5")),
            Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "95");
  EXPECT_EQ(status_of("reorg:" + lower), "confirmed");

  // One recorded before hashes were keyed in lower case keeps its key: its
  // retry after the upgrade is the same compensation, not a second debit.
  const std::string legacy = "0x" + std::string(60, 'C') + "0DE1";
  const PaymentEvent old{.event_id = "reorg:" + legacy,
                         .type = EventType::kReorgCompensation,
                         .user_id = 1,
                         .amount = *Amount::parse("7")};
  ASSERT_EQ(*ledger_->process_event(*conn_, old), Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_compensation(*conn_, legacy, 1, *Amount::parse("7")),
            Outcome::kAlreadyApplied);
  EXPECT_EQ(balance(1), "88");
  expect_reconciled();
}

TEST_F(Ledger_, Compensation_WithoutFunds_FailsLoudlyNeverNegative) {
  open_account(1, "0");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("0xabc", EventType::kDeposit, 1, "50")),
            Outcome::kApplied);
  ASSERT_EQ(*ledger_->process_withdrawal(*conn_, event("w_1", EventType::kWithdrawal, 1, "40")),
            Outcome::kApplied);
  absl::StatusOr<Outcome> r =
      ledger_->process_compensation(*conn_, "0xabc", 1, *Amount::parse("50"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("exceeds the available 10"));
  EXPECT_EQ(balance(1), "10");
  EXPECT_EQ(ledger_rows("reorg:0xabc"), 0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.dead_letter_queue WHERE event_id = 'reorg:0xabc'"),
            1);
  EXPECT_THAT(alerts_.keys(), Contains("reorg_compensation_failed:reorg:0xabc"));
  // Once funds arrive, the same compensation can be applied (still once).
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d_2", EventType::kDeposit, 1, "40")),
            Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_compensation(*conn_, "0xabc", 1, *Amount::parse("50")),
            Outcome::kApplied);
  EXPECT_EQ(balance(1), "0");
  expect_reconciled();
}

TEST_F(Ledger_, BadInput_IsRefusedByRuleAndNothingWritten) {
  open_account(1, "100");
  const struct {
    PaymentEvent e;
    bool deposit;
    std::string rule;
  } cases[] = {
      {event("", EventType::kDeposit, 1, "1"), true, "event_id must be 1..128 bytes"},
      {event(std::string(129, 'x'), EventType::kDeposit, 1, "1"), true,
       "event_id must be 1..128 bytes"},
      {event("bad\xff", EventType::kDeposit, 1, "1"), true, "valid UTF-8"},
      {event(std::string("a\0b", 3), EventType::kDeposit, 1, "1"), true, "without NUL"},
      {event("e", EventType::kDeposit, 0, "1"), true, "user_id must be positive"},
      {event("e", EventType::kWithdrawal, 1, "1"), true,
       "process_deposit takes deposit or airdrop"},
      {event("e", EventType::kDeposit, 1, "1"), false, "process_withdrawal takes withdrawal"},
      {event("e", EventType::kReorgCompensation, 1, "1"), false,
       "process_withdrawal takes withdrawal"},
      {PaymentEvent{.event_id = "e", .type = EventType::kDeposit, .user_id = 1, .amount = {}}, true,
       "amount must be greater than zero"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Outcome> r = c.deposit ? ledger_->process_deposit(*conn_, c.e)
                                          : ledger_->process_withdrawal(*conn_, c.e);
    ASSERT_FALSE(r.ok()) << c.rule;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.rule;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.rule));
  }
  expect_nothing_written();
  EXPECT_EQ(balance(1), "100");
}

TEST_F(Ledger_, Notifications_WrittenInTheSameTransactionOncePerOutcome) {
  ledger_ = std::make_unique<Ledger>(options({.write_notifications = true}));
  open_account(1, "0");
  const PaymentEvent d = event("d_1", EventType::kDeposit, 1, "5");
  const PaymentEvent w = event("w_1", EventType::kWithdrawal, 1, "50");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ledger_->process_deposit(*conn_, d).ok());
    ASSERT_TRUE(ledger_->process_withdrawal(*conn_, w).ok());
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE topic = 'credited'"), 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE topic = 'insufficient_funds'"), 1);
  EXPECT_EQ(scalar("SELECT payload->>'amount' FROM {schema}.outbox WHERE topic = 'credited'"), "5");
  // A refused event writes no notification.
  ASSERT_FALSE(ledger_->process_deposit(*conn_, event("d_2", EventType::kDeposit, 99, "5")).ok());
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox"), 2);
}

TEST_F(Ledger_, FindBalanceMismatches_ReportsTampering) {
  open_account(1, "10");
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "5")),
            Outcome::kApplied);
  expect_reconciled();
  exec("UPDATE {schema}.accounts SET balance = balance + 1 WHERE user_id = 1");
  absl::StatusOr<std::vector<BalanceMismatch>> m = ledger_->find_balance_mismatches(*conn_);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0].user_id, 1);
  EXPECT_EQ((*m)[0].expected, "15");
}

}  // namespace
}  // namespace idemledger::testing
