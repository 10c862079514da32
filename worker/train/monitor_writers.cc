#include "worker/train/monitor_writers.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/crc32c.h"
#include "common/hostname.h"
#include "common/status_macros.h"

namespace zeroshard::train {
namespace {

// Protocol-buffer wire format, the few pieces an Event needs.
void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i)
    out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutTag(int field, int wire_type, std::string* out) {
  PutVarint(static_cast<uint64_t>(field) << 3 | wire_type, out);
}
void PutDouble(int field, double v, std::string* out) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  PutTag(field, 1, out);
  PutLittleEndian(bits, 8, out);
}
void PutBytes(int field, absl::string_view bytes, std::string* out) {
  PutTag(field, 2, out);
  PutVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

// Event fields (tensorflow/core/util/event.proto).
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
// Summary.value = 1; Summary.Value: tag = 1, simple_value = 2.

absl::Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create the monitor folder ", dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

// Python's repr of a float: the shortest decimal that reads back the same.
std::string ShortestDouble(double v) {
  for (int digits = 6; digits < 17; ++digits) {
    const std::string s = absl::StrFormat("%.*g", digits, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

double WallTime() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<MonitorEvent> StepEvents(const engine::StepStats& s, bool fp16,
                                     int64_t train_batch_size) {
  const int64_t samples = s.step * train_batch_size;
  std::vector<MonitorEvent> events = {
      {"Train/Samples/train_loss", s.global_loss, samples}};
  if (fp16)
    events.push_back({"Train/Samples/loss_scale", s.loss_scale, samples});
  events.push_back({"Train/Samples/lr", s.lr, samples});
  return events;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data.data(), data.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(absl::string_view data) {
  std::string length;
  PutLittleEndian(data.size(), 8, &length);
  std::string out = length;
  PutLittleEndian(MaskedCrc32c(length), 4, &out);
  out.append(data.data(), data.size());
  PutLittleEndian(MaskedCrc32c(data), 4, &out);
  return out;
}

std::string FileVersionEvent(double wall_time) {
  std::string e;
  PutDouble(kWallTime, wall_time, &e);
  PutBytes(kFileVersion, "brain.Event:2", &e);
  return e;
}

std::string ScalarEvent(double wall_time, int64_t step, absl::string_view tag,
                        float value) {
  std::string value_msg;
  PutBytes(1, tag, &value_msg);
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  PutTag(2, 5, &value_msg);
  PutLittleEndian(bits, 4, &value_msg);
  std::string summary;
  PutBytes(1, value_msg, &summary);
  std::string e;
  PutDouble(kWallTime, wall_time, &e);
  PutTag(kStep, 0, &e);
  PutVarint(static_cast<uint64_t>(step), &e);
  PutBytes(kSummary, summary, &e);
  return e;
}

absl::StatusOr<std::unique_ptr<AppendFile>> AppendFile::Open(
    const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<AppendFile>(new AppendFile(path, f));
}

AppendFile::~AppendFile() { std::fclose(f_); }

absl::Status AppendFile::Append(absl::string_view bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size() ||
      std::fflush(f_) != 0) {
    return absl::DataLossError(
        absl::StrCat("write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::string& dir) {
  ZS_RETURN_IF_ERROR(MakeDirs(dir));
  const double now = WallTime();
  const std::string path =
      absl::StrFormat("%s/events.out.tfevents.%d.%s.%d", dir,
                      static_cast<int64_t>(now), LocalHostname(), getpid());
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<AppendFile> f, AppendFile::Open(path));
  ZS_RETURN_IF_ERROR(f->Append(TfRecord(FileVersionEvent(now))));
  return std::unique_ptr<TensorBoardWriter>(
      new TensorBoardWriter(std::move(f)));
}

absl::Status TensorBoardWriter::Write(const std::vector<MonitorEvent>& events,
                                      double wall_time) {
  std::string records;
  for (const MonitorEvent& e : events) {
    records += TfRecord(
        ScalarEvent(wall_time, e.step, e.tag, static_cast<float>(e.value)));
  }
  return file_->Append(records);
}

absl::StatusOr<std::unique_ptr<CsvMonitorWriter>> CsvMonitorWriter::Open(
    const std::string& dir) {
  ZS_RETURN_IF_ERROR(MakeDirs(dir));
  return std::unique_ptr<CsvMonitorWriter>(new CsvMonitorWriter(dir));
}

absl::Status CsvMonitorWriter::Write(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) {
    const std::string name =
        absl::StrReplaceAll(e.tag, {{"/", "_"}, {" ", "_"}});
    std::unique_ptr<AppendFile>& file = files_[name];
    if (file == nullptr) {
      ZS_ASSIGN_OR_RETURN(
          file, AppendFile::Open(absl::StrCat(dir_, "/", name, ".csv")));
      const size_t slash = e.tag.rfind('/');
      const std::string header =
          slash == std::string::npos ? e.tag : e.tag.substr(slash + 1);
      ZS_RETURN_IF_ERROR(file->Append(absl::StrCat("step,", header, "\r\n")));
    }
    ZS_RETURN_IF_ERROR(file->Append(
        absl::StrCat(e.step, ",", ShortestDouble(e.value), "\r\n")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FileMonitors>> FileMonitors::Open(
    const config::MonitorConfig& config, bool fp16, int64_t train_batch_size) {
  std::unique_ptr<FileMonitors> m(new FileMonitors());
  m->fp16_ = fp16;
  m->batch_ = train_batch_size;
  if (config.tensorboard.enabled) {
    m->tb_dir_ = config.tensorboard.Dir();
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> tb =
        TensorBoardWriter::Open(m->tb_dir_);
    if (!tb.ok()) {
      return absl::Status(tb.status().code(),
                          absl::StrCat("tensorboard: ", tb.status().message()));
    }
    m->tb_ = std::move(*tb);
  }
  if (config.csv_monitor.enabled) {
    m->csv_dir_ = config.csv_monitor.Dir();
    absl::StatusOr<std::unique_ptr<CsvMonitorWriter>> csv =
        CsvMonitorWriter::Open(m->csv_dir_);
    if (!csv.ok()) {
      return absl::Status(
          csv.status().code(),
          absl::StrCat("csv_monitor: ", csv.status().message()));
    }
    m->csv_ = std::move(*csv);
  }
  return m;
}

absl::Status FileMonitors::OnStep(const engine::StepStats& s) {
  const std::vector<MonitorEvent> events = StepEvents(s, fp16_, batch_);
  absl::Status result;
  if (tb_ != nullptr) {
    absl::Status st = tb_->Write(events, WallTime());
    if (!st.ok()) {
      tb_.reset();
      result = absl::Status(
          st.code(),
          absl::StrCat("tensorboard: ", st.message(), "; no more events"));
    }
  }
  if (csv_ != nullptr) {
    absl::Status st = csv_->Write(events);
    if (!st.ok()) {
      csv_.reset();
      if (result.ok()) {
        result = absl::Status(
            st.code(),
            absl::StrCat("csv_monitor: ", st.message(), "; no more rows"));
      }
    }
  }
  return result;
}

std::string FileMonitors::Describe() const {
  std::string out;
  if (!tb_dir_.empty()) absl::StrAppend(&out, "tensorboard: ", tb_dir_);
  if (!csv_dir_.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", "csv_monitor: ", csv_dir_);
  }
  return out;
}

}  // namespace zeroshard::train
