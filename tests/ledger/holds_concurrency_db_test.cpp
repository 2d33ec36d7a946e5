// Holds under concurrency, with fork(): separate processes, separate
// sessions, released together. A post, a void and the expiry sweeper racing
// for one hold; and random deposits, holds, posts and voids over three assets,
// each delivered by several processes.
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "idemledger/core/retry.hpp"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

// NOWAIT contention makes losers retry; give them room.
const RetryPolicy kPatient{
    .max_attempts = 200, .base_delay = absl::Milliseconds(1), .max_delay = absl::Milliseconds(50)};

using HoldRace = LedgerTest;

// Answers one process gave, one line each: "<key> <what> <outcome> <state>".
struct Answers {
  std::string path;
  std::ofstream out;
  explicit Answers(std::string p) : path(std::move(p)), out(path) {}
  // Writes the answer; false (and the error) if the call failed for good.
  bool record(const std::string& key, std::string_view what, const absl::StatusOr<HoldResult>& r) {
    if (!r.ok()) {
      std::fprintf(stderr, "%s %.*s: %s\n", key.c_str(), static_cast<int>(what.size()), what.data(),
                   r.status().ToString().c_str());
      return false;
    }
    out << key << ' ' << what << ' ' << to_string(r->outcome) << ' ' << to_string(r->state) << '\n';
    return true;
  }
};

struct Answer {
  std::string what, outcome, state;
};

std::map<std::string, std::vector<Answer>> read_answers(const std::string& prefix, int processes) {
  std::map<std::string, std::vector<Answer>> by_key;
  for (int p = 0; p < processes; ++p) {
    std::ifstream in(prefix + std::to_string(p));
    std::string key;
    Answer a;
    while (in >> key >> a.what >> a.outcome >> a.state) by_key[key].push_back(a);
  }
  return by_key;
}

