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

/* Deterministic ops: the scatter family of the framework determinism guides, whose GPU kernels
 * use atomicAdd. Each destination's sources are reduced in increasing source position, in float
 * (float32, float16, bfloat16), double (float64) or int64 (integers), rounded once: the same bits
 * for any number of threads (README, "Deterministic ops"). Host memory, contiguous row-major
 * tensors; shapes are int64 arrays of ndim entries. A failure (an index out of range, shapes
 * that do not fit, a dtype the op does not take) leaves the outputs untouched. Need no init.
 * detcoll_ops_set_threads(0) (the default) uses every core. */
DETCOLL_API detcoll_status_t detcoll_ops_set_threads(int threads);
/* torch.Tensor.scatter_add_(dim, index, src), in place on self; all three have ndim dims. */
DETCOLL_API detcoll_status_t detcoll_scatter_add(void* self, const int64_t* self_shape, int ndim,
                                                 detcoll_dtype_t dtype, int dim,
                                                 const int64_t* index, const int64_t* index_shape,
                                                 const void* src, const int64_t* src_shape);
/* torch.Tensor.index_add_(dim, index, source, alpha=alpha), in place on self. */
DETCOLL_API detcoll_status_t detcoll_index_add(void* self, const int64_t* self_shape, int ndim,
                                               detcoll_dtype_t dtype, int dim, const int64_t* index,
                                               int64_t index_count, const void* source,
                                               const int64_t* source_shape, double alpha);
/* tf.math.unsorted_segment_sum (mean != 0: _mean): out is [segments] + data_shape[id_dims:];
 * segment_ids has the shape data_shape[:id_dims]; negative ids are dropped. */
DETCOLL_API detcoll_status_t detcoll_unsorted_segment_reduce(
    void* out, int64_t segments, detcoll_dtype_t dtype, const void* data, const int64_t* data_shape,
    int ndim, const int64_t* segment_ids, int id_dims, int mean);
/* The backward of torch.nn.functional.embedding: grad_weight [num_weights, dim] from grad_output
 * [count, dim] and indices [count]; padding_idx < 0: none. */
DETCOLL_API detcoll_status_t detcoll_embedding_backward(void* grad_weight, int64_t num_weights,
                                                        detcoll_dtype_t dtype,
                                                        const void* grad_output, int64_t count,
                                                        int64_t dim, const int64_t* indices,
                                                        int64_t padding_idx,
                                                        int scale_grad_by_freq);
/* The backward of torch.nn.functional.embedding_bag, mode sum (mean = 0) or mean: grad_output
 * [bags, dim], indices [count], offsets [bags] (include_last_offset false), per_sample_weights
 * [count] or NULL (sum mode only). */
DETCOLL_API detcoll_status_t detcoll_embedding_bag_backward(
    void* grad_weight, int64_t num_weights, detcoll_dtype_t dtype, const void* grad_output,
    int64_t bags, int64_t dim, const int64_t* indices, int64_t count, const int64_t* offsets,
    int mean, const void* per_sample_weights, int64_t padding_idx);
/* torch.bincount(input, weights, minlength): *out_length = max(minlength, max(input) + 1); out
 * NULL asks for it. weights NULL counts (dtype int64). */
DETCOLL_API detcoll_status_t detcoll_bincount(void* out, int64_t* out_length, detcoll_dtype_t dtype,
                                              const int64_t* input, int64_t count,
                                              const void* weights, int64_t minlength);
/* The adjoint of a weighted gather, plane by plane: the backward of padding, pooling,
 * interpolation and grid sampling, whose forward reads input position destination[s] into output
 * position rows[s] with weight weights[s]. out [planes, out_inner] (overwritten) and values
 * [planes, values_inner], floating point; out[p][d] = the sum, over the sources s with
 * destination[s] = d in increasing s, of weights[s] * values[p][rows[s]] (rows NULL: s; weights
 * NULL: 1), in the accumulation type, rounded once. weights are in the accumulation type: float
 * for float32, float16 and bfloat16, double for float64. */
