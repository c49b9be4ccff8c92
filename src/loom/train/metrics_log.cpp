#include "loom/train/metrics_log.h"

#include "loom/core/error.h"

namespace loom::train {

MetricsLog::MetricsLog(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) throw Error("metrics: cannot open '" + path + "' for writing");
}

void MetricsLog::write(const nlohmann::ordered_json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) throw Error("metrics: writing '" + path_ + "' failed");
}

}  // namespace loom::train
