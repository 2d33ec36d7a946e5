// A host program outside the tree: it must compile against the public headers
// alone (no libpq-fe.h) and link against both targets.
#include <cstdio>
#include <string>

#include "idemledger.hpp"
#include "idemledger/pg/pool.hpp"

int main() {
  absl::StatusOr<idemledger::Amount> a = idemledger::Amount::parse("50.25");
  idemledger::pg::Pool pool({.dsn = "host=/nonexistent", .max_size = 1});
  (void)pool;
  if (!a.ok() || a->to_string() != "50.25") return 1;
  const idemledger::Relay relay({.transport = [](const idemledger::RelayMessage&) {
    return absl::OkStatus();
  }});
  std::printf("consumer ok: idemledger %s, key %s, relay %s\n", idemledger::kVersionString,
              idemledger::idempotency_key("evt", "deposit").c_str(),
              std::string(idemledger::to_string(relay.mode())).c_str());
  return 0;
}
