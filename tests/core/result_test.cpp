// Values the server answers are read once, through types, and a value that
// does not read as asked is an error naming the column — never a silent 0.
#include "idemledger/core/result.hpp"

#include "gmock/gmock.h"
#include "idemledger/core/event_status.hpp"
#include "idemledger/core/params.hpp"

namespace idemledger {
namespace {

using ::testing::HasSubstr;

Result one_row(std::vector<std::optional<std::string>> values,
               std::vector<std::string> names = {}) {
  Result r;
  r.columns = std::move(names);
  r.rows.push_back(std::move(values));
  return r;
}

TEST(Row, ReadsEachSupportedType) {
  const Result r = one_row({"42", "-7", "t", "f", "150.000000000000000001", "-0.5", "confirmed",
                            "2026-11-29 20:46:00.073152+00", "2026-11-29 23:46:00+03", "text"});
  const Row row = r.row(0);
  EXPECT_EQ(*row.get<std::int64_t>(0), 42);
  EXPECT_EQ(*row.get<int>(1), -7);
  EXPECT_TRUE(*row.get<bool>(2));
  EXPECT_FALSE(*row.get<bool>(3));
  EXPECT_EQ(row.get<Amount>(4)->to_string(), "150.000000000000000001");
  EXPECT_EQ(row.get<Amount>(5)->to_string(), "-0.5") << "system accounts may be negative";
  EXPECT_EQ(*row.get<EventStatus>(6), EventStatus::kConfirmed);
  EXPECT_EQ(
      *row.get<absl::Time>(7),
      absl::FromUnixMicros(absl::ToUnixMicros(absl::FromCivil(
                               absl::CivilSecond(2026, 11, 29, 20, 46, 0), absl::UTCTimeZone())) +
                           73152));
  EXPECT_EQ(*row.get<absl::Time>(8),
            absl::FromCivil(absl::CivilSecond(2026, 11, 29, 20, 46, 0), absl::UTCTimeZone()));
  EXPECT_EQ(*row.get<std::string>(9), "text");
}

TEST(Row, AnUnreadableValueIsAnErrorNamingTheColumn) {
  const Result r =
      one_row({"", "12abc", "99999999999999999999", "maybe", "1.2.3", "paid", {}, "x"},
              {"user_id", "retry_count", "big", "flag", "amount", "status", "trace", "ts"});
  const Row row = r.row(0);
  for (const absl::Status& s :
       {row.get<std::int64_t>(0).status(), row.get<int>(1).status(),
        row.get<std::int64_t>(2).status(), row.get<bool>(3).status(), row.get<Amount>(4).status(),
        row.get<EventStatus>(5).status(), row.get<std::string>(6).status(),
        row.get<absl::Time>(7).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  }
  EXPECT_THAT(std::string(row.get<int>(1).status().message()), HasSubstr("retry_count"));
  EXPECT_THAT(std::string(row.get<EventStatus>(5).status().message()), HasSubstr("\"paid\""));
  EXPECT_THAT(std::string(row.get<std::string>(6).status().message()), HasSubstr("NULL"));
  EXPECT_THAT(std::string(row.get<int>(99).status().message()), HasSubstr("#99"));
}

TEST(Row, GetOptionalReadsNullAsNothing) {
  const Result r = one_row({{}, "3"});
  EXPECT_EQ(*r.row(0).get_optional<std::int64_t>(0), std::nullopt);
  EXPECT_EQ(*r.row(0).get_optional<std::int64_t>(1), 3);
}

TEST(Result, SingleRowMeansExactlyOne) {
  Result none;
  EXPECT_EQ(none.single_row("claim").status().code(), absl::StatusCode::kInternal);
  Result two = one_row({"1"});
  two.rows.push_back({"2"});
  EXPECT_THAT(std::string(read_single<int>(two, "apply_event").status().message()),
              HasSubstr("apply_event: expected one row, got 2"));
  EXPECT_EQ(*read_single<int>(one_row({"5"}), "x"), 5);
}

TEST(Params, BindsEachTypeAsText) {
  const std::string id = "evt_1";
  const std::optional<std::string> none;
  const Params p(id, std::int64_t{-42}, 7, true, *Amount::parse("5e1"), absl::Milliseconds(1500),
                 std::nullopt, none, std::optional<int>(3), std::string("kept"));
  const std::span<const Param> v = p;
  ASSERT_EQ(v.size(), 10u);
  EXPECT_EQ(v[0], "evt_1");
  EXPECT_EQ(v[0]->data(), id.data()) << "an lvalue string is viewed, not copied";
  EXPECT_EQ(v[1], "-42");
  EXPECT_EQ(v[2], "7");
  EXPECT_EQ(v[3], "true");
  EXPECT_EQ(v[4], "50");
  EXPECT_EQ(v[5], "1500");
  EXPECT_EQ(v[6], std::nullopt);
  EXPECT_EQ(v[7], std::nullopt);
  EXPECT_EQ(v[8], "3");
  EXPECT_EQ(v[9], "kept") << "an rvalue string is kept alive by the Params";
}

TEST(ArrayText, QuotesEveryElementAndEscapesQuoteAndBackslash) {
  ArrayText a;
  a.add(std::string_view(R"(a"b)"));
  a.add(std::string_view(R"(c\d)"));
  a.add(std::string_view("e,f}{ NULL"));
  a.add(Param());
  a.add(std::int64_t{-7});
  a.add(*Amount::parse("1.50"));
  a.add(false);
  a.add(std::string_view(""));
  EXPECT_EQ(std::move(a).finish(), R"({"a\"b","c\\d","e,f}{ NULL",NULL,"-7","1.5","false",""})");
  EXPECT_EQ(ArrayText().finish(), "{}");
}

}  // namespace
}  // namespace idemledger
