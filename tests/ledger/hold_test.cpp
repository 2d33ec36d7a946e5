// The hold state machine as the library states it, without a database.
#include "idemledger/ledger/hold.hpp"

#include "gmock/gmock.h"

namespace idemledger::testing {
namespace {

constexpr HoldState kAll[] = {HoldState::kHeld, HoldState::kPosted, HoldState::kVoided,
                              HoldState::kExpired, HoldState::kRejected};

TEST(HoldStateMachine, OnlyAHeldHoldMovesAndOnlyToAFinalState) {
  int edges = 0;
  for (HoldState from : kAll) {
    for (HoldState to : kAll) {
      const bool valid = is_valid_hold_transition(from, to);
      edges += valid;
      EXPECT_EQ(valid,
                from == HoldState::kHeld && to != HoldState::kHeld && to != HoldState::kRejected)
          << to_string(from) << " -> " << to_string(to);
    }
  }
  EXPECT_EQ(edges, 3);
  static_assert(!is_valid_hold_transition(HoldState::kVoided, HoldState::kPosted),
                "a voided hold is never posted");
  static_assert(!is_valid_hold_transition(HoldState::kExpired, HoldState::kPosted));
  static_assert(!is_valid_hold_transition(HoldState::kRejected, HoldState::kPosted));
  for (HoldState s : kAll) EXPECT_EQ(is_terminal(s), s != HoldState::kHeld) << to_string(s);
}

TEST(HoldStateMachine, NamesAreTheDatabaseSpelling) {
  for (HoldState s : kAll) EXPECT_EQ(parse_enum<HoldState>(to_string(s)), s);
  EXPECT_EQ(to_string(HoldState::kExpired), "expired");
  EXPECT_FALSE(parse_enum<HoldState>("Held").has_value());
}

}  // namespace
}  // namespace idemledger::testing
