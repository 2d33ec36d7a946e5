// A host that applies deposits over the bundled pool: the ledger and pg
// components, nothing else.
#include <cstdio>

#include "idemledger/ledger/idempotency_key.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/pg/pool.hpp"

int main() {
  idemledger::pg::Pool pool({.dsn = "host=/nonexistent", .max_size = 1});
  const idemledger::Ledger ledger({.schema = "payments"});
  absl::StatusOr<idemledger::Amount> a = idemledger::Amount::parse("1.5");
  if (!a.ok()) return 1;
  std::printf("ledger+pg consumer ok: key %s, schema %s\n",
              idemledger::idempotency_key("evt", "deposit").c_str(),
              std::string(ledger.options().schema.name()).c_str());
  return 0;
}
