#pragma once

// Message tags of the collective layer. Every rank runs the collectives in the same order, and
// messages between two ranks with one tag are matched in posting order, so a tag per phase is
// enough. A communicator may be shared with the layers above (the fusion engine negotiates on the
// communicator its collectives run on): tags from kFirstUpperTag up are theirs (fusion/tags.h).

namespace detcoll::collective {

constexpr int kTagAgreement = 1;  // agreement records and texts (agreement.h)
constexpr int kTagPipeline = 2;   // the allreduce schedule's groups (pipeline.h)
constexpr int kTagBroadcast = 4;
constexpr int kTagAllgather = 5;
constexpr int kTagRing = 6;     // ring allreduce
constexpr int kTagBarrier = 7;  // dissemination barrier
constexpr int kTagAlltoall = 8;

constexpr int kFirstUpperTag = 64;

}  // namespace detcoll::collective
