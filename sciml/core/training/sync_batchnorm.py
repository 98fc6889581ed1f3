"""Synchronised batch norm for DDP on any device (``torch.nn.SyncBatchNorm`` runs on GPUs only)."""

from __future__ import annotations

import torch
from lightning.pytorch.plugins.layer_sync import LayerSync
from torch import nn


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum over ranks.

    The backward all-reduces the gradient too, since every rank's loss depends on the sum.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        torch.distributed.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        torch.distributed.all_reduce(grad)
        return grad


class _GlooSyncMixin:
    """Forward of a batch norm whose training statistics are all-reduced over the default process group.

    Two passes, differentiable through :class:`_AllReduceSum` (as in ``torch.nn.SyncBatchNorm``, gradients
    flow to every rank's inputs): ``μ = Σx / n`` and ``σ² = Σ(x − μ)² / n`` over the batch (and spatial)
    dimensions of all ranks; running statistics are updated with the unbiased ``σ² n / (n − 1)`` as in
    ``torch.nn.BatchNorm*``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        all_reduce = _AllReduceSum.apply
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        self._check_input_dim(x)
        dims = [0, *range(2, x.dim())]
        shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
        count = all_reduce(x.new_tensor([x.numel() / x.shape[1]]))
        mean = all_reduce(x.sum(dims)) / count
        var = all_reduce(((x - mean.view(shape)) ** 2).sum(dims)) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                factor = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.lerp_(mean.detach(), factor)
                self.running_var.lerp_(var.detach() * count / (count - 1).clamp(min=1), factor)
        y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        return y * self.weight.view(shape) + self.bias.view(shape) if self.affine else y


class GlooSyncBatchNorm(LayerSync):
    """Lightning layer-sync plugin: synchronised batch norm on any device, including CPU with gloo.

    ``apply`` swaps the class of every ``nn.BatchNorm1d/2d/3d`` for a subclass with a synchronised training
    forward (parameters and buffers stay in place, so ``state_dict`` keys are unchanged); ``revert`` swaps
    the original class back.
    """

    _classes: dict[type, type] = {}

    @classmethod
    def _sync_class(cls, base: type) -> type:
        if base not in cls._classes:  # registered in this module so that swapped modules still pickle
            name = f"GlooSync{base.__name__}"
            cls._classes[base] = globals()[name] = type(name, (_GlooSyncMixin, base),
                                                        {"_sciml_base": base, "__module__": __name__})
        return cls._classes[base]

    def apply(self, model: nn.Module) -> nn.Module:
        for module in model.modules():
            if type(module) in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
                module.__class__ = self._sync_class(type(module))
        return model

    def revert(self, model: nn.Module) -> nn.Module:
        for module in model.modules():
            if isinstance(module, _GlooSyncMixin):
                module.__class__ = module._sciml_base
        return model
