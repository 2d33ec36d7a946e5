// Recorder — intake's group commit without a thread per waiting delivery.
//
// The I/O thread that read and checked a delivery submits it with a callback
// and goes back to its sockets. Recorder threads, each on a pooled database
// session, take what has gathered (up to max_batch) and record it in one
// transaction (idemledger::record_webhook_events), then call each delivery's
// callback with its answer. A batch goes at once while fewer than
// max_in_flight batches are being recorded; otherwise it gathers until one
// of those commits, max_batch deliveries wait, or the oldest has waited
// max_wait: RecordBatcher's rule, run by the recorder's threads instead of
// by blocked callers. One recorder gathers at a time while the others
// record or sleep, so a submit wakes at most the gatherer, never every idle
// thread. A delivery costs no thread hand-off of its own: one wake-up of a
// recorder per batch, and one of an I/O thread to take the batch's answers
// back to their connections (http::AnswerBatch), their log lines written
// in one go (LogBatch).
//
// Guarantees: a callback is called once, only after the transaction holding
// its delivery committed (or with the status that says it may not be
// acknowledged). A retryable refusal — a lost session, an in-doubt commit,
// PostgreSQL breaking two batches' wait on each other — is recorded again,
// by the same recorder thread after a full-jitter pause, at most
// retry.max_attempts tries (4) within retry.budget (with_retries' rule,
// keyed by event id: a retry answers kDuplicate for what did commit),
// before its callback gets the status. stop() records everything submitted
// before it, then joins. The queue holds at most one delivery per open
// connection (the server reads a connection's next request only after
// answering this one), so the server's max_connections bounds it.
//
// Measured (Options::instruments, each optional): how many deliveries each
// batch held; how long each delivery waited between its submit and the start
// of its batch's transaction (the batch ahead committing, and the gathering);
// and how long each batch took from that start until every delivery in it had
// its answer (one round trip and commit, retries and their pauses included).
// A delivery's time in the recorder is its wait plus its batch's record.
//
// Thread-safety: submit() from any thread; stop() from one.
#ifndef IDEMLEDGER_EXAMPLES_WEBHOOK_INTAKE_RECORDER_HPP
#define IDEMLEDGER_EXAMPLES_WEBHOOK_INTAKE_RECORDER_HPP

#include <algorithm>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/http_server.hpp"
#include "../common/service.hpp"
#include "absl/functional/any_invocable.h"
#include "idemledger.hpp"
#include "idemledger/core/metrics.hpp"
#include "idemledger/core/mutex.hpp"
#include "idemledger/pg/pool.hpp"

namespace example {

class Recorder {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<idemledger::RecordResult>)>;
  struct Options {
    idemledger::Schema schema = idemledger::kDefaultSchema;
    int threads = 4;             // recorder threads, each one database session at a time
    std::size_t max_batch = 32;  // 1: every delivery its own transaction
    absl::Duration max_wait = absl::Milliseconds(2);
    int max_in_flight = 1;  // 0: every batch gathers for max_wait
    idemledger::RetryPolicy retry{.max_attempts = 4};
    struct Instruments {  // (null: not measured)
      prometheus::Histogram* batch_deliveries = nullptr;
      prometheus::Histogram* wait_seconds = nullptr;    // per delivery
      prometheus::Histogram* record_seconds = nullptr;  // per batch
    } instruments;
  };

  Recorder(idemledger::pg::Pool& pool, Options options) : pool_(pool), options_(options) {
    options_.max_batch =
        std::clamp<std::size_t>(options_.max_batch, 1, idemledger::kMaxRecordBatch);
    for (int i = 0; i < std::max(options_.threads, 1); ++i)
      threads_.emplace_back([this] { run(); });
  }
  ~Recorder() { stop(); }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // `done` is called once, on a recorder thread, with the delivery's answer.
  void submit(idemledger::WebhookEvent event, std::string trace_id, std::string raw_body,
              Done done) {
    idemledger::MutexLock lock(&mu_);
    queue_.push_back(Item{.event = std::move(event),
                          .trace_id = std::move(trace_id),
                          .raw_body = std::move(raw_body),
                          .done = std::move(done),
                          .since = absl::Now()});
  }

