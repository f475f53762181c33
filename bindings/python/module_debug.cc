// detcoll._detcoll's part of the training trace (detcoll/debug/trace.py; docs/design.md, "The
// debugger"), which keeps recording a small model's step cheap:
// - ValueStore, the values file of a recording. A recorded tensor is fingerprinted (detcoll_hash)
//   and, the first time its content is seen, its bytes are copied for a writer thread, which
//   appends them to the file: one call per tensor, and the file's writes off the training's
//   thread (a 4M-parameter model's step records 64 MB).
// - The log of detcoll.rng key derivations: a step derives a key per sample and layer, too many
//   to record one by one from Python. While on, each derivation appends, in native byte order:
//   parent and child key (4 + 4 uint32), the domain's length and the path's length (2 uint32),
//   the domain's bytes, the path (uint64 each). rng_log_take() returns and clears it.

#include <fcntl.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "binding.h"
#include "detcoll.h"

namespace detcoll_python {
namespace {

class ValueStore {
 public:
  // Small tensors gather into one block of about this size before it is queued.
  static constexpr size_t kBlock = 1 << 20;
  // Queued bytes beyond this make put() wait for the writer (a disk slower than the training).
  static constexpr size_t kMaxQueued = size_t{512} << 20;
  // A tensor larger than this is written from its own memory, not copied (put() waits for it).
  static constexpr size_t kDirect = size_t{64} << 20;
  static constexpr int kClosed = -1;
  static constexpr size_t kSpare = size_t{256} << 20;
  // From this size on, put() lets other threads run while it hashes and copies.
  static constexpr size_t kReleaseGil = 256 << 10;

  // `maxQueued`: kMaxQueued but in tests (which make put() wait for the writer every time).
  explicit ValueStore(const std::string& path, size_t maxQueued = kMaxQueued)
      : path_(path), maxQueued_(maxQueued) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) fail("cannot write", errno);
    writer_ = std::thread([this] { write(); });
  }
  ~ValueStore() { stop(); }
  ValueStore(const ValueStore&) = delete;
  ValueStore& operator=(const ValueStore&) = delete;

  // The fingerprint of `bytes` bytes at `data`, and with `keep` their offset in the file (their
  // copy queued for the writer once per fingerprint and length), else -1.
  std::pair<uint64_t, int64_t> put(uintptr_t data, size_t bytes, bool keep) {
    uint64_t fp = 0;
    int64_t at = -1;
    int error = 0;
    detcoll_status_t status;
    {
      // A small tensor's hash takes less than handing the GIL to another thread and back.
      std::optional<py::gil_scoped_release> release;
      if (bytes >= kReleaseGil) release.emplace();
      const char* pointer = reinterpret_cast<const char*>(data);
      status = detcoll_hash(bytes != 0 ? pointer : nullptr, bytes, &fp);
      if (status == DETCOLL_SUCCESS && keep) {
        std::unique_lock<std::mutex> lock(mutex_);  // put() may run on several threads
        error = claim(lock, pointer, bytes, fp, &at);
      }
    }
    check(status);
    if (error == kClosed) fail("cannot add to the closed values file", 0);
    if (error != 0) fail("cannot write", error);
    return {fp, at};
  }

