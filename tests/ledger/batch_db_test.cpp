// Ledger::process_batch against a real PostgreSQL: every answer equals the
// one the event gets alone (one case per rule, then a random stream applied
// as singles into one schema and as batches into another), and concurrent
// batches from forked processes over the same accounts never deadlock and
// keep every invariant.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "gmock/gmock.h"
#include "idemledger/core/retry.hpp"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/ledger/migrate.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Batch = LedgerTest;

// An answer as one comparable word: the outcome's name, or the status code's.
std::string word(const absl::StatusOr<Outcome>& r) {
  return r.ok() ? std::string(to_string(*r)) : absl::StatusCodeToString(r.status().code());
}

std::vector<std::string> words(const std::vector<absl::StatusOr<Outcome>>& answers) {
  std::vector<std::string> out;
  for (const auto& a : answers) out.push_back(word(a));
  return out;
}

// A step's answer as one comparable word: "<outcome>" for an event,
// "<outcome>:<state>" for a hold step, or the status code's name.
std::string step_word(const absl::StatusOr<StepResult>& r) {
  if (!r.ok()) return absl::StatusCodeToString(r.status().code());
  if (const auto* o = std::get_if<Outcome>(&*r)) return std::string(to_string(*o));
  const HoldResult& h = std::get<HoldResult>(*r);
  return fmt::format("{}:{}", to_string(h.outcome), to_string(h.state));
}

std::vector<std::string> step_words(const std::vector<absl::StatusOr<StepResult>>& answers) {
  std::vector<std::string> out;
  for (const auto& a : answers) out.push_back(step_word(a));
  return out;
}

HoldRequest hold_of(std::string id, std::int64_t user, std::string_view amount,
                    std::string_view fee, absl::Duration expires_in = absl::Hours(1)) {
  return {.event_id = std::move(id),
          .user_id = user,
          .amount = *Amount::parse(amount),
          .fee = fee == "0" ? Amount() : *Amount::parse(fee),  // parse() takes amounts > 0
          .expires_in = expires_in};
}

PaymentEvent in(std::string id, EventType type, std::int64_t user, std::string_view amount,
                std::optional<std::string_view> asset = std::nullopt) {
  PaymentEvent e{
      .event_id = std::move(id), .type = type, .user_id = user, .amount = *Amount::parse(amount)};
  if (asset) e.asset = *AssetCode::create(*asset);
  return e;
}

