#include "loom/profile/tfevents_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/topology.h"
#include "loom/profile/crc32c.h"

namespace loom::profile {
namespace {

// Protobuf wire format, the few pieces an Event needs.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void tag(std::string& out, int field, int wire_type) { varint(out, (field << 3) | wire_type); }

template <typename T>
void little_endian(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86 and ARM Linux are little-endian
  out.append(bytes, sizeof(T));
}

void length_delimited(std::string& out, int field, const std::string& payload) {
  tag(out, field, 2);
  varint(out, payload.size());
  out += payload;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string scalar_event(double wall_time, int64_t step, const std::string& name, float value) {
  std::string summary_value;  // Summary.Value: tag = 1, simple_value = 2
  length_delimited(summary_value, 1, name);
  tag(summary_value, 2, 5);
  little_endian(summary_value, value);
  std::string summary;  // Summary: value = 1
  length_delimited(summary, 1, summary_value);
  std::string event;  // Event: wall_time = 1, step = 2, summary = 5
  tag(event, 1, 1);
  little_endian(event, wall_time);
  tag(event, 2, 0);
  varint(event, static_cast<uint64_t>(step));
  length_delimited(event, 5, summary);
  return event;
}

std::string tf_record(const std::string& data) {
  std::string out;
  const uint64_t length = data.size();
  little_endian(out, length);
  little_endian(out, masked_crc32c(out.data(), sizeof length));
  out += data;
  little_endian(out, masked_crc32c(data.data(), data.size()));
  return out;
}

TfEventsWriter::TfEventsWriter(const std::string& dir) {
  const std::string host = host_name();
  const double now = now_seconds();
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host;
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw Error("TensorBoard events: cannot create '" + path_ + "'");
  std::string first;  // Event{wall_time, file_version = 3}
  tag(first, 1, 1);
  little_endian(first, now);
  length_delimited(first, 3, "brain.Event:2");
  write(first);
}

TfEventsWriter::~TfEventsWriter() {
  if (file_) std::fclose(file_);
}

void TfEventsWriter::scalar(const std::string& name, int64_t step, double value) {
  write(scalar_event(now_seconds(), step, name, static_cast<float>(value)));
}

void TfEventsWriter::write(const std::string& event) {
  const std::string record = tf_record(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    throw Error("TensorBoard events: cannot write '" + path_ + "'");
  }
}

}  // namespace loom::profile
