#pragma once

// Fuzz target: the verdict of the call agreement (collective/call_agreement.h) from any records.
// The input is a byte for the number of ranks, then each rank's 32-byte header and 32 bytes that
// start its inline payload (the rest of its record is zeros), then the ranks' texts (name and
// local error), cut at zero bytes. The records lie in one buffer of exactly P records, as the
// agreement holds them, so that a read past the last one is caught. Properties:
// - the verdict is a function of the records and texts: computed twice, the same;
// - a call that goes ahead has records its consumers can read: every rank's inline payload fits
//   its record (read here as the allreduce reads it) and holds at least one leaf; its headers
//   all carry a passed local check;
// - a failure is a failure: a status code detcoll_status_t knows, other than success.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collective/call_agreement.h"
#include "tests/fuzz/fuzz_check.h"

namespace detcoll::fuzz {

inline int callAgreementTarget(const uint8_t* data, size_t size) {
  using collective::CallAgreement;
  FuzzInput in(data, size);
  const int p = 1 + static_cast<int>(in.byte() % 6);
  constexpr size_t kRecord = CallAgreement::kRecordBytes;
  std::vector<char> slots(p * kRecord, 0);
  std::vector<const char*> records(p);
  for (int j = 0; j < p; ++j) {
    size_t got = 0;
    const unsigned char* bytes = in.take(CallAgreement::kHeaderBytes + 32, &got);
    std::memcpy(slots.data() + j * kRecord, bytes, got);
    records[j] = slots.data() + j * kRecord;
  }
  std::vector<std::vector<std::string>> texts(p);
  for (int j = 0; j < p && in.remaining() > 0; ++j) {
    for (int t = 0; t < 2; ++t) {
      std::string text;
      while (in.remaining() > 0) {
        const char c = static_cast<char>(in.byte());
        if (c == 0) break;
        text.push_back(c);
      }
      texts[j].push_back(text);
    }
  }

  const bool agree = collective::callRecordsAgree(records);
  DETCOLL_FUZZ_CHECK(agree == collective::callRecordsAgree(records));
  if (agree) {
    // What the consumers read (collective/collectives.cc), at the header's offsets: the status
    // (byte 3), the payload's size (12) and the leaves (14), then the payload itself.
    for (int j = 0; j < p; ++j) {
      uint8_t status = 0;
      uint16_t payloadBytes = 0;
      uint16_t leaves = 0;
      std::memcpy(&status, records[j] + 3, 1);
      std::memcpy(&payloadBytes, records[j] + 12, 2);
      std::memcpy(&leaves, records[j] + 14, 2);
      DETCOLL_FUZZ_CHECK(status == 0);
      DETCOLL_FUZZ_CHECK(leaves >= 1);
      DETCOLL_FUZZ_CHECK(CallAgreement::kHeaderBytes + payloadBytes <= kRecord);
      unsigned sum = 0;
      const char* payload = records[j] + CallAgreement::kHeaderBytes;
      for (size_t i = 0; i < std::min<size_t>(payloadBytes, kRecord); ++i) {
        sum += static_cast<unsigned char>(payload[i]);
      }
      DETCOLL_FUZZ_CHECK(sum < (1u << 24));
    }
    return 0;
  }
  const Status verdict = collective::callFailure(records, texts);
  const Status again = collective::callFailure(records, texts);
  DETCOLL_FUZZ_CHECK(verdict.code() == again.code() && verdict.message() == again.message());
  const int code = static_cast<int>(verdict.code());
  DETCOLL_FUZZ_CHECK(code > 0 && code <= static_cast<int>(StatusCode::kInternal));
  DETCOLL_FUZZ_CHECK(!verdict.message().empty());
  return 0;
}

}  // namespace detcoll::fuzz
