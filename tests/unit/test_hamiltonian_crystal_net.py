"""Crystal Hamiltonians through the one HamiltonianModule (ridge + equivariant residual, band-energy loss).

Fixtures from ``test_hamiltonian_model_crystal`` (random Hermitian-consistent H0/H/S blocks, DeepH folders). H gets
a random non-linear part so that the ridge leaves a residual. Checks: ``sciml.core.train`` fits a crystal run
with checkpoints chosen on the val split; O(3) equivariance of the predicted blocks (``B → D_i B D_jᵀ``, float64,
1e-9 relative) with a global translation; invariance to moving one atom by a lattice vector (block keys relabelled
``R → R + n_i − n_j``); the differentiable band assembly equals the numpy prediction path; a finite band-loss
gradient and a decreasing loss; export → load round trip; the shipped ``si-c-pbe-gth`` (first crystal format)
loads strictly and reproduces the numbers of the code that trained it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sciml.hamiltonian.bands import predict_crystal
from sciml.hamiltonian.orbitals import block_wigner
from sciml.hamiltonian.periodic import mesh_kpoints, structure_bands
from sciml.hamiltonian.structure import HamiltonianStructure
from sciml.testing import random_orthogonal
from tests.unit.test_hamiltonian_model_crystal import (
    LAYOUT,
    crystal,
    crystal_config,
    predictor_of,
    rotate,
    with_check_bands,
)

ROOT = Path(__file__).resolve().parents[2]


def noisy(rng) -> HamiltonianStructure:
    """A synthetic crystal whose H = 1.1 H0 + a random symmetric-consistent part ~exp(−d), with a 2×2×2 mesh."""
    s = crystal(rng)
    for (rx, ry, rz, i, j), b in list(s.blocks["H"].items()):
        if (rx, ry, rz, i) < (-rx, -ry, -rz, j) or ((rx, ry, rz) == (0, 0, 0) and i == j):
            extra = 0.05 * rng.normal(size=b.shape) * np.abs(b).max()
            extra = 0.5 * (extra + extra.T) if (rx, ry, rz) == (0, 0, 0) and i == j else extra
            s.blocks["H"][(rx, ry, rz, i, j)] = b + extra
            if not ((rx, ry, rz) == (0, 0, 0) and i == j):
                s.blocks["H"][(-rx, -ry, -rz, j, i)] = s.blocks["H"][(-rx, -ry, -rz, j, i)] + extra.T
    s.meta["kpts"] = mesh_kpoints((2, 2, 2)).tolist()
    return with_check_bands(s, np.random.default_rng(9).random((3, 3)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A crystal run of two epochs (``sciml.core.train``), then its network weights randomised."""
    from sciml.core.io.checkpoint import load_lightning_checkpoint
    from sciml.core.train import train
    from sciml.hamiltonian.module import HamiltonianModule

    tmp = tmp_path_factory.mktemp("crystal_run")
    rng = np.random.default_rng(0)
    cfg = crystal_config(tmp, [noisy(rng) for _ in range(6)], (0.5, 1 / 6, 1 / 6, 1 / 6),
                         loss={"real": 1.0, "eig": 1.0, "eig_scale": 1e-3})
    cfg["trainer"] |= {"max_epochs": 2}
    metrics = train(cfg)
    state = load_lightning_checkpoint(metrics["best_checkpoint"])
    module = HamiltonianModule(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"], strict=True)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in module.net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return {"module": module.eval(), "metrics": metrics, "cfg": cfg, "test": noisy(rng), "tmp": tmp}


def _scale(s) -> float:
    return max(np.abs(b).max() for b in s.blocks["H"].values())


def test_lightning_run_selects_on_val_and_writes_checkpoints(trained):
    run = Path(trained["cfg"]["run_dir"])
    assert (run / "checkpoints" / "best.ckpt").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    assert np.isfinite(trained["metrics"]["val_mae"]) and np.isfinite(trained["metrics"]["test_eig_mae_mev"])
    assert (run / "split.json").is_file()


def test_prediction_is_equivariant_and_uses_the_network(trained):
    module, test = trained["module"], trained["test"]
    predictor = predictor_of(module)
    pred = predict_crystal(test, predictor)
    scale = _scale(pred)
    with torch.no_grad():
        saved = [lin.weight.clone() for lin in (module.net.node_out, module.net.edge_out)]
        for lin in (module.net.node_out, module.net.edge_out):
            lin.weight.zero_()
        ridge_only = predict_crystal(test, predictor)
        for lin, w in zip((module.net.node_out, module.net.edge_out), saved, strict=True):
            lin.weight.copy_(w)
    assert max(np.abs(pred.blocks["H"][k] - b).max() for k, b in ridge_only.blocks["H"].items()) > 1e-4 * scale
    rng = np.random.default_rng(3)
    for parity in (False, True):
        q = random_orthogonal(rng, parity=False) * (-1 if parity else 1)
        d = block_wigner(LAYOUT, [14], q).numpy()
        rotated = predict_crystal(rotate(test, q), predictor)  # rotate() also translates by 1.3 Å
        err = max(np.abs(rotated.blocks["H"][k] - d @ b @ d.T).max() for k, b in pred.blocks["H"].items())
        assert err <= 1e-9 * scale, f"parity={parity}: {err:.2e}"


def test_moving_an_atom_by_a_lattice_vector_relabels_blocks_only(trained):
    module, test = trained["module"], trained["test"]
    n = np.array([[0, 0, 0], [1, -1, 0]])  # atom 1 moves by L0 − L1
    pos = test.positions + n @ test.lattice

    def relabel(blocks):
        return {(*(np.array(k[:3]) + n[k[3]] - n[k[4]]).tolist(), k[3], k[4]): b for k, b in blocks.items()}

    moved = HamiltonianStructure(test.numbers, pos, test.lattice, {m: relabel(b) for m, b in test.blocks.items()},
                                 dict(test.meta))
    predictor = predictor_of(module)
    pred, pred_moved = predict_crystal(test, predictor), predict_crystal(moved, predictor)
    err = max(np.abs(pred_moved.blocks["H"][k] - b).max() for k, b in relabel(pred.blocks["H"]).items())
    assert err <= 1e-9 * _scale(pred)


def test_band_assembly_matches_the_numpy_path(trained):
    from sciml.hamiltonian.data.batch import collate_crystals
    from sciml.hamiltonian.data.crystal import crystal_sample

    module, test = trained["module"], trained["test"]
    sample = crystal_sample(test, LAYOUT, module.node_basis, module.edge_basis, 4.0, n_virtual=8)
    with torch.no_grad():
        eps, _ = module.bands(collate_crystals([sample]), module.outputs(collate_crystals([sample])))
    ref = structure_bands(predict_crystal(test, predictor_of(module)), LAYOUT, test.meta["kpts"])
    assert eps.shape == (8 * 8,) and ref.shape == (8, 8)
    assert np.abs(eps.numpy().reshape(8, 8) - ref).max() <= 1e-10 * np.abs(ref).max()


def test_band_loss_has_finite_gradient_and_decreases(trained):
    from sciml.hamiltonian.task import build

    rng = np.random.default_rng(4)
    cfg = crystal_config(trained["tmp"] / "loss", [noisy(rng) for _ in range(3)], (1.0, 0.0, 0.0, 0.0),
                         loss={"real": 0.0, "eig": 1.0, "eig_scale": 1e-3})
    dm, module = build(cfg)
    batch = dm.collate_fn(dm.datasets["train"])
    module.log = lambda *a, **k: None  # no trainer attached
    with torch.no_grad():  # leave the zero start so the band term has a gradient through the whole network
        for lin in (module.net.node_out, module.net.edge_out):
            lin.weight.normal_(0.0, 0.01, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.Adam(module.net.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = module._step(batch, "train")
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in module.net.parameters() if p.grad is not None])
        assert torch.isfinite(grads).all() and grads.abs().max() > 0
        losses.append(float(loss))
        opt.step()
    assert np.isfinite(losses).all() and min(losses[1:]) < 0.95 * losses[0]


def test_export_load_round_trip_and_band_calibrator(trained, tmp_path):
    from sciml.core.export import export
    from sciml.hamiltonian.artifact import load_model

    ckpt = Path(trained["metrics"]["best_checkpoint"])
    metrics = export(ckpt, tmp_path / "m", calibrate=True, alpha=0.25, config=trained["cfg"])
    assert metrics["n_calib_structures"] == 1 and "model_occupied_band_mae_mev" in metrics
    loaded = load_model(tmp_path / "m")
    assert loaded.periodic and loaded.calibrator.counts.tolist() == [1] * 8
    from sciml.core.io.checkpoint import load_lightning_checkpoint
    from sciml.hamiltonian.module import HamiltonianModule

    state = load_lightning_checkpoint(ckpt)
    module = HamiltonianModule(**state["hyper_parameters"])
    module.load_state_dict(state["state_dict"], strict=True)
    a, b = predict_crystal(trained["test"], predictor_of(module)), predict_crystal(trained["test"], loaded)
    assert all(np.array_equal(a.blocks["H"][k], v) for k, v in b.blocks["H"].items())


def test_shipped_crystal_model_loads_strictly_and_keeps_its_numbers():
    """``checkpoints/si-c-pbe-gth`` (first crystal format, trained outside Lightning) loads strictly into the
    HamiltonianModule; on a fixed synthetic Si cell its bands equal those of the code that trained it (recorded
    with ``sciml.hamiltonian.crystal_model.load_crystal_model`` before the move, to 1e-9 relative)."""
    from sciml.hamiltonian.artifact import load_model

    if not (ROOT / "checkpoints" / "si-c-pbe-gth").is_dir():
        pytest.skip("no shipped crystal model")
    model = load_model(ROOT / "checkpoints" / "si-c-pbe-gth")
    assert model.periodic and model.module.layout.shells_of(14) == LAYOUT.shells_of(14)
    assert model.generator["basis"] == "gth-szv" and model.calibrator.counts.tolist() == [7] * 8
    lattice = 5.431 / 2 * (np.ones((3, 3)) - np.eye(3))
    s = crystal(np.random.default_rng(7), lattice=lattice, positions=np.array([[0, 0, 0], [1.36, 1.36, 1.36]]))
    bands = structure_bands(predict_crystal(s, model), LAYOUT, [[0, 0, 0], [0.5, 0, 0], [0.25, 0.25, 0.1]])
    recorded = np.array([
        [-23.9397846505422, -10.382828669059384, -5.129125078722842, -1.5047190762049631, -0.36378381946177146,
         1.1738783506622545, 10.519353943999379, 26.80219767626348],
        [-26.817292798832135, -20.26814483143635, -12.211691890560179, -0.8053533896502209, 0.3850464570637135,
         4.5931305307510675, 18.961963596847344, 35.14661083397405],
        [-26.91466274591123, -11.920638735359079, -4.380711403695597, -1.8100809433465666, 0.8841537358633572,
         3.6341634478200477, 12.501058077299458, 25.81667264429094]])
    assert np.abs(bands - recorded).max() <= 1e-9 * np.abs(recorded).max()


def test_band_loss_without_kpoints_is_a_clear_error(tmp_path):
    from sciml.hamiltonian.task import build

    rng = np.random.default_rng(6)
    cfg = crystal_config(tmp_path, [crystal(rng) for _ in range(2)], (1.0, 0.0, 0.0, 0.0),
                         loss={"real": 1.0, "eig": 1.0})  # crystal() has no meta kpts
    dm, module = build(cfg)
    module.log = lambda *a, **k: None
    with pytest.raises(ValueError, match="without kpts"):
        module._step(dm.collate_fn(dm.datasets["train"]), "train")
    module.loss_weights["eig"] = 0.0
    assert torch.isfinite(module._step(dm.collate_fn(dm.datasets["train"]), "train"))
    module.loss_weights["density"] = 1.0  # the density term is for molecules
    with pytest.raises(ValueError, match="molecule term"):
        module._step(dm.collate_fn(dm.datasets["train"]), "train")
