// idemledger-admin — what on-call runs at 3 a.m. instead of hand-written SQL.
//
//   idemledger-admin [--dsn DSN] [--schema S] [--json] [--quiet] [--actor TEXT] VERB ...
//     migrate                         apply migrations; print the schema version
//     status                          queue depth by status, open dead letters, health findings
//     stats                           events, outcomes, ledger totals
//     dlq list [--limit N]            open dead letters, newest first
//     dlq show ID                     one dead letter and its event
//     dlq replay ID --reason TEXT     back through the exactly-once path (audited)
//     dlq discard ID --reason TEXT    close it without replaying (audited)
//     reconcile [--full] [--window-minutes N]
//     cleanup [--ttl-hours H]
//     partitions enable|ensure [--months-ahead N]   monthly partitions (ops/partitioning.hpp)
//     relay status                    the delivery relay: marker, outbox, its DLQ, quarantine
//     relay list [--limit N]          relay dead letters not delivered (open, then dropped)
//     assets list                     the registered assets
//     assets add CODE --decimals N [--chain C] [--contract X]   register one (idempotent)
//     assets enable|disable CODE --reason TEXT   a disabled asset takes no new money; what
//                                     exists settles (audited)
//     liabilities                     per asset: what the ledger owes users, held, system accounts
//
// The read-only verbs (status, stats, dlq list|show, reconcile, relay
// status|list, assets list, liabilities) also run on a standby: a DSN with
// target_session_attrs=prefer-standby keeps them off the primary, and they
// then end with the standby's replay lag (on stderr with --json; reconcile's
// JSON has it as standby_replay_lag_ms).
// DSN and schema default to $IDEMLEDGER_DSN and $IDEMLEDGER_SCHEMA; a DSN may
// also name a service (service=NAME, ~/.pg_service.conf) and take its
// password from ~/.pgpass or $PGPASSFILE, so none appears in `ps`. Every
// query is the library's; every argument is checked before anything runs.
// Audited actions are recorded under the database role that ran them
// (current_user), with --actor as extra text. Exit codes: 0 fine, 1 findings
// (unhealthy, out of balance, unknown id), 2 usage or connection errors.
// Long jobs (reconcile --full, cleanup, partitions enable) show their
// progress on stderr (progress.hpp); --quiet silences it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "idemledger.hpp"
#include "progress.hpp"

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "idemledger-admin: %s\n"
               "usage: idemledger-admin [--dsn DSN] [--schema S] [--json] [--quiet] [--actor TEXT] "
               "migrate|status|stats|dlq list|dlq show ID|dlq replay|discard ID --reason TEXT|"
               "reconcile [--full] [--window-minutes N]|cleanup [--ttl-hours H]|"
               "partitions enable|ensure [--months-ahead N]|relay status|relay list [--limit N]|"
               "assets list|assets add CODE --decimals N [--chain C] [--contract X]|"
               "assets enable|disable CODE --reason TEXT|liabilities\n",
               why.c_str());
  std::exit(2);
}