DETCOLL_API detcoll_status_t detcoll_weighted_scatter(void* out, int64_t planes, int64_t out_inner,
                                                      detcoll_dtype_t dtype,
                                                      const int64_t* destination, int64_t n,
                                                      const void* values, int64_t values_inner,
                                                      const int64_t* rows, const void* weights);
/* The backward of reflection (reflect != 0) or replication padding, 1 to 3 spatial dimensions:
 * grad_input [planes, *input_spatial] from grad_output [planes, *padded], padding 2 values per
 * dimension in torch's order (last dimension first: left, right, top, bottom, front, back;
 * negative values crop). Each output position's gradient is added into the position it copies,
 * output positions in row-major order (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_pad_backward(void* grad_input, const void* grad_output,
                                                  detcoll_dtype_t dtype, int64_t planes,
                                                  const int64_t* input_spatial, int spatial,
                                                  const int64_t* padding, int reflect);
/* The backward of linear (spatial 1) and trilinear (spatial 3) upsampling (bilinear:
 * detcoll_upsample_bilinear2d_backward): grad_input [planes, *input_spatial] from grad_output
 * [planes, *output_spatial]; scales per axis as the forward was given them (<= 0 or NULL: none).
 * Taps in output order, weights as PyTorch forms them (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_upsample_linear_backward(
    void* grad_input, const void* grad_output, detcoll_dtype_t dtype, int64_t planes,
    const int64_t* input_spatial, const int64_t* output_spatial, int spatial, int align_corners,
    const double* scales);
/* The backward of average pooling, 2 or 3 spatial dimensions (kernel, stride and padding one per
 * dimension; divisor_override 0: none), and of adaptive average pooling: grad_input [planes,
 * *input_spatial] from grad_output [planes, *pooled]. Each output's gradient divided as torch
 * divides it, added into its window's inputs in output order (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_avg_pool_backward(
    void* grad_input, const void* grad_output, detcoll_dtype_t dtype, int64_t planes,
    const int64_t* input_spatial, int spatial, const int64_t* kernel, const int64_t* stride,
    const int64_t* padding, int ceil_mode, int count_include_pad, int64_t divisor_override);
DETCOLL_API detcoll_status_t detcoll_adaptive_avg_pool_backward(
    void* grad_input, const void* grad_output, detcoll_dtype_t dtype, int64_t planes,
    const int64_t* input_spatial, const int64_t* output_spatial, int spatial);
/* The backward of max pooling through its indices (3-D max pooling, adaptive max pooling):
 * grad_output and indices [planes, outputs], each index a position among a plane's `inner`
 * inputs; grad_input [planes, inner] gets each output's gradient at its index, output positions
 * in order, from zero. */
DETCOLL_API detcoll_status_t detcoll_max_pool_backward(void* grad_input, const void* grad_output,
                                                       const int64_t* indices,
                                                       detcoll_dtype_t dtype, int64_t planes,
                                                       int64_t inner, int64_t outputs);
