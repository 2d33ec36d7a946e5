// The admin CLI's progress lines (tools/idemledger-admin/progress.hpp): what
// an operator reads while a long job runs, and the line it ends with.
#include "tools/idemledger-admin/progress.hpp"

#include <cstdio>
#include <string>

#include "gmock/gmock.h"

namespace idemledger::admin {
namespace {

using ::testing::HasSubstr;

TEST(AdminProgress, DoneOfTotalPercentRateAndEta) {
  EXPECT_EQ(progress_line("reconcile --full", "users", {.done = 12'000, .total = 100'000},
                          absl::Seconds(4)),
            "reconcile --full: 12,000 of 100,000 users (12%), 3,000 users/s, ETA 29 s");
  EXPECT_EQ(progress_line("cleanup", "records", {.done = 1'000'000, .total = 9'000'000},
                          absl::Seconds(100)),
            "cleanup: 1,000,000 of 9,000,000 records (11%), 10,000 records/s, ETA 13 min 20 s");
  EXPECT_EQ(progress_line("cleanup", "records", {.done = 5, .total = 3'605}, absl::Seconds(1)),
            "cleanup: 5 of 3,605 records (0%), 5 records/s, ETA 12 min 0 s");
  EXPECT_EQ(progress_line("cleanup", "records", {.done = 1, .total = 7'201}, absl::Seconds(1)),
            "cleanup: 1 of 7,201 records (0%), 1 records/s, ETA 2 h 0 min");
}

TEST(AdminProgress, NoTotalNoEtaAndRowsThatArrivedMeanwhile) {
  EXPECT_EQ(progress_line("cleanup", "records", {.done = 2'500}, absl::Seconds(2)),
            "cleanup: 2,500 records, 1,250 records/s");
  EXPECT_EQ(
      progress_line("reconcile --full", "users", {.done = 1'200, .total = 1'000}, absl::Seconds(1)),
      "reconcile --full: 1,200 of 1,000 users (100%), 1,200 users/s")
      << "past the total counted at the start: no ETA, never over 100%";
  EXPECT_EQ(progress_line("cleanup", "records", {.done = 0, .total = 0}, absl::ZeroDuration()),
            "cleanup: 0 of 0 records");
}

TEST(AdminProgress, TheLastLineAndTheModes) {
  EXPECT_EQ(finished_line("cleanup", "records", 1'500, absl::Milliseconds(2500)),
            "cleanup: 1,500 records in 2.5 s (600 records/s)");
  EXPECT_EQ(grouped(-1'234'567), "-1,234,567");
  EXPECT_EQ(grouped(999), "999");

  for (const ProgressMode mode :
       {ProgressMode::kTerminal, ProgressMode::kLines, ProgressMode::kQuiet}) {
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    ProgressReporter reporter("job", "rows", mode, out);
    const ProgressFn fn = reporter.callback();
    fn({.done = 1, .total = 3});
    fn({.done = 2, .total = 3});  // within the interval: not shown
    reporter.finish(3);
    std::rewind(out);
    std::string text(4096, '\0');
    text.resize(std::fread(text.data(), 1, text.size(), out));
    std::fclose(out);
    switch (mode) {
      case ProgressMode::kTerminal:
        EXPECT_THAT(text, HasSubstr("\r\033[Kjob: 1 of 3 rows (33%)"));
        EXPECT_THAT(text, HasSubstr("\r\033[Kjob: 3 rows in "));
        break;
      case ProgressMode::kLines:
        EXPECT_THAT(text, ::testing::StartsWith("job: 1 of 3 rows (33%)"));
        EXPECT_THAT(text, ::testing::Not(HasSubstr("2 of 3")));
        EXPECT_THAT(text, HasSubstr("\njob: 3 rows in "));
        EXPECT_THAT(text, ::testing::Not(HasSubstr("\r")));
        break;
      case ProgressMode::kQuiet:
        EXPECT_EQ(text, "");
        break;
    }
  }
}

}  // namespace
}  // namespace idemledger::admin
