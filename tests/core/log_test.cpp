#include "idemledger/core/log.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace idemledger {
namespace {

const absl::Time kNoon = absl::FromUnixMicros(1'796'040'000'123'456);

TEST(Log, JsonLineHasTheFixedKeysFirstThenFields) {
  const LogField fields[] = {{"result", std::string_view("applied")},
                             {"retry_count", std::int64_t{2}}};
  const std::string line = format_json_log_line({.level = LogLevel::kWarning,
                                                 .time = kNoon,
                                                 .message = "event",
                                                 .trace_id = "t-1",
                                                 .event_id = "e-1",
                                                 .fields = fields});
  EXPECT_EQ(
      line,
      "{\"ts\":\"2026-11-30T12:00:00.123456Z\",\"level\":\"warning\",\"msg\":\"event\","
      "\"trace_id\":\"t-1\",\"event_id\":\"e-1\",\"result\":\"applied\",\"retry_count\":2}\n");
}

TEST(Log, OmitsEmptyIdsAndEscapesEverything) {
  const LogField fields[] = {{"error", std::string_view("quote \" backslash \\ newline \n \x01")},
                             {"bad_utf8", std::string_view("\xff\xfe ok")}};
  const std::string line = format_json_log_line({.time = kNoon, .message = "m", .fields = fields});
  EXPECT_EQ(line.find("trace_id"), std::string::npos);
  EXPECT_EQ(line.find("event_id"), std::string::npos);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line, whatever the values hold";
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["error"], "quote \" backslash \\ newline \n \x01");
  EXPECT_EQ(j["bad_utf8"], "\xEF\xBF\xBD\xEF\xBF\xBD ok") << "invalid UTF-8 replaced, not passed";
}

TEST(Log, SinkFiltersByLevelAndNeverInterleavesLines) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    JsonLineLogSink sink(out, LogLevel::kInfo);
    emit_log(&sink, LogLevel::kDebug, "hidden", "", "");
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&sink, t] {
        const std::string payload(500, static_cast<char>('a' + t));
        for (int i = 0; i < 200; ++i) {
          emit_log(&sink, LogLevel::kInfo, "line", "", "", {{"payload", payload}});
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  std::rewind(out);
  int lines = 0;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, out) != nullptr) {
    const nlohmann::json j = nlohmann::json::parse(buf, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << buf;
    EXPECT_NE(j["msg"], "hidden");
    const std::string payload = j["payload"];
    EXPECT_EQ(payload, std::string(500, payload[0]));
    ++lines;
  }
  std::fclose(out);
  EXPECT_EQ(lines, 8 * 200);
}

TEST(Log, NullSinkIsANoOp) { emit_log(nullptr, LogLevel::kError, "nobody listens", "", ""); }

}  // namespace
}  // namespace idemledger
