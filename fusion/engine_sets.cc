// The fusion engine's process sets and join (engine.h; docs/design.md, "Process sets" and "Join").

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fusion/engine.h"

namespace detcoll::fusion {

using collective::transport::Communicator;

Status Engine::addProcessSet(uint32_t id, std::vector<int> members,
                             std::unique_ptr<Communicator> comm) {
  if (id == 0) return Status::invalidArgument("process set 0 is every rank; it is not added");
  auto set = std::make_shared<ProcessSet>();
  set->members = std::make_shared<const std::vector<int>>(std::move(members));
  set->comm = std::move(comm);
  std::lock_guard<std::mutex> lock(setsMutex_);
  if (!sets_.emplace(id, std::move(set)).second) {
    return Status::invalidArgument("process set " + std::to_string(id) + " exists already");
  }
  return Status::ok();
}

void Engine::attachCommunicator(uint32_t id, std::unique_ptr<Communicator> comm) {
  std::lock_guard<std::mutex> lock(setsMutex_);
  const auto it = sets_.find(id);
  if (it != sets_.end()) it->second->comm = std::move(comm);
}

void Engine::removeProcessSet(uint32_t id) {
  std::lock_guard<std::mutex> lock(setsMutex_);
  sets_.erase(id);
  removedSets_.insert(id);
}

std::shared_ptr<const std::vector<int>> Engine::processSetMembers(uint32_t id) {
  std::lock_guard<std::mutex> lock(setsMutex_);
  const auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second->members;
}

bool Engine::processSetRemoved(uint32_t id) {
  std::lock_guard<std::mutex> lock(setsMutex_);
  return removedSets_.count(id) > 0;
}

Communicator* Engine::communicatorOf(uint32_t id) {
  if (id == 0) return &comm_;
  std::lock_guard<std::mutex> lock(setsMutex_);
  const auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second->comm.get();
}

bool Engine::stand(const std::string& name, const Descriptor& d, std::vector<RequestPtr>* ready) {
  if (d.processSet != 0) {
    const auto members = processSetMembers(d.processSet);
    // Removed here after the cycle that made it ready (the members' requests completed before
    // they removed it, while this rank's engine was behind): not this rank's to run.
    if (!members) return processSetRemoved(d.processSet);
    // Another set's request: its members run it, this rank has nothing to do.
    return std::find(members->begin(), members->end(), comm_.rank()) == members->end();
  }
  if (!joined_.load() || d.kind != RequestKind::kAllreduce) return false;
  // Joined: this rank's part of the others' allreduce is zeros (docs/design.md, "Join").
  RequestSpec spec;
  spec.name = name;
  spec.descriptor = d;
  spec.checked = true;
  if (d.device) {
    // No buffers: the device batch gives it device zeros (fusion/device_batches.h); `owned`
    // marks a stand-in.
    spec.owned = std::make_shared<std::vector<char>>();
  } else {
    spec.owned = std::make_shared<std::vector<char>>(d.bytes(), 0);
    spec.send = spec.owned->data();
    spec.recv = spec.owned->data();
  }
  ready->push_back(std::make_shared<Request>(std::move(spec), nullptr));
  return true;
}

}  // namespace detcoll::fusion
