// The fusion engine's records in the collective trace (engine.h, fusion/trace.h; docs/design.md,
// "The debugger"): per request, the fingerprints of what this rank gives, taken before its batch
// runs, and of what it receives, once the batch succeeded (else the batch's error).
//   allreduce, allgather, reducescatter, alltoall: inputs [sendbuf], output recvbuf (allgather:
//     every rank's count elements; reducescatter: this rank's block; alltoall: what it receives)
//   broadcast: inputs [buf] on the root, none elsewhere (there buf is only written); output buf
//   join: no inputs; output the last rank to join, an int32

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "common/fingerprint.h"
#include "fusion/engine.h"

namespace detcoll::fusion {
namespace {

using collective::transport::Communicator;

uint64_t sum(const std::vector<uint64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), uint64_t{0});
}

}  // namespace

std::vector<TraceRecord> Engine::traceInputs(const Batch& batch) {
  std::vector<TraceRecord> records;
  for (const RequestPtr& request : batch.requests) {
    const RequestSpec& spec = request->spec();
    const Descriptor& d = spec.descriptor;
    TraceRecord r;
    r.kind = requestKindName(d.kind);
    r.name = traceName(spec.name);
    r.set = d.processSet;
    r.mode = d.mode;
    r.type = d.type;
    r.count = d.count;
    r.async = true;
    r.joined = spec.owned != nullptr;  // the zeros of a joined rank (Engine::stand)
    if (d.kind == RequestKind::kAllreduce || d.kind == RequestKind::kReducescatter) r.op = d.op;
    const size_t element = dataTypeSize(d.type);
    if (d.kind == RequestKind::kAlltoall) {
      r.count = sum(spec.sendCounts);
      r.inputs.push_back(fingerprint(spec.send, r.count * element));
    } else if (d.kind == RequestKind::kBroadcast) {
      const Communicator* comm = communicatorOf(d.processSet);
      if (comm != nullptr && comm->rank() == d.root) {
        r.inputs.push_back(fingerprint(spec.recv, d.bytes()));
      }
    } else if (d.kind == RequestKind::kJoin) {
      r.type = DataType::kInt32;
      r.count = 1;
    } else {
      r.inputs.push_back(fingerprint(spec.send, d.bytes()));
    }
    records.push_back(std::move(r));
  }
  return records;
}

void Engine::traceOutputs(const Batch& batch, std::vector<TraceRecord> records,
                          const Status& status) {
  for (size_t i = 0; i < records.size(); ++i) {
    const RequestSpec& spec = batch.requests[i]->spec();
    const Descriptor& d = spec.descriptor;
    const Communicator* comm = communicatorOf(d.processSet);
    if (!status.isOk() || comm == nullptr) {
      // Failed (or did not run here: runBatch says why): the error, no output.
      records[i].error = status.isOk() ? "the batch did not run on this rank" : status.message();
      continue;
    }
    size_t bytes = d.bytes();
    if (d.kind == RequestKind::kAllgather) {
      bytes *= static_cast<size_t>(comm->size());
    } else if (d.kind == RequestKind::kReducescatter) {
      bytes =
          static_cast<size_t>(d.blocks[static_cast<size_t>(comm->rank())]) * dataTypeSize(d.type);
    } else if (d.kind == RequestKind::kAlltoall) {
      bytes = static_cast<size_t>(sum(spec.recvCounts)) * dataTypeSize(d.type);
    } else if (d.kind == RequestKind::kJoin) {
      bytes = sizeof(int32_t);
    }
    records[i].output = fingerprint(spec.recv, bytes);
  }
  options_.trace->appendBatch(std::move(records));
}

}  // namespace detcoll::fusion
