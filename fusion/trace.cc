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

Status Trace::prepare(const std::string& dir, int rank, int session) {
  namespace fs = std::filesystem;
  if (fd_ >= 0) return traceError("'" + path_ + "' is open already");
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
  const std::string name = "collectives.rank" + std::to_string(rank) +
                           (session > 1 ? ".session" + std::to_string(session) : "") + ".jsonl";
  const std::string path = (fs::path(dir) / name).string();
  // The new trace is written under another name until start(): a failed init leaves the file of
  // an earlier run as it was.
  const std::string partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return traceError("cannot write '" + partial + "': " + std::strerror(errno));
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = fd;
  path_ = path;
  rank_ = rank;
  dir_ = dir;
  suffix_ = session > 1 ? ".session" + std::to_string(session) : "";
  return Status::ok();
}

void Trace::removeStale(int size) {
  // Files of ranks this run does not have, left by an earlier run of more ranks: diff would take
  // them for this run's.
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string prefix = "collectives.rank";
  const std::string ending = suffix_ + ".jsonl";
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + ending.size() ||
        name.compare(name.size() - ending.size(), ending.size(), ending) != 0) {
      continue;
    }
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - ending.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    if (std::stoi(digits) >= size) fs::remove(entry.path(), ec);
  }
}

Status Trace::start(int size, Mode mode,
                    const std::vector<std::pair<std::string, std::string>>& settings) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0 || open_ || thread_.joinable()) return traceError("not prepared to start");
  Json variables = Json::object();
  for (const auto& [name, value] : settings) variables[name] = value;
  const Json header = {{"detcoll_trace", 1}, {"source", "collectives"}, {"rank", rank_},
                       {"size", size},       {"mode", modeName(mode)},  {"settings", variables}};
  failed_ = false;
  if (::rename((path_ + ".partial").c_str(), path_.c_str()) != 0) {
    return traceError("cannot write '" + path_ + "': " + std::strerror(errno));
  }
  if (!writeOut(line(header))) return traceError("cannot write '" + path_ + "'");
  if (rank_ == 0) removeStale(size);
  records_ = 0;
  open_ = true;
  closing_ = false;
  thread_ = std::thread([this] { writer(); });
  return Status::ok();
}

void Trace::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0 || open_ || thread_.joinable()) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink((path_ + ".partial").c_str());
}

Status Trace::open(const std::string& dir, int rank, int size, Mode mode,
                   const std::vector<std::pair<std::string, std::string>>& settings) {
  DETCOLL_RETURN_IF_ERROR(prepare(dir, rank));
  const Status started = start(size, mode, settings);
  if (!started.isOk()) abandon();
  return started;
}

void Trace::append(TraceRecord record) {
  std::unique_lock<std::mutex> lock(mutex_);
  add(lock, std::move(record), -1, {});
}

void Trace::appendBatch(std::vector<TraceRecord> records) {
  std::vector<std::string> members;
  if (records.size() > 1) {
    for (const TraceRecord& r : records) members.push_back(r.name);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // One batch's records stay together: room for all of them is made before the first.
  drained_.wait(lock, [&] { return !open_ || queued_.size() < kMaxQueued; });
  const auto batch = static_cast<int64_t>(records_);
  for (size_t i = 0; i < records.size(); ++i) {
    add(lock, std::move(records[i]), batch,
        i == 0 ? std::move(members) : std::vector<std::string>());
  }
}

void Trace::add(std::unique_lock<std::mutex>& lock, TraceRecord&& record, int64_t batch,
                std::vector<std::string> members) {
  if (batch < 0) drained_.wait(lock, [&] { return !open_ || queued_.size() < kMaxQueued; });
  if (!open_) return;
  const bool wasEmpty = queued_.empty();
  queued_.push_back(Queued{std::move(record), records_++, batch, std::move(members)});
  if (wasEmpty) wake_.notify_one();
}

std::string Trace::format(const Queued& q) {
  const TraceRecord& r = q.record;
  const bool fingerprinted = !r.device && r.error.empty();
  Json j = {{"seq", q.seq},
            {"kind", r.kind},
            {"name", r.name},
            {"set", r.set},
            {"mode", modeName(r.mode)},
            {"dtype", dataTypeName(r.type)},
            {"op", r.op ? Json(reduceOpName(*r.op)) : Json(nullptr)},
            {"count", r.count},
            {"leaves", r.leaves},
            {"inputs", fingerprints(r)},
            {"output", fingerprinted ? Json(fingerprintHex(r.output)) : Json(nullptr)}};
  if (r.device) j["device"] = true;
  j["async"] = r.async;
  if (q.batch >= 0) j["batch"] = q.batch;
  if (!q.members.empty()) j["members"] = q.members;
  if (r.joined) j["joined"] = true;
  if (!r.error.empty()) j["error"] = r.error;
  return line(j);
}

void Trace::writer() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return closing_ || !queued_.empty(); });
    // Records that arrive within the interval go out in one write.
    if (!closing_) wake_.wait_for(lock, kFlushInterval, [&] { return closing_; });
    std::vector<Queued> taken;
    taken.swap(queued_);
    const bool last = closing_;
    drained_.notify_all();
    lock.unlock();
    std::string text;
    for (const Queued& q : taken) text += format(q);
    if (!text.empty()) writeOut(text);
    lock.lock();
    if (last && queued_.empty()) {
      const std::string tail = std::move(tail_);
      lock.unlock();
      if (!tail.empty()) writeOut(tail);
      return;
    }
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
    if (!open_) {
      // Prepared and never started: the new file goes, an earlier one stays as it was.
      if (fd_ >= 0 && !thread_.joinable()) {
        ::close(fd_);
        fd_ = -1;
        ::unlink((path_ + ".partial").c_str());
      }
      return;
    }
    if (complete) tail_ = line(Json{{"end", true}, {"records", records_}});
    open_ = false;
    closing_ = true;
  }
  wake_.notify_all();
  drained_.notify_all();
  thread_.join();
  ::close(fd_);
  fd_ = -1;
}

}  // namespace detcoll::fusion
