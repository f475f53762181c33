#include "bindings/c/config.h"

#include <string>

#include "collective/agreement.h"
#include "common/config.h"
#include "fusion/settings.h"
#include "kernels/rng/seed_state.h"

namespace detcoll::bindings::c {

Status loadConfig(const EnvLookup& lookup, Config* config) {
  Environment env(lookup);
  Config result;
  DETCOLL_RETURN_IF_ERROR(collective::loadSettings(env, &result.collective));
  DETCOLL_RETURN_IF_ERROR(fusion::loadEngineSettings(env, &result.engine));
  result.engine.invariantTransport = result.collective.invariantTransport;
  result.engine.gpuTransport = result.collective.gpuTransport;
  DETCOLL_RETURN_IF_ERROR(loadLogLevel(env, &result.logLevel));
  DETCOLL_RETURN_IF_ERROR(kernels::rng::loadRootSeed(env, &result.seed));
  result.setVariables = env.setVariables();
  *config = std::move(result);
  return Status::ok();
}

namespace {

// A transport setting, `variable`, the same on every rank: a rank whose value differs, or whose
// own check of it (`local`) failed, fails init on every rank, each rank's value named by nameOf.
template <typename Transport>
Status agreeOnTransport(collective::Collectives& collectives, const std::string& variable,
                        Transport value, const char* (*nameOf)(Transport),
                        const Status& local = Status::ok()) {
  collective::AgreedValue mine;
  mine.present = true;
  mine.words[0] = static_cast<uint64_t>(value);
  auto name = [nameOf](const collective::AgreedValue& v) -> std::string {
    return nameOf(static_cast<Transport>(v.words[0]));
  };
  return collectives.agreeOnValue("init", variable, local, mine, name);
}

// DETCOLL_FAST_PATH (or HOROVOD_CACHE_CAPACITY), the same on every rank: the engines start the
// fast path of a repeated step together or not at all (fusion/fast_path.h).
Status agreeOnFastPath(const Config& config, collective::Collectives& collectives) {
  collective::AgreedValue mine;
  mine.present = true;
  mine.words[0] = config.engine.fastPath ? 1 : 0;
  auto name = [](const collective::AgreedValue& v) -> std::string {
    return v.words[0] != 0 ? "1" : "0";
  };
  return collectives.agreeOnValue("init", "DETCOLL_FAST_PATH", Status::ok(), mine, name);
}

}  // namespace

Status agreeOnSettings(const Config& config, collective::Collectives& collectives) {
  const collective::Settings& settings = config.collective;
  // DETCOLL_GPU_TRANSPORT: a rank staging through host memory while another runs NCCL would wait
  // forever; nccl in a build without NCCL fails init on every rank.
  Status nccl = Status::ok();
  if (settings.gpuTransport == collective::GpuTransport::kNccl && !DETCOLL_WITH_NCCL) {
    nccl = Status::invalidArgument("DETCOLL_GPU_TRANSPORT is nccl, but this build has no NCCL");
  }
  DETCOLL_RETURN_IF_ERROR(agreeOnTransport(collectives, "DETCOLL_GPU_TRANSPORT",
                                           settings.gpuTransport, collective::gpuTransportName,
                                           nccl));
  // DETCOLL_INVARIANT_TRANSPORT: the transports exchange different messages.
  DETCOLL_RETURN_IF_ERROR(agreeOnTransport(collectives, "DETCOLL_INVARIANT_TRANSPORT",
                                           settings.invariantTransport,
                                           collective::invariantTransportName));
  // DETCOLL_AGREEMENT_TRANSPORT: a rank posting on the record board while another sends messages
  // would wait for records that never come.
  DETCOLL_RETURN_IF_ERROR(agreeOnTransport(collectives, "DETCOLL_AGREEMENT_TRANSPORT",
                                           settings.agreementTransport,
                                           collective::agreementTransportName));
  return agreeOnFastPath(config, collectives);
}

}  // namespace detcoll::bindings::c