  void stop() {
    {
      idemledger::MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

 private:
  struct Item {
    idemledger::WebhookEvent event;
    std::string trace_id;
    std::string raw_body;
    Done done;
    absl::Time since;
    absl::StatusOr<idemledger::RecordResult> answer = absl::UnknownError("not recorded");
  };

  void run() {
    std::vector<Item> batch;
    batch.reserve(options_.max_batch);
    for (;;) {
      {
        idemledger::MutexLock lock(&mu_);
        // One recorder gathers at a time; the others sleep until it has
        // taken its batch (a submit wakes one thread, not every idle one).
        mu_.AwaitWithDeadline(
            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return stopping_ || (!gathering_ && !queue_.empty());
            },
            absl::InfiniteFuture());
        if (queue_.empty()) return;  // stopping, and nothing left
        gathering_ = true;
        mu_.AwaitWithDeadline(
            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return stopping_ || queue_.size() >= options_.max_batch ||
                     in_flight_ < options_.max_in_flight;
            },
            queue_.front().since + options_.max_wait);
        gathering_ = false;
        if (queue_.empty()) continue;  // another recorder took it meanwhile
        const std::size_t n = std::min(queue_.size(), options_.max_batch);
        for (std::size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        ++in_flight_;
      }
      const absl::Time started = absl::Now();
      record(batch);
      {
        idemledger::MutexLock lock(&mu_);
        --in_flight_;
      }
      measure(batch, started, absl::Now());
      // The batch's answers leave together: their log lines in one write,
      // then their responses in one hand-off to the I/O threads.
      http::AnswerBatch responses;
      LogBatch lines;
      for (Item& item : batch) {
        try {
          item.done(std::move(item.answer));
        } catch (const std::exception& e) {  // its Responder, unanswered, answers 500
          log("error", {{"msg", "answering a recorded delivery failed"}, {"error", e.what()}});
        }
      }
      batch.clear();  // (the Responders of any unanswered go with it)
    }
  }

  void measure(const std::vector<Item>& batch, absl::Time started, absl::Time recorded) const {
    const Options::Instruments& m = options_.instruments;
    if (m.batch_deliveries != nullptr)
      m.batch_deliveries->Observe(static_cast<double>(batch.size()));
    if (m.record_seconds != nullptr) idemledger::observe(*m.record_seconds, recorded - started);
    if (m.wait_seconds == nullptr) return;
    for (const Item& item : batch) idemledger::observe(*m.wait_seconds, started - item.since);
  }

  // Records `batch` until every delivery has an answer that is not worth
  // another try (with_retries decides, on the first still-retryable one).
  void record(std::vector<Item>& batch) const {
    std::vector<Item*> open;
    for (Item& item : batch) open.push_back(&item);
    std::vector<idemledger::WebhookDelivery> deliveries;
    (void)idemledger::with_retries(options_.retry, [&]() -> absl::Status {
      absl::StatusOr<idemledger::pg::PooledConnection> conn = pool_.acquire();
      if (!conn.ok()) {
        for (Item* item : open) item->answer = conn.status();
        return conn.status();
      }
      deliveries.clear();
      for (const Item* item : open) {
        deliveries.push_back(
            {.event = &item->event, .trace_id = item->trace_id, .raw_body = item->raw_body});
      }
      std::vector<absl::StatusOr<idemledger::RecordResult>> answers =
          idemledger::record_webhook_events(**conn, options_.schema, deliveries);
      for (std::size_t i = 0; i < open.size(); ++i) open[i]->answer = std::move(answers[i]);
      std::erase_if(
          open, [](const Item* item) { return !idemledger::is_retryable(item->answer.status()); });
      return open.empty() ? absl::OkStatus() : open.front()->answer.status();
    });
  }

  idemledger::pg::Pool& pool_;
  Options options_;
  idemledger::Mutex mu_;  // (absl::Mutex is invisible to TSan here: core/mutex.hpp)
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool gathering_ ABSL_GUARDED_BY(mu_) = false;  // a recorder is gathering the next batch
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_WEBHOOK_INTAKE_RECORDER_HPP
