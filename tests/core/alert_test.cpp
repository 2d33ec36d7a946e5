#include "idemledger/core/alert.hpp"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace idemledger {
namespace {

class Collect : public AlertSink {
 public:
  void alert(const Alert& a) override { keys.emplace_back(a.key); }
  std::vector<std::string> keys;
};

struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
};

TEST(CooldownAlertSink, SendsOncePerKeyPerCooldown) {
  Collect out;
  FakeClock clock;
  CooldownAlertSink sink(
      out, {.cooldown = absl::Minutes(5), .max_keys = 10, .now = [&] { return clock.now; }});
  const Alert a{.severity = AlertSeverity::kCritical, .key = "orphan:e1", .message = "m"};
  sink.alert(a);
  sink.alert(a);
  clock.now += absl::Minutes(4);
  sink.alert(a);
  sink.alert({.severity = AlertSeverity::kCritical, .key = "orphan:e2", .message = "m"});
  EXPECT_EQ(out.keys, (std::vector<std::string>{"orphan:e1", "orphan:e2"}));
  EXPECT_EQ(sink.suppressed(), 2u);
  clock.now += absl::Minutes(2);  // 6 minutes after the first
  sink.alert(a);
  EXPECT_EQ(out.keys.size(), 3u);
}

TEST(CooldownAlertSink, BoundedKeysEvictStaleOnesFirstThenDrop) {
  Collect out;
  FakeClock clock;
  CooldownAlertSink sink(
      out, {.cooldown = absl::Minutes(1), .max_keys = 3, .now = [&] { return clock.now; }});
  const auto send = [&](const std::string& key) {
    sink.alert({.severity = AlertSeverity::kWarning, .key = key, .message = "m"});
  };
  send("a");
  send("b");
  clock.now += absl::Minutes(3);  // a and b are now stale (> 2 cooldowns)
  send("c");
  send("d");  // table full: a and b evicted, d admitted
  send("e");  // c, d fresh: still room for one
  send("f");  // full of fresh keys: dropped, not grown
  EXPECT_EQ(out.keys, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(sink.dropped(), 1u);
  send("c");  // a known key is never dropped for space, only cooled down
  EXPECT_EQ(sink.suppressed(), 1u);
}

}  // namespace
}  // namespace idemledger