// One batch, one case per rule, in an order where input order decides.
TEST_F(Batch, EachEventAnswersAsAlone_InInputOrder) {
  ASSERT_TRUE(add_asset(*conn_, schema_, {.code = "USDC", .decimals = 6}).ok());
  open_account(1, "10");
  open_account(2, "0");
  const std::vector<PaymentEvent> events = {
      in("d1", EventType::kDeposit, 1, "5"),                  // set-based credit
      in("d1", EventType::kDeposit, 1, "5"),                  // duplicate within the batch
      in("d1", EventType::kDeposit, 1, "6"),                  // conflicting replay
      in("w1", EventType::kWithdrawal, 2, "3"),               // before d2: nothing to spend
      in("d2", EventType::kDeposit, 2, "4"),                  // account 2 is debited: one by one
      in("w2", EventType::kWithdrawal, 2, "3"),               // after d2: funds are there
      in("u1", EventType::kDeposit, 2, "1.5", "USDC"),        // first credit in USDC opens it
      in("u2", EventType::kDeposit, 2, "1.0000001", "USDC"),  // beyond USDC's 6 decimals
      in("x1", EventType::kDeposit, 99, "1"),                 // unknown user
      in("", EventType::kDeposit, 1, "1"),                    // invalid: never sent
      in("h1", EventType::kWithdrawalRequested, 1, "1"),      // a hold step
      in("a1", EventType::kAirdrop, 1, "0.25"),               // set-based, same account as d1
      in("f1", EventType::kWithdrawalFee, 1, "0.5"),          // makes account 1 one by one
  };
  absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> r = ledger_->process_batch(*conn_, events);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(words(*r),
              ElementsAre("applied", "already_applied", "ALREADY_EXISTS", "insufficient_funds",
                          "applied", "applied", "applied", "INVALID_ARGUMENT", "NOT_FOUND",
                          "INVALID_ARGUMENT", "INVALID_ARGUMENT", "applied", "applied"));
  EXPECT_THAT(std::string((*r)[10].status().message()), HasSubstr("hold step"));
  // Alone too: a hold step's type never reaches apply_event (it would credit).
  EXPECT_EQ(ledger_->process_event(*conn_, events[10]).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string((*r)[7].status().message()), HasSubstr("decimal places"));
  EXPECT_THAT(alerts_.keys(), ElementsAre("conflicting_replay:d1"));

  EXPECT_EQ(balance(1), "14.75");  // 10 + 5 + 0.25 - 0.5
  EXPECT_EQ(balance(2), "1");      // 4 - 3
  EXPECT_EQ(scalar("SELECT balance FROM {schema}.accounts WHERE user_id = 2 AND asset = 'USDC'"),
            "1.500000000000000000");
  EXPECT_EQ(scalar("SELECT string_agg(event_id || ':' || status, ',' ORDER BY event_id) "
                   "FROM {schema}.payment_events"),
            "a1:confirmed,d1:confirmed,d2:confirmed,f1:confirmed,u1:confirmed,w1:failed,"
            "w2:confirmed");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events WHERE source_event_id <> "
                  "'v1-opening'"),
            6);
  EXPECT_EQ(scalar("SELECT coalesce(sum(amount), 0) FROM (SELECT asset, amount FROM "
                   "{schema}.balance_events UNION ALL SELECT asset, amount FROM "
                   "{schema}.system_entries) legs WHERE asset = 'USDC'"),
            "0.000000000000000000");
  expect_reconciled();

  // The same batch again: every answer is the first one's, nothing moves.
  absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> again =
      ledger_->process_batch(*conn_, events);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(words(*again),
              ElementsAre("already_applied", "already_applied", "ALREADY_EXISTS",
                          "insufficient_funds", "already_applied", "already_applied",
                          "already_applied", "INVALID_ARGUMENT", "NOT_FOUND", "INVALID_ARGUMENT",
                          "INVALID_ARGUMENT", "already_applied", "already_applied"));
  EXPECT_EQ(balance(1), "14.75");
  EXPECT_EQ(balance(2), "1");
}

