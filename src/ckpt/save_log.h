// Where a training checkpoint's save reports to: the metrics lines written so
// far (a checkpoint stores them, so that a resumed run's metrics file holds
// every step) and the save's own line. The run's metrics file
// (MetricsWriter, train/run_support.h) is one; checkpoints see only this.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mt {

class SaveLog {
 public:
  virtual ~SaveLog() = default;
  virtual void write(const nlohmann::json& j) = 0;
  virtual const std::vector<std::string>& lines() const = 0;
};

}  // namespace mt
