#include "train/run_support.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace mt {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::out | std::ios::trunc);
  MT_REQUIRE(out_.good(), IoError, "cannot open metrics file '", path, "' for writing");
}

void MetricsWriter::write(const nlohmann::json& j) {
  if (!out_.is_open()) return;
  out_ << j.dump() << "\n";
  out_.flush();
}

Fault read_fault() {
  Fault f;
  const char* env = std::getenv("MESHTRAIN_FAULT");
  if (env == nullptr) return f;
  char kind[16] = {0};
  long long step = -1;
  MT_REQUIRE(std::sscanf(env, "%15[a-z]:%d:%lld", kind, &f.rank, &step) == 3, ConfigError,
             "MESHTRAIN_FAULT '", env, "' must be throw:RANK:STEP or stall:RANK:STEP");
  f.kind = kind;
  f.step = step;
  return f;
}

void inject_fault(const Fault& f, int rank, int64_t step) {
  if (f.rank != rank || f.step != step) return;
  if (f.kind == "throw") MT_THROW(Error, "injected fault (MESHTRAIN_FAULT) at step ", step);
  if (f.kind == "stall") std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace mt
