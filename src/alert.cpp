#include "idemledger/alert.hpp"

#include <cstdio>

#include "src/internal/text.hpp"

namespace idemledger {
namespace {

class StderrAlertSink final : public AlertSink {
 public:
  void alert(const Alert& a) override {
    const std::string line = internal::json_line({
        {"level", a.severity == AlertSeverity::kCritical ? "critical" : "warning"},
        {"msg", "ALERT"},
        {"alert_key", a.key},
        {"message", a.message},
    });
    // One write per line keeps concurrent alerts from interleaving.
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
};

}  // namespace

AlertSink& stderr_alert_sink() {
  static StderrAlertSink sink;
  return sink;
}

}  // namespace idemledger
