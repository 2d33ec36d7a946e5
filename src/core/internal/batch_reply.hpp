// The reply of a batch function — apply_batch() for Ledger::process_batch,
// record_events() for intake's RecordBatcher — read once, the same way.
//
// Such a function answers one row per item sent, (ord, answer, sqlstate,
// message): `ord` is the item's 1-based place in the arrays sent; `answer`
// is what the single call would have answered, or NULL with the SQLSTATE and
// message of the error that refused the item. The reply is read all or
// nothing: a row count other than the items sent, an ord out of range or
// answered twice, or a row that does not read makes the whole reply
// malformed, and no item is answered from it — a caller never reports one
// item's success out of a reply it cannot trust.
#ifndef IDEMLEDGER_SRC_CORE_INTERNAL_BATCH_REPLY_HPP
#define IDEMLEDGER_SRC_CORE_INTERNAL_BATCH_REPLY_HPP

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "idemledger/core/result.hpp"
#include "idemledger/core/status.hpp"

namespace idemledger::internal {

// Item i's answer (element i), or the refusal the server raised for it as
// status_from_sqlstate() reads it; kInternal, naming `function`, if the
// reply is malformed. `Answer` is any type Row reads (a NamedEnum too).
template <typename Answer>
absl::StatusOr<std::vector<absl::StatusOr<Answer>>> read_batch_reply(const Result& reply,
                                                                     std::size_t items,
                                                                     std::string_view function) {
  if (reply.rows.size() != items) {
    return absl::InternalError(
        fmt::format("{} answered {} rows for {} items", function, reply.rows.size(), items));
  }
  std::vector<absl::StatusOr<Answer>> answers(items, absl::InternalError("unanswered"));
  std::vector<bool> answered(items, false);
  for (std::size_t r = 0; r < reply.rows.size(); ++r) {
    auto row = reply.row(r)
                   .read<std::int64_t, std::optional<Answer>, std::optional<std::string>,
                         std::optional<std::string>>();
    if (!row.ok()) {
      return absl::InternalError(
          fmt::format("{} answered an unreadable row: {}", function, row.status().message()));
    }
    const auto& [ord, answer, state, message] = *row;
    if (ord < 1 || static_cast<std::size_t>(ord) > items ||
        answered[static_cast<std::size_t>(ord - 1)]) {
      return absl::InternalError(
          fmt::format("{} answered item {} of {} unexpectedly", function, ord, items));
    }
    const auto i = static_cast<std::size_t>(ord - 1);
    answered[i] = true;
    if (answer) {
      answers[i] = *answer;
      continue;
    }
    absl::Status refusal =
        status_from_sqlstate(state.value_or("XX000"), message.value_or("no message"));
    if (refusal.ok()) {
      return absl::InternalError(
          fmt::format("{} refused item {} with SQLSTATE {}", function, ord, state.value_or("")));
    }
    answers[i] = std::move(refusal);
  }
  return answers;  // rows == items, each ord once and in range: every item answered
}

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_CORE_INTERNAL_BATCH_REPLY_HPP