// 50 rounds. In round r, three processes post hold r, three void it and two
// run the expiry sweeper, all at the same instant — the instant the hold
// expires, give or take 3 ms. Each hold must end in exactly one terminal
// state, exactly one step must have done it, and every loser must be told
// that state; balances are exact.
TEST_F(HoldRace, PostVoidAndExpiryFromEightProcesses_OneTerminalStateEach) {
  constexpr int kRounds = 50, kProcesses = 8;
  constexpr absl::Duration kRoundLength = absl::Milliseconds(15);
  for (int r = 0; r < kRounds; ++r) open_account(r + 1, "100");
  const absl::Time t0 = absl::Now() + absl::Milliseconds(1500);  // after the forks connect
  const auto round_at = [&](int r) { return t0 + r * kRoundLength; };
  std::mt19937 rng(20261201);
  for (int r = 0; r < kRounds; ++r) {
    const absl::Duration jitter = absl::Milliseconds(static_cast<int>(rng() % 7) - 3);
    absl::StatusOr<HoldResult> h =
        ledger_->hold(*conn_, {.event_id = "h_" + std::to_string(r),
                               .user_id = r + 1,
                               .amount = *Amount::parse("10"),
                               .fee = *Amount::parse("1"),
                               .expires_in = round_at(r) + jitter - absl::Now()});
    ASSERT_TRUE(h.ok() && h->outcome == HoldOutcome::kApplied) << h.status();
  }
  ASSERT_LT(absl::Now(), t0) << "setup outran the race; the rounds would start late";

  const std::string prefix = scratch("hold_race_");
  const LedgerOptions opts = options();
  std::vector<int> codes = run_forked(kProcesses, [&](int p) {
    std::unique_ptr<pg::Connection> c = connect();
    const Ledger ledger(opts);
    Answers answers(prefix + std::to_string(p));
    long swept = 0;
    for (int r = 0; r < kRounds; ++r) {
      absl::SleepFor(round_at(r) - absl::Now());
      const std::string id = "h_" + std::to_string(r);
      if (p < 3) {
        if (!answers.record(id, "post", with_retries(kPatient, [&] {
                              return ledger.post(*c, {.hold_id = id});
                            }))) {
          return 3;
        }
      } else if (p < 6) {
        if (!answers.record(id, "void", with_retries(kPatient, [&] {
                              return ledger.void_hold(*c, {.hold_id = id});
                            }))) {
          return 3;
        }
      } else {
        absl::StatusOr<int> n = with_retries(kPatient, [&] { return ledger.expire_holds(*c); });
        if (!n.ok()) return 3;
        swept += *n;
      }
    }
    answers.out << "sweeper " << swept << " - -\n";
    return 0;
  });
  for (int code : codes) ASSERT_EQ(code, 0);
  absl::SleepFor(round_at(kRounds) + absl::Milliseconds(10) - absl::Now());
  absl::StatusOr<int> late = ledger_->expire_holds(*conn_);
  ASSERT_TRUE(late.ok()) << late.status();

  std::map<std::string, std::vector<Answer>> answers = read_answers(prefix, kProcesses);
  std::map<std::string, int> finals;
  long swept = *late;
  for (const Answer& a : answers["sweeper"]) swept += std::stol(a.what);
  long expired_by_a_post = 0;
  for (int r = 0; r < kRounds; ++r) {
    const std::string id = "h_" + std::to_string(r);
    const std::string final_state =
        scalar("SELECT state FROM {schema}.holds WHERE event_id = '" + id + "'");
    ++finals[final_state];
    ASSERT_NE(final_state, "held") << id;
    const std::vector<Answer>& got = answers[id];
    ASSERT_EQ(got.size(), 6u) << id;
    int applied = 0;
    for (const Answer& a : got) {
      if (a.outcome == "applied") {
        ++applied;
        EXPECT_EQ(final_state, a.what == "post" ? "posted" : "voided") << id;
      } else if (a.outcome == "already_applied") {
        EXPECT_EQ(final_state, a.what == "post" ? "posted" : "voided") << id;
      } else {
        EXPECT_EQ(a.outcome, "refused") << id;
        EXPECT_EQ(a.state, final_state) << id << ": a loser is told the state that won";
      }
    }
    if (final_state == "expired") {
      EXPECT_EQ(applied, 0) << id;
      expired_by_a_post += std::count_if(got.begin(), got.end(), [](const Answer& a) {
                             return a.what == "post" && a.state == "expired";
                           }) > 0;
    } else {
      EXPECT_EQ(applied, 1) << id << " ended " << final_state;
    }
    const std::string user = std::to_string(r + 1);
    EXPECT_EQ(scalar("SELECT trim_scale(balance)::text || '/' || trim_scale(held)::text FROM "
                     "{schema}.accounts WHERE user_id = " +
                     user),
              final_state == "posted" ? "89/0" : "100/0")
        << id;
  }
  // The sweepers expired only holds nobody else settled: no hold twice.
  EXPECT_LE(swept, finals["expired"]);
  EXPECT_GE(swept + expired_by_a_post, finals["expired"]);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 2 * finals["posted"]);
  // Which step wins depends on timing (a sanitizer build runs late, and
  // late means expired); that different steps won proves they raced.
  EXPECT_GE(finals.size(), 2u) << "one kind of step won every round: the race did not happen";
  std::printf("final states over %d rounds: %d posted, %d voided, %d expired (%ld by a sweeper)\n",
              kRounds, finals["posted"], finals["voided"], finals["expired"], swept);
  expect_reconciled();
}

