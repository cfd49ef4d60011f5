// EventFileWriter: one TensorBoard event file of scalar curves, as
// torch.utils.tensorboard's SummaryWriter writes it. The file is
//   <dir>/events.out.tfevents.<unix time, 10 digits>.<host>.<pid>.<n>
// (n: the first number that names no existing file), a sequence of TFRecords
// (crc32c.h) each holding one tensorflow.Event: first {file_version:
// "brain.Event:2"}, then one {summary {value {tag, simple_value}}} per
// scalar with its wall time and step. Events are queued in memory and written
// to the file when `queue_size` are pending (SummaryWriter's max_queue), on
// flush() and on destruction, so a killed process loses at most the queue and
// a reader sees whole records followed by at most one cut one. No fsync: what
// was written survives the process, as with TensorBoard's own writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mtrain::tensorboard {

std::string event_file_name(int64_t unix_seconds, std::string_view host, int pid, int n);

class EventFileWriter {
 public:
  // Creates `dir` and a new event file in it and writes the version record.
  // ConfigError naming the directory when it cannot.
  EventFileWriter(const std::string& dir, size_t queue_size);
  ~EventFileWriter();  // flushes; an error then goes to stderr
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // `value` is stored as a float (TensorBoard's simple_value).
  void add_scalar(std::string_view tag, double value, int64_t step, double wall_time);
  // Writes the queued events to the file. ConfigError on a write failure.
  void flush();

  const std::string& path() const { return path_; }
  size_t pending() const { return queued_; }

 private:
  void queue(const std::string& serialized_event);

  int fd_ = -1;
  std::string path_;
  std::string buffer_;  // framed records not yet written
  size_t queued_ = 0;
  size_t queue_size_;
};

// Seconds since the epoch, with sub-second digits (an Event's wall_time).
double wall_time_now();

}  // namespace mtrain::tensorboard
