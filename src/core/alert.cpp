#include "idemledger/core/alert.hpp"

#include <cstdio>

#include "src/core/internal/text.hpp"

namespace idemledger {
namespace {

class StderrAlertSink final : public AlertSink {
 public:
  void alert(const Alert& a) override {
    const std::string line =
        internal::JsonLine()
            .add("level", a.severity == AlertSeverity::kCritical ? "critical" : "warning")
            .add("msg", "ALERT")
            .add("alert_key", a.key)
            .add("message", a.message)
            .finish();
    // One write per line keeps concurrent alerts from interleaving.
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
};

}  // namespace

CooldownAlertSink::CooldownAlertSink(AlertSink& downstream, Options options)
    : downstream_(downstream), options_(std::move(options)) {}

void CooldownAlertSink::alert(const Alert& a) {
  {
    MutexLock lock(&mu_);
    const absl::Time now = options_.now();
    const std::string key(a.key);
    auto it = last_sent_.find(key);
    if (it != last_sent_.end() && now - it->second < options_.cooldown) {
      ++suppressed_;
      return;
    }
    if (it == last_sent_.end() && last_sent_.size() >= options_.max_keys) {
      absl::erase_if(last_sent_,
                     [&](const auto& kv) { return now - kv.second > 2 * options_.cooldown; });
      if (last_sent_.size() >= options_.max_keys) {
        ++dropped_;
        return;
      }
    }
    last_sent_[key] = now;
  }
  downstream_.alert(a);  // outside the lock: a slow pager must not serialise callers
}

std::size_t CooldownAlertSink::suppressed() const {
  MutexLock lock(&mu_);
  return suppressed_;
}

std::size_t CooldownAlertSink::dropped() const {
  MutexLock lock(&mu_);
  return dropped_;
}

AlertSink& stderr_alert_sink() {
  static StderrAlertSink sink;
  return sink;
}

AlertSink& alert_sink_or_default(AlertSink* sink) {
  return sink != nullptr ? *sink : stderr_alert_sink();
}

}  // namespace idemledger
