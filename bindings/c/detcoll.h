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

/* Thread-local text of the last failure in this thread; "" if none. */
DETCOLL_API const char* detcoll_last_error(void);

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
/* *done = 1 once the request has completed (successfully or not); the handle stays valid. */
DETCOLL_API detcoll_status_t detcoll_poll(detcoll_handle_t handle, int* done);
/* Blocks until the request completes, returns its status and releases the handle. */
DETCOLL_API detcoll_status_t detcoll_wait(detcoll_handle_t handle);

#ifdef __cplusplus
}
#endif

#endif /* DETCOLL_H_ */
