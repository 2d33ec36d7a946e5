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

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/core/mutex.hpp"

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

// `*sink`, or stderr_alert_sink() when `sink` is null (what every options
// struct's `alerts = nullptr` means).
AlertSink& alert_sink_or_default(AlertSink* sink);

// CooldownAlertSink
//
// Forwards to another sink at most once per key per `cooldown`, so a stuck
// event pages once, not once per retry. The key table is bounded: when full,
// keys idle for two cooldowns are evicted first; if none is, a new key is
// dropped (and counted) rather than the table growing without bound (the
// seed's send_alert). Thread-safe.
class CooldownAlertSink final : public AlertSink {
 public:
  struct Options {
    absl::Duration cooldown = absl::Minutes(5);
    std::size_t max_keys = 1000;
    // The clock; tests inject one.
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };
  CooldownAlertSink(AlertSink& downstream, Options options);

  void alert(const Alert& alert) override;

  // Alerts held back by a cooldown, and alerts dropped because the table was full.
  [[nodiscard]] std::size_t suppressed() const;
  [[nodiscard]] std::size_t dropped() const;

 private:
  AlertSink& downstream_;
  const Options options_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, absl::Time> last_sent_ ABSL_GUARDED_BY(mu_);
  std::size_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
  std::size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_ALERT_HPP
