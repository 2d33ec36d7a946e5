// A host program outside the tree that wants one of each: the umbrella header
// and target. It must compile against the public headers alone (no libpq-fe.h).
#include <cstdio>
#include <string>

#include "idemledger.hpp"

int main() {
  absl::StatusOr<idemledger::Amount> a = idemledger::Amount::parse("50.25");
  idemledger::pg::Pool pool({.dsn = "host=/nonexistent", .max_size = 1});
  (void)pool;
  if (!a.ok() || a->to_string() != "50.25") return 1;
  absl::StatusOr<std::unique_ptr<idemledger::Relay>> relay = idemledger::Relay::create(
      {.transport = [](const idemledger::RelayMessage&) { return absl::OkStatus(); }});
  if (!relay.ok()) return 1;
  std::printf("consumer ok: idemledger %s, key %s, relay %s\n", idemledger::kVersionString,
              idemledger::idempotency_key("evt", "deposit").c_str(),
              std::string(idemledger::to_string((*relay)->mode())).c_str());
  return 0;
}
