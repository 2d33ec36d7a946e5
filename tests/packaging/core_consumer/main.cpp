// A host with its own database driver, using only idemledger's core: it
// implements Connection itself and reads answers through the typed rows.
#include <cstdio>
#include <string>

#include "idemledger/core/amount.hpp"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/retry.hpp"
#include "idemledger/core/schema.hpp"

namespace {

// "The host's driver": answers every statement with one row, the text "7".
class HostConnection final : public idemledger::Connection {
 public:
  using Connection::execute;
  absl::StatusOr<idemledger::Result> execute(std::string_view,
                                             std::span<const idemledger::Param>) override {
    idemledger::Result r;
    r.rows.push_back({std::string("7")});
    return r;
  }
  bool in_transaction() const override { return false; }
};

}  // namespace

int main() {
  HostConnection conn;
  const idemledger::Schema schema = "host_schema";
  int tries = 0;
  absl::StatusOr<std::int64_t> v =
      idemledger::with_retries({}, [&]() -> absl::StatusOr<std::int64_t> {
        if (++tries < 2) return absl::UnavailableError("transient");
        absl::StatusOr<idemledger::Result> r = conn.execute(
            schema.qualify("SELECT 7 FROM {schema}.t WHERE id = $1"), idemledger::Params(1));
        if (!r.ok()) return r.status();
        return idemledger::read_single<std::int64_t>(*r, "seven");
      });
  absl::StatusOr<idemledger::Amount> a = idemledger::Amount::parse("50.25");
  if (!v.ok() || *v != 7 || tries != 2 || !a.ok() || a->to_string() != "50.25") return 1;
  std::printf("core consumer ok: %lld after %d tries, amount %s\n", static_cast<long long>(*v),
              tries, a->to_string().c_str());
  return 0;
}
