#include "collective/transport/thread_communicator.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

namespace detcoll::collective::transport {

namespace {

struct Message {
  const void* source = nullptr;  // set for a send
  void* destination = nullptr;   // set for a receive
  size_t bytes = 0;              // size of a send, capacity of a receive
  bool done = false;
  Status status;
  size_t received = 0;
};

}  // namespace

class ThreadWorld {
 public:
  explicit ThreadWorld(int size, bool board = false)
      : size_(size), board_(board ? (RecordBoard::bytes(size) + 63) / 64 : 0) {}
  int size() const { return size_; }
  // The board's memory (zeroed, 64-byte aligned), or null.
  void* board() { return board_.empty() ? nullptr : board_.data(); }

  // Posts one side of a transfer; completes both sides if the other is already waiting.
  void post(const std::shared_ptr<Message>& t, bool isSend, int from, int to, int tag) {
    const auto key = std::make_tuple(from, to, tag);
    std::shared_ptr<Message> send;
    std::shared_ptr<Message> recv;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& mine = isSend ? sends_[key] : recvs_[key];
      auto& theirs = isSend ? recvs_[key] : sends_[key];
      if (theirs.empty()) {
        mine.push_back(t);
        return;
      }
      (isSend ? recv : send) = theirs.front();
      (isSend ? send : recv) = t;
      theirs.pop_front();
    }
    // Copy outside the lock so that ranks move data in parallel.
    Status status;
    if (send->bytes > recv->bytes) {
      status = Status::internal("message of " + std::to_string(send->bytes) + " bytes from rank " +
                                std::to_string(from) + " exceeds the receive of " +
                                std::to_string(recv->bytes) + " bytes");
    } else if (send->bytes > 0) {
      std::memcpy(recv->destination, send->source, send->bytes);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    send->status = recv->status = status;
    recv->received = send->bytes;
    send->done = recv->done = true;
    cv_.notify_all();
  }

  bool test(const std::shared_ptr<Message>& t, Status* status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!t->done) return false;
    *status = t->status;
    return true;
  }

  // The world of the index-th duplicate: the same ranks, its own messages.
  std::shared_ptr<ThreadWorld> child(size_t index) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (children_.size() <= index) {
      children_.push_back(std::make_shared<ThreadWorld>(size_, !board_.empty()));
    }
    return children_[index];
  }

  Status wait(const std::shared_ptr<Message>& t, size_t* bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return t->done; });
    if (bytes != nullptr) *bytes = t->received;
    return t->status;
  }

 private:
  using Key = std::tuple<int, int, int>;
  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<Key, std::deque<std::shared_ptr<Message>>> sends_;
  std::map<Key, std::deque<std::shared_ptr<Message>>> recvs_;
  std::vector<std::shared_ptr<ThreadWorld>> children_;
  struct alignas(64) Line {
    char bytes[64];
  };
  std::vector<Line> board_;
};

namespace {

class ThreadTransfer : public Transfer {
 public:
  ThreadTransfer(std::shared_ptr<ThreadWorld> world, std::shared_ptr<Message> message)
      : world_(std::move(world)), message_(std::move(message)) {}
  // A pending transfer points into the caller's buffer: wait rather than leave it dangling.
  ~ThreadTransfer() override { (void)world_->wait(message_, nullptr); }
  Status wait(size_t* bytes) override { return world_->wait(message_, bytes); }
  bool test(Status* status) override { return world_->test(message_, status); }

 private:
  std::shared_ptr<ThreadWorld> world_;
  std::shared_ptr<Message> message_;
};

}  // namespace

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<ThreadWorld> world, int rank)
    : world_(std::move(world)), rank_(rank) {
  if (void* memory = world_->board()) {
    board_ = std::make_unique<RecordBoard>(memory, rank_, world_->size(), *this);
  }
}

ThreadCommunicator::~ThreadCommunicator() = default;

void ThreadCommunicator::setPatience(const Patience& patience) {
  if (board_) board_->setPatience(patience);
}

void ThreadCommunicator::abandon(const Status& why) {
  if (board_ && broken_.isOk()) broken_ = board_->postNotice(why);
}

Status ThreadCommunicator::health() {
  if (!broken_.isOk()) return broken_;
  if (board_ && board_->noticed()) broken_ = board_->notice();
  return broken_;
}

int ThreadCommunicator::size() const {
  return world_->size();
}

std::unique_ptr<Transfer> ThreadCommunicator::isend(const void* data, size_t bytes, int peer,
                                                    int tag) {
  countSend(tag);
  auto t = std::make_shared<Message>();
  t->source = data;
  t->bytes = bytes;
  world_->post(t, true, rank_, peer, tag);
  return std::make_unique<ThreadTransfer>(world_, t);
}

std::unique_ptr<Transfer> ThreadCommunicator::irecv(void* data, size_t capacity, int peer,
                                                    int tag) {
  auto t = std::make_shared<Message>();
  t->destination = data;
  t->bytes = capacity;
  world_->post(t, false, peer, rank_, tag);
  return std::make_unique<ThreadTransfer>(world_, t);
}

std::unique_ptr<ThreadCommunicator> ThreadCommunicator::duplicate() {
  return std::make_unique<ThreadCommunicator>(world_->child(duplicates_++), rank_);
}

Status spawn(int size, const std::function<void(Communicator&)>& fn, bool board) {
  auto world = std::make_shared<ThreadWorld>(size, board);
  std::vector<Status> failures(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(world, r);
      try {
        fn(comm);
      } catch (const std::exception& e) {
        failures[r] = Status::internal("rank " + std::to_string(r) + " threw: " + e.what());
      } catch (...) {
        failures[r] = Status::internal("rank " + std::to_string(r) + " threw");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& f : failures) {
    if (!f.isOk()) return f;
  }
  return Status::ok();
}

}  // namespace detcoll::collective::transport
