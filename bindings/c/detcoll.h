/* detcoll: bit-reproducible collectives for data-parallel training. The stable C ABI.
 *
 * Every call returns a status; on failure detcoll_last_error() describes it, the output buffers
 * are untouched and the library stays usable. A collective that fails on one rank (bad argument,
 * ranks disagreeing on the call) fails on every rank with the same status and message. No call
 * aborts the process. Collectives must be called in the same order on every rank. */
#ifndef DETCOLL_H_
#define DETCOLL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DETCOLL_API __attribute__((visibility("default")))
#else
#define DETCOLL_API
#endif

typedef enum {
  DETCOLL_SUCCESS = 0,
  DETCOLL_ERR_INVALID_ARGUMENT,
  DETCOLL_ERR_MISMATCH,
  DETCOLL_ERR_TIMEOUT,
  DETCOLL_ERR_BACKEND,
  DETCOLL_ERR_NOT_INITIALIZED,
  DETCOLL_ERR_INTERNAL
} detcoll_status_t;

typedef enum {
  DETCOLL_FLOAT32,
  DETCOLL_FLOAT64,
  DETCOLL_FLOAT16,
  DETCOLL_BFLOAT16,
  DETCOLL_INT32,
  DETCOLL_INT64
} detcoll_dtype_t;

typedef enum { DETCOLL_SUM, DETCOLL_AVERAGE, DETCOLL_MIN, DETCOLL_MAX } detcoll_op_t;

typedef enum { DETCOLL_MODE_NATIVE, DETCOLL_MODE_ORDERED, DETCOLL_MODE_INVARIANT } detcoll_mode_t;

/* Initializes detcoll on MPI_COMM_WORLD, calling MPI_Init_thread(MPI_THREAD_MULTIPLE) if MPI is
 * not initialized yet (detcoll_finalize then finalizes it). Reads and checks the DETCOLL_*
 * environment on every rank; an invalid value fails init on every rank. A second call while
 * initialized does nothing and succeeds. */
DETCOLL_API detcoll_status_t detcoll_init(void);
/* Releases detcoll and, if detcoll_init initialized MPI, finalizes MPI. */
DETCOLL_API detcoll_status_t detcoll_finalize(void);

/* -1 before init. Local rank and size count the ranks on this node. */
DETCOLL_API int detcoll_rank(void);
DETCOLL_API int detcoll_size(void);
DETCOLL_API int detcoll_local_rank(void);
DETCOLL_API int detcoll_local_size(void);

/* Overrides DETCOLL_DETERMINISM, before or after init; every rank must set the same mode.
 * native: MPI_Allreduce. ordered: each element is the left fold in rank order. invariant: the
 * exact sum rounded once, independent of world size too (see README). */
DETCOLL_API detcoll_status_t detcoll_set_mode(detcoll_mode_t mode);
DETCOLL_API detcoll_mode_t detcoll_get_mode(void);

/* sendbuf == recvbuf is in place. Average divides the sum by the world size. name may be NULL;
 * when given it must be the same on every rank. */
DETCOLL_API detcoll_status_t detcoll_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                               detcoll_dtype_t dtype, detcoll_op_t op,
                                               const char* name);
/* Each rank contributes nleaves buffers (leaves, 1 to 65535; the count may differ between ranks);
 * the result is the reduction of all of them, and average divides by the number of leaves over
 * all ranks. In invariant mode the result depends only on the multiset of leaves (at most 65536
 * in total), not on how they are spread over ranks. In ordered and native mode each rank first
 * folds its own leaves in order. recvbuf may be one of the leaves. */
DETCOLL_API detcoll_status_t detcoll_allreduce_leaves(const void* const* leaves, int nleaves,
                                                      void* recvbuf, size_t count,
                                                      detcoll_dtype_t dtype, detcoll_op_t op,
                                                      const char* name);
DETCOLL_API detcoll_status_t detcoll_broadcast(void* buf, size_t count, detcoll_dtype_t dtype,
                                               int root, const char* name);
