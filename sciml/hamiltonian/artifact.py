"""Load a Hamiltonian artifact (molecule or crystal model) into a predictor: module, calibrator, layout, domain.

One loader (:func:`load_model`) serves molecule and crystal models; old-format crystal artifacts are mapped
onto the current module (:func:`module_config`). Loading is strict, reads JSON and safetensors only.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from sciml.core.io.artifact import ArtifactError, load_artifact, parse_extra
from sciml.core.io.shipped import shipped_path
from sciml.hamiltonian.domain import FILE as DOMAIN_FILE
from sciml.hamiltonian.domain import HamiltonianDomain
from sciml.hamiltonian.model import HamiltonianModel
from sciml.hamiltonian.orbitals import OrbitalLayout
from sciml.hamiltonian.scf.refine_calibration import REFINE_FILE, RefinedCalibration
from sciml.hamiltonian.scf.residual import RESIDUAL_FILE, ResidualBound
from sciml.hamiltonian.sizes import KEY as TRAINING_KEY
from sciml.hamiltonian.sizes import TrainingDomain
from sciml.uq.split import calibrator_from_dict

__all__ = ["DEFAULT_MODEL", "HamiltonianPredictor", "load_model", "module_config"]

DEFAULT_MODEL = shipped_path("checkpoints/water-pbe-def2svp")


@dataclass
class HamiltonianPredictor:
    """A loaded Hamiltonian model: module (eval mode), calibrator, orbital layout, level of theory.

    Crystal models (``periodic``) also carry the pyscf.pbc ``generator`` settings that build H0 and S.
    """

    module: HamiltonianModel
    calibrator: torch.nn.Module | None
    layout: OrbitalLayout
    basis: str
    xc: str
    path: Path
    periodic: bool = False
    generator: dict = field(default_factory=dict)
    domain: HamiltonianDomain | None = None  # molecule models exported with a domain test (domain.json)
    h0: str = "full"  # how H0 is built at prediction, as in the training data (sciml.hamiltonian.scf.h0)
    residual: ResidualBound | None = None  # conformal H-MAE bound from the SCF residual (residual.json)
    refined: RefinedCalibration | None = None  # intervals of ``predict --refine K`` (refine_calibrator.json)
    training: TrainingDomain | None = None  # elements and sizes of the training molecules (metadata.json)


#: network settings of the first crystal models (``task: hamiltonian-crystal`` artifacts, e.g. si-c-pbe-gth)
LEGACY_CRYSTAL_NET = {"hidden": "16x0e+8x1o+8x1e+4x2e+4x2o", "lmax": 2, "n_layers": 2, "n_rbf": 16, "cutoff": 6.0,
                      "radial_hidden": 32}


def module_config(config: dict, metadata: dict, path) -> dict:
    """``HamiltonianModel`` keyword arguments of an artifact's config.

    Also reads the first crystal format (``task: hamiltonian-crystal``, ridge + network trained outside
    Lightning, same state-dict keys): its network ran in float64 on blocks within ``network.settings.cutoff``.
    """
    if config.get("task") == "hamiltonian":
        return dict(config["module"])
    if config.get("task") != "hamiltonian-crystal":
        raise ArtifactError(f"{path}: task is {config.get('task')!r}, not a Hamiltonian model")
    if not config.get("network"):
        raise ArtifactError(f"{path}: a ridge-only crystal model of an older sciml; retrain it with "
                            "`sciml fit --config configs/hamiltonian/si-c.yaml`")
    net = LEGACY_CRYSTAL_NET | config["network"]["settings"]
    meta = {k: metadata.get(k) for k in ("basis", "xc", "pseudo")}
    meta |= {"cutoff": float(net["cutoff"]), "n_virtual": int(config["network"]["loss"].get("n_virtual", 2)),
             "periodic": True, "generator": config.get("generator") or {}}
    loss = {k: v for k, v in config["network"]["loss"].items() if k != "n_virtual"}
    return {"network": net | {"use_h0": True, "dtype": "float64"}, "layout": config["layout"], "stats": None,
            "loss": loss, "meta": meta, "ridge": config["ridge"]}


@contextmanager
def _fast_e3nn_build(enabled: bool = True):
    """Build e3nn modules without ``opt_einsum_fx`` contraction planning (about half of model loading).

    ``torch.einsum`` still orders contractions at run time; predictions change by float rounding only. Molecule
    models only (``enabled``): crystal models keep the bit-identical export/load round trip. e3nn's global
    defaults are restored afterwards.
    """
    import e3nn

    if not enabled:
        yield
        return
    before = e3nn.get_optimization_defaults()
    e3nn.set_optimization_defaults(optimize_einsums=False)
    try:
        yield
    finally:
        e3nn.set_optimization_defaults(optimize_einsums=before["optimize_einsums"])


def load_model(path: str | Path = DEFAULT_MODEL) -> HamiltonianPredictor:
    """Load a Hamiltonian artifact folder, molecule or crystal model (strict weights, JSON calibrator)."""
    import sciml.uq.mondrian  # noqa: F401  (registers the "mondrian" calibrator of crystal models)

    art = load_artifact(path)
    path = art.path  # the folder a shipped model name resolves to (sciml.core.io.shipped.resolve_model)
    kwargs = module_config(art.config, dict(art.metadata or {}), path)
    with _fast_e3nn_build(not (kwargs.get("meta") or {}).get("periodic")):
        module = HamiltonianModel(**kwargs)
    module.load_state_dict(art.state_dict, strict=True)
    module.eval()
    meta = module.meta
    calibrator = calibrator_from_dict(art.calibrator) if art.calibrator else None
    domain = parse_extra(art, DOMAIN_FILE, HamiltonianDomain.from_dict)
    if getattr(calibrator, "score_name", None) == "normalized" and domain is None:
        raise ArtifactError(f"{Path(path) / 'calibrator.json'}: normalised intervals need {DOMAIN_FILE}, which is "
                            "missing from metadata.json's extra_files; re-export the model")
    return HamiltonianPredictor(module, calibrator, module.layout, str(meta.get("basis", "def2-svp")),
                                str(meta.get("xc", "pbe")), Path(path), bool(meta.get("periodic")),
                                dict(meta.get("generator") or {}), domain, str(meta.get("h0") or "full"),
                                parse_extra(art, RESIDUAL_FILE, ResidualBound.from_dict),
                                parse_extra(art, REFINE_FILE, RefinedCalibration.from_dict), _training(art))


def _training(art) -> TrainingDomain | None:
    """The ``training_domain`` of ``metadata.json`` (None for artifacts exported before it was recorded)."""
    raw = (art.metadata or {}).get(TRAINING_KEY)
    if raw is None:
        return None
    try:
        return TrainingDomain.from_dict(raw)
    except ValueError as err:
        raise ArtifactError(f"{art.path / 'metadata.json'}: {err}; re-export the model") from None
