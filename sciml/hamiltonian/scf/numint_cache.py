"""pyscf's numerical XC integration with the atomic orbitals' grid values kept between Fock builds.

A Kohn–Sham Fock build evaluates every AO (and, for GGAs, its gradient) on every grid point before it integrates
``V_xc``; across the builds of one molecule those values do not change. :class:`CachedNumInt` keeps them from its
first pass on, so that further builds only contract them with the new density: a build then costs a fraction of
a fresh one, for the memory of the AO values (the refinement's coarse grid, :mod:`sciml.hamiltonian.scf.two_grid`,
needs much less than the fine one). Imported only where pyscf is (extra ``quantum``).

The kept values live in one arena per grid, taken from a small pool to which :func:`release` (or a collected
solver) gives it back: fresh memory of that size costs its page faults on first touch (as much as the builds it
saves), while a reused arena is already mapped. A caller that builds many molecules releases each one's values as
soon as its builds are done, so one arena serves them all.
"""

from __future__ import annotations

import weakref

import numpy as np
from pyscf.dft.numint import NumInt

#: free arenas (float64, flat) that finished solvers gave back; at most :data:`POOL_SIZE` are kept
_POOL: list[np.ndarray] = []
POOL_SIZE = 4


def _take(n: int) -> np.ndarray:
    """A flat float64 arena of at least ``n`` elements: the smallest that fits from the pool, else a new one."""
    if not any(a.size >= n for a in _POOL):
        return np.empty(n)
    k = min(range(len(_POOL)), key=lambda i: (_POOL[i].size < n, _POOL[i].size))
    return _POOL.pop(k)


def _give_back(arena: np.ndarray) -> None:
    """Return ``arena`` to the pool, dropping the smallest arenas beyond :data:`POOL_SIZE`."""
    _POOL.append(arena)
    _POOL.sort(key=lambda a: -a.size)
    del _POOL[POOL_SIZE:]


def _dense(ao: np.ndarray) -> bool:
    """Whether ``ao``'s strides lay out exactly ``ao.size`` contiguous elements (in some axis order)."""
    return ao.itemsize + sum((n - 1) * s for n, s in zip(ao.shape, ao.strides, strict=True)) == ao.nbytes


class CachedNumInt(NumInt):
    """``NumInt`` whose ``block_loop`` replays the AO blocks of its last grid (kept from the first pass on).

    Parameters
    ----------
    cache_mb : float
        The most AO values it keeps (MB). A grid that needs more is evaluated anew on every pass, as pyscf does.

    Notes
    -----
    The cache is keyed by the molecule, the grid (object and size) and the derivative order, so a changed grid is
    evaluated again. pyscf reuses one buffer for consecutive blocks, so kept blocks are copies (its memory layout
    kept: the contractions expect Fortran-ordered AO arrays).

    """

    def __init__(self, cache_mb: float):
        super().__init__()
        self.cache_mb = float(cache_mb)
        self._blocks = None
        self._arena: np.ndarray | None = None

    def _keep(self, ao: np.ndarray, offset: int, total: int) -> np.ndarray:
        """A copy of ``ao`` (its memory layout kept) at ``offset`` elements into this grid's arena of ``total``."""
        if self._arena is None:
            self._arena = _take(total)
            self._finalizer = weakref.finalize(self, _give_back, self._arena)
        if not _dense(ao) or offset + ao.size > self._arena.size:
            return ao.copy(order="K")
        view = np.ndarray(ao.shape, ao.dtype, buffer=self._arena, offset=offset * ao.itemsize, strides=ao.strides)
        np.copyto(view, ao)
        return view

    def block_loop(self, mol, grids, nao=None, deriv=0, max_memory=2000, non0tab=None, blksize=None, buf=None):
        """The blocks ``(ao, mask, weight, coords)`` of pyscf's loop; from the cache once a pass has kept them."""
        key = (id(mol), id(grids), 0 if grids.weights is None else grids.weights.size, deriv)
        if self._blocks is not None and self._blocks[0] == key:
            yield from self._blocks[1]
            return
        kept, size = [], 0
        for ao, mask, weight, coords in super().block_loop(mol, grids, nao, deriv, max_memory, non0tab, blksize,
                                                           buf):
            if kept is not None:
                total = ao.size // len(weight) * grids.weights.size  # AO values (and derivatives) of the grid
                if total * ao.itemsize > self.cache_mb * 1e6:
                    kept = None
                else:
                    kept.append((self._keep(ao, size // ao.itemsize, total), mask, weight, coords))
                    size += ao.nbytes
            yield ao, mask, weight, coords
        self._blocks = None if kept is None else (key, kept)

    def release(self) -> None:
        """Drop the kept values and give the arena back to the pool (the next pass evaluates the AOs again)."""
        self._blocks = None
        if self._arena is not None:
            self._finalizer.detach()
            _give_back(self._arena)
            self._arena = None

    @property
    def cached_bytes(self) -> int:
        """Bytes of AO values held now (0 before the first pass or when the grid did not fit)."""
        return 0 if self._blocks is None else sum(b[0].nbytes for b in self._blocks[1])


def release(solver) -> None:
    """:meth:`CachedNumInt.release` of a pyscf mean-field object's integrator; nothing for other integrators."""
    numint = getattr(solver, "_numint", None)
    if isinstance(numint, CachedNumInt):
        numint.release()