// Text from the database or the operator, made safe for a terminal: control
// characters and non-UTF-8-looking bytes become \xNN, so a stored event id
// can neither clear the screen nor fake a table row.
std::string printable(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

std::string time_text(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E6S UTC", t, absl::UTCTimeZone());
}
std::string time_text(const std::optional<absl::Time>& t) { return t ? time_text(*t) : "-"; }

struct Args {
  std::string dsn;
  idemledger::Schema schema = idemledger::kDefaultSchema;
  bool json = false;
  bool full = false;
  bool quiet = false;  // no progress on stderr
  std::vector<std::string> words;
  std::map<std::string, std::string> flags;

  bool has(const std::string& flag) const { return flags.contains(flag); }
  // A flag's integer value in [min, max], or `fallback` when absent; anything
  // else ends the program with exit 2 before a connection is opened.
  std::int64_t number(const std::string& flag, std::int64_t fallback, std::int64_t min,
                      std::int64_t max) const {
    const auto it = flags.find(flag);
    if (it == flags.end()) return fallback;
    std::int64_t v = 0;
    if (!absl::SimpleAtoi(it->second, &v) || v < min || v > max) {
      usage(flag + " must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
            "], got \"" + printable(it->second) + "\"");
    }
    return v;
  }
};

// Longest argument taken: a DSN, a reason, a contract address fit easily.
constexpr std::size_t kMaxArgumentLength = 1024;

Args parse_args(int argc, char** argv) {
  static const std::set<std::string> kValued = {
      "--dsn",          "--schema",    "--reason",   "--limit", "--window-minutes", "--actor",
      "--months-ahead", "--ttl-hours", "--decimals", "--chain", "--contract"};
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).size() > kMaxArgumentLength) {
      usage("argument " + std::to_string(i) + " is longer than " +
            std::to_string(kMaxArgumentLength) + " bytes");
    }
  }
  if (const char* dsn = std::getenv("IDEMLEDGER_DSN")) a.dsn = dsn;
  std::string schema_name;
  if (const char* schema = std::getenv("IDEMLEDGER_SCHEMA"); schema != nullptr && *schema != '\0') {
    schema_name = schema;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--json") {
      a.json = true;
    } else if (w == "--full") {
      a.full = true;
    } else if (w == "--quiet") {
      a.quiet = true;
    } else if (kValued.contains(w)) {
      if (i + 1 >= argc) usage(w + " needs a value");
      a.flags[w] = argv[++i];
    } else if (w.starts_with("--")) {
      usage("unknown flag " + printable(w));
    } else {
      a.words.push_back(w);
    }
  }
  if (a.has("--dsn")) a.dsn = a.flags["--dsn"];
  if (a.has("--schema")) schema_name = a.flags["--schema"];
  if (!schema_name.empty()) {
    absl::StatusOr<idemledger::Schema> schema = idemledger::Schema::create(schema_name);
    if (!schema.ok()) usage(std::string(schema.status().message()));
    a.schema = *schema;
  }
  if (a.dsn.empty()) usage("no database: pass --dsn or set IDEMLEDGER_DSN");
  if (a.words.empty()) usage("no verb");
  return a;
}

// Prints rows as an aligned table, or as a JSON array of objects.
using Cell = nlohmann::json;  // a string, an integer or null
void print_table(const Args& a, const std::vector<std::string>& header,
                 const std::vector<std::vector<Cell>>& rows) {
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& row : rows) {
      nlohmann::json o = nlohmann::json::object();
      for (std::size_t c = 0; c < header.size(); ++c) o[header[c]] = row[c];
      out.push_back(std::move(o));
    }
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  const auto text = [](const Cell& cell) {
    if (cell.is_null()) return std::string("-");
    if (cell.is_string()) return printable(cell.get<std::string>());
    return cell.dump();
  };
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < header.size(); ++c)
      width[c] = std::max(width[c], text(row[c]).size());
  }
  const auto line = [&](const auto& cell) {
    for (std::size_t c = 0; c < header.size(); ++c) {
      std::printf("%-*s  ", static_cast<int>(width[c]), cell(c).c_str());
    }
    std::printf("\n");
  };
  line([&](std::size_t c) { return header[c]; });
  for (const auto& row : rows) line([&](std::size_t c) { return text(row[c]); });
}

template <typename T>
T must(absl::StatusOr<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "idemledger-admin: %s\n", printable(r.status().ToString()).c_str());
    std::exit(2);
  }
  return *std::move(r);
}

// Who does an audited action: the database role (authenticated by the
// server, unlike $USER), plus what the operator adds with --actor.
std::string actor(idemledger::Connection& c, const Args& a) {
  const idemledger::Result r = must(c.execute("SELECT current_user"));
  std::string role = must(idemledger::read_single<std::string>(r, "current_user"));
  if (a.has("--actor")) role += " (" + a.flags.at("--actor") + ")";
  return role;
}

