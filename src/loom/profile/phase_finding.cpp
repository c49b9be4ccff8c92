#include "loom/profile/phase_finding.h"

#include "loom/core/text.h"

namespace loom::profile {

Finding phase_finding(const RunProfile& run, Phase phase, const std::string& id, double high_share,
                      const std::string& key) {
  const double per_step = run.steps > 0 ? run.step_times.wall / static_cast<double>(run.steps) : 0;
  const double share = run.step_times.share(phase);
  Finding f;
  f.id = id;
  f.severity = share >= high_share ? "high" : "moderate";
  f.evidence = std::string(phase_name(phase)) + " is " + percent(share) + " of the step (" +
               milliseconds(share * per_step) + " of " + milliseconds(per_step) +
               (run.device_clock ? " on " + run.device + "'s clock)" : ")");
  f.key = key;
  f.max_gain = share < 1 ? 1 / (1 - share) : 0;
  f.measured = {{"share", share}, {"phase_seconds", share * per_step}, {"step_seconds", per_step}};
  return f;
}

}  // namespace loom::profile
