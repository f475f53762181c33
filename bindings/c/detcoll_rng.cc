// The C API of the random streams: seeds agreed across ranks, keys, fills and the checkpointable
// state (kernels/rng/).

#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "bindings/c/detcoll.h"
#include "bindings/c/runtime.h"
#include "collective/agreement.h"
#include "common/config.h"
#include "common/logging.h"
#include "kernels/rng/fill.h"
#include "kernels/rng/key_registry.h"
#include "kernels/rng/philox.h"

#if DETCOLL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/rng/fill_cuda.h"
#endif

namespace detcoll::bindings::c {
namespace {

namespace rng = kernels::rng;

static_assert(sizeof(detcoll_rng_key_t) == sizeof(rng::Key));

rng::KeyRegistry g_keyRegistry;

rng::Key toKey(const detcoll_rng_key_t& k) {
  return rng::Key{{k.words[0], k.words[1], k.words[2], k.words[3]}};
}
detcoll_rng_key_t fromKey(const rng::Key& k) {
  return detcoll_rng_key_t{{k.w[0], k.w[1], k.w[2], k.w[3]}};
}

std::string seedText(const collective::AgreedValue& v) {
  return v.present ? std::to_string(v.words[0]) : "unset";
}

// A seed from the system's entropy source; std::random_device may throw where there is none.
Status drawSeed(uint64_t* seed) {
  try {
    std::random_device device;
    *seed = static_cast<uint64_t>(device()) << 32 | device();
    return Status::ok();
  } catch (const std::exception& e) {
    return Status::backend(std::string("cannot draw a root seed (") + e.what() +
                           "); set DETCOLL_SEED");
  }
}

Status nullArgument(const char* call, const char* what) {
  return Status::invalidArgument(std::string(call) + ": " + what + " is null");
}

detcoll_status_t fill(const char* call, const detcoll_rng_key_t* key, rng::FillSpec spec,
                      uint64_t offset, void* out, size_t count, detcoll_dtype_t dtype) {
  if (key == nullptr) return finish(nullArgument(call, "key"));
  spec.type = static_cast<DataType>(dtype);
  Status status = rng::checkFill(call, spec, offset, count, out);
  if (!status.isOk()) return finish(status);
  int device = -1;
  status = locateMemory(out, &device);
  if (!status.isOk()) return finish(status.prefixed(call));
#if DETCOLL_WITH_CUDA
  if (device >= 0) {
    // On the buffer's own device, on the calling thread's stream (detcoll_set_cuda_stream),
    // without waiting; with none set, on the legacy default stream, waited for. The caller's
    // device is restored.
    void* stream = callingThreadCudaStream();
    int current = 0;
    cudaGetDevice(&current);
    cudaError_t error = cudaSetDevice(device);
    if (error == cudaSuccess) {
      status = rng::fillDevice(toKey(*key), spec, offset, count, out, stream);
      if (status.isOk() && stream == nullptr) error = cudaStreamSynchronize(nullptr);
      cudaSetDevice(current);
    }
    if (status.isOk() && error != cudaSuccess) {
      status = Status::backend(std::string("CUDA: ") + cudaGetErrorString(error));
    }
    return finish(status.prefixed(call));
  }
#endif
  return finish(rng::fillHost(toKey(*key), spec, offset, count, out).prefixed(call));
}

// Runs `body` on the runtime's random state, under its lock; NOT_INITIALIZED before init.
template <typename Body>
detcoll_status_t withState(const char* call, Body body) {
  std::shared_lock<std::shared_mutex> lock(g_runtimeMutex);
  if (!g_runtime) return finish(notInitialized(call));
  std::lock_guard<std::mutex> state(g_runtime->rngMutex);
  return finish(body(g_runtime->rng).prefixed(call));
}

}  // namespace

Status initializeRandomState(Runtime& runtime) {
  collective::AgreedValue mine;
  mine.present = runtime.config.seed.has_value();
  mine.words[0] = runtime.config.seed.value_or(0);
  DETCOLL_RETURN_IF_ERROR(runtime.collectives->agreeOnValue("seed agreement", "DETCOLL_SEED",
                                                            Status::ok(), mine, seedText));
  uint64_t seed = runtime.config.seed.value_or(0);
  if (!runtime.config.seed) {
    // Rank 0 draws; a failure to draw fails init on every rank.
    const Status drawn = runtime.comm->rank() == 0 ? drawSeed(&seed) : Status::ok();
    DETCOLL_RETURN_IF_ERROR(
        runtime.collectives->broadcast(&seed, 1, DETCOLL_INT64, 0, "detcoll.root_seed", drawn));
    DETCOLL_LOG(kInfo) << "root seed " << seed << " drawn on rank 0; DETCOLL_SEED=" << seed
                       << " repeats it";
  }
  runtime.rng = rng::SeedState(seed);
  return Status::ok();
}

}  // namespace detcoll::bindings::c