int migrate(idemledger::Connection& c, const Args& a) {
  if (absl::Status s = idemledger::migrate(c, a.schema); !s.ok()) usage(s.ToString());
  std::printf("schema %s at version %d\n", std::string(a.schema.name()).c_str(),
              must(idemledger::current_schema_version(c, a.schema)));
  return 0;
}

int status(idemledger::Connection& c, const Args& a) {
  const idemledger::StatusReport s = must(idemledger::status_report(c, {.schema = a.schema}));
  const idemledger::HealthReport& h = s.health;
  if (a.json) {
    nlohmann::json by_status = nlohmann::json::object();
    for (const auto& row : s.by_status) by_status[std::string(to_string(row.status))] = row.events;
    std::printf("%s\n", nlohmann::json{{"events", by_status},
                                       {"open_dead_letters", s.open_dead_letters},
                                       {"last_reconciliation", time_text(s.last_reconciliation)},
                                       {"healthy", h.healthy()},
                                       {"zombie_processing", h.zombie_processing},
                                       {"zombie_queued", h.zombie_queued},
                                       {"dead_letters_last_hour", h.dead_letters_last_hour},
                                       {"stuck_idempotency_records", h.stuck_idempotency_records},
                                       {"partitioning_incomplete", h.partitioning_incomplete}}
                            .dump(2)
                            .c_str());
  } else {
    std::vector<std::vector<Cell>> rows;
    for (const auto& row : s.by_status) {
      rows.push_back(
          {std::string(to_string(row.status)), row.events, time_text(row.oldest_update)});
    }
    print_table(a, {"status", "events", "oldest_update"}, rows);
    std::printf(
        "\nopen dead letters: %lld\nlast reconciliation: %s\nhealth: %s (zombies: %lld "
        "processing, %lld queued; dead letters last hour: %lld; stuck idempotency records: "
        "%lld)%s\n",
        static_cast<long long>(s.open_dead_letters),
        s.last_reconciliation ? time_text(*s.last_reconciliation).c_str() : "never",
        h.healthy() ? "ok" : "UNHEALTHY", static_cast<long long>(h.zombie_processing),
        static_cast<long long>(h.zombie_queued), static_cast<long long>(h.dead_letters_last_hour),
        static_cast<long long>(h.stuck_idempotency_records),
        h.partitioning_incomplete
            ? "\nwarning: system_entries is not partitioned yet: run 'partitions enable' once "
              "more"
            : "");
  }
  return h.healthy() ? 0 : 1;
}

int stats(idemledger::Connection& c, const Args& a) {
  std::vector<std::vector<Cell>> rows;
  for (const idemledger::StatsRow& r : must(idemledger::ledger_stats(c, a.schema))) {
    rows.push_back({r.what, r.count, r.total ? Cell(r.total->to_string()) : Cell()});
  }
  print_table(a, {"what", "count", "total"}, rows);
  return 0;
}

