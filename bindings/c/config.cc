#include "bindings/c/config.h"

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

}  // namespace detcoll::bindings::c
