#include "collective/settings.h"

namespace detcoll::collective {

const char* gpuTransportName(GpuTransport transport) {
  switch (transport) {
    case GpuTransport::kNccl:
      return "nccl";
    case GpuTransport::kMpi:
      return "mpi";
    case GpuTransport::kAuto:
      break;
  }
  return "auto";
}

const char* invariantTransportName(InvariantTransport transport) {
  switch (transport) {
    case InvariantTransport::kLeaves:
      return "leaves";
    case InvariantTransport::kEncodings:
      return "encodings";
    case InvariantTransport::kMpi:
      return "mpi";
    case InvariantTransport::kAuto:
      break;
  }
  return "auto";
}

const char* agreementTransportName(AgreementTransport transport) {
  return transport == AgreementTransport::kMessages ? "messages" : "auto";
}

Status loadSettings(Environment& env, Settings* settings) {
  Settings result;
  const char* used = nullptr;
  if (const char* v = env.get("DETCOLL_DETERMINISM", nullptr, &used)) {
    if (!parseMode(v, &result.mode)) return invalidValue(used, v, "native, ordered or invariant");
  }
  if (const char* v = env.get("DETCOLL_GPU_TRANSPORT", nullptr, &used)) {
    bool known = false;
    for (GpuTransport t : {GpuTransport::kAuto, GpuTransport::kNccl, GpuTransport::kMpi}) {
      if (std::string(v) == gpuTransportName(t)) {
        result.gpuTransport = t;
        known = true;
      }
    }
    if (!known) return invalidValue(used, v, "auto, nccl or mpi");
  }
  if (const char* v = env.get("DETCOLL_INVARIANT_TRANSPORT", nullptr, &used)) {
    bool known = false;
    for (InvariantTransport t : {InvariantTransport::kAuto, InvariantTransport::kLeaves,
                                 InvariantTransport::kEncodings, InvariantTransport::kMpi}) {
      if (std::string(v) == invariantTransportName(t)) {
        result.invariantTransport = t;
        known = true;
      }
    }
    if (!known) return invalidValue(used, v, "auto, leaves, encodings or mpi");
  }
  if (const char* v = env.get("DETCOLL_AGREEMENT_TRANSPORT", nullptr, &used)) {
    bool known = false;
    for (AgreementTransport t : {AgreementTransport::kAuto, AgreementTransport::kMessages}) {
      if (std::string(v) == agreementTransportName(t)) {
        result.agreementTransport = t;
        known = true;
      }
    }
    if (!known) return invalidValue(used, v, "auto or messages");
  }
  *settings = result;
  return Status::ok();
}

}  // namespace detcoll::collective