int dlq(idemledger::Connection& c, const Args& a) {
  const std::string sub = a.words.size() > 1 ? a.words[1] : "";
  const idemledger::DeadLetterQueue queue({.schema = a.schema});
  if (sub == "list") {
    const int limit = static_cast<int>(a.number("--limit", 50, 1, 10'000));
    std::vector<std::vector<Cell>> rows;
    for (const auto& r : must(queue.list(c, limit))) {
      rows.push_back({r.id, r.letter.event_id, r.letter.event_type, r.letter.user_id,
                      r.letter.amount, r.letter.reason, r.attempt, time_text(r.created_at)});
    }
    print_table(a, {"id", "event_id", "type", "user", "amount", "reason", "attempt", "created_at"},
                rows);
    return 0;
  }
  if (sub != "show" && sub != "replay" && sub != "discard") usage("dlq list|show|replay|discard");
  if (a.words.size() < 3) usage("dlq " + sub + " needs an id");
  std::int64_t id = 0;
  if (!absl::SimpleAtoi(a.words[2], &id) || id <= 0) {
    usage("a dead letter id is a positive integer, got \"" + printable(a.words[2]) + "\"");
  }
  // A refusal the operator can act on (no such letter, already resolved,
  // still not applicable) is a finding (1); anything else is an error (2).
  const auto refused = [](const absl::Status& s) {
    std::fprintf(stderr, "idemledger-admin: %s\n", printable(std::string(s.message())).c_str());
    return s.code() == absl::StatusCode::kNotFound ||
                   s.code() == absl::StatusCode::kFailedPrecondition
               ? 1
               : 2;
  };
  if (sub == "show") {
    absl::StatusOr<idemledger::DeadLetterQueue::Record> r = queue.show(c, id);
    if (!r.ok()) return refused(r.status());
    const std::vector<std::string> names = {
        "id",         "event_id",     "event_type",  "user_id",       "amount",
        "reason",     "error",        "attempt",     "trace_id",      "created",
        "resolution", "event_status", "retry_count", "recovery_count"};
    const auto or_null = [](const auto& o) { return o ? Cell(*o) : Cell(); };
    const std::vector<Cell> row = {
        r->id,
        r->letter.event_id,
        r->letter.event_type,
        r->letter.user_id,
        r->letter.amount,
        r->letter.reason,
        r->letter.error,
        r->attempt,
        r->letter.trace_id.empty() ? Cell() : Cell(r->letter.trace_id),
        time_text(r->created_at),
        or_null(r->resolution),
        r->event_status ? Cell(std::string(to_string(*r->event_status))) : Cell(),
        r->retry_count,
        r->recovery_count};
    if (a.json) {
      print_table(a, names, {row});
    } else {
      for (std::size_t i = 0; i < names.size(); ++i) {
        const std::string value = row[i].is_null()     ? "-"
                                  : row[i].is_string() ? printable(row[i].get<std::string>())
                                                       : row[i].dump();
        std::printf("%-15s %s\n", names[i].c_str(), value.c_str());
      }
    }
    return 0;
  }
  if (!a.has("--reason") || a.flags.at("--reason").empty()) usage(sub + " requires --reason");
  const std::string& reason = a.flags.at("--reason");
  const std::string who = actor(c, a);
  if (sub == "discard") {
    absl::StatusOr<std::int64_t> audit = queue.discard(c, id, reason, who);
    if (!audit.ok()) return refused(audit.status());
    std::printf("dead letter %lld discarded (audit record %lld)\n", static_cast<long long>(id),
                static_cast<long long>(*audit));
    return 0;
  }
  const idemledger::Ledger ledger({.schema = a.schema});
  absl::StatusOr<idemledger::DeadLetterQueue::ReplayResult> r =
      queue.replay(c, ledger, id, reason, who);
  if (!r.ok()) return refused(r.status());
  if (r->applied_now) {
    std::printf("dead letter %lld replayed (audit record %lld): event %s applied now: %s\n",
                static_cast<long long>(id), static_cast<long long>(r->audit_id),
                printable(r->event_id).c_str(),
                std::string(idemledger::to_string(*r->applied_now)).c_str());
  } else {
    std::printf(
        "dead letter %lld replayed (audit record %lld): event %s is pending again; "
        "a worker applies it once\n",
        static_cast<long long>(id), static_cast<long long>(r->audit_id),
        printable(r->event_id).c_str());
  }
  return 0;
}

// A long job's progress on stderr: redrawn on a terminal, plain lines
// otherwise, nothing with --quiet (progress.hpp).
idemledger::admin::ProgressReporter reporter(const Args& a, std::string job, std::string unit) {
  using idemledger::admin::ProgressMode;
  const ProgressMode mode = a.quiet                 ? ProgressMode::kQuiet
                            : isatty(STDERR_FILENO) ? ProgressMode::kTerminal
                                                    : ProgressMode::kLines;
  return {std::move(job), std::move(unit), mode};
}

int reconcile(idemledger::Connection& c, const Args& a) {
  const std::int64_t window = a.number("--window-minutes", 60, 1, 60 * 24 * 366);
  idemledger::ReconcileReport r;
  if (a.full) {
    idemledger::admin::ProgressReporter progress = reporter(a, "reconcile --full", "users");
    const idemledger::Reconciler reconciler({.schema = a.schema, .progress = progress.callback()});
    r = must(reconciler.full(c));
    progress.finish(r.users_checked);
  } else {
    r = must(idemledger::Reconciler({.schema = a.schema}).hot_path(c, absl::Minutes(window)));
  }
  if (a.json) {
    nlohmann::json out = {{"users_checked", r.users_checked},
                          {"accounts_checked", r.accounts_checked},
                          {"standby_replay_lag_ms",
                           r.standby_lag ? nlohmann::json(absl::ToInt64Milliseconds(*r.standby_lag))
                                         : nlohmann::json()},
                          {"clean", r.clean()},
                          {"mismatches", nlohmann::json::array()},
                          {"duplicates", nlohmann::json::array()},
                          {"imbalances", nlohmann::json::array()}};
    for (const auto& m : r.mismatches) {
      out["mismatches"].push_back({{"user_id", m.user_id},
                                   {"asset", m.asset},
                                   {"balance", m.balance},
                                   {"expected", m.expected},
                                   {"held", m.held},
                                   {"expected_held", m.expected_held}});
    }
    for (const auto& i : r.imbalances) {
      out["imbalances"].push_back({{"asset", i.asset}, {"sum", i.sum}});
    }
    for (const auto& d : r.duplicates) {
      out["duplicates"].push_back({{"source_event_id", d.source_event_id},
                                   {"event_type", d.event_type},
                                   {"copies", d.copies}});
    }
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf(
        "reconciliation (%s): %lld users checked (%lld accounts), %zu out of balance, %zu "
        "duplicate ledger entries, %zu assets not summing to zero\n",
        a.full ? "full" : "hot path", static_cast<long long>(r.users_checked),
        static_cast<long long>(r.accounts_checked), r.mismatches.size(), r.duplicates.size(),
        r.imbalances.size());
    for (const auto& m : r.mismatches) {
      std::printf("  user %lld %s: balance %s, expected %s; held %s, expected %s\n",
                  static_cast<long long>(m.user_id), printable(m.asset).c_str(), m.balance.c_str(),
                  m.expected.c_str(), m.held.c_str(), m.expected_held.c_str());
    }
    for (const auto& i : r.imbalances) {
      std::printf("  asset %s: entries sum to %s, not 0\n", printable(i.asset).c_str(),
                  i.sum.c_str());
    }
    for (const auto& d : r.duplicates) {
      std::printf("  duplicate: %s (%s) x%lld\n", printable(d.source_event_id).c_str(),
                  printable(d.event_type).c_str(), static_cast<long long>(d.copies));
    }
  }
  return r.clean() ? 0 : 1;
}

int cleanup(idemledger::Connection& c, const Args& a) {
  const std::int64_t min_hours = absl::ToInt64Hours(idemledger::kMinIdempotencyTtl);
  const std::int64_t hours = a.number("--ttl-hours", 24 * 30, min_hours, 24 * 365 * 100);
  idemledger::admin::ProgressReporter progress = reporter(a, "cleanup", "records");
  const idemledger::CleanupReport r = must(idemledger::cleanup_idempotency_records(
      c, {.schema = a.schema, .ttl = absl::Hours(hours), .progress = progress.callback()}));
  progress.finish(r.deleted);
  std::printf(
      "deleted %lld idempotency records older than %lldh in %lld batches; dropped %lld expired "
      "monthly partitions\n",
      static_cast<long long>(r.deleted), static_cast<long long>(hours),
      static_cast<long long>(r.batches), static_cast<long long>(r.partitions_dropped));
  return 0;
}

int partitions(idemledger::Connection& c, const Args& a) {
  const std::string sub = a.words.size() > 1 ? a.words[1] : "";
  if (sub != "enable" && sub != "ensure") usage("partitions enable|ensure [--months-ahead N]");
  const idemledger::PartitioningOptions options{
      .schema = a.schema, .months_ahead = static_cast<int>(a.number("--months-ahead", 3, 0, 120))};
  // One transaction, one statement: nothing to count while it runs, so the
  // operator is told what it holds and, at the end, how long it took.
  const absl::Time started = absl::Now();
  if (sub == "enable" && !a.quiet) {
    std::fprintf(stderr,
                 "partitions enable: copying the history tables in one transaction; they stay "
                 "locked until it commits\n");
  }
  const int created = must(sub == "enable" ? idemledger::enable_monthly_partitioning(c, options)
                                           : idemledger::ensure_monthly_partitions(c, options));
  if (sub == "enable" && !a.quiet) {
    std::fprintf(stderr, "partitions enable: done in %s\n",
                 idemledger::admin::human_duration(absl::Now() - started).c_str());
  }
  std::printf("schema %s: monthly partitions %s; %d created\n",
              std::string(a.schema.name()).c_str(),
              must(idemledger::is_partitioned(c, a.schema)) ? "on" : "off (enable first)", created);
  return 0;
}

int relay(idemledger::Connection& c, const Args& a) {
  const std::string sub = a.words.size() > 1 ? a.words[1] : "";
  if (sub == "status") {
    const idemledger::RelayReport r = must(idemledger::relay_report(c, a.schema));
    std::vector<std::vector<Cell>> rows;
    for (const auto& m : r.markers) {
      rows.push_back({"marker " + m.name + ": " + std::string(to_string(m.state)), Cell(),
                      time_text(m.opened_at)});
    }
    rows.push_back({"outbox undelivered", r.outbox_undelivered, time_text(r.oldest_undelivered)});
    rows.push_back({"outbox delivered", r.outbox_delivered, Cell()});
    for (const auto& d : r.dead_letters) {
      rows.push_back({"dead letters " + d.what, d.count, time_text(d.since)});
    }
    for (const auto& d : r.dropped_by_reason) {
      rows.push_back({"dropped: " + d.what, d.count, Cell()});
    }
    rows.push_back({"quarantined", r.quarantined, time_text(r.quarantined_since)});
    print_table(a, {"what", "count", "since"}, rows);
    return 0;
  }
  if (sub == "list") {
    const int limit = static_cast<int>(a.number("--limit", 50, 1, 10'000));
    std::vector<std::vector<Cell>> rows;
    for (const auto& d : must(idemledger::list_relay_dead_letters(c, a.schema, limit))) {
      rows.push_back({d.id, d.outbox_id, d.topic, d.dlq_retries, time_text(d.first_dlq_at),
                      d.reason, d.resolution ? Cell(*d.resolution) : Cell(),
                      d.drop_reason ? Cell(*d.drop_reason) : Cell()});
    }
    print_table(a,
                {"id", "outbox_id", "topic", "dlq_retries", "first_dlq_at", "reason", "resolution",
                 "drop_reason"},
                rows);
    return 0;
  }
  usage("relay status|list");
}

int assets(idemledger::Connection& c, const Args& a) {
  const std::string sub = a.words.size() > 1 ? a.words[1] : "";
  if (sub == "list") {
    std::vector<std::vector<Cell>> rows;
    for (const idemledger::Asset& x : must(idemledger::list_assets(c, a.schema))) {
      rows.push_back({std::string(x.code.code()), x.decimals,
                      x.chain.empty() ? Cell() : Cell(x.chain),
                      x.contract.empty() ? Cell() : Cell(x.contract), x.enabled ? "yes" : "no",
                      x.is_default ? "default" : ""});
    }
    print_table(a, {"asset", "decimals", "chain", "contract", "enabled", ""}, rows);
    return 0;
  }
  if (sub != "add" && sub != "enable" && sub != "disable") {
    usage(
        "assets list|add CODE --decimals N [--chain C] [--contract X]|enable CODE --reason "
        "TEXT|disable CODE --reason TEXT");
  }
  if (a.words.size() < 3) usage("assets " + sub + " needs an asset code");
  absl::StatusOr<idemledger::AssetCode> code = idemledger::AssetCode::create(a.words[2]);
  if (!code.ok()) usage(std::string(code.status().message()));
  if (sub == "add") {
    if (!a.has("--decimals")) usage("assets add needs --decimals");
    const idemledger::Asset asset{.code = *code,
                                  .decimals = static_cast<int>(a.number("--decimals", 18, 0, 18)),
                                  .chain = a.has("--chain") ? a.flags.at("--chain") : "",
                                  .contract = a.has("--contract") ? a.flags.at("--contract") : ""};
    if (absl::Status s = idemledger::add_asset(c, a.schema, asset); !s.ok()) {
      std::fprintf(stderr, "idemledger-admin: %s\n", printable(std::string(s.message())).c_str());
      return s.code() == absl::StatusCode::kAlreadyExists ? 1 : 2;
    }
    std::printf("asset %s registered (%d decimals)\n", std::string(code->code()).c_str(),
                asset.decimals);
    return 0;
  }
  if (!a.has("--reason") || a.flags.at("--reason").empty())
    usage("assets " + sub + " requires --reason");
  if (absl::Status s = idemledger::set_asset_enabled(c, a.schema, *code, sub == "enable",
                                                     a.flags.at("--reason"), actor(c, a));
      !s.ok()) {
    std::fprintf(stderr, "idemledger-admin: %s\n", printable(std::string(s.message())).c_str());
    return s.code() == absl::StatusCode::kNotFound ? 1 : 2;
  }
  std::printf("asset %s %sd\n", std::string(code->code()).c_str(), sub.c_str());
  return 0;
}

int liabilities(idemledger::Connection& c, const Args& a) {
  std::vector<std::vector<Cell>> rows;
  for (const idemledger::AssetLiabilities& l : must(idemledger::liabilities(c, a.schema))) {
    rows.push_back({l.asset, l.accounts, l.owed.to_string(), l.held.to_string(),
                    l.available.to_string(), l.external.to_string(), l.fees.to_string()});
  }
  print_table(a, {"asset", "accounts", "owed_to_users", "held", "available", "external", "fees"},
              rows);
  return 0;
}

int run(idemledger::Connection& c, const Args& a) {
  const std::string& verb = a.words[0];
  if (verb == "migrate") return migrate(c, a);
  if (verb == "status") return status(c, a);
  if (verb == "stats") return stats(c, a);
  if (verb == "dlq") return dlq(c, a);
  if (verb == "reconcile") return reconcile(c, a);
  if (verb == "cleanup") return cleanup(c, a);
  if (verb == "partitions") return partitions(c, a);
  if (verb == "relay") return relay(c, a);
  if (verb == "assets") return assets(c, a);
  if (verb == "liabilities") return liabilities(c, a);
  usage("unknown verb: " + printable(verb));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    // Unnamed statements: an operator's one-off commands gain nothing from
    // preparing, and they then also work through PgBouncer < 1.21.
    std::unique_ptr<idemledger::pg::Connection> c = must(idemledger::pg::Connection::open(
        a.dsn, {.prepared_statements = false, .application_name = "idemledger-admin"}));
    // On a standby (target_session_attrs=prefer-standby keeps reads off the
    // primary) every figure is as of its replay: say how far behind it was.
    // A verb that writes fails there (25006) and says so.
    const std::optional<absl::Duration> lag = must(idemledger::standby_replay_lag(*c));
    const int code = run(*c, a);
    if (lag) {
      std::fprintf(a.json ? stderr : stdout,
                   "read on a standby, replay lag %lld ms: the figures are as of then\n",
                   static_cast<long long>(absl::ToInt64Milliseconds(*lag)));
    }
    return code;
  } catch (const std::exception& e) {  // nothing the library throws; JSON output could
    std::fprintf(stderr, "idemledger-admin: %s\n", printable(e.what()).c_str());
    return 2;
  }
}