// Hold steps in one batch, one case per rule, in an order where input order
// decides: each answers as hold(), post() or void_hold() alone would.
TEST_F(Batch, HoldStepsAnswerAsAlone_InInputOrder) {
  open_account(1, "10");
  open_account(2, "0");
  const std::vector<LedgerStep> steps = {
      hold_of("h0", 2, "3", "1"),             // before d1: nothing to hold
      in("d1", EventType::kDeposit, 2, "5"),  // a credit to an account the batch holds from
      hold_of("h1", 2, "3", "1"),             // after d1: held
      hold_of("h2", 2, "2", "0"),             // 5 - 4 held = 1 available: rejected
      PostRequest{.hold_id = "h1", .amount = *Amount::parse("2")},  // capture 2 + fee 1 of 3 + 1
      PostRequest{.hold_id = "h1", .amount = *Amount::parse("2")},  // its replay
      VoidRequest{.hold_id = "h1"},  // a void after the post: refused
      hold_of("h1", 2, "3", "2"),    // the hold's id, other content
      hold_of("h3", 1, "4", "0"),    // user 1: held
      VoidRequest{.hold_id = "h3", .user_id = 1},
      PostRequest{.hold_id = "h3"},                      // after its void: refused
      PostRequest{.hold_id = "h3", .user_id = 2},        // another user's hold
      hold_of("h4", 1, "1", "0", absl::ZeroDuration()),  // expires at once
      PostRequest{.hold_id = "h4"},                      // past expiry: refused, and it expires
      PostRequest{.hold_id = "nope"},                    // no such hold
      hold_of("h5", 1, "1", "0"),
      PostRequest{.hold_id = "h5", .amount = *Amount::parse("2")},  // more than it holds
      hold_of("", 1, "1", "0"),                                     // invalid: never sent
      in("w1", EventType::kWithdrawalRequested, 1, "1"),  // a hold step as an event: invalid
      in("d2", EventType::kDeposit, 1, "1"),              // a credit to user 1, after its holds
  };
  absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> r = ledger_->process_steps(*conn_, steps);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<std::string> first = {"insufficient_funds:rejected",
                                          "applied",
                                          "applied:held",
                                          "insufficient_funds:rejected",
                                          "applied:posted",
                                          "already_applied:posted",
                                          "refused:posted",
                                          "ALREADY_EXISTS",
                                          "applied:held",
                                          "applied:voided",
                                          "refused:voided",
                                          "ALREADY_EXISTS",
                                          "applied:held",
                                          "refused:expired",
                                          "NOT_FOUND",
                                          "applied:held",
                                          "INVALID_ARGUMENT",
                                          "INVALID_ARGUMENT",
                                          "INVALID_ARGUMENT",
                                          "applied"};
  EXPECT_EQ(step_words(*r), first);
  EXPECT_THAT(alerts_.keys(),
              ElementsAre("hold_refused:h1", "conflicting_replay:h1", "hold_refused:h3",
                          "conflicting_replay:h3", "hold_refused:h4"));
  EXPECT_EQ(balance(2), "2");  // 5 - 2 - 1
  EXPECT_EQ(balance(1), "11");
  EXPECT_EQ(scalar("SELECT held FROM {schema}.accounts WHERE user_id = 2"), "0.000000000000000000");
  EXPECT_EQ(scalar("SELECT held FROM {schema}.accounts WHERE user_id = 1"),
            "1.000000000000000000");  // h5
  EXPECT_EQ(scalar("SELECT string_agg(event_id || ':' || state, ',' ORDER BY event_id) "
                   "FROM {schema}.holds"),
            "h0:rejected,h1:posted,h2:rejected,h3:voided,h4:expired,h5:held");
  EXPECT_EQ(scalar("SELECT posted_amount || '+' || posted_fee FROM {schema}.holds "
                   "WHERE event_id = 'h1'"),
            "2.000000000000000000+1.000000000000000000");
  expect_reconciled();
  absl::StatusOr<std::vector<BalanceMismatch>> mismatches =
      ledger_->find_balance_mismatches(*conn_);
  ASSERT_TRUE(mismatches.ok());
  EXPECT_TRUE(mismatches->empty());

  // The same batch again: each step answers what happened the first time
  // (the holds rejected, posted or voided before are not judged again).
  absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> again =
      ledger_->process_steps(*conn_, steps);
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<std::string> replayed = first;
  replayed[1] = "already_applied";
  replayed[2] = "already_applied:posted";
  replayed[4] = "already_applied:posted";
  replayed[8] = "already_applied:voided";
  replayed[9] = "already_applied:voided";
  replayed[12] = "already_applied:expired";
  replayed[15] = "already_applied:held";
  replayed[19] = "already_applied";
  EXPECT_EQ(step_words(*again), replayed);
  EXPECT_EQ(balance(2), "2");
  EXPECT_EQ(balance(1), "11");
}

