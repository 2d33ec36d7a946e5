// idemledger/core/progress.hpp — how far a long job has got.
//
//   idemledger::Reconciler r({.schema = "idemledger",
//                             .progress = [](const idemledger::Progress& p) { ... }});
//
// A job that runs in batches (a full reconciliation, the idempotency cleanup)
// calls its ProgressFn after each committed batch with what is done so far
// and, when it could count it at the start, the total: an estimate, since
// rows arrive and leave while it runs (done may pass it). A job never waits
// for the callback to be useful; keep it cheap (the admin CLI redraws a line).
//
// The callback runs on the job's thread, between batches, never concurrently
// with itself.
#ifndef IDEMLEDGER_CORE_PROGRESS_HPP
#define IDEMLEDGER_CORE_PROGRESS_HPP

#include <cstdint>
#include <functional>
#include <optional>

namespace idemledger {

struct Progress {
  std::int64_t done = 0;              // units done so far (users, records)
  std::optional<std::int64_t> total;  // counted at the start, if it was
};

using ProgressFn = std::function<void(const Progress&)>;

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_PROGRESS_HPP
