#include "idemledger/core/metrics.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "prometheus/family.h"
#include "prometheus/text_serializer.h"

namespace idemledger {
namespace {

// Registration runs where no Status can be returned (constructors); a clash
// is a bug in the program that links us, found the first time it runs.
[[noreturn]] void registration_error(std::string_view name, const char* what) {
  std::fprintf(stderr, "idemledger metrics: \"%.*s\": %s\n", static_cast<int>(name.size()),
               name.data(), what);
  std::abort();
}

// prometheus-cpp reports misuse by throwing; it stops here.
template <typename T, typename... Args>
T& series(prometheus::Registry& registry, std::string_view name, std::string_view help,
          const prometheus::Labels& labels, Args&&... args) {
  // prometheus-cpp 1.0 writes HELP unescaped: a backslash or a newline there
  // would break the whole exposition.
  if (help.find_first_of("\\\n") != std::string_view::npos) {
    registration_error(name, "HELP text must not contain a backslash or a newline");
  }
  try {
    prometheus::Family<T>& family = prometheus::detail::Builder<T>()
                                        .Name(std::string(name))
                                        .Help(std::string(help))
                                        .Register(registry);
    return family.Add(labels, std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    registration_error(name, e.what());
  }
}

}  // namespace

const prometheus::Histogram::BucketBoundaries& default_latency_buckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
      0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  return *kBuckets;
}

prometheus::Counter& counter(prometheus::Registry& registry, std::string_view name,
                             std::string_view help, const prometheus::Labels& labels) {
  return series<prometheus::Counter>(registry, name, help, labels);
}

prometheus::Gauge& gauge(prometheus::Registry& registry, std::string_view name,
                         std::string_view help, const prometheus::Labels& labels) {
  return series<prometheus::Gauge>(registry, name, help, labels);
}

prometheus::Histogram& histogram(prometheus::Registry& registry, std::string_view name,
                                 std::string_view help,
                                 const prometheus::Histogram::BucketBoundaries& buckets,
                                 const prometheus::Labels& labels) {
  return series<prometheus::Histogram>(registry, name, help, labels, buckets);
}

std::string render(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

}  // namespace idemledger
