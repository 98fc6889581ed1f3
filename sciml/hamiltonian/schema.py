"""Run-config keys of the Hamiltonian family (``sciml fit`` with ``task: hamiltonian``), with defaults and meanings.

Torch-free: ``sciml fit --help`` and config errors read it before any heavy import. The defaults are the code's
(``tests/integration/test_config_schema.py`` checks them against the constructors they document).
"""

from __future__ import annotations

from sciml.core.schema import Key, Section, split_section

DATA_HINT = "make it with `sciml data hamiltonian` (--molecule water --n 200, or --crystal Si) --out DIR"
"""How to get data when ``data.path`` does not exist."""

SCHEMA = {
    "data": Section({
        "path": Key(None, "molecules: npz of conformers (H, H0, S) or a folder of such npz files "
                    "(one per molecule); crystals: a folder of DeepH folders", "str",
                    required=True),
        "split": split_section([0.7, 0.05, 0.1, 0.15], 0,
                        by=Key("conformer", "split unit: conformer, or molecule (a folder of npz files: every "
                                            "conformer of a molecule in one split)", "str", ("conformer", "molecule"))),
        "batch_size": Key(32, "structures per batch"),
        "num_workers": Key(0, "DataLoader workers"),
        "cutoff": Key(100.0, "edge cutoff, Å (beyond it a block stays H0's)"),
        "n_virtual": Key(3, "virtual orbitals in the orbital-energy target"),
        "limit": Key(None, "use only the first N conformers (tests)", "int"),
    }),
    "model": Section({
        "network": Section({
            "hidden": Key("32x0e+16x1o+16x1e+8x2e+8x2o+4x3o+4x3e+4x4e", "hidden irreps (starting with 0e)"),
            "lmax": Key(4, "spherical harmonics degree"), "n_layers": Key(2, "interaction layers"),
            "n_rbf": Key(16, "radial basis size"), "cutoff": Key(6.0, "radial cutoff, Å"),
            "radial_hidden": Key(64, "radial MLP width"), "use_h0": Key(True, "predict ΔH = H − H0 from H0"),
            "dtype": Key("float32", "network dtype", "str", ("float32", "float64"))}),
        "ridge": Section({
            "lmax": Key(2, "degree of the edge harmonics"), "lam": Key(1e-6, "ridge penalty"),
            "centres": Key([0.9, 1.5, 2.5, 3.5], "radial Gaussian centres, Å"), "width": Key(0.6, "their width, Å"),
            "two_hop": Key(False, "edges also see both atoms' neighbour sums"),
            "scale_floor": Key(0.0, "feature columns are scaled by max(RMS, floor x largest RMS) of their type: "
                                    "nearly dead columns are not blown up (unseen short bonds); 0: plain RMS")},
            "closed-form base model (needs use_h0); null: none", nullable=True),
        "input_clip": Key(None, "bound of the network's normalised H0 inputs, in training standard deviations per "
                                "irrep instance (inputs far outside the training range are not extrapolated); null: "
                                "off",
                          "float", nullable=True),
        "readout_cutoff": Key(None, "[r_on, r_off] Å: the network's pair corrections fade out (cosine) between them "
                                    "and far pairs keep the ridge's ΔH; null: no envelope", "list", nullable=True),
        "overlap_filter": Key(None, "molecules: keep the predicted ΔH only on overlap eigenvectors with eigenvalue "
                                    "above this (near-null directions of S amplify errors); null: off", "float",
                              nullable=True),
        "loss": Section({"real": Key(1.0, "normalised block MSE weight"), "eig": Key(0.0, "orbital-energy MSE weight"),
                         "eig_scale": Key(1e-3, "orbital-energy scale, Hartree"),
                         "real_scale_power": Key(0.0, "weight of each block irrep in the real-space MSE: its training "
                                                      "scale to this power (0: all alike; 2: MSE in Hartree)"),
                         "density": Key(0.0, "molecules: weight of the squared first-order density error "
                                             "(occupied-virtual block of the H error over the gap); 0: off")}),
        "optim": Section({"lr": Key(2e-3, "AdamW learning rate"), "weight_decay": Key(0.0, "AdamW weight decay"),
                          "scheduler": Key("cosine", "schedule", "str", ("cosine", "onecycle", "none")),
                          "min_lr_ratio": Key(0.01, "cosine floor as a share of lr")}),
    }),
}
