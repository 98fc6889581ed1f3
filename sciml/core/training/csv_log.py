"""A CSV metrics log that a resumed run extends instead of starting over.

Lightning's :class:`~lightning.pytorch.loggers.CSVLogger` deletes ``metrics.csv`` whenever its directory is not
empty, so a run resumed after a kill lost the history of every epoch before it. :class:`ResumableCSVLogger`
keeps the rows up to the checkpoint it resumes from (``step <= resume_step``: the rows of the interrupted,
re-run epoch are dropped so that no epoch appears twice) and appends the new ones under the same header. The
rows are written whenever a checkpoint is, so a kill never loses the history of a saved epoch.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from sciml.core.io.atomic import atomic_write_text


def kept_rows(path: Path, resume_step: int) -> tuple[list[str], list[dict]]:
    """Header and rows of ``metrics.csv`` at ``path`` logged at ``step <= resume_step``."""
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        rows = [row for row in reader if row.get("step") and int(float(row["step"])) <= resume_step]
        return list(reader.fieldnames or []), rows


class _ResumingWriter(ExperimentWriter):
    """Experiment writer that trims the existing ``metrics.csv`` to ``resume_step`` instead of deleting it."""

    def __init__(self, log_dir: str, resume_step: int | None) -> None:
        self._resume_step = resume_step
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        if self._resume_step is None:  # a fresh run: rows of an earlier run in this directory are not its history
            path.unlink()
            return
        header, rows = kept_rows(path, self._resume_step)
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(path, text.getvalue())
        self.metrics_keys = sorted(header)  # new keys later rewrite the file with the union of both headers


class ResumableCSVLogger(CSVLogger):
    """``<save_dir>/logs/metrics.csv``, continued across resumes.

    Parameters
    ----------
    save_dir : str or Path
        Run directory.
    resume_step : int or None
        Global step of the checkpoint the run resumes from (rows logged after it are dropped), or ``None`` for a
        fresh run (an existing ``metrics.csv`` is removed, as Lightning does).

    """

    def __init__(self, save_dir: str | Path, resume_step: int | None = None) -> None:
        super().__init__(save_dir, name="logs", version="")
        self._resume_step = resume_step

    def after_save_checkpoint(self, checkpoint_callback) -> None:
        """Write the rows logged so far: a checkpoint on disk always has its history in ``metrics.csv``."""
        self.save()

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ResumingWriter(self.log_dir, self._resume_step)
        return self._experiment