/* recvbuf holds size * count elements, rank j's at offset j * count. */
DETCOLL_API detcoll_status_t detcoll_allgather(const void* sendbuf, void* recvbuf, size_t count,
                                               detcoll_dtype_t dtype, const char* name);

/* Device memory (a CUDA build): the blocking calls above take CUDA device pointers too, with the
 * bits of the host path for the same mode. A call's buffers are all host memory or all memory of
 * one device, and every rank passes the same kind. They travel over NCCL (ncclSend/ncclRecv
 * groups for ordered and invariant, ncclAllReduce for native) when detcoll was built with it,
 * else staged through host memory over MPI; DETCOLL_GPU_TRANSPORT=auto|nccl|mpi chooses. The
 * first device call fixes the device. Asynchronous requests take device memory too (process set 0
 * only): the fusion engine packs them into a device fusion buffer, with the same bits.
 *
 * detcoll_set_cuda_stream: the calling thread's cudaStream_t (per thread, like a framework's
 * current stream), for its later device calls. A blocking call is enqueued on it after the work
 * already there and returns without waiting, as NCCL calls do (over MPI it waits); NULL, the
 * default: detcoll's own stream, and the call returns when its result is in place. An
 * asynchronous request on device memory starts after the work on the stream at enqueue (NULL:
 * the legacy default stream), and detcoll_wait makes the stream set at the wait wait for the
 * result without the host waiting (NULL: the host waits for it); detcoll_poll reports the
 * engine's side done, its device work queued. Needs no init. */
DETCOLL_API detcoll_status_t detcoll_set_cuda_stream(void* stream);
/* What this build has: 1 when it takes CUDA device memory, else 0; NCCL's version code
 * (NCCL_VERSION_CODE, e.g. 22807) when it was built with NCCL, else 0. Need no init. */
DETCOLL_API int detcoll_built_with_cuda(void);
DETCOLL_API int detcoll_nccl_version(void);

/* Thread-local text of the last failure in this thread; "" if none. */
DETCOLL_API const char* detcoll_last_error(void);

/* For bindings that check arguments of their own (a framework tensor's layout, say): the calling
 * thread's next allreduce, allreduce_leaves, broadcast or allgather (blocking, asynchronous or
 * grouped) still joins its agreement, but as failed with `reason` (at most 191 bytes travel), so
 * it returns DETCOLL_ERR_INVALID_ARGUMENT on every rank with a message naming this rank and the
 * reason, instead of one rank failing alone while the others wait. Buffers are not touched; pass
 * the call's name as the other ranks do. NULL or "" cancels a pending rejection. */
DETCOLL_API detcoll_status_t detcoll_reject_next_call(const char* reason);

/* Asynchronous requests, served by the fusion engine (DETCOLL_FUSION_THRESHOLD,
 * DETCOLL_CYCLE_TIME). A request is matched across ranks by its name, not by call order: ranks
 * may enqueue in any order, from any thread; names must be unique among requests in flight on a
 * rank (NULL: "detcoll.noname.<n>" from a per-rank counter, so unnamed requests must be enqueued
 * in one order everywhere). In ordered and invariant mode the result has exactly the bits of the
 * blocking call, whatever fusion and timing did. Buffers must stay valid and untouched until the
 * request completes; the mode is the one in force at enqueue.
 *
 * A call that returns an error enqueued nothing and sets *handle to NULL. Otherwise the request's
 * own outcome comes from detcoll_wait: a bad argument on any rank, ranks that disagree on a name
 * (DETCOLL_ERR_MISMATCH), a name some ranks never submit (DETCOLL_ERR_TIMEOUT after
 * DETCOLL_STALL_SHUTDOWN_SECONDS) or a shutdown fail it on every rank that enqueued it. Needs MPI
 * at MPI_THREAD_MULTIPLE (detcoll_init asks for it when it initializes MPI). */
