"""Lightning callback that fits a conformal calibrator (:mod:`sciml.uq`) on the calibration split after training."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from sciml.core import keys
from sciml.core.io.atomic import atomic_write_text
from sciml.core.io.checkpoint import load_lightning_checkpoint
from sciml.uq.groups import build_calibrator, fit_calibrator, loader_structures, structure_groups


@torch.no_grad()
def collect_predictions(module: L.LightningModule, loader) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run ``module.predict_step`` over ``loader``; return ``(mean, sigma, y)``, each of shape ``(n,)``."""
    was_training = module.training
    module.eval()
    empty = torch.empty(0, device=module.device)
    means, sigmas, ys = [empty], [empty], [empty]  # an empty loader (a rank's empty shard) gives (0,) tensors
    for batch in loader:
        batch = batch.to(module.device)
        pred = module.predict_step(batch, 0)
        means.append(pred.mean)
        sigmas.append(pred.sigma if pred.sigma is not None else torch.ones_like(pred.mean))
        ys.append(batch[keys.TARGET])
    module.train(was_training)
    return torch.cat(means), torch.cat(sigmas), torch.cat(ys)


def shard_loader(loader: DataLoader, rank: int, world_size: int) -> DataLoader:
    """The items ``rank, rank + world_size, …`` of ``loader``'s dataset, in a loader with the same batching.

    Unlike ``DistributedSampler`` it never pads: the shards are disjoint and together hold every item once,
    so gathered calibration scores count each calibration point exactly once.
    """
    indices = range(rank, len(loader.dataset), world_size)
    return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=indices, collate_fn=loader.collate_fn,
                      num_workers=loader.num_workers)


def gather_uneven(strategy, tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """All-gather 1-d tensors of equal length ``n_r`` per rank (``n_r`` may differ across ranks).

    Each rank pads to the longest shard, ``strategy.all_gather`` stacks the padded blocks, and the padding
    is cut off with the gathered true lengths; returns tensors of length ``Σ_r n_r`` in rank order.
    """
    stacked = torch.stack(tensors)  # (k, n_local)
    counts = strategy.all_gather(torch.tensor([stacked.shape[1]], device=stacked.device)).reshape(-1)
    padded = torch.nn.functional.pad(stacked, (0, int(counts.max()) - stacked.shape[1]), value=float("nan"))
    blocks = strategy.all_gather(padded)  # (world_size, k, max_n)
    full = torch.cat([blocks[r, :, : int(n)] for r, n in enumerate(counts)], dim=1)
    return tuple(full.unbind(0))


class ConformalCallback(L.Callback):
    """Fit split conformal on the datamodule's ``calib_dataloader()`` once training ends.

    The best checkpoint (by the monitored validation metric) is loaded first, so the calibrator matches
    the weights that will be exported. Under DDP each rank scores a disjoint, unpadded shard of the
    calibration split (:func:`shard_loader`) and the shards are gathered with their true lengths
    (:func:`gather_uneven`), so every rank fits the same calibrator on each calibration point exactly
    once. The result is written by global rank 0 to ``<run_dir>/calibrator.json`` and kept as
    ``self.calibrator`` (not attached to the module, whose ``state_dict`` must keep matching its checkpoints).

    Parameters
    ----------
    run_dir : str
        Folder of the run.
    score : str
        Conformity score (``absolute`` or ``normalized``; ``normalized`` divides by ``Prediction.sigma``).
    alpha : float
        Default miscoverage level stored with the calibrator.
    calibration : dict, optional
        The run config's ``calibration`` block: ``method`` (``split`` default, or ``mondrian``) and
        ``group_by`` (:data:`sciml.uq.groups.GROUP_FUNCTIONS`); group labels are computed per rank from the
        items the module's ``batch_items(batch)`` returns (structures, for crystal models) and gathered with
        the predictions.

    """

    def __init__(self, run_dir: str, score: str = "absolute", alpha: float = 0.1,
                 calibration: dict | None = None) -> None:
        self.run_dir, self.score, self.alpha = Path(run_dir), score, alpha
        self.calibration = calibration
        self.calibrator: torch.nn.Module | None = None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        best = getattr(trainer.checkpoint_callback, "best_model_path", "")
        if best and Path(best).exists():
            state = load_lightning_checkpoint(best, map_location=pl_module.device)["state_dict"]
            pl_module.load_state_dict(state)
        loader = trainer.datamodule.calib_dataloader()
        if trainer.world_size > 1:
            loader = shard_loader(loader, trainer.global_rank, trainer.world_size)
        mean, sigma, y = collect_predictions(pl_module, loader)
        calibrator = build_calibrator(self.calibration, self.score, self.alpha)
        to_items = getattr(pl_module, "batch_items", None)  # a model whose calibrator groups says how
        if getattr(calibrator, "group_by", None) is not None and to_items is None:
            raise ValueError(f"calibration groups by {calibrator.group_by!r} but {type(pl_module).__name__} "
                             "has no batch_items(batch); use method 'split'")
        structures = loader_structures(calibrator, loader, to_items)
        single = structures is not None and isinstance(calibrator.group_by, str)  # Mondrian: one label each
        if structures is not None and not single and trainer.world_size > 1:
            raise ValueError("calibration method 'multigroup' is fitted in one process: set it for `sciml export` "
                             "or `sciml calibrate`, or use 'mondrian' under DDP")
        groups = structure_groups(calibrator.group_by, structures) if single else torch.zeros_like(mean)
        groups = groups.to(mean)  # exact for small integers; gathered with the predictions
        if trainer.world_size > 1:
            mean, sigma, y, groups = gather_uneven(trainer.strategy, (mean, sigma, y, groups))
        fit_calibrator(calibrator, mean.double(), y.double(), sigma.double(), structures,
                       groups=groups.long() if single else None)
        self.calibrator = calibrator
        if trainer.is_global_zero:
            atomic_write_text(self.run_dir / "calibrator.json", json.dumps(calibrator.to_dict()))
