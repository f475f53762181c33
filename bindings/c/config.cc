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

// DETCOLL_GPU_TRANSPORT, the same on every rank (a rank staging through host memory while another
// runs NCCL would wait forever); nccl in a build without NCCL fails init on every rank.
Status agreeOnGpuTransport(const Config& config, collective::Collectives& collectives) {
  const collective::GpuTransport transport = config.collective.gpuTransport;
  Status local = Status::ok();
  if (transport == collective::GpuTransport::kNccl && !DETCOLL_WITH_NCCL) {
    local = Status::invalidArgument("DETCOLL_GPU_TRANSPORT is nccl, but this build has no NCCL");
  }
  collective::AgreedValue mine;
  mine.present = true;
  mine.words[0] = static_cast<uint64_t>(transport);
  auto name = [](const collective::AgreedValue& v) -> std::string {
    return collective::gpuTransportName(static_cast<collective::GpuTransport>(v.words[0]));
  };
  return collectives.agreeOnValue("init", "DETCOLL_GPU_TRANSPORT", local, mine, name);
}

// DETCOLL_INVARIANT_TRANSPORT, the same on every rank: the transports exchange different messages.
Status agreeOnInvariantTransport(const Config& config, collective::Collectives& collectives) {
  collective::AgreedValue mine;
  mine.present = true;
  mine.words[0] = static_cast<uint64_t>(config.collective.invariantTransport);
  auto name = [](const collective::AgreedValue& v) -> std::string {
    return collective::invariantTransportName(
        static_cast<collective::InvariantTransport>(v.words[0]));
  };
  return collectives.agreeOnValue("init", "DETCOLL_INVARIANT_TRANSPORT", Status::ok(), mine, name);
}

// DETCOLL_AGREEMENT_TRANSPORT, the same on every rank: a rank posting on the record board while
// another sends messages would wait for records that never come.
Status agreeOnAgreementTransport(const Config& config, collective::Collectives& collectives) {
  collective::AgreedValue mine;
  mine.present = true;
  mine.words[0] = static_cast<uint64_t>(config.collective.agreementTransport);
  auto name = [](const collective::AgreedValue& v) -> std::string {
    return collective::agreementTransportName(
        static_cast<collective::AgreementTransport>(v.words[0]));
  };
  return collectives.agreeOnValue("init", "DETCOLL_AGREEMENT_TRANSPORT", Status::ok(), mine, name);
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
  DETCOLL_RETURN_IF_ERROR(agreeOnGpuTransport(config, collectives));
  DETCOLL_RETURN_IF_ERROR(agreeOnInvariantTransport(config, collectives));
  DETCOLL_RETURN_IF_ERROR(agreeOnAgreementTransport(config, collectives));
  return agreeOnFastPath(config, collectives);
}

}  // namespace detcoll::bindings::c
