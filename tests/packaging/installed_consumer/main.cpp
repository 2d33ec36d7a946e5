// A host program built against the installed Debian packages, by CMake
// (find_package) and by make (pkg-config) alike. With a DSN
// (argument or $IDEMLEDGER_TEST_DSN) it migrates a scratch schema and applies a
// deposit twice through the installed shared libraries: one credit, one
// "already applied", the balance exact. The host's own prometheus::Registry
// holds its instrument and the library's side by side, exposed by
// prometheus-cpp's serializer as any host would.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "idemledger.hpp"
#include "idemledger/pg/pool.hpp"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace {

int fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::printf("consumer: idemledger %s\n", idemledger::kVersionString);
  const char* dsn = argc > 1 ? argv[1] : std::getenv("IDEMLEDGER_TEST_DSN");
  if (dsn == nullptr) return 0;

  constexpr char kSchema[] = "packaged_consumer";
  idemledger::pg::Pool pool({.dsn = dsn, .max_size = 1});
  absl::StatusOr<idemledger::pg::PooledConnection> conn = pool.acquire();
  if (!conn.ok()) return fail("connect", conn.status());
  if (absl::StatusOr<idemledger::Result> r =
          (*conn)->execute("DROP SCHEMA IF EXISTS packaged_consumer CASCADE");
      !r.ok()) {
    return fail("drop schema", r.status());
  }
  if (absl::Status s = idemledger::migrate(**conn, kSchema); !s.ok()) return fail("migrate", s);
  prometheus::Registry registry;  // the host's
  prometheus::Counter& host_requests = prometheus::BuildCounter()
                                           .Name("host_requests_total")
                                           .Help("The host's own instrument.")
                                           .Register(registry)
                                           .Add({});
  host_requests.Increment();
  idemledger::LedgerMetrics metrics(registry);
  const idemledger::Ledger ledger({.schema = kSchema, .metrics = &metrics});
  if (absl::Status s = ledger.open_account(**conn, 7, idemledger::Amount()); !s.ok()) {
    return fail("open_account", s);
  }
  const idemledger::PaymentEvent deposit{.event_id = "pkg-1",
                                         .type = idemledger::EventType::kDeposit,
                                         .user_id = 7,
                                         .amount = *idemledger::Amount::parse("12.5")};
  absl::StatusOr<idemledger::Outcome> first = ledger.process_deposit(**conn, deposit);
  absl::StatusOr<idemledger::Outcome> again = ledger.process_deposit(**conn, deposit);
  absl::StatusOr<idemledger::Amount> balance = ledger.balance(**conn, 7);
  if (!first.ok()) return fail("deposit", first.status());
  if (!again.ok()) return fail("replay", again.status());
  if (!balance.ok()) return fail("balance", balance.status());
  const bool exact = *first == idemledger::Outcome::kApplied &&
                     *again == idemledger::Outcome::kAlreadyApplied &&
                     balance->to_string() == "12.5";
  const std::string exposition = prometheus::TextSerializer().Serialize(registry.Collect());
  const bool both_exposed =
      exposition.find("host_requests_total 1\n") != std::string::npos &&
      exposition.find("idemledger_ledger_outcomes_total{outcome=\"applied\"} 1\n") !=
          std::string::npos &&
      exposition.find("idemledger_ledger_outcomes_total{outcome=\"duplicate\"} 1\n") !=
          std::string::npos;
  std::printf("consumer: one registry exposes the host's and the ledger's series: %s\n",
              both_exposed ? "yes" : "no");
  std::printf("consumer: deposit %s, replay %s, balance %s\n",
              std::string(idemledger::to_string(*first)).c_str(),
              std::string(idemledger::to_string(*again)).c_str(), balance->to_string().c_str());
  (void)(*conn)->execute("DROP SCHEMA packaged_consumer CASCADE");
  return exact && both_exposed ? 0 : 1;
}
