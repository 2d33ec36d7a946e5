// idemledger/alert.hpp — where the ledger reports what a human must look at.
//
// Orphan idempotency records, conflicting replays, failed compensations and
// guard hits are not errors a retry fixes; they are pages. The ledger calls an
// AlertSink; the default writes one JSON line to stderr at level "critical".
//
//   struct Pager : idemledger::AlertSink {
//     void alert(const idemledger::Alert& a) override { pagerduty.send(a.key, a.message); }
//   };
//
// Implementations must be thread-safe: the ledger calls them from any thread.
#ifndef IDEMLEDGER_ALERT_HPP
#define IDEMLEDGER_ALERT_HPP

#include <string_view>

namespace idemledger {

enum class AlertSeverity { kWarning, kCritical };

struct Alert {
  AlertSeverity severity;
  std::string_view key;      // stable, for deduplication: "orphan_deposit:<event_id>"
  std::string_view message;  // what happened and what rule it breaks
};

class AlertSink {
 public:
  virtual ~AlertSink() = default;
  virtual void alert(const Alert& alert) = 0;
};

// The default sink: one JSON line on stderr per alert. Thread-safe.
AlertSink& stderr_alert_sink();

}  // namespace idemledger

#endif  // IDEMLEDGER_ALERT_HPP
