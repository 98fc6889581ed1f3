"""Does the network carry weight? The val-split check that decides whether an exported model uses it.

A molecule model with a closed-form ridge base predicts ``ΔH = ridge(H0, r) + σ·net(Ĥ0, r)``. When the network
does not lower the H MAE of the **val** split below the ridge alone (the case across molecules with few training
molecules, where it fits the training molecules and not new ones), the exported model keeps the ridge alone:
the network's read-outs are zeroed, so its output is exactly 0 and the prediction is the closed form. The decision
and both val numbers go into the artifact's metrics and card. The test split plays no part in it.
"""

from __future__ import annotations

import torch

from sciml.hamiltonian.evaluate import evaluate
from sciml.hamiltonian.model import HamiltonianModel

__all__ = ["disable_network", "network_check"]


def disable_network(module: HamiltonianModel) -> None:
    """Zero the network's read-outs in place: ``ΔH`` becomes the ridge's alone (exactly)."""
    with torch.no_grad():
        for lin in (module.net.node_out, module.net.edge_out):
            lin.weight.zero_()


def val_h_mae(module: HamiltonianModel, loader) -> float:
    """Mean over structures of the H MAE (µHa) on ``loader``, as the exported metrics measure it."""
    return float(evaluate(module, loader)["h_mae"].mean())


def network_check(module: HamiltonianModel, dm) -> dict:
    """Compare the model with its ridge alone on the val split; disable the network if it does not beat it.

    Returns ``{"val_h_mae_network", "val_h_mae_ridge", "network_used", "n_val"}`` (µHa); without a ridge base or
    a val split the network is kept and the record says why.
    """
    n_val = len(dm.datasets.get("val", []))
    if module.ridge is None or n_val == 0:
        return {"network_used": True, "reason": "no ridge base" if module.ridge is None else "empty val split"}
    net = val_h_mae(module, dm.val_dataloader())
    state = {k: v.clone() for k, v in module.state_dict().items()}
    disable_network(module)
    ridge = val_h_mae(module, dm.val_dataloader())
    used = net < ridge
    if used:
        module.load_state_dict(state, strict=True)
    return {"val_h_mae_network": net, "val_h_mae_ridge": ridge, "network_used": bool(used), "n_val": n_val}
