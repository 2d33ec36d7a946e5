// idemledger/core/state_machine.hpp — a state machine as a table of edges.
//
// Each state machine (events: core/event_status.hpp; holds:
// ledger/hold.hpp) is one constexpr array of (from, to) pairs: the single
// source of truth, which migrate() copies into the database for the one SQL
// writer of that state to check. constexpr and thread-safe.
#ifndef IDEMLEDGER_CORE_STATE_MACHINE_HPP
#define IDEMLEDGER_CORE_STATE_MACHINE_HPP

#include <array>
#include <cstddef>
#include <utility>

namespace idemledger {

template <typename State, std::size_t N>
using Edges = std::array<std::pair<State, State>, N>;

// Whether `edges` lists from -> to.
template <typename State, std::size_t N>
[[nodiscard]] constexpr bool has_edge(const Edges<State, N>& edges, State from, State to) {
  for (const auto& [f, t] : edges) {
    if (f == from && t == to) return true;
  }
  return false;
}

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_STATE_MACHINE_HPP
