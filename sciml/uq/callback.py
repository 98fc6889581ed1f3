"""Lightning callback that fits a conformal calibrator on the calibration split after training."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import torch

from sciml import keys
from sciml.io.atomic import atomic_write_text
from sciml.uq.split import SplitConformal


@torch.no_grad()
def collect_predictions(module: L.LightningModule, loader) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run ``module.predict_step`` over ``loader``; return ``(mean, sigma, y)``, each of shape ``(n,)``."""
    was_training = module.training
    module.eval()
    means, sigmas, ys = [], [], []
    for batch in loader:
        batch = batch.to(module.device)
        pred = module.predict_step(batch, 0)
        means.append(pred.mean)
        sigmas.append(pred.sigma if pred.sigma is not None else torch.ones_like(pred.mean))
        ys.append(batch[keys.TARGET])
    module.train(was_training)
    return torch.cat(means), torch.cat(sigmas), torch.cat(ys)


class ConformalCallback(L.Callback):
    """Fit split conformal on the datamodule's ``calib_dataloader()`` once training ends.

    The best checkpoint (by the monitored validation metric) is loaded first, so the calibrator matches
    the weights that will be exported. Scores from all DDP ranks are gathered before the quantile, and
    the result is written to ``<run_dir>/calibrator.json`` and kept as ``self.calibrator`` (not attached to
    the module, whose ``state_dict`` must keep matching its checkpoints).

    Parameters
    ----------
    run_dir : str
        Folder of the run.
    score : str
        Conformity score (``absolute`` or ``normalized``; ``normalized`` divides by ``Prediction.sigma``).
    alpha : float
        Default miscoverage level stored with the calibrator.

    """

    def __init__(self, run_dir: str, score: str = "absolute", alpha: float = 0.1) -> None:
        self.run_dir, self.score, self.alpha = Path(run_dir), score, alpha
        self.calibrator: SplitConformal | None = None

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        best = getattr(trainer.checkpoint_callback, "best_model_path", "")
        if best and Path(best).exists():
            state = torch.load(best, map_location=pl_module.device, weights_only=True)["state_dict"]
            pl_module.load_state_dict(state)
        mean, sigma, y = collect_predictions(pl_module, trainer.datamodule.calib_dataloader())
        if trainer.world_size > 1:
            mean, sigma, y = (pl_module.all_gather(t).reshape(-1) for t in (mean, sigma, y))
        calibrator = SplitConformal(score=self.score, alpha=self.alpha)
        calibrator.fit_predictions(mean.double(), y.double(), sigma.double())
        self.calibrator = calibrator
        if trainer.is_global_zero:
            atomic_write_text(self.run_dir / "calibrator.json", json.dumps(calibrator.to_dict()))
