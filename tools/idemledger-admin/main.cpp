// idemledger-admin — what on-call runs at 3 a.m. instead of hand-written SQL.
//
//   idemledger-admin [--dsn DSN] [--schema S] [--json] VERB ...
//     migrate                         apply migrations; print the schema version
//     status                          queue depth by status, open dead letters, health findings
//     stats                           events, outcomes, ledger totals
//     dlq list [--limit N]            open dead letters, newest first
//     dlq show ID                     one dead letter and its event
//     dlq replay ID --reason TEXT     back through the exactly-once path (audited)
//     dlq discard ID --reason TEXT    close it without replaying (audited)
//     reconcile [--full] [--window-minutes N]
//     cleanup [--ttl-hours H]
//     partitions enable|ensure [--months-ahead N]   monthly partitions (partitioning.hpp)
//     relay status                    the delivery relay: marker, outbox, its DLQ, quarantine
//     relay list [--limit N]          relay dead letters not delivered (open, then dropped)
//
// DSN and schema default to $IDEMLEDGER_DSN and $IDEMLEDGER_SCHEMA. Exit codes: 0 fine, 1 findings
// (unhealthy, out of balance, unknown id), 2 usage or connection errors.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "idemledger.hpp"
#include "idemledger/pg/connection.hpp"

namespace {

using idemledger::Param;

struct Args {
  std::string dsn, schema = "idemledger";
  bool json = false;
  std::vector<std::string> words;
  std::map<std::string, std::string> flags;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "idemledger-admin: %s\n"
               "usage: idemledger-admin [--dsn DSN] [--schema S] [--json] "
               "migrate|status|stats|dlq list|dlq show ID|dlq replay|discard ID --reason TEXT|"
               "reconcile [--full]|cleanup [--ttl-hours H]|partitions enable|ensure|"
               "relay status|relay list\n",
               why.c_str());
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  if (const char* dsn = std::getenv("IDEMLEDGER_DSN")) a.dsn = dsn;
  if (const char* schema = std::getenv("IDEMLEDGER_SCHEMA"); schema != nullptr && *schema != '\0')
    a.schema = schema;
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--json" || w == "--full") {
      a.flags[w] = "1";
      a.json = a.json || w == "--json";
    } else if (w.starts_with("--")) {
      if (i + 1 >= argc) usage(w + " needs a value");
      a.flags[w] = argv[++i];
    } else {
      a.words.push_back(w);
    }
  }
  if (a.flags.contains("--dsn")) a.dsn = a.flags["--dsn"];
  if (a.flags.contains("--schema")) a.schema = a.flags["--schema"];
  if (a.dsn.empty()) usage("no database: pass --dsn or set IDEMLEDGER_DSN");
  if (a.words.empty()) usage("no verb");
  return a;
}

// Prints rows as an aligned table, or as a JSON array of objects.
void print_table(const Args& a, const std::vector<std::string>& header,
                 const idemledger::Result& r) {
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& row : r.rows) {
      nlohmann::json o;
      for (std::size_t c = 0; c < header.size(); ++c)
        o[header[c]] = row[c] ? nlohmann::json(*row[c]) : nullptr;
      out.push_back(o);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : r.rows) {
    for (std::size_t c = 0; c < header.size(); ++c)
      width[c] = std::max(width[c], row[c].value_or("-").size());
  }
  const auto line = [&](const auto& cell) {
    for (std::size_t c = 0; c < header.size(); ++c)
      std::printf("%-*s  ", static_cast<int>(width[c]), cell(c).c_str());
    std::printf("\n");
  };
  line([&](std::size_t c) { return header[c]; });
  for (const auto& row : r.rows) line([&](std::size_t c) { return row[c].value_or("-"); });
}

idemledger::Result query(idemledger::Connection& c, const Args& a, std::string sql,
                         std::initializer_list<Param> params = {}) {
  for (std::size_t p; (p = sql.find("{schema}")) != std::string::npos;) sql.replace(p, 8, a.schema);
  absl::StatusOr<idemledger::Result> r = c.execute(sql, params);
  if (!r.ok()) {
    std::fprintf(stderr, "idemledger-admin: %s\n", r.status().ToString().c_str());
    std::exit(2);
  }
  return *std::move(r);
}

// --limit N for the list verbs (50 by default).
std::string list_limit(const Args& a) {
  return a.flags.contains("--limit") ? a.flags.at("--limit") : "50";
}