/* The backward of bicubic upsampling (2-D): grad_input [planes, in_h, in_w] from grad_output
 * [planes, out_h, out_w]; scales as the forward was given them (<= 0: none). Each output's 16
 * taps' products (gradient x y weight x x weight, in torch's arithmetic) are added in output
 * order, then tap order (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_upsample_bicubic2d_backward(
    void* grad_input, const void* grad_output, detcoll_dtype_t dtype, int64_t planes, int64_t in_h,
    int64_t in_w, int64_t out_h, int64_t out_w, int align_corners, double scale_h, double scale_w);
/* The backward of grid_sample, 2 or 3 spatial dimensions: grad_input [batch, channels,
 * *input_spatial] and grad_grid [batch, positions, spatial] (either NULL: not wanted) from
 * grad_output [batch, channels, positions], input and grid [batch, positions, spatial] (x first).
 * interpolation_mode 0 bilinear, 1 nearest, 2 bicubic (2-D); padding_mode 0 zeros, 1 border,
 * 2 reflection. Each tap's weight x gradient added in position, then tap order; the grid's
 * gradient per position, channels then taps in order (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_grid_sampler_backward(
    void* grad_input, void* grad_grid, const void* grad_output, const void* input, const void* grid,
    detcoll_dtype_t dtype, int64_t batch, int64_t channels, const int64_t* input_spatial,
    int spatial, int64_t positions, int interpolation_mode, int padding_mode, int align_corners);
/* The backward of ctc_loss: grad_log_probs [steps, batch, classes] from grad [batch],
 * log_probs [steps, batch, classes], targets [batch, target_stride] (padded; int64),
 * neg_log_likelihood [batch] and log_alpha [batch, steps, alpha_width], all but targets in dtype;
 * input_lengths and target_lengths are host arrays [batch]. log beta and the per-class sums in
 * float64 in a fixed order (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_ctc_loss_backward(
    void* grad_log_probs, const void* grad, const void* log_probs, const int64_t* targets,
    int64_t target_stride, const int64_t* input_lengths, const int64_t* target_lengths,
    const void* neg_log_likelihood, const void* log_alpha, int64_t alpha_width,
    detcoll_dtype_t dtype, int64_t steps, int64_t batch, int64_t classes, int64_t blank,
    int zero_infinity);
/* F.nll_loss with a fixed summation order: input [batch, classes, inner] log-probabilities,
 * target [batch, inner] (int64), weight [classes] or NULL; reduction 0 none (output [batch,
 * inner]), 1 mean, 2 sum (output a scalar). total_weight (a scalar; NULL allowed for none) gets
 * the fixed-tree sum of the kept samples' weights (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_nll_loss(void* output, void* total_weight, const void* input,
                                              const int64_t* target, const void* weight,
                                              detcoll_dtype_t dtype, int64_t batch, int64_t classes,
                                              int64_t inner, int64_t ignore_index, int reduction);
/* torch.kthvalue and torch.median along a dimension with indices that do not depend on the
 * kernel: input [outer, length, inner], values and indices [outer, inner]. The order is the stable
 * ascending one (-0 as +0, NaN last, ties by position); kthvalue its k-th element (1-based),
 * median the lower median, or NaN at a slice's first NaN (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_kthvalue(void* values, int64_t* indices, const void* input,
                                              detcoll_dtype_t dtype, int64_t outer, int64_t length,
                                              int64_t inner, int64_t k);
DETCOLL_API detcoll_status_t detcoll_median(void* values, int64_t* indices, const void* input,
                                            detcoll_dtype_t dtype, int64_t outer, int64_t length,
                                            int64_t inner);
/* Writes through indices, every dtype, bits copied. write_last: row destination[s] of out [rows,
 * width] becomes row s of values [n, width] for s = 0 .. n - 1, so the last s stays where
 * destinations repeat; rows none names are untouched (index_put_ and put_ without accumulate).
 * max_unpool (2-D, 3-D): out [planes, outputs] zeroed, then input [planes, inputs] written at
 * each value's index within its plane, the last where a plane's indices repeat. */
DETCOLL_API detcoll_status_t detcoll_write_last(void* out, int64_t rows, int64_t width,
                                                detcoll_dtype_t dtype, const int64_t* destination,
                                                int64_t n, const void* values);
DETCOLL_API detcoll_status_t detcoll_max_unpool(void* out, const void* input,
                                                const int64_t* indices, detcoll_dtype_t dtype,
                                                int64_t planes, int64_t inputs, int64_t outputs);
/* embedding_bag's weight gradient in mode max: grad_weight [num_weights, dim] from grad_output
 * [bags, dim]; element (b, c) adds into row maximum_indices[b][c], column c, where bag_size[b] > 0
 * and the row is neither negative nor padding_idx (< 0: none); in row-major order. */
DETCOLL_API detcoll_status_t detcoll_embedding_bag_max_backward(
    void* grad_weight, int64_t num_weights, detcoll_dtype_t dtype, const void* grad_output,
    int64_t bags, int64_t dim, const int64_t* maximum_indices, const int64_t* bag_size,
    int64_t padding_idx);
/* tf.sparse.sparse_dense_matmul: out [out_rows, columns] = A · dense for A's nnz entries
 * (rows[k], cols[k], values[k]) and dense [dense_rows, columns]; each output row adds
 * values[k] x dense[cols[k]] over its entries in increasing k, from zero in the accumulation type,
 * rounded once. Its gradients: the dense operand's is this call with rows and cols exchanged. */
