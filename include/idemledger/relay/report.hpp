// idemledger/relay/report.hpp — the delivery relay's state, for operators.
//
//   absl::StatusOr<idemledger::RelayReport> r = idemledger::relay_report(conn, schema);
//   absl::StatusOr<std::vector<idemledger::RelayDeadLetter>> open =
//       idemledger::list_relay_dead_letters(conn, schema, 50);
//
// What `idemledger-admin relay status|list` prints. Thread-safe (no state).
#ifndef IDEMLEDGER_RELAY_REPORT_HPP
#define IDEMLEDGER_RELAY_REPORT_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/breaker.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

struct RelayReport {
  struct Marker {
    std::string name;  // "relay:<name>"
    BreakerState state;
    std::optional<absl::Time> opened_at;
  };
  std::vector<Marker> markers;
  std::int64_t outbox_undelivered = 0;
  std::optional<absl::Time> oldest_undelivered;
  std::int64_t outbox_delivered = 0;
  // Dead letters by resolution ("open", "delivered", "dropped") with the
  // earliest first_dlq_at of each, and the dropped ones by drop reason.
  struct Count {
    std::string what;
    std::int64_t count = 0;
    std::optional<absl::Time> since;
  };
  std::vector<Count> dead_letters;
  std::vector<Count> dropped_by_reason;
  std::int64_t quarantined = 0;
  std::optional<absl::Time> quarantined_since;
};

[[nodiscard]] absl::StatusOr<RelayReport> relay_report(Connection& conn, const Schema& schema);

// An envelope not delivered: open ones first, then dropped, newest first.
struct RelayDeadLetter {
  std::int64_t id = 0;
  std::int64_t outbox_id = 0;
  std::string topic;
  int dlq_retries = 0;
  absl::Time first_dlq_at;
  std::string reason;
  std::optional<std::string> resolution;  // nullopt: open
  std::optional<std::string> drop_reason;
};

[[nodiscard]] absl::StatusOr<std::vector<RelayDeadLetter>> list_relay_dead_letters(
    Connection& conn, const Schema& schema, int limit);

}  // namespace idemledger

#endif  // IDEMLEDGER_RELAY_REPORT_HPP
