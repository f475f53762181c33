/* detcoll's deterministic ops: the C entries of the kernels that replace the framework kernels
 * whose GPU versions add with atomicAdd or race (README, "Deterministic ops"). Included by
 * detcoll.h, whose types they use. */
#ifndef DETCOLL_OPS_H_
#define DETCOLL_OPS_H_

#include "detcoll.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * NULL asks for it, and out must then hold that many elements (there is no capacity argument:
 * ask first). weights NULL counts (dtype int64). On an error *out_length and out are untouched. */
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
/* The backward of nearest upsampling, 1 to 3 spatial dimensions: grad_input [planes,
 * *input_spatial] from grad_output [planes, *output_spatial]; scales as the forward was given
 * them (<= 0 or NULL: none). Each output's gradient into the input torch's nearest_idx names,
 * output positions in order. */
DETCOLL_API detcoll_status_t detcoll_upsample_nearest_backward(
    void* grad_input, const void* grad_output, detcoll_dtype_t dtype, int64_t planes,
    const int64_t* input_spatial, const int64_t* output_spatial, int spatial, const double* scales);
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
/* tf.image.crop_and_resize and its gradients: image [batch, height, width, channels] (NHWC),
 * boxes [num_boxes, 4] as normalized (y1, x1, y2, x2), box_indices [num_boxes] (int64), out and
 * grads [num_boxes, crop_height, crop_width, channels]; nearest != 0 for method "nearest". The
 * backward writes grad_image [batch, height, width, channels] and grad_boxes [num_boxes, 4], either
 * NULL when not wanted; the image's gradient adds every (box, position, corner) in that order
 * (README, "Deterministic ops"). */
DETCOLL_API detcoll_status_t detcoll_crop_and_resize(void* out, const void* image,
                                                     const void* boxes, const int64_t* box_indices,
                                                     detcoll_dtype_t dtype, int64_t batch,
                                                     int64_t height, int64_t width,
                                                     int64_t channels, int64_t num_boxes,
                                                     int64_t crop_height, int64_t crop_width,
                                                     int nearest, double extrapolation_value);
DETCOLL_API detcoll_status_t detcoll_crop_and_resize_backward(
    void* grad_image, void* grad_boxes, const void* grads, const void* image, const void* boxes,
    const int64_t* box_indices, detcoll_dtype_t dtype, int64_t batch, int64_t height, int64_t width,
    int64_t channels, int64_t num_boxes, int64_t crop_height, int64_t crop_width, int nearest);
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

#ifdef __cplusplus
}
#endif

#endif /* DETCOLL_OPS_H_ */
