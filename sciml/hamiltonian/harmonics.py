"""Real spherical harmonics in pyscf's and e3nn's conventions, the change of basis between them, Wigner D.

pyscf (libcint) real harmonics: no Condon-Shortley phase, components m = -l..l, except l = 1 ordered (x, y, z):

    Y_lm = sqrt(2) K_lm P_l^|m|(cos t) sin(|m| phi)   (m < 0)
    Y_l0 = K_l0 P_l(cos t)
    Y_lm = sqrt(2) K_lm P_l^m(cos t) cos(m phi)       (m > 0),   K_lm = sqrt((2l+1)/(4 pi) (l-|m|)!/(l+|m|)!)

with P_l^m the associated Legendre functions without the (-1)^m phase. Checked against ``mol.eval_gto`` for
l = 1..4 in the tests; this closed form lets prediction run without pyscf installed.
"""

from __future__ import annotations

from functools import cache
from math import factorial, pi, sqrt

import numpy as np

__all__ = ["e3nn_harmonics", "pyscf_harmonics", "pyscf_to_e3nn_shell", "sphere_points", "wigner_D"]


def sphere_points(n: int = 96, seed: int = 0) -> np.ndarray:
    """Fixed pseudo-random unit vectors, shape (n, 3) float64 (generic: no symmetry-induced degeneracy)."""
    x = np.random.default_rng(seed).normal(size=(n, 3))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def pyscf_harmonics(l: int, xyz: np.ndarray) -> np.ndarray:
    """Pyscf's real harmonics of degree ``l`` at unit vectors ``xyz`` (n, 3) -> (n, 2l+1), pyscf order."""
    from scipy.special import lpmv

    xyz = np.asarray(xyz, dtype=np.float64)
    cos_t = np.clip(xyz[:, 2], -1.0, 1.0)
    phi = np.arctan2(xyz[:, 1], xyz[:, 0])
    cols = []
    for m in range(-l, l + 1):
        a = abs(m)
        k = sqrt((2 * l + 1) / (4 * pi) * factorial(l - a) / factorial(l + a))
        p = (-1) ** a * lpmv(a, l, cos_t)  # remove scipy's Condon-Shortley phase
        if m < 0:
            cols.append(sqrt(2) * k * p * np.sin(a * phi))
        elif m == 0:
            cols.append(k * p)
        else:
            cols.append(sqrt(2) * k * p * np.cos(a * phi))
    y = np.stack(cols, axis=1)
    return y[:, [2, 0, 1]] if l == 1 else y  # p: (m=+1, m=-1, m=0) = (x, y, z)


def e3nn_harmonics(l: int, xyz):
    """e3nn's real harmonics (float64 torch, exact polynomials) at ``xyz`` (n, 3) -> (n, 2l+1)."""
    import torch

    from sciml.core.e3nn_o3 import o3

    x = torch.as_tensor(np.asarray(xyz) if not isinstance(xyz, torch.Tensor) else xyz, dtype=torch.float64)
    return o3.spherical_harmonics(l, x, normalize=False, normalization="integral")


@cache
def _shell_matrix(l: int) -> np.ndarray:
    pts = sphere_points(max(96, 8 * (2 * l + 1)))
    a = e3nn_harmonics(l, pts).numpy()
    b = pyscf_harmonics(l, pts)
    t, *_ = np.linalg.lstsq(a, b, rcond=None)
    u, _, vt = np.linalg.svd(t)  # nearest orthogonal matrix (removes the normalisation ratio)
    t = u @ vt
    t[np.abs(t) < 1e-13] = 0.0
    t.setflags(write=False)
    return t


def pyscf_to_e3nn_shell(l: int) -> np.ndarray:
    """Orthogonal (2l+1, 2l+1) ``T_l``: ``Y_pyscf(x) = Y_e3nn(x) @ T_l``, so ``B_e3nn = T_l B_pyscf T_l^T``.

    Rows index e3nn components, columns pyscf components. Cached, read-only.
    """
    if l < 0:
        raise ValueError(f"angular momentum must be >= 0, got {l}")
    return _shell_matrix(int(l)).copy()


def wigner_D(l: int, rotation):
    """Wigner D of degree ``l`` in e3nn's real basis, torch float64 (2l+1, 2l+1), exact to ~1e-14.

    Solves ``Y_l(Q x_i) = D_l(Q) Y_l(x_i)`` by least squares over fixed unit vectors x_i (e3nn's
    ``D_from_matrix`` is only ~1e-7 accurate). ``rotation`` is a 3x3 orthogonal matrix Q (numpy or torch); for an
    improper Q the parity (-1)^l is included, as for orbitals.
    """
    import torch

    q = torch.as_tensor(np.asarray(rotation.detach().cpu() if isinstance(rotation, torch.Tensor) else rotation),
                        dtype=torch.float64)
    if q.shape != (3, 3):
        raise ValueError(f"rotation must be a 3x3 matrix, got shape {tuple(q.shape)}")
    pts = torch.as_tensor(sphere_points(max(64, 6 * (2 * l + 1))), dtype=torch.float64)
    a = e3nn_harmonics(l, pts)
    b = e3nn_harmonics(l, pts @ q.T)
    d_t = torch.linalg.lstsq(a, b, driver="gelsd").solution  # b = a D^T
    return d_t.T.contiguous()
