"""What the prior's choice computes once and on what: the joint singles of every training double, the refits' subsample.

:func:`~sciml.perturbation.select.resolve` fits the singles jointly with all training doubles once (they score κ on
val and come with the settings), and the cross-fitting refits of the combination rule see at most
:data:`~sciml.perturbation.select.REFIT_ENTRIES` (double, gene) entries each; the choices are those of the
uncached path.
"""

from __future__ import annotations

import torch

from sciml.perturbation import select
from sciml.perturbation.nn.combination import CombinationRule
from sciml.perturbation.nn.masking import masking

from .doubles_dm import screen_of
from .test_perturbation_masking import _screen


def test_resolve_fits_the_joint_singles_of_all_training_doubles_once(monkeypatch):
    m, dm = _screen(lambda a, b: masking(a, b, 1.0), noise=0.3)
    screen = screen_of(m, dm)
    settings = m.prior_settings.replace(denoise="eb_joint")
    fit, calls = select.fit_joint, []

    def record(singles, doubles):
        calls.append(tuple(doubles.keys))
        return fit(singles, doubles)

    monkeypatch.setattr(select, "fit_joint", record)
    resolved = select.resolve(settings, screen, seed=3)
    train = tuple(screen.doubles["train"].keys)
    assert calls.count(train) == 1 and len(calls) == 1 + select.JOINT_FOLDS  # all training doubles, then the folds
    alone = select.choose_masking(settings.replace(closure=resolved.settings.closure), screen, seed=3)
    assert resolved.settings == alone.settings  # the same choice as computing them for κ anew
    want = fit(screen.singles, screen.doubles["train"])
    for part in ("effect", "var", "known", "rows"):
        torch.testing.assert_close(getattr(resolved.joint, part), getattr(want, part))


def test_the_cross_fitting_refits_see_at_most_refit_entries(monkeypatch):
    m, dm = _screen(lambda a, b: torch.tanh(a + b))
    screen = screen_of(m, dm)
    rule = CombinationRule().requires_grad_(False)  # each refit starts anew from a copy
    seen, fit = [], CombinationRule.fit

    def record(self, *args, **kwargs):
        seen.append(kwargs.get("max_entries"))
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(CombinationRule, "fit", record)
    monkeypatch.setattr(select, "REFIT_ENTRIES", 50)  # fewer than the 10 doubles x 8 genes of a refit
    small = select.choose_shrink(m.prior_settings, screen, rule, folds=2)
    assert seen == [50] * 2
    monkeypatch.setattr(select, "REFIT_ENTRIES", None)
    full = select.choose_shrink(m.prior_settings, screen, rule, folds=2)
    assert small.mse != full.mse and small.mse.keys() == full.mse.keys()  # the subsample is used