TEST_F(Batch, OversizedIsRefusedWhole_EmptyCostsNothing) {
  std::vector<PaymentEvent> events(kMaxBatchSize + 1, in("e", EventType::kDeposit, 1, "1"));
  absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> r = ledger_->process_batch(*conn_, events);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("at most 1000"));
  absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> none = ledger_->process_batch(*conn_, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// The common case really is set-based: apply_event() runs only for the
// events that need it (counted by PostgreSQL's function statistics).
TEST_F(Batch, CreditsToUndebitedAccountsSkipTheProcedure) {
  IDEMLEDGER_NEEDS_OWN_SESSION("function statistics are per session");
  for (int u = 1; u <= 11; ++u) open_account(u, "10");
  exec("SET track_functions = 'pl'");
  std::vector<PaymentEvent> events;
  for (int i = 0; i < 50; ++i) {
    events.push_back(in("p" + std::to_string(i), EventType::kDeposit, 1 + i % 10, "1"));
  }
  events.push_back(in("p7", EventType::kDeposit, 8, "1"));      // a duplicate: one by one
  events.push_back(in("q1", EventType::kWithdrawal, 11, "1"));  // a debit: one by one
  events.push_back(in("q2", EventType::kDeposit, 11, "1"));     // its account's credit too
  absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> r = ledger_->process_batch(*conn_, events);
  ASSERT_TRUE(r.ok()) << r.status();
  for (std::size_t i = 0; i < 50; ++i) EXPECT_EQ(word((*r)[i]), "applied") << i;
  EXPECT_THAT(std::vector<std::string>({word((*r)[50]), word((*r)[51]), word((*r)[52])}),
              ElementsAre("already_applied", "applied", "applied"));
  EXPECT_EQ(function_calls("apply_event"), "3");
  EXPECT_EQ(balance(1), "15");
  EXPECT_EQ(balance(11), "10");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events WHERE source_event_id <> "
                  "'v1-opening'"),
            52);
  expect_reconciled();
}

// Metrics count each event of a batch; the latency is one observation per call.
TEST_F(Batch, MetricsCountEveryEventAndTimeTheCallOnce) {
  open_account(1, "1");
  prometheus::Registry registry;
  LedgerMetrics metrics(registry);
  const Ledger measured(options({.metrics = &metrics}));
  const std::vector<PaymentEvent> events = {
      in("m1", EventType::kDeposit, 1, "1"), in("m1", EventType::kDeposit, 1, "1"),
      in("m2", EventType::kWithdrawal, 1, "5"), in("m3", EventType::kDeposit, 1, "2")};
  absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> r = measured.process_batch(*conn_, events);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(metrics.applied.Value(), 2);
  EXPECT_EQ(metrics.duplicates.Value(), 1);
  EXPECT_EQ(metrics.insufficient_funds.Value(), 1);
  EXPECT_EQ(metrics.apply_duration.Collect().histogram.sample_count, 1u);
}

// Event ids with the characters an array literal treats specially stay
// one element each.
TEST_F(Batch, IdsWithQuotesCommasAndBracesStayWhole) {
  open_account(1, "0");
  const std::vector<PaymentEvent> events = {
      in(R"(a"b)", EventType::kDeposit, 1, "1"), in(R"(c\d)", EventType::kDeposit, 1, "1"),
      in("e,f}{", EventType::kDeposit, 1, "1"), in("NULL", EventType::kDeposit, 1, "1"),
      in(" sp ", EventType::kDeposit, 1, "1")};
  absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> r = ledger_->process_batch(*conn_, events);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(words(*r), ElementsAre("applied", "applied", "applied", "applied", "applied"));
  EXPECT_EQ(scalar("SELECT string_agg(event_id, '|' ORDER BY event_id) FROM "
                   "{schema}.payment_events"),
            R"( sp |NULL|a"b|c\d|e,f}{)");
  EXPECT_EQ(balance(1), "5");
}