using namespace detcoll;
using namespace detcoll::bindings::c;
namespace rng = detcoll::kernels::rng;

extern "C" {

void detcoll_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  const rng::Block b = rng::philox4x32_10(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1]);
  std::memcpy(out, b.v, sizeof b.v);
}

detcoll_status_t detcoll_rng_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (Status entered = enterBlockingCall("detcoll_rng_seed"); !entered.isOk())
    return finish(entered);
  collective::AgreedValue mine;
  mine.present = true;
  mine.words[0] = seed;
  Status status = g_runtime->collectives->agreeOnValue(
      "seed agreement", "detcoll_rng_seed: the seed", Status::ok(), mine, seedText);
  if (status.isOk()) {
    std::lock_guard<std::mutex> state(g_runtime->rngMutex);
    rng::SeedState next(seed);
    for (const auto& [name, value] : g_runtime->rng.counters()) (void)next.setCounter(name, value);
    g_runtime->rng = std::move(next);
  }
  return finish(status);
}

detcoll_status_t detcoll_rng_get_seed(uint64_t* seed) {
  if (seed == nullptr) return finish(nullArgument("detcoll_rng_get_seed", "seed"));
  return withState("detcoll_rng_get_seed", [&](rng::SeedState& state) {
    *seed = state.seed();
    return Status::ok();
  });
}

detcoll_status_t detcoll_rng_root_key(detcoll_rng_key_t* key) {
  if (key == nullptr) return finish(nullArgument("detcoll_rng_root_key", "key"));
  return withState("detcoll_rng_root_key", [&](rng::SeedState& state) {
    *key = fromKey(state.rootKey());
    return Status::ok();
  });
}

detcoll_status_t detcoll_rng_key_from_seed(uint64_t seed, detcoll_rng_key_t* key) {
  if (key == nullptr) return finish(nullArgument("detcoll_rng_key_from_seed", "key"));
  *key = fromKey(rng::rootKey(seed));
  return DETCOLL_SUCCESS;
}

detcoll_status_t detcoll_rng_derive(const detcoll_rng_key_t* parent, const char* domain,
                                    const uint64_t* path, size_t path_len,
                                    detcoll_rng_key_t* child) {
  const char* call = "detcoll_rng_derive";
  if (parent == nullptr) return finish(nullArgument(call, "parent"));
  if (domain == nullptr) return finish(nullArgument(call, "domain"));
  if (path == nullptr && path_len > 0) return finish(nullArgument(call, "path"));
  if (child == nullptr) return finish(nullArgument(call, "child"));
  *child = fromKey(rng::deriveKey(toKey(*parent), std::string_view(domain), path, path_len));
  return DETCOLL_SUCCESS;
}

detcoll_status_t detcoll_rng_name_hash(const void* bytes, size_t length, detcoll_rng_key_t* hash) {
  if (bytes == nullptr && length > 0) return finish(nullArgument("detcoll_rng_name_hash", "bytes"));
  if (hash == nullptr) return finish(nullArgument("detcoll_rng_name_hash", "hash"));
  *hash = fromKey(rng::nameHash(static_cast<const char*>(bytes), length));
  return DETCOLL_SUCCESS;
}

detcoll_status_t detcoll_rng_begin_step(uint64_t step) {
  g_keyRegistry.beginStep(step);
  return DETCOLL_SUCCESS;
}

detcoll_status_t detcoll_rng_derive_checked(const detcoll_rng_key_t* parent, const char* domain,
                                            const uint64_t* path, size_t path_len,
                                            const char* purpose, detcoll_rng_key_t* child) {
  const char* call = "detcoll_rng_derive_checked";
  if (parent == nullptr) return finish(nullArgument(call, "parent"));
  if (domain == nullptr) return finish(nullArgument(call, "domain"));
  if (path == nullptr && path_len > 0) return finish(nullArgument(call, "path"));
  if (purpose == nullptr) return finish(nullArgument(call, "purpose"));
  if (child == nullptr) return finish(nullArgument(call, "child"));
  rng::Key key;
  const Status status = g_keyRegistry.derive(toKey(*parent), domain, path, path_len, purpose, &key);
  if (!status.isOk()) return finish(status.prefixed(call));
  *child = fromKey(key);
  return DETCOLL_SUCCESS;
}

