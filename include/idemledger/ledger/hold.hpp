// idemledger/ledger/hold.hpp — two-phase withdrawals: hold, then post or void.
//
// A withdrawal to a chain is not one step. When the user asks, hold()
// reserves amount + fee of the account's available funds; when the chain
// transaction is final, post() captures it (writing the withdrawal and fee
// entries as one posting); when it fails, void_hold() releases it; a hold
// nobody settles expires and is released by the sweeper (expire_holds()).
//
//   held ──> posted      (post: capture <= what is held; the rest is released)
//     │ └──> voided      (void: released)
//     └────> expired     (past expires_at: released; a post is then refused)
//   rejected             (born so: not enough available funds; nothing held)
//
// Every step is keyed and exactly-once under at-least-once delivery: the
// hold's key is the withdrawal's event id, and a step is a compare-and-set
// on the hold's state under its row lock. A repeated hold, post or void
// answers what happened the first time; a post and a void racing from two
// processes end in one terminal state, and the loser is told which
// (HoldOutcome::kRefused with that state); a voided, expired or rejected hold is
// never posted. The table below is the one source of truth for the edges:
// migrate() copies it into <schema>.hold_transitions, where the SQL function
// transition_hold() — the only writer of a hold's state — checks it.
// Everything here is constexpr and thread-safe.
#ifndef IDEMLEDGER_LEDGER_HOLD_HPP
#define IDEMLEDGER_LEDGER_HOLD_HPP

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/state_machine.hpp"
#include "idemledger/ledger/asset.hpp"

namespace idemledger {

enum class HoldState { kHeld, kPosted, kVoided, kExpired, kRejected };
inline constexpr EnumNames<HoldState, 5> kHoldStateNames{{{
    {HoldState::kHeld, "held"},
    {HoldState::kPosted, "posted"},
    {HoldState::kVoided, "voided"},
    {HoldState::kExpired, "expired"},
    {HoldState::kRejected, "rejected"},
}}};
constexpr const auto& enum_names(HoldState) { return kHoldStateNames; }

// Every edge a hold may take after it is created (held or rejected).
inline constexpr Edges<HoldState, 3> kHoldTransitions = {{
    {HoldState::kHeld, HoldState::kPosted},
    {HoldState::kHeld, HoldState::kVoided},
    {HoldState::kHeld, HoldState::kExpired},
}};

[[nodiscard]] constexpr bool is_valid_hold_transition(HoldState from, HoldState to) {
  return has_edge(kHoldTransitions, from, to);
}

[[nodiscard]] constexpr bool is_terminal(HoldState s) { return s != HoldState::kHeld; }

// What a hold step did.
enum class HoldOutcome {
  kApplied,            // it happened now
  kAlreadyApplied,     // an earlier call did it; nothing changed now
  kInsufficientFunds,  // the hold was refused for lack of funds (now or earlier): rejected
  kRefused,            // a post or void the hold no longer allows: it is in another final state
};
inline constexpr EnumNames<HoldOutcome, 4> kHoldOutcomeNames{{{
    {HoldOutcome::kApplied, "applied"},
    {HoldOutcome::kAlreadyApplied, "already_applied"},
    {HoldOutcome::kInsufficientFunds, "insufficient_funds"},
    {HoldOutcome::kRefused, "refused"},
}}};
constexpr const auto& enum_names(HoldOutcome) { return kHoldOutcomeNames; }

// What a hold step did, and the state it left (or found) the hold in.
struct HoldResult {
  HoldOutcome outcome = HoldOutcome::kApplied;
  HoldState state = HoldState::kHeld;
};

// Reserve `amount` + `fee` of `user_id`'s available funds in `asset`.
struct HoldRequest {
  std::string event_id;  // the withdrawal's id: the hold's key
  std::int64_t user_id = 0;
  std::optional<AssetCode> asset;               // nullopt: the default asset
  Amount amount;                                // > 0, within the asset's decimals
  Amount fee;                                   // >= 0, within the asset's decimals
  absl::Duration expires_in = absl::Hours(24);  // from now, by the server's clock
};

// Capture a hold: by default everything it holds; less releases the rest.
struct PostRequest {
  std::string hold_id;                  // the withdrawal's event id
  std::optional<std::int64_t> user_id;  // set: must be the hold's user
  std::optional<Amount> amount;         // <= held amount; nullopt: all of it
  std::optional<Amount> fee;            // <= held fee; nullopt: all of it
  std::string event_id;                 // the confirming event, if it was queued; else ""
};

// Release a hold.
struct VoidRequest {
  std::string hold_id;
  std::optional<std::int64_t> user_id;
  std::string event_id;  // the failing event, if it was queued; else ""
};

// A hold as it stands.
struct Hold {
  std::string event_id;
  std::int64_t user_id = 0;
  AssetCode asset = "DEFAULT";
  Amount amount;
  Amount fee;
  HoldState state = HoldState::kHeld;
  absl::Time expires_at;
  std::optional<Amount> posted_amount;
  std::optional<Amount> posted_fee;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_HOLD_HPP