typedef struct detcoll_request* detcoll_handle_t;
DETCOLL_API detcoll_status_t detcoll_allreduce_async(const void* sendbuf, void* recvbuf,
                                                     size_t count, detcoll_dtype_t dtype,
                                                     detcoll_op_t op, const char* name,
                                                     detcoll_handle_t* handle);
/* n requests enqueued atomically, negotiated together and fused together where they fit;
 * handles[i] for each (all NULL on error). */
DETCOLL_API detcoll_status_t detcoll_grouped_allreduce_async(
    int n, const void* const* sendbufs, void* const* recvbufs, const size_t* counts,
    detcoll_dtype_t dtype, detcoll_op_t op, const char* const* names, detcoll_handle_t* handles);
DETCOLL_API detcoll_status_t detcoll_broadcast_async(void* buf, size_t count, detcoll_dtype_t dtype,
                                                     int root, const char* name,
                                                     detcoll_handle_t* handle);
DETCOLL_API detcoll_status_t detcoll_allgather_async(const void* sendbuf, void* recvbuf,
                                                     size_t count, detcoll_dtype_t dtype,
                                                     const char* name, detcoll_handle_t* handle);
/* Any asynchronous request, described whole: the calls above, and what they cannot say (the
 * tensor's shape, the reduce-scatter and the alltoall). Zero-initialize it, then set the fields
 * the kind uses. Every rank must describe the same request under one name (its ndim and shape
 * too); a rank that describes another fails it on every rank with DETCOLL_ERR_MISMATCH naming
 * what each rank gave.
 *
 * reducescatter: counts[j] elements of the reduction go to rank j (size() entries, the same on
 *   every rank; Horovod splits a tensor's first dimension this way). sendbuf holds their sum,
 *   recvbuf this rank's block; the elements are reduced exactly as the allreduce of the same mode
 *   reduces them, so a block equals that slice of the allreduce, bit for bit. Average divides by
 *   the world size. In place is not supported.
 * alltoall: counts[j] elements of sendbuf go to rank j and recvcounts[j] elements come from rank
 *   j, packed in rank order in each buffer (MPI_Alltoallv with packed displacements). A count
 *   rank j does not send fails every rank with DETCOLL_ERR_MISMATCH naming both ranks. */
typedef enum {
  DETCOLL_REQUEST_ALLREDUCE,
  DETCOLL_REQUEST_BROADCAST,
  DETCOLL_REQUEST_ALLGATHER,
  DETCOLL_REQUEST_REDUCESCATTER,
  DETCOLL_REQUEST_ALLTOALL
} detcoll_request_kind_t;

typedef struct detcoll_request_desc {
  detcoll_request_kind_t kind;
  const void* sendbuf;      /* all but broadcast */
  void* recvbuf;            /* broadcast: the buffer */
  size_t count;             /* allreduce, broadcast: elements; allgather: elements of each rank */
  const size_t* counts;     /* reducescatter, alltoall: size() entries */
  const size_t* recvcounts; /* alltoall: size() entries */
  detcoll_dtype_t dtype;
  detcoll_op_t op; /* allreduce, reducescatter */
  int root;        /* broadcast */
  const char* name;
  /* The tensor's shape, which every rank must give alike: ndim (0 to 64) entries, or NULL for
   * none. Allgather and alltoall give the dimensions after the first, which may differ. */
  const int64_t* shape;
  int ndim;
  /* The process set it runs in (detcoll_process_set_add); 0: every rank. Ranks, counts and blocks
   * are then the set's (its members in increasing order: member i is the set's rank i); root is
   * a rank of the world, which must be a member. A rank that is not a member gets
   * DETCOLL_ERR_INVALID_ARGUMENT at once, and the members never wait for it. Each set is a
   * namespace: requests of different sets never pair, whatever their names. */
  int process_set;
} detcoll_request_desc_t;
DETCOLL_API detcoll_status_t detcoll_enqueue(const detcoll_request_desc_t* request,
                                             detcoll_handle_t* handle);

