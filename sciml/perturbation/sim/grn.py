"""A SERGIO-like gene regulatory network: Hill regulation with AND terms, steady states, chemical Langevin noise.

Production of gene i (Dibaeinia & Sinha 2020, SERGIO, with two-regulator AND terms)::

    P_i(x) = m_i · s · [ b_i + Σ_τ K_τ Π_{j ∈ τ} φ_j(x_j) ],   φ_j(x) = x^n / (h^n + x^n)     (activator)
                                                               φ_j(x) = h^n / (h^n + x^n)     (repressor)

An OR term replaces the product of its two regulators by ``φ_1 + φ_2 − φ_1·φ_2`` (either regulator suffices,
so a double perturbation is needed to silence it). The Hill coefficient ``n`` sets how cooperative binding is.

with degradation rate 1, so the noise-free steady state of a DAG is ``x_i = P_i(x)`` in topological order.
``m_i`` is the perturbation multiplier (knockdown 1 − e, knockout 0, activation 1 + a), ``s`` a cell scale.
A term with two regulators (AND) makes the response to a double perturbation non-additive: knocking down either
regulator already silences the term (masking), activating both is needed to switch it on (synergy).
Cells: chemical Langevin steps ``dx = (P(x) − x) dt + σ (√P dW₁ − √x dW₂)`` started at the steady state.

Three engines take the same Euler–Maruyama steps: :meth:`GRN.langevin` (numpy, float64), :meth:`GRN.langevin_torch`
(float32, the two noise terms as one normal of variance ``P + x``) and :meth:`GRN.langevin_compiled` (float32,
numba kernels over blocks of cells, counter-based normals); they agree in law, not in random numbers.
The compiled engine's kernels and packed terms are in :mod:`sciml.perturbation.sim.kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sciml.core.threads import torch_threads
from sciml.perturbation.sim.kernels import PackedTerms, kernels, negative_binomial

BLOCK = 128  # cells per pass of the compiled engine (GRN.langevin_compiled)


@dataclass
class GRN:
    """Terms of a regulatory network over ``n_genes`` genes (genes are in topological order).

    Attributes
    ----------
    basal : (G,) basal production b_i (master regulators only; 0 elsewhere), molecules / time.
    target : (T,) gene each term feeds.
    regs : (T, 2) regulator genes of each term (second = -1 for a single-regulator term).
    activating : (T, 2) bool, activator (True) or repressor Hill function.
    half : (T, 2) Hill half-saturation h (molecules).
    strength : (T,) |K_τ|, molecules / time.
    hill : Hill coefficient n.
    logic_or : (T,) bool, OR term (``None``: all AND).

    """

    basal: np.ndarray
    target: np.ndarray
    regs: np.ndarray
    activating: np.ndarray
    half: np.ndarray
    strength: np.ndarray
    hill: float = 2.0
    logic_or: np.ndarray | None = None
    _layers: list[np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)
    _packed: PackedTerms | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def n_genes(self) -> int:
        return len(self.basal)

    def and_pairs(self) -> list[tuple[int, int]]:
        """Regulator pairs of the AND terms (sorted indices)."""
        return sorted({tuple(sorted(map(int, r))) for r in self.regs if r[1] >= 0})

    def edges(self) -> np.ndarray:
        """(E, 4) int array ``regulator, target, term, sign`` (sign +1 activator, -1 repressor)."""
        rows = [(int(r), int(self.target[t]), t, 1 if self.activating[t, k] else -1)
                for t in range(len(self.target)) for k, r in enumerate(self.regs[t]) if r >= 0]
        return np.array(rows, dtype=np.int64).reshape(-1, 4)

    def _phi(self, x: np.ndarray, t: np.ndarray, k: int) -> np.ndarray:
        reg = self.regs[t, k]
        xr = np.maximum(x[..., np.maximum(reg, 0)], 0.0) ** self.hill
        hn = self.half[t, k] ** self.hill
        phi = np.where(self.activating[t, k], xr / (hn + xr), hn / (hn + xr))
        return np.where(reg >= 0, phi, 1.0)

    def production(self, x: np.ndarray, mult: np.ndarray, scale: np.ndarray | float = 1.0) -> np.ndarray:
        """P(x) for cells (..., G); ``mult`` (..., G) perturbation multipliers, ``scale`` (..., 1) cell scale."""
        t = np.arange(len(self.target))
        p0, p1 = self._phi(x, t, 0), self._phi(x, t, 1)
        terms = p0 * p1 if self.logic_or is None else np.where(self.logic_or, p0 + p1 - p0 * p1, p0 * p1)
        return mult * scale * (self.basal + self.gene_sum(self.strength * terms))

    def gene_sum(self, terms: np.ndarray) -> np.ndarray:
        """Sum of each gene's terms, ``(..., T)`` → ``(..., G)`` (0 for a gene without terms).

        A segmented sum over the terms sorted by target (``O(T)`` per cell; a ``(T, G)`` one-hot product would cost
        ``O(T·G)``).
        """
        order = np.argsort(self.target, kind="stable")
        target = self.target[order]
        starts = np.flatnonzero(np.r_[True, target[1:] != target[:-1]]) if len(target) else np.zeros(0, int)
        out = np.zeros((*terms.shape[:-1], self.n_genes))
        if len(target):
            out[..., target[starts]] = np.add.reduceat(terms[..., order], starts, axis=-1)
        return out

    def steady_state(self, mult: np.ndarray, scale: np.ndarray | float = 1.0) -> np.ndarray:
        """Noise-free steady state (..., G): one topological sweep (exact for a DAG, degradation rate 1)."""
        x = np.zeros(np.shape(mult))
        for layer in self.layers():
            x[..., layer] = self.production(x, mult, scale)[..., layer]
        return x

    def layers(self) -> list[np.ndarray]:
        """Genes grouped by depth in the DAG (a gene's regulators all lie in earlier groups); computed once."""
        if self._layers is not None:
            return self._layers
        depth = np.zeros(self.n_genes, dtype=int)
        order = np.argsort(self.target, kind="stable")
        for target, regs in zip(self.target[order].tolist(), self.regs[order].tolist(), strict=True):
            for r in regs:
                if r >= 0:
                    depth[target] = max(depth[target], depth[r] + 1)
        self._layers = [np.flatnonzero(depth == d) for d in range(depth.max() + 1)]
        return self._layers

    def langevin(self, x0: np.ndarray, mult: np.ndarray, scale: np.ndarray, rng: np.random.Generator,
                 steps: int = 100, dt: float = 0.05, noise: float = 1.0) -> np.ndarray:
        """Chemical Langevin dynamics from ``x0`` (cells, G); returns non-negative molecule levels."""
        x = x0.copy()
        for _ in range(steps):
            prod = self.production(x, mult, scale)
            drift = prod - x
            diff = np.sqrt(prod) * rng.standard_normal(x.shape) - np.sqrt(np.maximum(x, 0)) * rng.standard_normal(
                x.shape)
            x = np.maximum(x + drift * dt + noise * np.sqrt(dt) * diff, 0.0)
        return x

    def langevin_torch(self, x0: np.ndarray, mult: np.ndarray, scale: np.ndarray, seed: int, steps: int = 100,
                       dt: float = 0.05, noise: float = 1.0) -> np.ndarray:
        """:meth:`langevin` in float32 torch (one thread; the normal draws from a torch generator seeded with ``seed``).

        The same dynamics in law, not the same random numbers (a screen made with one engine is not reproduced by
        the other, ``SimConfig.engine``), about five times less work on wide panels: the two noise terms of a gene
        are one normal of variance ``P + x`` (a sum of independent normals), and a Hill function is
        ``a + s·x^n/(h^n + x^n)`` with ``(a, s)`` = (0, 1) for an activator, (1, −1) for a repressor, (1, 0) for
        no regulator.
        """
        import torch

        f32 = torch.float32
        x = torch.as_tensor(x0, dtype=f32)
        factor = torch.as_tensor(mult * scale, dtype=f32)
        basal = torch.as_tensor(self.basal, dtype=f32)
        reg = torch.as_tensor(np.maximum(self.regs, 0))  # (T, 2)
        hn = torch.as_tensor(self.half**self.hill, dtype=f32)
        valid = self.regs >= 0
        offset = torch.as_tensor(np.where(valid & self.activating, 0.0, 1.0), dtype=f32)
        sign = torch.as_tensor(np.where(valid, np.where(self.activating, 1.0, -1.0), 0.0), dtype=f32)
        strength = torch.as_tensor(self.strength, dtype=f32)
        target = torch.as_tensor(self.target)
        logic_or = None if self.logic_or is None else torch.as_tensor(self.logic_or)
        gen = torch.Generator().manual_seed(int(seed))
        zeros = torch.zeros_like(x)
        amplitude = noise * dt**0.5
        with torch_threads(1):  # the per-step tensors are small: on a shared node, threads cost more than they give
            x = self._torch_steps(x, factor, basal, reg, hn, offset, sign, strength, target, logic_or, gen, zeros,
                                  steps, dt, amplitude)
        return x.double().numpy()

    def _torch_steps(self, x, factor, basal, reg, hn, offset, sign, strength, target, logic_or, gen, zeros, steps,
                     dt, amplitude):
        """The Euler–Maruyama steps of :meth:`langevin_torch` (tensors prepared there)."""
        import torch

        for _ in range(steps):
            xr = x[:, reg].pow_(self.hill)  # (n, T, 2); x >= 0 throughout
            phi = torch.addcmul(offset, sign, xr.div_(xr + hn))
            p0, p1 = phi.unbind(-1)
            terms = p0 * p1 if logic_or is None else torch.where(logic_or, p0 + p1 - p0 * p1, p0 * p1)
            prod = zeros.index_add(1, target, terms.mul_(strength)).add_(basal).mul_(factor)
            step = torch.randn(x.shape, generator=gen).mul_((prod + x).sqrt_()).mul_(amplitude)
            x = x.add_(prod.sub_(x).mul_(dt)).add_(step).clamp_min_(0.0)
        return x

    def compile(self) -> None:
        """Compile the kernels of :meth:`langevin_compiled` and :func:`negative_binomial` now (seconds, once).

        One cell, one step, and one count: the threads that follow find them compiled.
        """
        self.langevin_compiled((), np.ones(1), np.ones(1), 0, steps=1)
        negative_binomial(np.ones(1), 1.0, 0)

    def packed(self) -> PackedTerms:
        """The terms as float32 arrays sorted by target (:class:`PackedTerms`), for the compiled engine; built once."""
        if self._packed is None:
            self._packed = self._pack()
        return self._packed

    def _pack(self) -> PackedTerms:
        order = np.argsort(self.target, kind="stable")
        target, regs, act = self.target[order], self.regs[order].reshape(-1, 2), self.activating[order].reshape(-1, 2)
        valid = regs >= 0
        f32 = np.float32
        logic_or = np.zeros(len(order), bool) if self.logic_or is None else self.logic_or[order].astype(bool)
        return PackedTerms(start=np.searchsorted(target, np.arange(self.n_genes + 1)).astype(np.int64),
                           reg=np.ascontiguousarray(np.maximum(regs, 0), dtype=np.int64), single=~valid[:, 1],
                           hn=np.ascontiguousarray(self.half[order] ** self.hill, dtype=f32),
                           offset=np.where(valid & act, 0.0, 1.0).astype(f32),
                           sign=np.where(valid, np.where(act, 1.0, -1.0), 0.0).astype(f32),
                           strength=self.strength[order].astype(f32), logic_or=logic_or,
                           basal=self.basal.astype(f32), n_regulators=int(regs.max(initial=-1)) + 1,
                           ordered=bool((regs < target[:, None]).all()))

    def langevin_compiled(self, genes: tuple[int, ...], factor: np.ndarray, scale: np.ndarray, seed: int,
                          steps: int = 100, dt: float = 0.05, noise: float = 1.0, block: int = BLOCK) -> np.ndarray:
        """Cells of one condition (n, G) float32: the steady state, then :meth:`langevin` steps, compiled (numba).

        The same dynamics in law as :meth:`langevin` and :meth:`langevin_torch` (float32; one normal of variance
        ``P + x`` per gene and step), computed without the ``(cells, T, 2)`` gathers: the cells of a block lie side
        by side in memory (``(G, block)``), so that every term is one vectorised pass over the block, and the
        production of a gene is summed over its terms and turned into its Euler–Maruyama step in the same pass.
        The normals are counter-based (:func:`_normals`: SplitMix64 and Box–Muller), keyed by ``seed`` and the
        block, so the cells do not depend on threads; a screen made with another ``block`` has other numbers.

        Parameters
        ----------
        genes : tuple of int
            Perturbed genes (their production is multiplied by ``factor``).
        factor : (n,) float
            Perturbation multiplier m of each cell (1 − e knockdown, 0 knockout, 1 + a activation).
        scale : (n,) float
            Cell scale s.
        seed : int
            Seed of the normal draws.
        steps, dt, noise : int, float, float
            Euler–Maruyama steps, step size, noise amplitude σ.
        block : int
            Cells per pass: ``(G, block)`` float32 state and normals, and ``(n_regulators, block)`` regulator powers
            ``x^n`` that must stay in cache.

        Returns
        -------
        (n, G) float32 molecule levels, non-negative.

        """
        packed, compiled = self.packed(), kernels()
        n, g = len(scale), self.n_genes
        pert = np.asarray(genes, dtype=np.int64)
        out = np.empty((n, g), dtype=np.float32)
        f32 = np.float32
        args = packed.arguments() + (f32(self.hill),)
        for k, lo in enumerate(range(0, n, block)):
            hi = min(lo + block, n)
            s = np.ascontiguousarray(scale[lo:hi], dtype=f32)
            m = np.ascontiguousarray(factor[lo:hi], dtype=f32)
            x = np.empty((g, hi - lo), dtype=f32)
            xn = np.empty((packed.n_regulators, hi - lo), dtype=f32)
            if packed.ordered:
                compiled.sweep(x, xn, s, pert, m, *args)
            else:  # regulators not all before their targets: the layered sweep of steady_state
                mult = np.ones((hi - lo, g))
                mult[:, pert] = m[:, None]
                x[:] = self.steady_state(mult, s[:, None].astype(np.float64)).T
            key = np.random.SeedSequence([int(seed), k]).generate_state(1, np.uint64)[0]
            z = np.empty(2 * ((g * (hi - lo) + 1) // 2), dtype=f32)  # an even count: normals come in pairs
            compiled.relax(x, xn, z, s, pert, m, *args, f32(dt), f32(noise * dt**0.5), steps, key)
            out[lo:hi] = x.T
        return out


def random_grn(n_genes: int, n_masters: int, n_regulators: int, and_share: float, rng: np.random.Generator,
               max_terms: int = 2, repress_share: float = 0.3, level: float = 20.0, hill: float = 2.0,
               reuse_and: float = 0.6, or_share: float = 0.0) -> GRN:
    """A random DAG-ish network: masters (basal only) → regulators → targets, Hill terms, a share of AND terms.

    Parameters
    ----------
    n_genes, n_masters, n_regulators : int
        Genes in total; the first ``n_masters`` have only basal production; genes ``< n_regulators`` may regulate.
    and_share : float in [0, 1]
        Probability that a term is a two-regulator AND term (the non-additivity knob).
    rng : numpy.random.Generator
        Source of randomness.
    max_terms : int
        Terms per non-master gene are drawn from 1..max_terms.
    repress_share : float
        Probability that a regulator acts as a repressor.
    level : float
        Typical expression (molecules): basal rates and term strengths are drawn around it.
    hill : float
        Hill coefficient n.
    reuse_and : float
        Probability that an AND term reuses the regulator pair of an earlier AND term (modules: one pair of
        regulators jointly controlling several genes, which makes their double's interaction larger).
    or_share : float in [0, 1]
        Probability that a two-regulator term is an OR term instead of AND (no draw when 0, so the network of a
        given seed is unchanged).

    """
    basal = np.zeros(n_genes)
    basal[:n_masters] = level * rng.uniform(0.5, 1.5, n_masters)
    target, regs, act, strength = [], [], [], []
    earlier: list[list[int]] = []  # the two-regulator terms so far, repeats included (all regulators < i)
    for i in range(n_masters, n_genes):
        basal[i] = 0.05 * level  # leaky expression
        pool = np.arange(min(i, n_regulators))
        for _ in range(int(rng.integers(1, max_terms + 1))):
            two = rng.random() < and_share and len(pool) >= 2
            pick = rng.choice(pool, size=2 if two else 1, replace=False)
            if two and earlier and rng.random() < reuse_and:
                pick = earlier[int(rng.integers(len(earlier)))]
            if two:
                earlier.append([int(pick[0]), int(pick[1])])
            target.append(i)
            regs.append([int(pick[0]), int(pick[1]) if two else -1])
            act.append(rng.random(2) >= repress_share)
            strength.append(level * rng.uniform(1.0, 3.0) * (2.0 if two else 1.0))
    regs = np.array(regs).reshape(-1, 2)
    logic_or = (regs[:, 1] >= 0) & (rng.random(len(regs)) < or_share) if or_share > 0 else None
    grn = GRN(basal, np.array(target), regs, np.array(act).reshape(-1, 2),
              np.ones((len(target), 2)), np.array(strength), hill, logic_or)
    # half-saturation near the regulator's control level, so perturbations move φ through its sensitive range;
    # set layer by layer, since a gene's level depends on the half-saturations of its own inputs
    jitter = rng.uniform(0.7, 1.5, grn.regs.shape)
    x = np.zeros(n_genes)
    for layer in grn.layers():
        terms = np.isin(grn.target, layer)
        grn.half[terms] = np.maximum(x[np.maximum(grn.regs[terms], 0)], 1e-3) * jitter[terms]
        x[layer] = grn.production(x, np.ones(n_genes))[layer]
    return grn