DETCOLL_API detcoll_status_t detcoll_sparse_dense_matmul(void* out, int64_t out_rows,
                                                         detcoll_dtype_t dtype, const int64_t* rows,
                                                         const int64_t* cols, const void* values,
                                                         int64_t nnz, const void* dense,
                                                         int64_t dense_rows, int64_t columns);
/* torch.histc(input, bins, min, max) of n values into out [bins], both of dtype (floating
 * point): min == max takes the input's range. Each value's bin in torch 2's formula, counted
 * exactly (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_histc(void* out, int64_t bins, double min, double max,
                                           const void* input, int64_t n, detcoll_dtype_t dtype);

/* Sums with a fixed tree (README, "Deterministic ops"): out has in's shape without the axes
 * (naxes of them, negative from the end). bias_add_grad sums every axis but the channel axis:
 * axis 1 (channels_first, NCHW) or the last (NHWC). */
DETCOLL_API detcoll_status_t detcoll_sum_over_axes(const void* in, const int64_t* shape, int ndim,
                                                   detcoll_dtype_t dtype, const int* axes,
                                                   int naxes, void* out);
DETCOLL_API detcoll_status_t detcoll_bias_add_grad(const void* grad, const int64_t* shape, int ndim,
                                                   detcoll_dtype_t dtype, int channels_first,
                                                   void* out);

/* Gathers (README, "Deterministic ops"): each input pixel's gradient is summed from the outputs
 * that read it, in PyTorch's CPU order. Floating dtypes; tensors are [planes, height, width]
 * with N x C folded into planes. */
/* The backward of F.interpolate(mode='bilinear'): grad_input [planes, in_h, in_w] from
 * grad_output [planes, out_h, out_w]; scale_h, scale_w are the scale factors the forward was
 * given (<= 0: none, the sizes decide). */
DETCOLL_API detcoll_status_t detcoll_upsample_bilinear2d_backward(
    void* grad_input, const void* grad_output, detcoll_dtype_t dtype, int64_t planes, int64_t in_h,
    int64_t in_w, int64_t out_h, int64_t out_w, int align_corners, double scale_h, double scale_w);
/* F.max_pool2d's parameters: kernel, stride, padding and dilation as {height, width}. */
typedef struct detcoll_pool2d {
  int64_t kernel[2];
  int64_t stride[2];
  int64_t padding[2];
  int64_t dilation[2];
  int ceil_mode;
} detcoll_pool2d_t;
/* The output size of max_pool2d over in_h x in_w, with the parameters checked as PyTorch does. */
DETCOLL_API detcoll_status_t detcoll_max_pool2d_output_size(const detcoll_pool2d_t* pool,
                                                            int64_t in_h, int64_t in_w,
                                                            int64_t* out_h, int64_t* out_w);
/* F.max_pool2d(..., return_indices=True): out and indices are [planes, out_h, out_w]; ties go to
 * the first position in the window, a NaN wins, as in PyTorch. */
DETCOLL_API detcoll_status_t detcoll_max_pool2d(void* out, int64_t* indices, const void* in,
                                                detcoll_dtype_t dtype, int64_t planes, int64_t in_h,
                                                int64_t in_w, const detcoll_pool2d_t* pool);
/* Its backward; every index must name a position of its own window. */
DETCOLL_API detcoll_status_t detcoll_max_pool2d_backward(void* grad_input, const void* grad_output,
                                                         const int64_t* indices,
                                                         detcoll_dtype_t dtype, int64_t planes,
                                                         int64_t in_h, int64_t in_w,
                                                         const detcoll_pool2d_t* pool);

/* Debugging (README, "Finding why two runs differ"). The fingerprint by which traces and
 * detcoll.debug compare buffers across runs and ranks: xxHash's XXH3 64-bit hash of the `bytes`
 * bytes at data (seed 0), the same on every machine. Host memory; needs no init. */
DETCOLL_API detcoll_status_t detcoll_hash(const void* data, size_t bytes, uint64_t* hash);

#ifdef __cplusplus
}
#endif

#endif /* DETCOLL_H_ */