detcoll_status_t detcoll_rng_uniform(const detcoll_rng_key_t* key, uint64_t offset, void* out,
                                     size_t count, detcoll_dtype_t dtype) {
  rng::FillSpec spec;
  spec.distribution = rng::Distribution::kUniform;
  return fill("detcoll_rng_uniform", key, spec, offset, out, count, dtype);
}

detcoll_status_t detcoll_rng_normal(const detcoll_rng_key_t* key, uint64_t offset, void* out,
                                    size_t count, detcoll_dtype_t dtype, double mean,
                                    double stddev) {
  rng::FillSpec spec;
  spec.distribution = rng::Distribution::kNormal;
  spec.mean = mean;
  spec.stddev = stddev;
  return fill("detcoll_rng_normal", key, spec, offset, out, count, dtype);
}

detcoll_status_t detcoll_rng_bernoulli(const detcoll_rng_key_t* key, uint64_t offset, void* out,
                                       size_t count, detcoll_dtype_t dtype, double p) {
  rng::FillSpec spec;
  spec.distribution = rng::Distribution::kBernoulli;
  spec.p = p;
  return fill("detcoll_rng_bernoulli", key, spec, offset, out, count, dtype);
}

detcoll_status_t detcoll_rng_randint(const detcoll_rng_key_t* key, uint64_t offset, void* out,
                                     size_t count, detcoll_dtype_t dtype, uint64_t n) {
  rng::FillSpec spec;
  spec.distribution = rng::Distribution::kRandint;
  spec.n = n;
  return fill("detcoll_rng_randint", key, spec, offset, out, count, dtype);
}

detcoll_status_t detcoll_rng_counter_get(const char* name, uint64_t* value) {
  if (name == nullptr) return finish(nullArgument("detcoll_rng_counter_get", "name"));
  if (value == nullptr) return finish(nullArgument("detcoll_rng_counter_get", "value"));
  return withState("detcoll_rng_counter_get",
                   [&](rng::SeedState& state) { return state.counter(name, value); });
}

detcoll_status_t detcoll_rng_counter_set(const char* name, uint64_t value) {
  if (name == nullptr) return finish(nullArgument("detcoll_rng_counter_set", "name"));
  return withState("detcoll_rng_counter_set",
                   [&](rng::SeedState& state) { return state.setCounter(name, value); });
}

detcoll_status_t detcoll_rng_counter_next(const char* name, uint64_t* value) {
  if (name == nullptr) return finish(nullArgument("detcoll_rng_counter_next", "name"));
  if (value == nullptr) return finish(nullArgument("detcoll_rng_counter_next", "value"));
  return withState("detcoll_rng_counter_next",
                   [&](rng::SeedState& state) { return state.next(name, value); });
}

detcoll_status_t detcoll_rng_state_save(void* buf, size_t size, size_t* needed) {
  if (needed == nullptr) return finish(nullArgument("detcoll_rng_state_save", "needed"));
  return withState("detcoll_rng_state_save", [&](rng::SeedState& state) {
    const std::string bytes = state.serialize();
    *needed = bytes.size();
    if (buf == nullptr || size < bytes.size()) {
      return Status::invalidArgument("the state needs " + std::to_string(bytes.size()) +
                                     " bytes, the buffer has " +
                                     std::to_string(buf == nullptr ? 0 : size));
    }
    std::memcpy(buf, bytes.data(), bytes.size());
    return Status::ok();
  });
}

detcoll_status_t detcoll_rng_state_restore(const void* buf, size_t size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (Status entered = enterBlockingCall("detcoll_rng_state_restore"); !entered.isOk())
    return finish(entered);
  rng::SeedState restored;
  Status local = rng::SeedState::deserialize(buf, size, &restored);
  collective::AgreedValue mine;
  if (local.isOk()) {
    const std::string canonical = restored.serialize();
    mine.present = true;
    mine.words[0] = restored.seed();
    mine.words[1] = rng::keyLow64(rng::nameHash(canonical.data(), canonical.size()));
  }
  auto describe = [](const collective::AgreedValue& v) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(v.words[1]));
    return "seed " + std::to_string(v.words[0]) + " (state hash " + hash + ")";
  };
  Status status = g_runtime->collectives->agreeOnValue(
      "random state restore", "the restored random state", local, mine, describe);
  if (status.isOk()) {
    std::lock_guard<std::mutex> state(g_runtime->rngMutex);
    g_runtime->rng = std::move(restored);
  } else {
    status = status.prefixed("detcoll_rng_state_restore");
  }
  return finish(status);
}

}  // extern "C"
