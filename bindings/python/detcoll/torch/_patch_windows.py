"""patch()'s wrappers for the window, resampling and indexing kernels (_adjoints.py,
_ctc.py, _grid_sample.py, _indexing.py): padding, pooling, interpolation, grid_sample and
ctc_loss backward, max_unpool, index_put_, put_, histc and embedding_bag's weight gradient, with the schemas they
were written for (_patch.py)."""

import torch

import detcoll
from detcoll.torch import _adjoints, _ctc, _grid_sample, _indexing
from detcoll.torch._patch_widen import _NARROW_INTEGERS, _index, _no_overlap, _widened


def _pad_entries():
    """reflection_pad{1,2,3}d_backward and replication_pad{1,2,3}d_backward."""
    entries = {}
    for mode, fn in (("reflection", _adjoints.reflection_pad_backward),
                     ("replication", _adjoints.replication_pad_backward)):
        for d in (1, 2, 3):
            name = f"{mode}_pad{d}d_backward"
            entries[name] = (
                f"aten::{name}(Tensor grad_output, Tensor self, int[{2 * d}] padding) -> Tensor",
                lambda grad_output, self, padding, fn=fn: fn(grad_output, self.shape, padding))
    return entries


def _avg_pool_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, divisor_override):
    return _adjoints.avg_pool_backward(grad_output, self.shape, kernel_size, stride, padding,
                                       ceil_mode, count_include_pad, divisor_override)


def _pool_entries():
    """avg_pool{2,3}d_backward, _adaptive_avg_pool{2,3}d_backward,
    adaptive_max_pool{2,3}d_backward, max_pool3d_with_indices_backward, max_unpool{2,3}d."""
    entries = {}
    for d in (2, 3):
        entries[f"avg_pool{d}d_backward"] = (
            f"aten::avg_pool{d}d_backward(Tensor grad_output, Tensor self, int[{d}] kernel_size, "
            f"int[{d}] stride, int[{d}] padding, bool ceil_mode, bool count_include_pad, "
            "int? divisor_override) -> Tensor",
            _avg_pool_backward)
        entries[f"_adaptive_avg_pool{d}d_backward"] = (
            f"aten::_adaptive_avg_pool{d}d_backward(Tensor grad_output, Tensor self) -> Tensor",
            lambda grad_output, self, d=d: _adjoints.adaptive_avg_pool_backward(
                grad_output, self.shape, d))
        entries[f"adaptive_max_pool{d}d_backward"] = (
            f"aten::adaptive_max_pool{d}d_backward(Tensor grad_output, Tensor self, "
            "Tensor indices) -> Tensor",
            lambda grad_output, self, indices, d=d: _adjoints.max_pool_backward(
                grad_output, self.shape, indices, d))
    entries["max_pool3d_with_indices_backward"] = (
        "aten::max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, "
        "int[3] kernel_size, int[3] stride, int[3] padding, int[3] dilation, bool ceil_mode, "
        "Tensor indices) -> Tensor",
        lambda grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices:
            _adjoints.max_pool_backward(grad_output, self.shape, indices, 3))
    entries["max_unpool2d"] = (
        "aten::max_unpool2d(Tensor self, Tensor indices, int[2] output_size) -> Tensor",
        lambda self, indices, output_size: _adjoints.max_unpool(self, indices, output_size))
    entries["max_unpool3d"] = (
        "aten::max_unpool3d(Tensor self, Tensor indices, int[3] output_size, int[3] stride, "
        "int[3] padding) -> Tensor",
        lambda self, indices, output_size, stride, padding: _adjoints.max_unpool(
            self, indices, output_size))
    return entries


def _interpolate_entries():
    """upsample_linear1d_backward, upsample_bicubic2d_backward, upsample_trilinear3d_backward and
    their .vec overloads."""
    entries = {}
    for name, d, mode, axes in (
            ("upsample_linear1d_backward", 1, "linear", ("scales",)),
            ("upsample_bicubic2d_backward", 2, "bicubic", ("scales_h", "scales_w")),
            ("upsample_trilinear3d_backward", 3, "linear",
             ("scales_d", "scales_h", "scales_w"))):
        scales = ", ".join(f"float? {a}=None" for a in axes)

        def kernel(grad_output, output_size, input_size, align_corners, *scales, mode=mode):
            return _adjoints.upsample_backward(grad_output, output_size, input_size,
                                               align_corners, scales, mode)

        def vec(grad_output, output_size, input_size, align_corners, scale_factors, mode=mode,
                name=name):
            if (output_size is None) == (scale_factors is None):
                raise detcoll.InvalidArgumentError(
                    f"{name}: give exactly one of output_size and scale_factors")
            if output_size is None:
                output_size = [int(float(input_size[2 + i]) * f)
                               for i, f in enumerate(scale_factors)]
            return _adjoints.upsample_backward(grad_output, output_size, input_size,
                                               align_corners, scale_factors, mode)

        entries[name] = (f"aten::{name}(Tensor grad_output, int[{d}] output_size, "
                         f"int[{d + 2}] input_size, bool align_corners, {scales}) -> Tensor",
                         kernel)
        entries[f"{name}.vec"] = (f"aten::{name}.vec(Tensor grad_output, int[]? output_size, "
                                  "int[] input_size, bool align_corners, float[]? scale_factors) "
                                  "-> Tensor", vec)
    return entries


