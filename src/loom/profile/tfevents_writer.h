// TensorBoard event files written natively (no TensorFlow, no protobuf library): scalars only,
// which is what training curves need. The file is `events.out.tfevents.<seconds>.<host>` in the
// given directory; each record is TFRecord-framed (length, masked CRC-32C of the length, the
// serialized Event, masked CRC-32C of it). The first record carries file_version "brain.Event:2".
//
// Records are appended and flushed per call, so a run killed midway leaves a readable file.
// Not thread-safe: one writer per file, used from the training thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace loom::profile {

// The serialized Event{wall_time, step, summary{value{tag, simple_value}}}, protobuf wire format.
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

// One TFRecord: the framing around `data`.
std::string tf_record(const std::string& data);

class TfEventsWriter {
 public:
  // Creates the file (throws Error naming it when it cannot).
  explicit TfEventsWriter(const std::string& dir);
  ~TfEventsWriter();
  TfEventsWriter(const TfEventsWriter&) = delete;
  TfEventsWriter& operator=(const TfEventsWriter&) = delete;

  void scalar(const std::string& tag, int64_t step, double value);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace loom::profile