  // Hands what is gathered to the writer, which writes it out at once (no waiting here).
  void flush() {
    int error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue();
      error = error_;
    }
    if (error != 0) fail("cannot write", error);
  }

  // Writes everything out and closes the file; raises when some write failed.
  void close() {
    int error;
    {
      py::gil_scoped_release release;
      error = stop();
    }
    if (error != 0) fail("cannot write", error);
  }

  int64_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return size_;
  }

 private:
  [[noreturn]] void fail(const char* what, int error) {
    std::string message = std::string("record: ") + what + " '" + path_ + "'";
    if (error != 0) message += std::string(": ") + std::strerror(error);
    PyErr_SetString(PyExc_OSError, message.c_str());
    throw py::error_already_set();
  }

  // Under mutex_: the gathered block goes to the writer.
  void queue() {
    if (gathered_.empty()) return;
    queued_ += gathered_.size();
    blocks_.push_back(std::move(gathered_));
    gathered_ = std::string();
    wake_.notify_one();
  }

  // Under mutex_: the offset of these bytes in the file (*at), their copy queued for the writer
  // the first time; 0, or the error that keeps them out of the file (kClosed after close()).
  int claim(std::unique_lock<std::mutex>& lock, const char* data, size_t bytes, uint64_t fp,
            int64_t* at) {
    if (closing_) return kClosed;
    if (error_ != 0) return error_;  // the file is incomplete: no offset in it is good any more
    const std::pair<uint64_t, size_t> key{fp, bytes};
    const auto found = offsets_.find(key);
    if (found != offsets_.end()) {
      *at = found->second;
      return 0;
    }
    // Room first (a disk slower than the training), so that no other put() comes between the
    // offset claimed here and the bytes queued.
    written_.wait(lock, [&] { return queued_ <= maxQueued_ || error_ != 0; });
    if (error_ != 0) return error_;
    if (bytes > kDirect) {
      // Not copied: written from the tensor's memory once the writer has written the rest.
      queue();
      written_.wait(lock, [&] { return queued_ == 0 || error_ != 0; });
      if (error_ == 0) error_ = writeAll(data, bytes);
      if (error_ != 0) return error_;
    } else {
      if (gathered_.size() + bytes > kBlock) queue();
      if (gathered_.empty()) gathered_ = block(std::max(kBlock, bytes));
      gathered_.append(data, bytes);
      if (gathered_.size() >= kBlock) queue();
    }
    *at = size_;
    offsets_.emplace(key, size_);
    size_ += static_cast<int64_t>(bytes);
    return 0;
  }

  void write() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return closing_ || !blocks_.empty(); });
      if (blocks_.empty()) return;  // closing, all written
      std::string block = std::move(blocks_.front());
      blocks_.pop_front();
      const bool failed = error_ != 0;  // after a failed write nothing more is written
      lock.unlock();
      const int error = failed ? 0 : writeAll(block.data(), block.size());
      lock.lock();
      if (error != 0 && error_ == 0) error_ = error;
      queued_ -= block.size();
      if (spareBytes_ + block.capacity() <= kSpare) {
        // Kept for the next copies: memory already faulted in (a fresh block's page faults cost
        // more than the copy into it).
        spareBytes_ += block.capacity();
        block.clear();
        spare_.push_back(std::move(block));
      }
      written_.notify_all();
    }
  }

  // Under mutex_: an empty buffer of at least `capacity` bytes, a spare one where there is one.
  std::string block(size_t capacity) {
    for (size_t i = spare_.size(); i-- > 0;) {
      if (spare_[i].capacity() >= capacity) {
        std::string found = std::move(spare_[i]);
        spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
        spareBytes_ -= found.capacity();
        return found;
      }
    }
    std::string fresh;
    fresh.reserve(capacity);
    return fresh;
  }

  // 0 or the errno of the failed write.
  int writeAll(const char* data, size_t left) {
    while (left > 0) {
      const ssize_t n = ::write(fd_, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n == 0 ? EIO : errno;
      data += n;
      left -= static_cast<size_t>(n);
    }
    return 0;
  }

  // Queues the rest, lets the writer finish and closes the file: the first error, or 0.
  int stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (fd_ < 0) return error_;
      queue();
      closing_ = true;
      wake_.notify_one();
    }
    if (writer_.joinable()) writer_.join();
    ::close(fd_);
    fd_ = -1;
    return error_;
  }

  std::string path_;
  size_t maxQueued_;
  int fd_ = -1;
  int64_t size_ = 0;  // of the file once everything queued is written
  std::map<std::pair<uint64_t, size_t>, int64_t> offsets_;
  std::mutex mutex_;
  std::condition_variable wake_;     // the writer: a block is queued, or closing_
  std::condition_variable written_;  // put(): a block was written
  std::string gathered_;             // not yet queued
  std::vector<std::string> spare_;   // written blocks, kept for reuse (at most kSpare bytes)
  size_t spareBytes_ = 0;
  std::deque<std::string> blocks_;  // queued for the writer
  size_t queued_ = 0;
  bool closing_ = false;
  int error_ = 0;  // the first failed write's errno: the file is incomplete
  std::thread writer_;
};

bool g_logOn = false;
std::string* g_log = new std::string();  // never destroyed: used until the interpreter ends
uint64_t g_logged = 0;

template <typename T>
void put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

}  // namespace

void logDerivation(const detcoll_rng_key_t& parent, const std::string& domain,
                   const std::vector<uint64_t>& path, const detcoll_rng_key_t& child) {
  if (!g_logOn) return;
  std::string& out = *g_log;
  for (uint32_t word : parent.words) put(out, word);
  for (uint32_t word : child.words) put(out, word);
  put(out, static_cast<uint32_t>(domain.size()));
  put(out, static_cast<uint32_t>(path.size()));
  out += domain;
  for (uint64_t step : path) put(out, step);
  ++g_logged;
}

void defineDebug(py::module_& m) {
  m.def("rng_log", [](bool on) { g_logOn = on; });
  m.def("rng_log_take", [] {
    py::tuple taken = py::make_tuple(g_logged, py::bytes(*g_log));
    g_log->clear();
    g_logged = 0;
    return taken;
  });
  py::class_<ValueStore>(m, "ValueStore")
      .def(py::init<const std::string&, size_t>(), py::arg("path"),
           py::arg("max_queued") = ValueStore::kMaxQueued)
      .def("put", &ValueStore::put)
      .def("flush", &ValueStore::flush)
      .def("close", &ValueStore::close)
      .def_property_readonly("size", &ValueStore::size);
}

}  // namespace detcoll_python