def _index_put_impl_(self, indices, values, accumulate=False, unsafe=False):
    if not accumulate and _indexing._masked_fill(self, indices, values):
        return self  # torch's own shortcut, before its checks, for every dtype
    _widened("index_put_", self, values)  # refuses complex
    for index in indices:
        if index is not None and index.dtype not in (torch.int64, torch.bool, torch.uint8):
            raise detcoll.InvalidArgumentError(  # as torch refuses them
                f"index_put_: an index has dtype {index.dtype}; tensors used as indices must be "
                "long, byte or bool tensors")
    _no_overlap("index_put_", self, values, *[i for i in indices if i is not None])
    if self.dtype in _NARROW_INTEGERS:
        wide = self.long()
        _indexing._index_put(wide, list(indices), values.long(), accumulate)
        return self.copy_(wide)
    return _indexing._index_put(self, list(indices), values, accumulate)


def _put_(self, index, source, accumulate=False):
    if index.dtype != torch.int64:  # as torch refuses it
        raise detcoll.InvalidArgumentError(
            f"put_: index has dtype {index.dtype}; torch's put_ takes a long tensor")
    _widened("put_", self, source)
    _no_overlap("put_", self, index, source)
    if self.dtype in _NARROW_INTEGERS:
        wide = self.long()
        _indexing._put(wide, _index(index), source.long(), accumulate)
        return self.copy_(wide)
    return _indexing._put(self, _index(index), source, accumulate)


def _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                  num_weights, scale_grad_by_freq, mode, per_sample_weights=None,
                                  padding_idx=-1):
    return _indexing.embedding_bag_dense_backward(
        grad, _index(indices), _index(offset2bag), _index(bag_size), _index(maximum_indices),
        num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx)


def entries():
    """PATCHABLE's entries for these kernels."""
    return {
        **_pad_entries(),
        **_pool_entries(),
        **_interpolate_entries(),
        "_index_put_impl_": (
            "aten::_index_put_impl_(Tensor(a!) self, Tensor?[] indices, Tensor values, "
            "bool accumulate=False, bool unsafe=False) -> Tensor(a!)",
            _index_put_impl_),
        "put_": (
            "aten::put_(Tensor(a!) self, Tensor index, Tensor source, bool accumulate=False) -> "
            "Tensor(a!)",
            _put_),
        "histc": (
            "aten::histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor",
            _indexing.histc),
        **{f"grid_sampler_{d}d_backward": (
            f"aten::grid_sampler_{d}d_backward(Tensor grad_output, Tensor input, Tensor grid, "
            "int interpolation_mode, int padding_mode, bool align_corners, bool[2] output_mask) "
            "-> (Tensor, Tensor)",
            _grid_sample.grid_sampler_backward) for d in (2, 3)},
        # cuDNN's sampler (what CUDA runs for bilinear, zeros, align_corners=True, 4-D): its
        # backward gets the same deterministic kernel, with those arguments.
        "cudnn_grid_sampler_backward": (
            "aten::cudnn_grid_sampler_backward(Tensor self, Tensor grid, Tensor grad_output) -> "
            "(Tensor grad_self, Tensor grad_grid)",
            lambda self, grid, grad_output: _grid_sample.grid_sampler_backward(
                grad_output, self, grid, 0, 0, True)),
        "_ctc_loss_backward": (
            "aten::_ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, "
            "int[] input_lengths, int[] target_lengths, Tensor neg_log_likelihood, "
            "Tensor log_alpha, int blank, bool zero_infinity=False) -> Tensor",
            _ctc.ctc_loss_backward),
        "_ctc_loss_backward.Tensor": (
            "aten::_ctc_loss_backward.Tensor(Tensor grad, Tensor log_probs, Tensor targets, "
            "Tensor input_lengths, Tensor target_lengths, Tensor neg_log_likelihood, "
            "Tensor log_alpha, int blank, bool zero_infinity=False) -> Tensor",
            _ctc.ctc_loss_backward),
        "_embedding_bag_dense_backward": (
            "aten::_embedding_bag_dense_backward(Tensor grad, Tensor indices, Tensor offset2bag, "
            "Tensor bag_size, Tensor maximum_indices, int num_weights, bool scale_grad_by_freq, "
            "int mode, Tensor? per_sample_weights, int padding_idx=-1) -> Tensor",
            _embedding_bag_dense_backward),
    }