// 200 rounds; in each, 8 processes deliver the same new hold at the same
// instant. One applies it; every other delivery is answered what happened
// — never an error, even one whose first read ran just before the first
// delivery committed and whose next ran just after (migration 12).
TEST_F(HoldRace, DuplicatesOfANewHoldFromEightProcesses_AllAnswered) {
  constexpr int kRounds = 200, kProcesses = 8, kUsers = 20;
  for (int u = 1; u <= kUsers; ++u) open_account(u, "1000");
  const absl::Time t0 = absl::Now() + absl::Milliseconds(1500);  // after the forks connect
  const std::string prefix = scratch("dup_holds_");
  const std::vector<int> codes = run_forked(kProcesses, [&](int p) {
    std::unique_ptr<pg::Connection> c = connect();
    const Ledger ledger(options());
    Answers answers(prefix + std::to_string(p));
    for (int r = 0; r < kRounds; ++r) {
      absl::SleepFor(t0 + r * absl::Milliseconds(5) - absl::Now());
      const std::string id = "dup_" + std::to_string(r);
      const absl::StatusOr<HoldResult> h = with_retries(kPatient, [&] {
        return ledger.hold(*c, {.event_id = id,
                                .user_id = 1 + r % kUsers,
                                .amount = *Amount::parse("1"),
                                .fee = *Amount::parse("0.5")});
      });
      if (!answers.record(id, "hold", h)) return 3;
    }
    return 0;
  });
  for (int code : codes) EXPECT_EQ(code, 0);
  const std::map<std::string, std::vector<Answer>> got = read_answers(prefix, kProcesses);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kRounds));
  for (const auto& [id, list] : got) {
    ASSERT_EQ(list.size(), static_cast<std::size_t>(kProcesses)) << id;
    EXPECT_EQ(std::count_if(list.begin(), list.end(),
                            [](const Answer& a) { return a.outcome == "applied"; }),
              1)
        << id;
    for (const Answer& a : list) EXPECT_EQ(a.state, "held") << id;
  }
  EXPECT_EQ(scalar("SELECT sum(held)::numeric(20,1)::text FROM {schema}.accounts"), "300.0")
      << "200 holds of 1.5, each once";
  expect_reconciled();
}