/* Process sets (Horovod's): requests among some of the ranks, on a communicator of their own,
 * negotiated with the others so that sets which share ranks never deadlock. Adding and removing
 * are collective: every rank (members or not) makes the same calls in the same order, from the
 * thread that called detcoll_init, with the same ranks (any order; no duplicates); ranks that
 * disagree all get DETCOLL_ERR_MISMATCH. *id receives the set's id (1, 2, ...). A set's requests
 * must have completed before it is removed. Need the fusion engine (MPI_THREAD_MULTIPLE). */
DETCOLL_API detcoll_status_t detcoll_process_set_add(const int* ranks, int nranks, int* id);
DETCOLL_API detcoll_status_t detcoll_process_set_remove(int id);
/* This rank's rank in the set, or -1 when it is not a member; the set's size; both -1 when no set
 * has that id (0: the world). */
DETCOLL_API int detcoll_process_set_rank(int id);
DETCOLL_API int detcoll_process_set_size(int id);

/* Horovod's join, for ranks that ran out of data before the others: blocks until every rank has
 * joined. Meanwhile the fusion engine keeps answering the others' allreduces (of process set 0)
 * with zeros from this rank, so that their averages still divide by the world size, as in
 * Horovod; their broadcasts, allgathers, reduce-scatters and alltoalls fail at once on every rank
 * that made them, naming the ranks that joined, without waiting for the other ranks to make them.
 * *last_rank (may be NULL) receives the rank that joined last. */
DETCOLL_API detcoll_status_t detcoll_join(int* last_rank);

/* *done = 1 once the request has completed (successfully or not); the handle stays valid. */
DETCOLL_API detcoll_status_t detcoll_poll(detcoll_handle_t handle, int* done);
/* Blocks until the request completes, returns its status and releases the handle. */
DETCOLL_API detcoll_status_t detcoll_wait(detcoll_handle_t handle);

/* ---- Reproducible randomness: counter-based streams addressed by keys (README "Seeds") ----
 *
 * A key (128 bits) names a stream; element i of a stream is a pure function of (key, i), the same
 * bits on every rank, on the CPU and the GPU, however a range is split. Keys come from the root
 * seed and are derived by domain and path (step, sample index, op id, ...), not drawn in
 * sequence, so a sample's randomness does not depend on which rank or worker processes it. */

/* Philox4x32-10 (Random123): out = the block of counter ctr under key. Needs no init. */
DETCOLL_API void detcoll_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                       uint32_t out[4]);

typedef struct {
  uint32_t words[4]; /* 0-1: the Philox key; 2-3: the high half of the Philox counter */
} detcoll_rng_key_t;

/* The root seed. detcoll_init takes DETCOLL_SEED (which must then be the same on every rank) or
 * draws one on rank 0, and broadcasts it; detcoll_rng_seed sets another and keeps the counters
 * (collective: every rank must pass the same seed, else DETCOLL_ERR_MISMATCH on every rank and
 * nothing changes). */
DETCOLL_API detcoll_status_t detcoll_rng_seed(uint64_t seed);
DETCOLL_API detcoll_status_t detcoll_rng_get_seed(uint64_t* seed);
/* The root key of the agreed seed, = detcoll_rng_key_from_seed(seed). */
DETCOLL_API detcoll_status_t detcoll_rng_root_key(detcoll_rng_key_t* key);

/* Keys, pure functions (no init needed): the root key of a seed; the child of `parent` for a
 * domain (a NUL-terminated name such as "dropout") and a path of path_len integers; the 128-bit
 * stable hash of `length` bytes. */
DETCOLL_API detcoll_status_t detcoll_rng_key_from_seed(uint64_t seed, detcoll_rng_key_t* key);
DETCOLL_API detcoll_status_t detcoll_rng_derive(const detcoll_rng_key_t* parent, const char* domain,
                                                const uint64_t* path, size_t path_len,
                                                detcoll_rng_key_t* child);
DETCOLL_API detcoll_status_t detcoll_rng_name_hash(const void* bytes, size_t length,
                                                   detcoll_rng_key_t* hash);

