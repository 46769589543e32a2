"""SyncBatchNorm: batch normalization with statistics over every rank's batch,
so N ranks with batch b normalize like one process with batch N*b. Runs on CPU
tensors (PyTorch's own SyncBatchNorm needs a GPU)."""
import itertools

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hvdlite.common.ops import ReduceOp
from hvdlite.common.process_sets import global_process_set
from hvdlite.torch.mpi_ops import allgather, allreduce

# Modules are numbered in construction order, the same on every rank, to give
# their collectives names that stay the same from step to step (so the
# response cache applies).
_instances = itertools.count()


def _channel_view(stat, ndim):
    return stat.view([1, -1] + [1] * (ndim - 2))


class _SyncBatchNormFunction(torch.autograd.Function):
    """Forward: one allgather of each rank's (count, mean, variance) per
    channel, combined exactly (Chan et al.), so ranks may have different batch
    sizes. Backward: one allreduce of the two per-channel sums the input
    gradient needs."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, name,
                process_set):
        dtype = torch.promote_types(input.dtype, torch.float32)
        x = input.to(dtype)
        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        count = input.numel() // channels if channels else 0
        if count:
            local_var, local_mean = torch.var_mean(x, dim=dims, correction=0)
        else:  # an empty batch on this rank still takes part in the collective
            local_mean = local_var = x.new_zeros(channels)
        local = torch.cat([x.new_tensor([count]), local_mean, local_var]).unsqueeze(0)
        gathered = allgather(local, name=f"{name}.stats", process_set=process_set)
        counts, means, variances = gathered[:, :1], gathered[:, 1:channels + 1], gathered[:, channels + 1:]
        total = float(counts.sum())
        if total == 0:
            raise ValueError(f"SyncBatchNorm ({name}): every rank's batch is empty")
        mean = (counts * means).sum(0) / total
        var = (counts * (variances + (means - mean) ** 2)).sum(0) / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            unbiased = var * (total / max(total - 1, 1))
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        x_hat = (x - _channel_view(mean, x.dim())) * _channel_view(invstd, x.dim())
        out = x_hat
        if weight is not None:
            out = out * _channel_view(weight.to(dtype), x.dim())
        if bias is not None:
            out = out + _channel_view(bias.to(dtype), x.dim())
        ctx.save_for_backward(x_hat, invstd, weight)
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.total, ctx.name, ctx.process_set = total, name, process_set
        ctx.input_dtype = input.dtype
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        x_hat, invstd, weight = ctx.saved_tensors
        dy = grad_output.to(x_hat.dtype)
        dims = [0] + list(range(2, dy.dim()))
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * x_hat).sum(dims)
        # Every rank runs this allreduce, whether or not its input needs a
        # gradient, since the others wait for it.
        sums = allreduce(torch.cat([sum_dy, sum_dy_xhat]), op=ReduceOp.Sum,
                         name=f"{ctx.name}.grad", process_set=ctx.process_set)
        channels = sum_dy.numel()
        mean_dy = sums[:channels] / ctx.total
        mean_dy_xhat = sums[channels:] / ctx.total
        scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
        grad_input = (dy - _channel_view(mean_dy, dy.dim())
                      - x_hat * _channel_view(mean_dy_xhat, dy.dim())) * _channel_view(scale, dy.dim())
        # Local sums, as for any other parameter: DistributedOptimizer averages them.
        grad_weight = None if weight is None else sum_dy_xhat.to(weight.dtype)
        grad_bias = None if ctx.bias_dtype is None else sum_dy.to(ctx.bias_dtype)
        return (grad_input.to(ctx.input_dtype), grad_weight, grad_bias,
                None, None, None, None, None, None)


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d (input (N, C, ...)) whose training
    statistics cover the batches of every rank of process_set. In eval mode it
    uses the running statistics, like BatchNorm; they are updated identically on
    every rank.

    Args:
        num_features (int): C, the number of features (channels).
        eps (float): added to the variance, as in BatchNorm.
        momentum (float | None): for the running statistics; None: a cumulative average.
        affine (bool): learn a weight and a bias.
        track_running_stats (bool): keep running statistics for evaluation.
        process_set (ProcessSet): the ranks whose batches make the statistics (default: all).
        device (torch.device | None): where the parameters and buffers are created.
        dtype (torch.dtype | None): their dtype.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set, device=None,
                 dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self.process_set = process_set
        self._collective_name = f"SyncBatchNorm.{next(_instances)}"

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        """Normalizes `input` with the mean and variance of every rank's batch (in training).

        Args:
            input (torch.Tensor): at least 2-D, features on dimension 1.

        Returns:
            torch.Tensor: the normalized input; in evaluation, BatchNorm's own result from the
            running statistics.

        Raises:
            ValueError: for an input of fewer than 2 dimensions.
        """
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        tracked = not self.training or self.track_running_stats
        running_mean = self.running_mean if tracked else None
        running_var = self.running_var if tracked else None
        if not (use_batch_stats and self.training and self.process_set.included()
                and self.process_set.size() > 1):
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                use_batch_stats, factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean,
                                            running_var, self.eps, factor, self._collective_name,
                                            self.process_set)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=global_process_set):
        """Replaces every BatchNorm*d in `module` by a SyncBatchNorm that shares its
        parameters and running statistics.

        Args:
            module (torch.nn.Module): the model (or a single BatchNorm layer); its children
                are replaced in place.
            process_set (ProcessSet): given to every SyncBatchNorm (default: all ranks).

        Returns:
            torch.nn.Module: `module`, or the new SyncBatchNorm when `module` itself is a BatchNorm.

        Example:
            ```python
            model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
            ```
        """
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_set)
            if module.affine:
                converted.weight = module.weight
                converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.train(module.training)
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        return converted
