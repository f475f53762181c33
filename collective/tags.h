#pragma once

// Message tags of the algorithms. Every rank runs collectives in the same order and messages with
// one tag between two ranks are matched in order, so a tag per phase is enough.

namespace detcoll::collective {

constexpr int kTagHeader = 1;          // call descriptions exchanged before each collective
constexpr int kTagReduceScatter = 2;   // ordered allreduce: pieces to the owner of a shard
constexpr int kTagAllgatherShard = 3;  // ordered allreduce: reduced shards to every rank
constexpr int kTagBroadcast = 4;
constexpr int kTagAllgather = 5;
constexpr int kTagRing = 6;         // ring allreduce
constexpr int kTagNegotiation = 7;  // fusion engine: rank messages to the coordinator
constexpr int kTagResponse = 8;     // fusion engine: the coordinator's response to every rank

}  // namespace detcoll::collective
