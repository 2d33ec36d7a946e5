#include "idemledger/core/schema.hpp"

#include "gmock/gmock.h"

namespace idemledger {
namespace {

using ::testing::HasSubstr;

// Literals are checked by the compiler; this proves the same rule holds there.
static_assert(internal::is_sql_identifier("idemledger"));
static_assert(internal::is_sql_identifier("_t_1"));
static_assert(!internal::is_sql_identifier("Public"));
static_assert(!internal::is_sql_identifier("x; DROP SCHEMA public CASCADE; --"));
static_assert(Schema("payments").name() == "payments");

TEST(Schema, RefusesEverythingButAPlainLowerCaseIdentifier) {
  for (const std::string& bad :
       {std::string(), std::string("Public"), std::string("x; DROP TABLE users"),
        std::string("a-b"), std::string("1abc"), std::string("a b"), std::string("\"quoted\""),
        std::string("caf\xc3\xa9"), std::string(64, 'a'), std::string("a\0b", 3)}) {
    absl::StatusOr<Schema> s = Schema::create(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("[a-z_][a-z0-9_]{0,62}"));
  }
  EXPECT_TRUE(Schema::create(std::string(63, 'a')).ok()) << "63 bytes: PostgreSQL's limit";
}

TEST(Schema, ShowsARefusedNameEscapedAndBounded) {
  absl::StatusOr<Schema> s = Schema::create("x\x1b[2J" + std::string(500, 'y'));
  ASSERT_FALSE(s.ok());
  const std::string message(s.status().message());
  EXPECT_THAT(message, HasSubstr("\\x1b[2J"));
  EXPECT_LT(message.size(), 200u);
}

TEST(Schema, QualifyReplacesEveryPlaceholder) {
  const Schema s = "ledger_7";
  EXPECT_EQ(s.qualify("SELECT * FROM {schema}.a JOIN {schema}.b USING (id)"),
            "SELECT * FROM ledger_7.a JOIN ledger_7.b USING (id)");
  EXPECT_EQ(s.qualify("no placeholder"), "no placeholder");
  EXPECT_EQ(*Schema::create("ledger_7"), s);
  EXPECT_EQ(kDefaultSchema.name(), "idemledger");
}

}  // namespace
}  // namespace idemledger
