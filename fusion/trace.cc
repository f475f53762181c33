#include "fusion/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>

#include "common/fingerprint.h"
#include "common/logging.h"
#include "common/names.h"

namespace detcoll::fusion {
namespace {

using Json = nlohmann::ordered_json;  // the fields in the order the format lists them

// Names need not be valid UTF-8: invalid bytes are replaced rather than thrown about.
std::string line(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Status traceError(const std::string& text) {
  return Status::invalidArgument("DETCOLL_TRACE: " + text);
}

Json fingerprints(const TraceRecord& r) {
  if (r.device) return nullptr;
  Json list = Json::array();
  for (uint64_t value : r.inputs) list.push_back(fingerprintHex(value));
  return list;
}

}  // namespace

std::string traceName(const std::string& qualified) {
  return shownName(std::string_view(qualified).substr(0, qualified.find('\0')));
}

Trace::~Trace() {
  close(false);
}

Status Trace::open(const std::string& dir, int rank, int size, Mode mode,
                   const std::vector<std::pair<std::string, std::string>>& settings) {
  namespace fs = std::filesystem;
  if (thread_.joinable()) return traceError("'" + path_ + "' is open already");
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (fs::exists(status) && !fs::is_directory(status)) {
    return traceError("'" + dir + "' exists and is not a directory");
  }
  if (!fs::exists(status)) {
    fs::create_directories(dir, ec);
    // Another rank may have made it meanwhile: only a path that is still no directory fails.
    std::error_code again;
    if (ec && !fs::is_directory(dir, again)) {
      return traceError("cannot create the directory '" + dir + "': " + ec.message());
    }
  }
  const std::string path =
      (fs::path(dir) / ("collectives.rank" + std::to_string(rank) + ".jsonl")).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return traceError("cannot write '" + path + "': " + std::strerror(errno));
  Json variables = Json::object();
  for (const auto& [name, value] : settings) variables[name] = value;
  const Json header = {{"detcoll_trace", 1}, {"source", "collectives"}, {"rank", rank},
                       {"size", size},       {"mode", modeName(mode)},  {"settings", variables}};
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = fd;
  path_ = path;
  failed_ = false;
  if (!writeOut(line(header))) {
    ::close(fd_);
    fd_ = -1;
    return traceError("cannot write '" + path + "'");
  }
  records_ = 0;
  open_ = true;
  closing_ = false;
  thread_ = std::thread([this] { writer(); });
  return Status::ok();
}

void Trace::append(const TraceRecord& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  add(record, -1, nullptr);
}

void Trace::appendBatch(const std::vector<TraceRecord>& records) {
  std::vector<std::string> members;
  if (records.size() > 1) {
    for (const TraceRecord& r : records) members.push_back(r.name);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const auto batch = static_cast<int64_t>(records_);
  for (const TraceRecord& r : records) add(r, batch, members.empty() ? nullptr : &members);
}

void Trace::add(const TraceRecord& r, int64_t batch, const std::vector<std::string>* members) {
  if (!open_) return;
  Json j = {{"seq", records_},
            {"kind", r.kind},
            {"name", r.name},
            {"set", r.set},
            {"mode", modeName(r.mode)},
            {"dtype", dataTypeName(r.type)},
            {"op", r.op ? Json(reduceOpName(*r.op)) : Json(nullptr)},
            {"count", r.count},
            {"leaves", r.leaves},
            {"inputs", fingerprints(r)},
            {"output", r.device ? Json(nullptr) : Json(fingerprintHex(r.output))}};
  if (r.device) j["device"] = true;
  j["async"] = r.async;
  if (batch >= 0) j["batch"] = batch;
  if (members != nullptr) j["members"] = *members;
  ++records_;
  const bool wasEmpty = buffer_.empty();
  buffer_ += line(j);
  if (wasEmpty) wake_.notify_one();
}

void Trace::writer() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return closing_ || !buffer_.empty(); });
    // Records that arrive within the interval go out in one write.
    if (!closing_) wake_.wait_for(lock, kFlushInterval, [&] { return closing_; });
    std::string text;
    text.swap(buffer_);
    const bool last = closing_;
    lock.unlock();
    if (!text.empty()) writeOut(text);
    lock.lock();
    if (last && buffer_.empty()) return;
  }
}

bool Trace::writeOut(const std::string& text) {
  // After a failed write the file ends where it failed: nothing later, no end record.
  if (failed_) return false;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : "nothing written";
      failed_ = true;
      DETCOLL_LOG(kWarn) << "DETCOLL_TRACE: writing '" << path_ << "' failed (" << reason
                         << "); the trace ends here, without its end record";
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void Trace::close(bool complete) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!open_) return;
    if (complete) buffer_ += line(Json{{"end", true}, {"records", records_}});
    open_ = false;
    closing_ = true;
  }
  wake_.notify_all();
  thread_.join();
  ::close(fd_);
  fd_ = -1;
}

}  // namespace detcoll::fusion
