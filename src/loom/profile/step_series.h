// The steady steps one by one, for how much their time varied (the advisor's
// unsteady_throughput): each step's wall seconds and the part of it spent waiting for data.
// Sums (StepTimes) say where the time went on average; a run whose steps swing between fast and
// slow needs the steps themselves.
//
// A long run keeps a uniform random sample of its steps in bounded memory (reservoir sampling,
// Vitter's algorithm R, with a fixed seed so that a run's sample is reproducible): every step has
// the same chance to be in it, and unlike keeping every k-th step, a pattern that repeats every
// few steps cannot hide from it. 4096 steps put the tenths' edges within about 1% of the whole
// run's.
//
// Not thread-safe: the training thread's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace loom::profile {

class StepSeries {
 public:
  explicit StepSeries(std::size_t capacity = 4096);

  void add(double wall_seconds, double data_wait_seconds);

  // The kept steps (all of them until `capacity`), in no particular order once sampling; the
  // two lists are parallel (entry i of each is one step).
  const std::vector<double>& wall_seconds() const { return wall_; }
  const std::vector<double>& data_wait_seconds() const { return data_wait_; }
  int64_t steps() const { return steps_; }  // all steps added, kept or not

 private:
  std::size_t capacity_;
  int64_t steps_ = 0;
  std::vector<double> wall_, data_wait_;
  std::mt19937_64 random_{0x5eed};
};

}  // namespace loom::profile
