#pragma once

// The allreduce schedule, written once (docs/design.md, "One schedule"): a direct reduce-scatter
// then an allgather, over Kernels (what computes: the CPU's kernels, kernels/host_reduce_kernels.h,
// or data-parallel bodies on the GPU, kernels/bodies/reduce_kernels.h) and an Exchange (what
// moves bytes: collective/comm_exchange.h over MPI or threads, or NCCL). The CPU path and the GPU
// path run this same code; so do the tests that have no GPU, with the GPU's bodies run on the
// host.
//
// The element range is cut into rounds of P shards. In round q every rank sends its piece of
// shard s to rank s (the reduce-scatter S(q)); rank s reduces its shard's P pieces, its own read
// in place, with a fold that sees them in rank order (F(q)); then every rank's reduced shard goes
// to every rank (the allgather G(q)). Each rank sends and receives 2(P-1)/P of the data, as in a
// ring, in one step instead of P-1.
//
// Transfers travel in groups: group k holds G(k-2) and S(k). Groups 0 and 1 are posted first;
// group q completes before F(q), and group q+2 is posted after it. So round q+1's reduce-scatter
// is in flight while round q is folded, and a round's allgather overlaps the next two folds. The
// received pieces and the encoded input are staged by round parity: memory is 2 * P segments of
// pieces, plus two rounds of encodings where the input is encoded per round, whatever the count.
// On a stream-ordered transport every post and kernel goes onto one stream in this order, and
// completing a group waits for nothing.
//
// Kernels offers alloc<T>(n), mark() and release(mark) (scratch: each stage releases its own),
// status(), stream(), table(pointers, k), fold, localKeys, foldKeys, encode, decode and
// invariantLocal (kernels/host_reduce_kernels.h says what each computes).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "collective/transport/exchange.h"
#include "common/status.h"
#include "kernels/pieces.h"

namespace detcoll::collective {

using kernels::Pieces;

// One run of the schedule.
struct Stage {
  size_t count = 0;
  // Reduce-scatter input, inBytes per element: `input`, or encode(begin, n, dst) per round.
  size_t inBytes = 0;
  const void* input = nullptr;
  std::function<void(size_t begin, size_t n, void* dst)> encode;
  // Allgather output, outBytes per element; may equal input (in place).
  size_t outBytes = 0;
  void* output = nullptr;
  // Writes the reduced elements [begin, begin + n) to out from the P pieces, in rank order;
  // vectorized: every piece and out are 16-byte aligned.
  std::function<void(void* out, const Pieces& pieces, size_t begin, size_t n, bool vectorized)>
      fold;
  // Input bytes of each shard per round.
  size_t segmentBytes = 1 << 20;
  // A reduce-scatter alone (no allgather): rank j owns the elements [offset_j, offset_j +
  // blocks[j]) (offsets are the sums of the blocks before), `input` is required and `output`
  // holds this rank's block alone. Round q's shard j is the q-th segment of block j. Empty: the
  // allreduce's balanced shards of each round, and the allgather.
  std::vector<size_t> blocks;
};

template <typename Kernels>
class Pipeline {
 public:
  Pipeline(Kernels& k, transport::Exchange& x, const Stage& s)
      : k_(k),
        x_(x),
        s_(s),
        p_(x.size()),
        rank_(x.rank()),
        // Shards start at multiples of unit_ elements, 16 bytes of input and of output, so that
        // every shard of 16-byte aligned buffers is read and written as vectors.
        unit_(std::max<size_t>(1, kernels::kVectorBytes / std::min(s.inBytes, s.outBytes))),
        scatterOnly_(!s.blocks.empty()),
        widest_(scatterOnly_ ? *std::max_element(s.blocks.begin(), s.blocks.end())
                             : (s.count + p_ - 1) / p_),
        segment_(
            roundUp(std::max<size_t>(1, std::min(s.segmentBytes / s.inBytes, widest_)), unit_)),
        round_(segment_ * p_),
        // Slots of 16-byte multiples, so that every staged piece can be read as vectors.
        slotBytes_(roundUp(segment_ * s.inBytes, kernels::kVectorBytes)),
        rounds_(scatterOnly_ ? (widest_ + segment_ - 1) / segment_
                             : (s.count + round_ - 1) / round_) {
    size_t offset = 0;
    for (size_t b : s.blocks) {
      offsets_.push_back(offset);
      offset += b;
    }
  }