/* The optional key check: detcoll_rng_derive_checked derives like detcoll_rng_derive and fails
 * with DETCOLL_ERR_INVALID_ARGUMENT, naming both purposes, when the key was already derived in
 * this step for another purpose. detcoll_rng_begin_step starts a step (forgets its keys). Local
 * to the process; needs no init. */
DETCOLL_API detcoll_status_t detcoll_rng_begin_step(uint64_t step);
DETCOLL_API detcoll_status_t detcoll_rng_derive_checked(const detcoll_rng_key_t* parent,
                                                        const char* domain, const uint64_t* path,
                                                        size_t path_len, const char* purpose,
                                                        detcoll_rng_key_t* child);

/* Fills: out[j] = element (offset + j) of the key's stream, j < count (offset + count below
 * 2^64). Uniform in [0, 1) and normal (Box-Muller) fill float32 or float64; bernoulli writes 0 or
 * 1 (1 with probability ceil(p 2^32) / 2^32) in any dtype; randint fills int32 (n <= 2^31) or
 * int64 (n <= 2^63) with values in [0, n), no modulo bias, elements below 2^48. out must be
 * aligned to the dtype; normal values beyond its range are +-inf. The formulas are in the
 * README. In a CUDA build, device memory is filled on the device (same bits): on the calling
 * thread's stream (detcoll_set_cuda_stream) without waiting, or, with none set, on the legacy
 * default stream before the call returns. Need no init. */
DETCOLL_API detcoll_status_t detcoll_rng_uniform(const detcoll_rng_key_t* key, uint64_t offset,
                                                 void* out, size_t count, detcoll_dtype_t dtype);
DETCOLL_API detcoll_status_t detcoll_rng_normal(const detcoll_rng_key_t* key, uint64_t offset,
                                                void* out, size_t count, detcoll_dtype_t dtype,
                                                double mean, double stddev);
DETCOLL_API detcoll_status_t detcoll_rng_bernoulli(const detcoll_rng_key_t* key, uint64_t offset,
                                                   void* out, size_t count, detcoll_dtype_t dtype,
                                                   double p);
DETCOLL_API detcoll_status_t detcoll_rng_randint(const detcoll_rng_key_t* key, uint64_t offset,
                                                 void* out, size_t count, detcoll_dtype_t dtype,
                                                 uint64_t n);

/* The checkpointable state: the root seed and named counters (a counter never set is 0). _next
 * returns the counter and advances it by one. _save writes the state into buf (size bytes) and
 * sets *needed to its length; a buf too small (or NULL) gets DETCOLL_ERR_INVALID_ARGUMENT with
 * *needed set, so a first call may ask for the size. _restore is collective: every rank must
 * restore the same state (else DETCOLL_ERR_MISMATCH everywhere and nothing changes); a corrupt
 * buffer on any rank fails every rank. Need init. */
DETCOLL_API detcoll_status_t detcoll_rng_counter_get(const char* name, uint64_t* value);
DETCOLL_API detcoll_status_t detcoll_rng_counter_set(const char* name, uint64_t value);
DETCOLL_API detcoll_status_t detcoll_rng_counter_next(const char* name, uint64_t* value);
DETCOLL_API detcoll_status_t detcoll_rng_state_save(void* buf, size_t size, size_t* needed);
DETCOLL_API detcoll_status_t detcoll_rng_state_restore(const void* buf, size_t size);

/* The deterministic ops are declared in detcoll_ops.h, which this header includes. */

/* Debugging (README, "Finding why two runs differ"). The fingerprint by which traces and
 * detcoll.debug compare buffers across runs and ranks: xxHash's XXH3 64-bit hash of the `bytes`
 * bytes at data (seed 0), the same on every machine. Host memory; needs no init. */
DETCOLL_API detcoll_status_t detcoll_hash(const void* data, size_t bytes, uint64_t* hash);

#ifdef __cplusplus
}
#endif

#include "detcoll_ops.h" /* the deterministic ops, which use the types above */

#endif /* DETCOLL_H_ */
