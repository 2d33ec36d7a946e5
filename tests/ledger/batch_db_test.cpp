// Ledger::process_batch against a real PostgreSQL: every answer equals the
// one the event gets alone (one case per rule, then a random stream applied
// as singles into one schema and as batches into another), and concurrent
// batches from forked processes over the same accounts never deadlock and
// keep every invariant.
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
  exec("SELECT pg_stat_force_next_flush()");
  exec("SELECT 1");  // a transaction end flushes the counts
  exec("SELECT pg_stat_clear_snapshot()");
  EXPECT_EQ(scalar("SELECT calls FROM pg_stat_user_functions WHERE schemaname = '" + schema_name_ +
                   "' AND funcname = 'apply_event'"),
            "3");
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

// A random stream — credits, debits, fees, compensations over three assets,
// duplicates, conflicts, overdrafts, unknown users and assets, too many
// decimals — applied once as single calls into this test's schema and once
// as batches of random sizes into a second schema: every answer, every
// account, every event status and every posting agree.
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
  std::vector<PaymentEvent> stream;
  for (int i = 0; i < 1500; ++i) {
    const int roll = pick(100);
    if (roll < 15 && !stream.empty()) {  // a redelivery
      stream.push_back(stream[static_cast<std::size_t>(pick(static_cast<int>(stream.size())))]);
      continue;
    }
    if (roll < 18 && !stream.empty()) {  // the same id, other content
      PaymentEvent e = stream[static_cast<std::size_t>(pick(static_cast<int>(stream.size())))];
      e.amount = *Amount::parse("0.5")->checked_add(e.amount);
      stream.push_back(e);
      continue;
    }
    static constexpr EventType kTypes[] = {
        EventType::kDeposit,    EventType::kDeposit,       EventType::kAirdrop,
        EventType::kDeposit,    EventType::kWithdrawal,    EventType::kWithdrawal,
        EventType::kWithdrawal, EventType::kWithdrawalFee, EventType::kReorgCompensation};
    // The last third only credits: batches whose accounts take the set-based path.
    const EventType type = i < 1000 ? kTypes[pick(9)] : kTypes[pick(4)];
    const std::int64_t user = roll < 20 ? 40 : 1 + pick(8);  // 7, 8 and 40: no accounts
    const int a = roll < 21 ? 3 : pick(3);
    std::string amount = std::to_string(1 + pick(40)) + "." + std::to_string(pick(1000));
    if (roll < 23) amount += "00000001";  // too many decimals for USDC and WBTC
    stream.push_back(in("s" + std::to_string(i), type, user, amount, assets[a]));
  }

  std::vector<std::string> alone;
  for (const PaymentEvent& e : stream) alone.push_back(word(singles.process_event(*conn_, e)));
  std::vector<std::string> together;
  for (std::size_t at = 0; at < stream.size();) {
    const std::size_t n = std::min(stream.size() - at, static_cast<std::size_t>(1 + pick(120)));
    absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> r =
        batched.process_batch(*conn_, std::span(stream).subspan(at, n));
    ASSERT_TRUE(r.ok()) << r.status();
    for (const std::string& w : words(*r)) together.push_back(w);
    at += n;
  }
  ASSERT_EQ(alone.size(), together.size());
  std::map<std::string, int> seen;
  for (std::size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(alone[i], together[i]) << "event " << i << " " << stream[i].event_id;
    ++seen[alone[i]];
  }
  // The stream exercised every answer.
  for (const char* w : {"applied", "already_applied", "insufficient_funds", "ALREADY_EXISTS",
                        "NOT_FOUND", "INVALID_ARGUMENT", "FAILED_PRECONDITION"}) {
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
        "UNION ALL SELECT idempotency_key || ' ' || outcome FROM {schema}.processed_events) s"));
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

// 8 processes send batches of 1..60 random deposits and withdrawals over the
// same 12 accounts, every event delivered 1..3 times by different processes.
// No batch and no event ever meets a deadlock; every event ends applied once
// or refused for funds; balances reconcile.
TEST_F(Batch, EightProcessesOverlappingBatches_NoDeadlockInvariantsHold) {
  constexpr int kProcesses = 8, kEvents = 3000, kUsers = 12;
  for (int u = 1; u <= kUsers; ++u) open_account(u, "500");
  std::mt19937 rng(20261202);
  std::vector<PaymentEvent> events;
  std::vector<std::vector<int>> deliveries(kProcesses);
  for (int id = 0; id < kEvents; ++id) {
    const bool credit = rng() % 3 != 0;
    events.push_back(in("c" + std::to_string(id),
                        credit ? EventType::kDeposit : EventType::kWithdrawal,
                        1 + static_cast<std::int64_t>(rng() % kUsers),
                        std::to_string(1 + rng() % 90) + "." + std::to_string(rng() % 100)));
    for (int k = 0, copies = 1 + static_cast<int>(rng() % 3); k < copies; ++k) {
      deliveries[rng() % kProcesses].push_back(id);
    }
  }
  for (auto& d : deliveries) std::shuffle(d.begin(), d.end(), rng);

  const std::string prefix = ::testing::TempDir() + "/batch_" + schema_name_ + "_";
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
      std::vector<PaymentEvent> batch;
      for (std::size_t i = 0; i < n; ++i) batch.push_back(events[todo[i]]);
      absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> r =
          with_retries(kPatient, [&] { return ledger.process_batch(*c, batch); });
      if (!r.ok()) {
        std::fprintf(stderr, "batch: %s\n", r.status().ToString().c_str());
        return 3;
      }
      std::vector<int> again;
      for (std::size_t i = 0; i < n; ++i) {
        const absl::StatusOr<Outcome>& a = (*r)[i];
        if (a.ok()) {
          out << todo[i] << ' ' << to_string(*a) << '\n';
        } else if (sqlstate(a.status()) == "40P01") {
          ++deadlocks;
        } else if (is_retryable(a.status())) {
          again.push_back(todo[i]);  // e.g. a lock held by another batch: send it again
        } else {
          std::fprintf(stderr, "event %d: %s\n", todo[i], a.status().ToString().c_str());
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

  std::map<int, std::map<std::string, int>> outcomes;
  for (int p = 0; p < kProcesses; ++p) {
    std::ifstream answers(prefix + std::to_string(p));
    int id;
    std::string outcome;
    while (answers >> id >> outcome) ++outcomes[id][outcome];
  }
  ASSERT_EQ(outcomes.size(), static_cast<std::size_t>(kEvents));
  long applied = 0;
  for (const auto& [id, by] : outcomes) {
    const int first = (by.count("applied") ? by.at("applied") : 0);
    if (by.count("insufficient_funds")) {
      EXPECT_EQ(first + (by.count("already_applied") ? 1 : 0), 0) << "event " << id;
    } else {
      EXPECT_EQ(first, 1) << "event " << id;
      ++applied;
    }
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events WHERE source_event_id <> "
                  "'v1-opening'"),
            applied);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.accounts WHERE balance < 0"), 0);
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
