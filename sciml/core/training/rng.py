"""Global RNG states saved in checkpoints, for exact resume."""

from __future__ import annotations

import random

import lightning as L
import numpy as np
import torch


class RNGStateCallback(L.Callback):
    """Store the global torch / numpy / Python RNG states in checkpoints and restore them on resume.

    Lightning does not save RNG states; without them a resumed run reshuffles its training data
    differently from an uninterrupted run with the same seed. States are plain tensors, ints and tuples, so
    checkpoints still load with ``weights_only=True``. Under DDP rank 0's state is saved and restored on
    every rank (all ranks are seeded alike and ``DistributedSampler`` shuffles by seed and epoch).
    """

    def state_dict(self) -> dict:
        name, keys, pos, has_gauss, gauss = np.random.get_state()
        state = {"torch": torch.get_rng_state(), "python": random.getstate(),
                 "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss))}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        torch.set_rng_state(state_dict["torch"])
        random.setstate(state_dict["python"])
        name, keys, pos, has_gauss, gauss = state_dict["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])