// 8 processes, three assets (18, 6 and 8 decimals), 12 users. Phase one:
// deposits, single-phase withdrawals and holds, each delivered by 2-4
// processes in their own shuffled orders. Phase two: each hold is posted
// (all or part), voided, both at once, or left held; again 2-4 times each.
// Every step happens once, and every account's balance and held amount equal
// what an independent model of the answers says.
TEST_F(HoldRace, RandomStepsOverThreeAssetsWithDuplicates_EveryAccountExact) {
  constexpr int kProcesses = 8, kUsers = 12, kSteps = 600;
  ASSERT_TRUE(add_asset(*conn_, schema_, {.code = "USDC", .decimals = 6}).ok());
  ASSERT_TRUE(add_asset(*conn_, schema_, {.code = "WBTC", .decimals = 8}).ok());
  const std::vector<std::pair<AssetCode, int>> assets = {
      {AssetCode("DEFAULT"), 18}, {AssetCode("USDC"), 6}, {AssetCode("WBTC"), 8}};
  for (int u = 1; u <= kUsers; ++u) {
    for (const auto& [code, decimals] : assets) {
      ASSERT_TRUE(ledger_->open_account(*conn_, u, *Amount::parse("50"), code).ok());
    }
  }
  std::mt19937 rng(20261202);
  // Up to 6 decimal places, never more than the asset allows.
  const auto amount_in = [&](int decimals, unsigned whole_max) {
    std::string text = std::to_string(rng() % whole_max);
    if (decimals > 0) {
      std::string fraction = std::to_string(rng() % 1000000);
      fraction.resize(static_cast<std::size_t>(std::min(decimals, 6)), '0');
      text += "." + fraction;
    }
    return *Amount::parse(text);
  };
  struct Step {
    enum Kind { kDeposit, kWithdrawal, kHold, kPost, kVoid } kind;
    std::string id;  // the event's, or the hold's for a post / void
    std::int64_t user;
    std::size_t asset;
    Amount amount, fee;
    bool partial = false;
  };
  std::vector<Step> first, second;
  for (int i = 0; i < kSteps; ++i) {
    const auto user = static_cast<std::int64_t>(1 + rng() % kUsers);
    const std::size_t asset = rng() % assets.size();
    const int decimals = assets[asset].second;
    Amount amount = amount_in(decimals, 40);
    if (amount.is_zero()) amount = *Amount::parse("1");
    const int roll = static_cast<int>(rng() % 100);
    if (roll < 45) {
      first.push_back({Step::kDeposit, "d_" + std::to_string(i), user, asset, amount, Amount()});
    } else if (roll < 60) {
      first.push_back({Step::kWithdrawal, "w_" + std::to_string(i), user, asset, amount, Amount()});
    } else {
      const std::string id = "h_" + std::to_string(i);
      first.push_back({Step::kHold, id, user, asset, amount, *Amount::parse("0.5")});
      const int settle = static_cast<int>(rng() % 10);
      const bool partial = rng() % 3 == 0;
      if (settle < 4 || settle == 8) {
        second.push_back({Step::kPost, id, user, asset, Amount(), Amount(), partial});
      }
      if (settle >= 4 && settle <= 8) second.push_back({Step::kVoid, id, user, asset, {}, {}});
      // settle == 9: left held
    }
  }
  // Each step by 2-4 of the processes, each process in its own order.
  const auto deal = [&](const std::vector<Step>& steps) {
    std::vector<std::vector<std::size_t>> plan(kProcesses);
    for (std::size_t s = 0; s < steps.size(); ++s) {
      std::vector<int> who(kProcesses);
      std::iota(who.begin(), who.end(), 0);
      std::shuffle(who.begin(), who.end(), rng);
      for (int k = 0; k < 2 + static_cast<int>(rng() % 3); ++k) plan[who[k]].push_back(s);
    }
    for (auto& p : plan) std::shuffle(p.begin(), p.end(), rng);
    return plan;
  };

  const LedgerOptions opts = options();
  const auto run_phase = [&](const std::vector<Step>& steps, const std::string& name) {
    const std::vector<std::vector<std::size_t>> plan = deal(steps);
    const std::string prefix = scratch(name + "_");
    const std::vector<int> codes = run_forked(kProcesses, [&](int p) {
      std::unique_ptr<pg::Connection> c = connect();
      const Ledger ledger(opts);
      Answers answers(prefix + std::to_string(p));
      for (std::size_t s : plan[p]) {
        const Step& st = steps[s];
        const AssetCode asset = assets[st.asset].first;
        const PaymentEvent e{
            .event_id = st.id,
            .type = st.kind == Step::kDeposit ? EventType::kDeposit : EventType::kWithdrawal,
            .user_id = st.user,
            .amount = st.amount,
            .asset = asset};
        absl::StatusOr<HoldResult> r = with_retries(kPatient, [&]() -> absl::StatusOr<HoldResult> {
          switch (st.kind) {
            case Step::kDeposit:
            case Step::kWithdrawal: {
              absl::StatusOr<Outcome> o = ledger.process_event(*c, e);
              if (!o.ok()) return o.status();
              // The answers are compared by name, which the two enums share.
              return HoldResult{.outcome = *parse_enum<HoldOutcome>(to_string(*o))};
            }
            case Step::kHold:
              return ledger.hold(*c, {.event_id = st.id,
                                      .user_id = st.user,
                                      .asset = asset,
                                      .amount = st.amount,
                                      .fee = st.fee});
            case Step::kPost: {
              PostRequest post{.hold_id = st.id};
              if (st.partial) post.fee = Amount();  // capture the amount, waive the fee
              return ledger.post(*c, post);
            }
            case Step::kVoid:
              return ledger.void_hold(*c, {.hold_id = st.id});
          }
          return absl::InternalError("unreachable");
        });
        const char* what[] = {"deposit", "withdrawal", "hold", "post", "void"};
        if (!answers.record(st.id, what[st.kind], r)) return 3;
      }
      return 0;
    });
    for (int code : codes) EXPECT_EQ(code, 0) << name;
    return read_answers(prefix, kProcesses);
  };
  std::map<std::string, std::vector<Answer>> got = run_phase(first, "steps_1");
  std::map<std::string, std::vector<Answer>> settled = run_phase(second, "steps_2");
  ASSERT_FALSE(HasFailure());

  // The model: what each account must hold, from the answers alone.
  std::map<std::pair<std::int64_t, std::size_t>, Amount> balance, held;
  for (int u = 1; u <= kUsers; ++u) {
    for (std::size_t a = 0; a < assets.size(); ++a) {
      balance[{u, a}] = *Amount::parse("50");
      held[{u, a}] = Amount();
    }
  }
  const auto add = [](Amount& to, const Amount& x) { to = *to.checked_add(x); };
  const auto sub = [](Amount& to, const Amount& x) { to = *to.checked_sub(x); };
  const auto once = [&](const std::string& id, const std::vector<Answer>& answers,
                        std::string_view what) {
    // Exactly one process did it (or all were refused alike), every other was told so.
    int applied = 0;
    std::set<std::string> states, outcomes;
    for (const Answer& a : answers) {
      if (a.what != what) continue;
      applied += a.outcome == "applied";
      outcomes.insert(a.outcome);
      states.insert(a.state);
    }
    EXPECT_EQ(states.size(), 1u) << id << " " << what << ": processes disagree on the state";
    if (outcomes.count("insufficient_funds") || outcomes.count("refused")) {
      EXPECT_EQ(outcomes.size(), 1u) << id << " " << what;
      EXPECT_EQ(applied, 0) << id << " " << what;
    } else {
      EXPECT_EQ(applied, 1) << id << " " << what << " happened " << applied << " times";
    }
    return applied == 1;
  };
  std::map<std::string, std::string> hold_state;
  long entries = 0;
  for (const Step& st : first) {
    const std::vector<Answer>& answers = got[st.id];
    ASSERT_FALSE(answers.empty()) << st.id;
    const bool happened = once(st.id, answers, answers[0].what);
    Amount& bal = balance[{st.user, st.asset}];
    if (st.kind == Step::kDeposit) {
      EXPECT_TRUE(happened) << st.id;
      add(bal, st.amount);
      ++entries;
    } else if (st.kind == Step::kWithdrawal && happened) {
      sub(bal, st.amount);
      ++entries;
    } else if (st.kind == Step::kHold) {
      hold_state[st.id] = answers[0].state;
      if (happened) add(held[{st.user, st.asset}], *st.amount.checked_add(st.fee));
    }
  }
  std::map<std::string, const Step*> hold_of;
  for (const Step& st : first) hold_of[st.id] = &st;
  for (const Step& st : second) {
    const std::vector<Answer>& answers = settled[st.id];
    const std::string what = st.kind == Step::kPost ? "post" : "void";
    if (!once(st.id, answers, what)) continue;
    const Step& h = *hold_of.at(st.id);
    const Amount reserved = *h.amount.checked_add(h.fee);
    sub(held[{h.user, h.asset}], reserved);
    if (st.kind == Step::kPost) {
      sub(balance[{h.user, h.asset}], st.partial ? h.amount : reserved);
      entries += st.partial ? 1 : 2;
      hold_state[st.id] = "posted";
    } else {
      hold_state[st.id] = "voided";
    }
  }
  std::map<std::string, int> states;
  for (const auto& [id, state] : hold_state) ++states[state];
  std::printf(
      "%zu first-phase steps (%ld ledger entries), %zu settlements; holds: %d held, %d "
      "posted, %d voided, %d rejected\n",
      first.size(), entries, second.size(), states["held"], states["posted"], states["voided"],
      states["rejected"]);
  for (const auto& [key, expected] : balance) {
    const auto& [user, asset] = key;
    absl::StatusOr<Account> a = ledger_->account(*conn_, user, assets[asset].first);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->balance, expected) << "user " << user << " " << assets[asset].first.code();
    EXPECT_EQ(a->held, held[key]) << "user " << user << " " << assets[asset].first.code();
  }
  for (const auto& [id, state] : hold_state) {
    EXPECT_EQ(scalar("SELECT state FROM {schema}.holds WHERE event_id = '" + id + "'"), state)
        << id;
  }
  // Postings: every one sums to zero per asset; one user leg per entry.
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), entries);
  EXPECT_EQ(count("SELECT count(*) FROM (SELECT asset, sum(amount) s FROM (SELECT asset, amount "
                  "FROM {schema}.balance_events UNION ALL SELECT asset, amount FROM "
                  "{schema}.system_entries) l GROUP BY asset) t WHERE s <> 0"),
            0);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.accounts WHERE balance - held < 0"), 0);
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