  // Transport failures are returned; a kernel's failure is not (it is in the kernels' status,
  // which the next stage's agreement and the allreduce's last one make every rank's), so that a
  // rank whose kernel failed still runs every transfer and leaves no peer waiting. The stage's
  // scratch is released when it returns.
  Status run() {
    if (s_.count == 0) return Status::ok();
    if (scatterOnly_ && !s_.input)
      return Status::internal("a reduce-scatter stage needs its input");
    const size_t mark = k_.mark();
    const Status status = p_ == 1 ? alone() : rounds();
    k_.release(mark);
    return status;
  }

 private:
  struct Shard {
    size_t begin;
    size_t length;
  };

  Status rounds() {
    staging_ = k_.template alloc<char>(static_cast<int64_t>(2 * p_ * slotBytes_));
    if (!s_.input)
      encoded_ = k_.template alloc<char>(static_cast<int64_t>(2 * round_ * s_.inBytes));
    // Every rank has its scratch (and whatever the caller allocated before), or every rank stops.
    DETCOLL_RETURN_IF_ERROR(x_.agree(k_.status()));
    // From here every rank runs every transfer: a kernel that fails to launch makes the later
    // launches no-ops and is reported at the end, so that no peer is left waiting.
    DETCOLL_RETURN_IF_ERROR(post(0));
    DETCOLL_RETURN_IF_ERROR(post(1));
    for (size_t q = 0; q < rounds_; ++q) {
      DETCOLL_RETURN_IF_ERROR(x_.complete(group(q)));
      fold(q);
      DETCOLL_RETURN_IF_ERROR(post(q + 2));
    }
    DETCOLL_RETURN_IF_ERROR(x_.complete(group(rounds_)));
    return x_.complete(group(rounds_ + 1));
  }

  static size_t roundUp(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }
  size_t length(size_t q) const { return std::min(round_, s_.count - q * round_); }
  // Shard j of round q: a balanced split in units, the first ones a unit longer (the last shard
  // of the last round may be short).
  Shard shard(size_t q, int j) const {
    if (scatterOnly_) {
      const size_t done = std::min(s_.blocks[j], q * segment_);
      return {offsets_[j] + done, std::min(segment_, s_.blocks[j] - done)};
    }
    const size_t n = length(q);
    const size_t units = (n + unit_ - 1) / unit_;
    const size_t base = units / p_;
    const size_t extra = units % p_;
    const size_t first = base * j + std::min<size_t>(j, extra);
    const size_t begin = std::min(n, first * unit_);
    const size_t end =
        std::min(n, (first + base + (static_cast<size_t>(j) < extra ? 1 : 0)) * unit_);
    return {q * round_ + begin, end - begin};
  }
  char* slot(size_t q, int j) const { return staging_ + ((q % 2) * p_ + j) * slotBytes_; }
  char* encodedRound(size_t q) const { return encoded_ + (q % 2) * round_ * s_.inBytes; }
  // Input element `index` of round q: in the caller's buffer, or in the round's encoding.
  const char* inputAt(size_t q, size_t index) const {
    if (s_.input) return static_cast<const char*>(s_.input) + index * s_.inBytes;
    return encodedRound(q) + (index - q * round_) * s_.inBytes;
  }
  // Output element `index`: in a reduce-scatter, the output holds this rank's block alone.
  char* outputAt(size_t index) const {
    if (scatterOnly_) index -= offsets_[rank_];
    return static_cast<char*>(s_.output) + index * s_.outBytes;
  }
  transport::ExchangeGroup& group(size_t k) { return groups_[k % 3]; }