// A random stream — credits, debits, fees, compensations, holds (some
// expiring at once), posts (whole and partial) and voids over three assets,
// duplicates, conflicts, overdrafts, unknown users, assets and holds, too
// many decimals — applied once as single calls into this test's schema and
// once as batches of random sizes into a second schema: every answer, every
// account (balance and held), every event status, every hold's state and
// every posting agree.
TEST_F(Batch, RandomStream_BatchesAnswerAsSingles) {
  const Schema other = unique_schema();
  ASSERT_TRUE(migrate(*conn_, other).ok());
  LedgerOptions in_other = options();
  in_other.schema = other;
  const Ledger batched(in_other);
  for (const Schema& s : {schema_, other}) {
    ASSERT_TRUE(add_asset(*conn_, s, {.code = "USDC", .decimals = 6}).ok());
    ASSERT_TRUE(add_asset(*conn_, s, {.code = "WBTC", .decimals = 8}).ok());
  }
  const Ledger singles = *ledger_;
  for (std::int64_t u = 1; u <= 6; ++u) {
    ASSERT_TRUE(singles.open_account(*conn_, u, *Amount::parse("50")).ok());
    ASSERT_TRUE(batched.open_account(*conn_, u, *Amount::parse("50")).ok());
  }

  std::mt19937 rng(20261201);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::vector<std::optional<std::string_view>> assets = {std::nullopt, "USDC", "WBTC",
                                                               "DOGE"};
  const auto amount_text = [&] {
    return std::to_string(1 + pick(40)) + "." + std::to_string(pick(1000));
  };
  std::vector<LedgerStep> stream;
  std::vector<std::string> holds = {"ghost"};  // hold ids to post or void; one never held
  for (int i = 0; i < 1500; ++i) {
    const int roll = pick(100);
    if (roll < 15 && !stream.empty()) {  // a redelivery
      stream.push_back(sent_before(stream, pick));
      continue;
    }
    if (roll < 18 && !stream.empty()) {  // the same id, other content
      LedgerStep step = sent_before(stream, pick);
      std::visit(
          [&](auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, PaymentEvent> || std::is_same_v<T, HoldRequest>) {
              x.amount = *Amount::parse("0.5")->checked_add(x.amount);
            } else if constexpr (std::is_same_v<T, PostRequest>) {
              x.amount = *Amount::parse("0.5");  // another capture
            } else {
              x.user_id = 1 + pick(6);  // maybe another user's hold
            }
          },
          step);
      stream.push_back(step);
      continue;
    }
    const std::int64_t user = roll < 20 ? 40 : 1 + pick(8);  // 7, 8 and 40: no accounts
    const int a = roll < 21 ? 3 : pick(3);
    std::string amount = amount_text();
    if (roll < 23) amount += "00000001";  // too many decimals for USDC and WBTC
    if (i < 1000 && roll >= 70) {         // a hold step
      const std::string& target =
          holds[static_cast<std::size_t>(pick(static_cast<int>(holds.size())))];
      switch (pick(3)) {
        case 0: {
          HoldRequest h = hold_of("h" + std::to_string(i), user, amount, pick(2) ? "0" : "0.5",
                                  pick(8) == 0 ? absl::ZeroDuration() : absl::Hours(1));
          if (assets[a]) h.asset = *AssetCode::create(*assets[a]);
          holds.push_back(h.event_id);
          stream.push_back(std::move(h));
          break;
        }
        case 1:
          stream.push_back(PostRequest{
              .hold_id = target,
              .amount = pick(2) ? std::nullopt : std::optional<Amount>(*Amount::parse("1"))});
          break;
        default:
          stream.push_back(VoidRequest{.hold_id = target});
      }
      continue;
    }
    static constexpr EventType kTypes[] = {
        EventType::kDeposit,    EventType::kDeposit,       EventType::kAirdrop,
        EventType::kDeposit,    EventType::kWithdrawal,    EventType::kWithdrawal,
        EventType::kWithdrawal, EventType::kWithdrawalFee, EventType::kReorgCompensation};
    // The last third only credits: batches whose accounts take the set-based path.
    const EventType type = i < 1000 ? kTypes[pick(9)] : kTypes[pick(4)];
    stream.push_back(in("s" + std::to_string(i), type, user, amount, assets[a]));
  }

  std::vector<std::string> one_by_one;
  for (const LedgerStep& step : stream) {
    one_by_one.push_back(step_word(singles.process_step(*conn_, step)));
  }
  std::vector<std::string> together;
  for (std::size_t at = 0; at < stream.size();) {
    const std::size_t n = std::min(stream.size() - at, static_cast<std::size_t>(1 + pick(120)));
    absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> r =
        batched.process_steps(*conn_, std::span(stream).subspan(at, n));
    ASSERT_TRUE(r.ok()) << r.status();
    for (const std::string& w : step_words(*r)) together.push_back(w);
    at += n;
  }
  ASSERT_EQ(one_by_one.size(), together.size());
  std::map<std::string, int> seen;
  for (std::size_t i = 0; i < one_by_one.size(); ++i) {
    EXPECT_EQ(one_by_one[i], together[i]) << "step " << i;
    ++seen[one_by_one[i]];
  }
  // The stream exercised every answer.
  for (const char* w :
       {"applied", "already_applied", "insufficient_funds", "ALREADY_EXISTS", "NOT_FOUND",
        "INVALID_ARGUMENT", "FAILED_PRECONDITION", "applied:held", "applied:posted",
        "applied:voided", "already_applied:posted", "already_applied:voided",
        "insufficient_funds:rejected", "refused:posted", "refused:voided", "refused:expired"}) {
    EXPECT_GT(seen[w], 0) << w;
  }

  const auto state_of = [&](const Schema& s) {
    return scalar(s.qualify(
        "SELECT md5(string_agg(x, ';' ORDER BY x)) FROM ("
        "SELECT user_id || ' ' || asset || ' ' || balance || ' ' || held AS x FROM "
        "{schema}.accounts "
        "UNION ALL SELECT event_id || ' ' || status || ' ' || asset FROM {schema}.payment_events "
        "UNION ALL SELECT source_event_id || ' ' || event_type || ' ' || amount "
        "  FROM {schema}.balance_events "
        "UNION ALL SELECT source_event_id || ' ' || account || ' ' || amount "
        "  FROM {schema}.system_entries "
        "UNION ALL SELECT idempotency_key || ' ' || outcome FROM {schema}.processed_events "
        "UNION ALL SELECT event_id || ' ' || state || ' ' || coalesce(posted_amount::text, '') "
        "  || ' ' || coalesce(posted_fee::text, '') FROM {schema}.holds) s"));
  };
  EXPECT_EQ(state_of(schema_), state_of(other));
  EXPECT_EQ(scalar(other.qualify(
                "SELECT count(*) FROM (SELECT asset, sum(amount) FROM (SELECT asset, amount FROM "
                "{schema}.balance_events UNION ALL SELECT asset, amount FROM "
                "{schema}.system_entries) l GROUP BY asset HAVING sum(amount) <> 0) s")),
            "0");
  absl::StatusOr<std::vector<BalanceMismatch>> mismatches = batched.find_balance_mismatches(*conn_);
  ASSERT_TRUE(mismatches.ok());
  EXPECT_TRUE(mismatches->empty());
  exec("DROP SCHEMA " + std::string(other.name()) + " CASCADE");
}

