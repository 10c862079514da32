#include "worker/train/monitor_writers.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
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

// Python's repr of a float (what DeepSpeed's csv writer prints): the
// shortest decimal that reads back the same, "256.0" for an integral one.
std::string ShortestDouble(double v) {
  std::string s = absl::StrFormat("%.17g", v);
  for (int digits = 1; digits < 17; ++digits) {
    std::string t = absl::StrFormat("%.*g", digits, v);
    if (std::strtod(t.c_str(), nullptr) == v) {
      s = std::move(t);
      break;
    }
  }
  if (s.find_first_of(".eninf") == std::string::npos) s += ".0";
  return s;
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

absl::Status CreateDirs(Env* env, const std::string& dir) {
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(dir, '/', absl::SkipEmpty())) {
    prefix = prefix.empty() && dir[0] != '/' ? std::string(part)
                                             : absl::StrCat(prefix, "/", part);
    absl::Status s = env->CreateDir(prefix);
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("cannot create the monitor folder ", dir, ": ",
                                 s.message()));
    }
  }
  return absl::OkStatus();
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

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::string& dir, Env* env) {
  ZS_RETURN_IF_ERROR(CreateDirs(env, dir));
  const double now = WallTime();
  const std::string path =
      absl::StrFormat("%s/events.out.tfevents.%d.%s.%d", dir,
                      static_cast<int64_t>(now), LocalHostname(), getpid());
  ZS_ASSIGN_OR_RETURN(AppendableFile f, AppendableFile::Open(env, path));
  ZS_RETURN_IF_ERROR(f.Append(TfRecord(FileVersionEvent(now))));
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
  return file_.Append(records);
}

absl::StatusOr<std::unique_ptr<CsvMonitorWriter>> CsvMonitorWriter::Open(
    const std::string& dir, Env* env) {
  ZS_RETURN_IF_ERROR(CreateDirs(env, dir));
  return std::unique_ptr<CsvMonitorWriter>(new CsvMonitorWriter(dir, env));
}

absl::Status CsvMonitorWriter::Write(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) {
    const std::string name =
        absl::StrReplaceAll(e.tag, {{"/", "_"}, {" ", "_"}});
    auto it = files_.find(name);
    if (it == files_.end()) {
      ZS_ASSIGN_OR_RETURN(
          AppendableFile file,
          AppendableFile::Open(env_, absl::StrCat(dir_, "/", name, ".csv")));
      const size_t slash = e.tag.rfind('/');
      const std::string header =
          slash == std::string::npos ? e.tag : e.tag.substr(slash + 1);
      ZS_RETURN_IF_ERROR(file.Append(absl::StrCat("step,", header, "\r\n")));
      it = files_.emplace(name, std::move(file)).first;
    }
    ZS_RETURN_IF_ERROR(it->second.Append(
        absl::StrCat(e.step, ",", ShortestDouble(e.value), "\r\n")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FileMonitors>> FileMonitors::Open(
    const config::MonitorConfig& config, bool fp16, int64_t train_batch_size,
    Env* env) {
  std::unique_ptr<FileMonitors> m(new FileMonitors());
  m->fp16_ = fp16;
  m->batch_ = train_batch_size;
  if (config.tensorboard.enabled) {
    m->tb_dir_ = config.tensorboard.Dir();
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> tb =
        TensorBoardWriter::Open(m->tb_dir_, env);
    if (!tb.ok()) {
      return absl::Status(tb.status().code(),
                          absl::StrCat("tensorboard: ", tb.status().message()));
    }
    m->tb_ = std::move(*tb);
  }
  if (config.csv_monitor.enabled) {
    m->csv_dir_ = config.csv_monitor.Dir();
    absl::StatusOr<std::unique_ptr<CsvMonitorWriter>> csv =
        CsvMonitorWriter::Open(m->csv_dir_, env);
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
  absl::Status result;  // the first error's code, every error's message
  auto fail = [&result](const absl::Status& st, const std::string& what) {
    const std::string text = absl::StrCat(what, st.message(), "; closed");
    result = result.ok()
                 ? absl::Status(st.code(), text)
                 : absl::Status(result.code(),
                                absl::StrCat(result.message(), "; ", text));
  };
  if (tb_ != nullptr) {
    absl::Status st = tb_->Write(events, WallTime());
    if (!st.ok()) {
      tb_.reset();
      fail(st, "tensorboard: ");
    }
  }
  if (csv_ != nullptr) {
    absl::Status st = csv_->Write(events);
    if (!st.ok()) {
      csv_.reset();
      fail(st, "csv_monitor: ");
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