std::string actor() {
  const char* user = std::getenv("USER");
  return user != nullptr ? user : std::to_string(getuid());
}

int run(idemledger::Connection& c, const Args& a) {
  const std::string& verb = a.words[0];
  if (verb == "migrate") {
    if (absl::Status s = idemledger::migrate(c, a.schema); !s.ok()) usage(s.ToString());
    std::printf("schema %s at version %d\n", a.schema.c_str(),
                *idemledger::current_schema_version(c, a.schema));
    return 0;
  }
  if (verb == "status") {
    print_table(
        a, {"status", "events", "oldest_update"},
        query(c, a,
              "SELECT status, count(*)::text, min(updated_at)::text FROM {schema}.payment_events "
              "GROUP BY status ORDER BY status"));
    const idemledger::Result dlq =
        query(c, a, "SELECT count(*) FROM {schema}.dead_letter_queue WHERE resolved_at IS NULL");
    const idemledger::Result last = query(c, a,
                                          "SELECT coalesce(max(finished_at)::text, 'never') FROM "
                                          "{schema}.reconciliation_runs");
    absl::StatusOr<idemledger::HealthReport> h = idemledger::check_health(c, {.schema = a.schema});
    if (!h.ok()) usage(h.status().ToString());
    if (a.json) {
      std::printf("%s\n",
                  nlohmann::json{{"open_dead_letters", *dlq.at(0, 0)},
                                 {"last_reconciliation", *last.at(0, 0)},
                                 {"healthy", h->healthy()},
                                 {"zombie_processing", h->zombie_processing},
                                 {"zombie_queued", h->zombie_queued},
                                 {"dead_letters_last_hour", h->dead_letters_last_hour},
                                 {"stuck_idempotency_records", h->stuck_idempotency_records}}
                      .dump(2)
                      .c_str());
    } else {
      std::printf(
          "\nopen dead letters: %s\nlast reconciliation: %s\nhealth: %s (zombies: %lld processing, "
          "%lld "
          "queued; dead letters last hour: %lld; stuck idempotency records: %lld)\n",
          dlq.at(0, 0)->c_str(), last.at(0, 0)->c_str(), h->healthy() ? "ok" : "UNHEALTHY",
          static_cast<long long>(h->zombie_processing), static_cast<long long>(h->zombie_queued),
          static_cast<long long>(h->dead_letters_last_hour),
          static_cast<long long>(h->stuck_idempotency_records));
    }
    return h->healthy() ? 0 : 1;
  }
  if (verb == "stats") {
    print_table(
        a, {"what", "count", "total"},
        query(c, a,
              "SELECT 'event ' || event_type || ' ' || status, count(*)::text, sum(amount)::text "
              "FROM {schema}.payment_events GROUP BY 1 "
              "UNION ALL SELECT 'outcome ' || outcome, count(*)::text, NULL FROM "
              "{schema}.processed_events "
              "GROUP BY 1 "
              "UNION ALL SELECT 'ledger entries', count(*)::text, coalesce(sum(amount), 0)::text "
              "FROM {schema}.balance_events "
              "UNION ALL SELECT 'users', count(*)::text, sum(balance)::text FROM {schema}.users "
              "ORDER BY 1"));
    return 0;
  }
  if (verb == "dlq" && a.words.size() >= 2) {
    const std::string& sub = a.words[1];
    if (sub == "list") {
      const std::string limit = list_limit(a);
      print_table(
          a, {"id", "event_id", "type", "user", "amount", "reason", "attempt", "created_at"},
          query(c, a,
                "SELECT id::text, event_id, event_type, user_id::text, amount::text, reason, "
                "attempt::text, created_at::text FROM {schema}.dead_letter_queue "
                "WHERE resolved_at IS NULL ORDER BY id DESC LIMIT $1::bigint",
                {Param(limit)}));
      return 0;
    }
    if (a.words.size() < 3) usage("dlq " + sub + " needs an id");
    const std::string& id = a.words[2];
    if (sub == "show") {
      const idemledger::Result r = query(
          c, a,
          "SELECT d.id::text, d.event_id, d.event_type, d.user_id::text, d.amount::text, d.reason, "
          "d.error, "
          "d.attempt::text, d.trace_id, d.created_at::text, d.resolution, e.status, "
          "e.retry_count::text, "
          "e.recovery_count::text FROM {schema}.dead_letter_queue d "
          "LEFT JOIN {schema}.payment_events e ON e.event_id = d.event_id WHERE d.id = $1::bigint",
          {Param(id)});
      if (r.rows.empty()) {
        std::fprintf(stderr, "no dead letter %s\n", id.c_str());
        return 1;
      }
      const std::vector<std::string> names = {
          "id",         "event_id",     "event_type",  "user_id",       "amount",
          "reason",     "error",        "attempt",     "trace_id",      "created",
          "resolution", "event_status", "retry_count", "recovery_count"};
      if (a.json) {
        print_table(a, names, r);
      } else {
        for (std::size_t i = 0; i < names.size(); ++i) {
          std::printf("%-15s %s\n", names[i].c_str(), r.at(0, i).value_or("-").c_str());
        }
      }
      return 0;
    }
    if (sub == "discard" || sub == "replay") {
      if (!a.flags.contains("--reason") || a.flags.at("--reason").empty())
        usage(sub + " requires --reason");
      std::int64_t letter = 0;
      if (!absl::SimpleAtoi(id, &letter)) usage("dead letter id must be an integer: " + id);
      const std::string& reason = a.flags.at("--reason");
      const idemledger::DeadLetterQueue dlq({.schema = a.schema});
      // A refusal the operator can act on (no such letter, already resolved,
      // still not applicable) is a finding (1); anything else is an error (2).
      const auto refused = [](const absl::Status& s) {
        std::fprintf(stderr, "idemledger-admin: %s\n", std::string(s.message()).c_str());
        return s.code() == absl::StatusCode::kNotFound ||
                       s.code() == absl::StatusCode::kFailedPrecondition
                   ? 1
                   : 2;
      };
      if (sub == "discard") {
        absl::StatusOr<std::int64_t> audit = dlq.discard(c, letter, reason, actor());
        if (!audit.ok()) return refused(audit.status());
        std::printf("dead letter %s discarded (audit record %lld)\n", id.c_str(),
                    static_cast<long long>(*audit));
        return 0;
      }
      const idemledger::Ledger ledger({.schema = a.schema});
      absl::StatusOr<idemledger::DeadLetterQueue::ReplayResult> r =
          dlq.replay(c, ledger, letter, reason, actor());
      if (!r.ok()) return refused(r.status());
      if (r->applied_now) {
        std::printf("dead letter %s replayed (audit record %lld): event %s applied now: %s\n",
                    id.c_str(), static_cast<long long>(r->audit_id), r->event_id.c_str(),
                    std::string(idemledger::to_string(*r->applied_now)).c_str());
      } else {
        std::printf(
            "dead letter %s replayed (audit record %lld): event %s is pending again; "
            "a worker applies it once\n",
            id.c_str(), static_cast<long long>(r->audit_id), r->event_id.c_str());
      }
      return 0;
    }
  }
  if (verb == "reconcile") {
    const idemledger::Reconciler reconciler({.schema = a.schema});
    const long window = a.flags.contains("--window-minutes")
                            ? std::atol(a.flags.at("--window-minutes").c_str())
                            : 60;
    absl::StatusOr<idemledger::ReconcileReport> r =
        a.flags.contains("--full") ? reconciler.full(c)
                                   : reconciler.hot_path(c, absl::Minutes(window));
    if (!r.ok()) usage(r.status().ToString());
    if (a.json) {
      nlohmann::json out = {{"users_checked", r->users_checked}, {"clean", r->clean()}};
      for (const auto& m : r->mismatches) {
        out["mismatches"].push_back(
            {{"user_id", m.user_id}, {"balance", m.balance}, {"expected", m.expected}});
      }
      for (const auto& d : r->duplicates) {
        out["duplicates"].push_back({{"source_event_id", d.source_event_id},
                                     {"event_type", d.event_type},
                                     {"copies", d.copies}});
      }
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::printf(
          "reconciliation (%s): %lld users checked, %zu out of balance, %zu duplicate ledger "
          "entries\n",
          a.flags.contains("--full") ? "full" : "hot path",
          static_cast<long long>(r->users_checked), r->mismatches.size(), r->duplicates.size());
      for (const auto& m : r->mismatches) {
        std::printf("  user %lld: balance %s, expected %s\n", static_cast<long long>(m.user_id),
                    m.balance.c_str(), m.expected.c_str());
      }
      for (const auto& d : r->duplicates) {
        std::printf("  duplicate: %s (%s) x%lld\n", d.source_event_id.c_str(), d.event_type.c_str(),
                    static_cast<long long>(d.copies));
      }
    }
    return r->clean() ? 0 : 1;
  }
  if (verb == "cleanup") {
    const long hours =
        a.flags.contains("--ttl-hours") ? std::atol(a.flags.at("--ttl-hours").c_str()) : 24L * 30;
    absl::StatusOr<idemledger::CleanupReport> r =
        idemledger::cleanup_idempotency_records(c, {.schema = a.schema, .ttl = absl::Hours(hours)});
    if (!r.ok()) usage(r.status().ToString());
    std::printf(
        "deleted %lld idempotency records older than %ldh in %lld batches; dropped %lld expired "
        "monthly partitions\n",
        static_cast<long long>(r->deleted), hours, static_cast<long long>(r->batches),
        static_cast<long long>(r->partitions_dropped));
    return 0;
  }
  if (verb == "partitions") {
    const std::string sub = a.words.size() > 1 ? a.words[1] : "";
    if (sub != "enable" && sub != "ensure") usage("partitions enable|ensure [--months-ahead N]");
    int months = 3;
    if (a.flags.contains("--months-ahead") &&
        !absl::SimpleAtoi(a.flags.at("--months-ahead"), &months)) {
      usage("--months-ahead must be an integer");
    }
    const idemledger::PartitioningOptions options{.schema = a.schema, .months_ahead = months};
    absl::StatusOr<int> created = sub == "enable"
                                      ? idemledger::enable_monthly_partitioning(c, options)
                                      : idemledger::ensure_monthly_partitions(c, options);
    if (!created.ok()) usage(created.status().ToString());
    std::printf("schema %s: monthly partitions %s; %d created\n", a.schema.c_str(),
                *idemledger::is_partitioned(c, a.schema) ? "on" : "off (enable first)", *created);
    return 0;
  }
  if (verb == "relay" && a.words.size() == 2 && a.words[1] == "status") {
    print_table(
        a, {"what", "count", "since"},
        query(c, a,
              "SELECT 'marker ' || name || ': ' || state, NULL, opened_at::text "
              "FROM {schema}.circuit_breakers WHERE name LIKE 'relay:%' "
              "UNION ALL SELECT 'outbox undelivered', count(*)::text, min(created_at)::text "
              "FROM {schema}.outbox WHERE published_at IS NULL AND diverted_at IS NULL "
              "UNION ALL SELECT 'outbox delivered', count(*)::text, NULL FROM {schema}.outbox "
              "WHERE published_at IS NOT NULL "
              "UNION ALL SELECT 'dead letters ' || coalesce(resolution, 'open'), count(*)::text, "
              "min(first_dlq_at)::text FROM {schema}.relay_dead_letters GROUP BY resolution "
              "UNION ALL SELECT 'dropped: ' || drop_reason, count(*)::text, NULL "
              "FROM {schema}.relay_dead_letters WHERE resolution = 'dropped' GROUP BY drop_reason "
              "UNION ALL SELECT 'quarantined', count(*)::text, min(quarantined_at)::text "
              "FROM {schema}.relay_quarantine"));
    return 0;
  }
  if (verb == "relay" && a.words.size() == 2 && a.words[1] == "list") {
    const std::string limit = list_limit(a);
    print_table(a,
                {"id", "outbox_id", "topic", "dlq_retries", "first_dlq_at", "reason", "resolution",
                 "drop_reason"},
                query(c, a,
                      "SELECT id::text, outbox_id::text, topic, dlq_retries::text, "
                      "first_dlq_at::text, reason, resolution, drop_reason "
                      "FROM {schema}.relay_dead_letters WHERE resolution IS DISTINCT FROM "
                      "'delivered' ORDER BY resolution NULLS FIRST, id DESC LIMIT $1::bigint",
                      {Param(limit)}));
    return 0;
  }
  usage("unknown verb: " + verb);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    absl::StatusOr<std::unique_ptr<idemledger::pg::Connection>> c =
        // Unnamed statements: an operator's one-off commands gain nothing from
        // preparing, and they then also work through PgBouncer < 1.21.
        idemledger::pg::Connection::open(a.dsn, {.prepared_statements = false});
    if (!c.ok()) usage(c.status().ToString());
    return run(**c, a);
  } catch (const std::exception& e) {  // e.g. JSON output of non-UTF-8 data: report, exit 2
    std::fprintf(stderr, "idemledger-admin: %s\n", e.what());
    return 2;
  }
}
