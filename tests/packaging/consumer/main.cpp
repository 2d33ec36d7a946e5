// A host program outside the tree: it must compile against the public headers
// alone (no libpq-fe.h) and link against both targets.
#include <cstdio>

#include "idemledger.hpp"
#include "idemledger/pg/pool.hpp"

int main() {
  absl::StatusOr<idemledger::Amount> a = idemledger::Amount::parse("50.25");
  idemledger::pg::Pool pool({.dsn = "host=/nonexistent", .max_size = 1});
  (void)pool;
  if (!a.ok() || a->to_string() != "50.25") return 1;
  std::printf("consumer ok: idemledger %s, key %s\n", idemledger::kVersionString,
              idemledger::idempotency_key("evt", "deposit").c_str());
  return 0;
}