  // Group k: round k-2's allgather and round k's reduce-scatter. The same transfers in the same
  // order on every rank, so that those between a pair of ranks match in posting order.
  Status post(size_t k) {
    transport::ExchangeGroup& g = group(k);
    if (k >= 2 && k - 2 < rounds_ && !scatterOnly_) gather(k - 2, g);
    if (k < rounds_) {
      if (!s_.input) s_.encode(k * round_, length(k), encodedRound(k));
      scatter(k, g);
    }
    if (g.empty()) return Status::ok();
    return x_.post(g, k_.stream());
  }

  // My piece of every other shard out, the other ranks' pieces of my shard in.
  void scatter(size_t q, transport::ExchangeGroup& g) {
    const Shard mine = shard(q, rank_);
    for (int j = 0; j < p_; ++j) {
      if (j == rank_) continue;
      const Shard theirs = shard(q, j);
      if (mine.length > 0) g.recvs.push_back({slot(q, j), mine.length * s_.inBytes, j});
      if (theirs.length > 0) {
        g.sends.push_back({inputAt(q, theirs.begin), theirs.length * s_.inBytes, j});
      }
    }
  }

  void fold(size_t q) {
    const Shard mine = shard(q, rank_);
    if (mine.length == 0) return;
    Pieces pieces;
    pieces.base = slot(q, 0);
    pieces.stride = slotBytes_;
    pieces.own = rank_;
    pieces.ownPtr = inputAt(q, mine.begin);
    char* out = outputAt(mine.begin);
    s_.fold(out, pieces, mine.begin, mine.length, kernels::aligned16({pieces.ownPtr, out}));
  }

  // My reduced shard out, every other rank's in.
  void gather(size_t q, transport::ExchangeGroup& g) {
    const Shard mine = shard(q, rank_);
    for (int j = 0; j < p_; ++j) {
      if (j == rank_) continue;
      const Shard theirs = shard(q, j);
      if (theirs.length > 0) {
        g.recvs.push_back({outputAt(theirs.begin), theirs.length * s_.outBytes, j});
      }
      if (mine.length > 0) g.sends.push_back({outputAt(mine.begin), mine.length * s_.outBytes, j});
    }
  }

  // One rank: its own input folded alone, in segments where it is encoded.
  Status alone() {
    const size_t step = s_.input ? s_.count : std::max<size_t>(1, s_.segmentBytes / s_.inBytes);
    char* encoded =
        s_.input ? nullptr : k_.template alloc<char>(static_cast<int64_t>(step * s_.inBytes));
    for (size_t begin = 0; begin < s_.count; begin += step) {
      const size_t n = std::min(step, s_.count - begin);
      const char* piece = encoded;
      if (s_.input) {
        piece = static_cast<const char*>(s_.input) + begin * s_.inBytes;
      } else {
        s_.encode(begin, n, encoded);
      }
      Pieces pieces;
      pieces.own = 0;
      pieces.ownPtr = piece;
      char* out = outputAt(begin);
      s_.fold(out, pieces, begin, n, kernels::aligned16({piece, out}));
    }
    return Status::ok();
  }

  Kernels& k_;
  transport::Exchange& x_;
  const Stage& s_;
  const int p_;
  const int rank_;
  const size_t unit_;
  const bool scatterOnly_;
  const size_t widest_;  // elements of the largest shard over all rounds (of the largest block)
  const size_t segment_;
  const size_t round_;
  const size_t slotBytes_;
  const size_t rounds_;
  std::vector<size_t> offsets_;  // of the blocks
  char* staging_ = nullptr;
  char* encoded_ = nullptr;
  transport::ExchangeGroup groups_[3];
};

template <typename Kernels>
Status runStage(Kernels& k, transport::Exchange& x, const Stage& s) {
  return Pipeline<Kernels>(k, x, s).run();
}

}  // namespace detcoll::collective
