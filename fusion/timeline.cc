#include "fusion/timeline.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/names.h"

namespace detcoll::fusion {
namespace {

// Names need not be valid UTF-8: invalid bytes are replaced rather than thrown about.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

double microseconds(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace

Timeline::~Timeline() {
  close();
}

Status Timeline::open(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    return Status::invalidArgument("DETCOLL_TIMELINE: cannot write '" + path +
                                   "': " + std::strerror(errno));
  }
  origin_ = Clock::now();
  std::fputs("[\n", file_);
  first_ = true;
  nlohmann::json process = {{"name", "process_name"},
                            {"ph", "M"},
                            {"pid", 0},
                            {"args", {{"name", "detcoll requests (rank 0)"}}}};
  write(dump(process));
  return Status::ok();
}

int Timeline::rowOf(const std::string& name) {
  const auto [it, fresh] = rows_.try_emplace(name, static_cast<int>(rows_.size()) + 1);
  if (fresh) {
    nlohmann::json row = {{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", 0},
                          {"tid", it->second},
                          {"args", {{"name", shownName(name)}}}};
    write(dump(row));
  }
  return it->second;
}

void Timeline::write(const std::string& event) {
  if (!first_) std::fputs(",\n", file_);
  std::fputs(event.c_str(), file_);
  first_ = false;
}

void Timeline::phase(const std::string& name, const char* phase, Clock::time_point begin,
                     Clock::time_point end, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  nlohmann::json event = {{"name", phase},
                          {"ph", "X"},
                          {"pid", 0},
                          {"tid", rowOf(name)},
                          {"ts", microseconds(begin - origin_)},
                          {"dur", microseconds(end - begin)}};
  if (!detail.empty()) event["args"] = {{"detail", detail}};
  write(dump(event));
}

void Timeline::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

}  // namespace detcoll::fusion