// NOWAIT contention and lock waits make losers retry; give them room.
const RetryPolicy kPatient{
    .max_attempts = 200, .base_delay = absl::Milliseconds(1), .max_delay = absl::Milliseconds(50)};

// 8 processes send batches of 1..60 random deposits, withdrawals, holds,
// posts and voids over the same 12 accounts, every step delivered 1..3 times
// by different processes; a third of the 60 holds made beforehand get both a
// post and a void, racing. No batch and no step ever meets a deadlock; every
// event ends applied once or refused for funds; every hold ends in exactly
// one terminal state, reached by exactly one step, and every other step on
// it is told that state; balances and held amounts reconcile.
TEST_F(Batch, EightProcessesOverlappingBatches_NoDeadlockInvariantsHold) {
  constexpr int kProcesses = 8, kEvents = 3000, kUsers = 12, kHolds = 60;
  for (int u = 1; u <= kUsers; ++u) open_account(u, "500");
  std::mt19937 rng(20261202);
  std::vector<LedgerStep> steps;
  std::vector<int> hold_of_step;  // per step: the hold it settles, or -1
  for (int h = 0; h < kHolds; ++h) {
    const absl::StatusOr<HoldResult> held = ledger_->hold(
        *conn_, hold_of("H" + std::to_string(h), 1 + h % kUsers, "2", h % 2 ? "0.5" : "0"));
    ASSERT_TRUE(held.ok() && held->state == HoldState::kHeld) << h;
  }
  for (int id = 0; id < kEvents; ++id) {
    const bool credit = rng() % 3 != 0;
    steps.push_back(in("c" + std::to_string(id),
                       credit ? EventType::kDeposit : EventType::kWithdrawal,
                       1 + static_cast<std::int64_t>(rng() % kUsers),
                       std::to_string(1 + rng() % 90) + "." + std::to_string(rng() % 100)));
    hold_of_step.push_back(-1);
    if (id % 10 == 0) {  // a new hold, held or rejected by the funds left then
      steps.push_back(hold_of("n" + std::to_string(id),
                              1 + static_cast<std::int64_t>(rng() % kUsers),
                              std::to_string(1 + rng() % 30), "0"));
      hold_of_step.push_back(-1);
    }
  }
  for (int h = 0; h < kHolds; ++h) {
    const std::string id = "H" + std::to_string(h);
    if (h % 3 != 1) {
      steps.push_back(PostRequest{
          .hold_id = id,
          .amount = h % 2 ? std::optional<Amount>(*Amount::parse("1.5")) : std::nullopt});
      hold_of_step.push_back(h);
    }
    if (h % 3 != 0) {
      steps.push_back(VoidRequest{.hold_id = id, .user_id = 1 + h % kUsers});
      hold_of_step.push_back(h);
    }
  }
  std::vector<std::vector<int>> deliveries(kProcesses);
  for (int id = 0; id < static_cast<int>(steps.size()); ++id) {
    for (int k = 0, copies = 1 + static_cast<int>(rng() % 3); k < copies; ++k) {
      deliveries[rng() % kProcesses].push_back(id);
    }
  }
  for (auto& d : deliveries) std::shuffle(d.begin(), d.end(), rng);

  // The server's own count: a deadlock a retry hid would still show here.
  const auto deadlocks_so_far = [&] {
    exec("SELECT pg_stat_clear_snapshot()");
    return count("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()");
  };
  const long deadlocks_before = deadlocks_so_far();
  const std::string prefix = scratch("batch_");
  const LedgerOptions opts = options();
  const std::vector<int> codes = run_forked(kProcesses, [&](int p) {
    std::unique_ptr<pg::Connection> c = connect();
    Ledger ledger(opts);
    std::mt19937 local(static_cast<unsigned>(p));
    std::ofstream out(prefix + std::to_string(p));
    std::vector<int> todo = deliveries[static_cast<std::size_t>(p)];
    int deadlocks = 0;
    while (!todo.empty()) {
      const std::size_t n = std::min(todo.size(), static_cast<std::size_t>(1 + local() % 60));
      std::vector<LedgerStep> batch;
      std::vector<int> sent;
      for (std::size_t i = 0; i < n; ++i) {
        const int id = todo[i];
        if (p % 2 == 1 && hold_of_step[static_cast<std::size_t>(id)] >= 0) {
          // Odd processes post and void by single calls, racing the batches.
          absl::StatusOr<StepResult> a =
              with_retries(kPatient, [&] { return ledger.process_step(*c, steps[id]); });
          if (!a.ok()) {
            std::fprintf(stderr, "step %d: %s\n", id, a.status().ToString().c_str());
            return 3;
          }
          out << id << ' ' << step_word(a) << '\n';
          continue;
        }
        batch.push_back(steps[id]);
        sent.push_back(id);
      }
      absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> r =
          with_retries(kPatient, [&] { return ledger.process_steps(*c, batch); });
      if (!r.ok()) {
        std::fprintf(stderr, "batch: %s\n", r.status().ToString().c_str());
        return 3;
      }
      std::vector<int> again;
      for (std::size_t i = 0; i < sent.size(); ++i) {
        const absl::StatusOr<StepResult>& a = (*r)[i];
        if (a.ok()) {
          out << sent[i] << ' ' << step_word(a) << '\n';
        } else if (sqlstate(a.status()) == "40P01") {
          ++deadlocks;
        } else if (is_retryable(a.status())) {
          again.push_back(sent[i]);  // e.g. a lock held by another batch: send it again
        } else {
          std::fprintf(stderr, "step %d: %s\n", sent[i], a.status().ToString().c_str());
          return 3;
        }
      }
      if (deadlocks > 0) return 4;
      todo.erase(todo.begin(), todo.begin() + static_cast<std::ptrdiff_t>(n));
      todo.insert(todo.end(), again.begin(), again.end());
    }
    return 0;
  });
  for (int code : codes) ASSERT_EQ(code, 0) << "4 means a deadlock";
  EXPECT_EQ(deadlocks_so_far(), deadlocks_before);

  std::map<int, std::map<std::string, int>> outcomes;
  for (int p = 0; p < kProcesses; ++p) {
    std::ifstream answers(prefix + std::to_string(p));
    int id;
    std::string outcome;
    while (answers >> id >> outcome) ++outcomes[id][outcome];
  }
  ASSERT_EQ(outcomes.size(), steps.size());
  long applied = 0;
  std::map<int, std::map<std::string, int>> by_hold;  // settling answers per hold
  for (const auto& [id, by] : outcomes) {
    const int h = hold_of_step[static_cast<std::size_t>(id)];
    if (h >= 0) {
      for (const auto& [w, n] : by) by_hold[h][w] += n;
      continue;
    }
    if (std::holds_alternative<HoldRequest>(steps[static_cast<std::size_t>(id)])) {
      // Held once and then found held, or rejected every time.
      if (by.count("insufficient_funds:rejected")) {
        EXPECT_EQ(by.size(), 1u) << "hold step " << id;
      } else {
        EXPECT_EQ(by.count("applied:held") ? by.at("applied:held") : 0, 1) << "hold step " << id;
        EXPECT_EQ(by.size(), by.count("already_applied:held") + 1) << "hold step " << id;
      }
      continue;
    }
    const int first = (by.count("applied") ? by.at("applied") : 0);
    if (by.count("insufficient_funds")) {
      EXPECT_EQ(first + (by.count("already_applied") ? 1 : 0), 0) << "event " << id;
    } else {
      EXPECT_EQ(first, 1) << "event " << id;
      ++applied;
    }
  }
  ASSERT_EQ(by_hold.size(), static_cast<std::size_t>(kHolds));
  long posted = 0;
  for (const auto& [h, by] : by_hold) {
    const std::string state =
        scalar("SELECT state FROM {schema}.holds WHERE event_id = 'H" + std::to_string(h) + "'");
    ASSERT_TRUE(state == "posted" || state == "voided") << h << " " << state;
    posted += state == "posted";
    int winners = 0;
    for (const auto& [w, n] : by) {
      if (w == "applied:" + state) {
        winners += n;
      } else {
        EXPECT_TRUE(w == "already_applied:" + state || w == "refused:" + state)
            << "hold H" << h << " is " << state << " but a step was told " << w;
      }
    }
    EXPECT_EQ(winners, 1) << "hold H" << h;
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events WHERE source_event_id <> "
                  "'v1-opening' AND source_event_id NOT LIKE 'H%'"),
            applied);
  EXPECT_EQ(count("SELECT count(DISTINCT source_event_id) FROM {schema}.balance_events "
                  "WHERE source_event_id LIKE 'H%'"),
            posted);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.accounts WHERE balance < 0 OR held < 0 "
                  "OR held > balance"),
            0);
  expect_reconciled();
  absl::StatusOr<std::vector<BalanceMismatch>> mismatches =
      ledger_->find_balance_mismatches(*conn_);
  ASSERT_TRUE(mismatches.ok());
  EXPECT_TRUE(mismatches->empty());
}

}  // namespace
}  // namespace idemledger::testing
