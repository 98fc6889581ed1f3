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
(About 600 lines: the kernels sit beside the model they compile; a ``_kernels.py`` of their own is the next split.)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

BLOCK = 128  # cells per pass of the compiled engine (GRN.langevin_compiled)
NB_INVERSION_MAX = 50.0  # means above: negative-binomial counts as Gamma–Poisson (the inversion takes ~1 + μ terms)


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
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the per-step tensors are small: on a shared node, threads cost more than they give
        try:
            x = self._torch_steps(x, factor, basal, reg, hn, offset, sign, strength, target, logic_or, gen, zeros,
                                  steps, dt, amplitude)
        finally:
            torch.set_num_threads(threads)
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
            self._packed = PackedTerms.from_grn(self)
        return self._packed

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
        packed, kernels = self.packed(), _kernels()
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
                kernels.sweep(x, xn, s, pert, m, *args)
            else:  # regulators not all before their targets: the layered sweep of steady_state
                mult = np.ones((hi - lo, g))
                mult[:, pert] = m[:, None]
                x[:] = self.steady_state(mult, s[:, None].astype(np.float64)).T
            key = np.random.SeedSequence([int(seed), k]).generate_state(1, np.uint64)[0]
            z = np.empty(2 * ((g * (hi - lo) + 1) // 2), dtype=f32)  # an even count: normals come in pairs
            kernels.relax(x, xn, z, s, pert, m, *args, f32(dt), f32(noise * dt**0.5), steps, key)
            out[lo:hi] = x.T
        return out

@dataclass(frozen=True)
class PackedTerms:
    """A network's terms for the compiled engine, sorted by target gene (``T`` terms, ``G`` genes).

    Attributes
    ----------
    start : (G + 1,) int64, the terms of gene i are ``start[i]:start[i + 1]``.
    reg : (T, 2) int64 regulators (a missing second regulator: 0, with ``single``).
    single : (T,) bool, one-regulator term.
    hn : (T, 2) float32 ``h^n``.
    offset, sign : (T, 2) float32, φ = offset + sign · x^n / (h^n + x^n): (0, 1) activator, (1, −1) repressor,
        (1, 0) no regulator.
    strength : (T,) float32 K_τ.
    logic_or : (T,) bool, OR term.
    basal : (G,) float32 b_i.
    n_regulators : genes ``< n_regulators`` include every regulator.
    ordered : every regulator precedes its target (the steady state is one sweep in gene order).

    """

    start: np.ndarray
    reg: np.ndarray
    single: np.ndarray
    hn: np.ndarray
    offset: np.ndarray
    sign: np.ndarray
    strength: np.ndarray
    logic_or: np.ndarray
    basal: np.ndarray
    n_regulators: int
    ordered: bool

    @classmethod
    def from_grn(cls, grn: GRN) -> PackedTerms:
        order = np.argsort(grn.target, kind="stable")
        target, regs, act = grn.target[order], grn.regs[order].reshape(-1, 2), grn.activating[order].reshape(-1, 2)
        valid = regs >= 0
        f32 = np.float32
        logic_or = np.zeros(len(order), bool) if grn.logic_or is None else grn.logic_or[order].astype(bool)
        return cls(start=np.searchsorted(target, np.arange(grn.n_genes + 1)).astype(np.int64),
                   reg=np.ascontiguousarray(np.maximum(regs, 0), dtype=np.int64), single=~valid[:, 1],
                   hn=np.ascontiguousarray(grn.half[order] ** grn.hill, dtype=f32),
                   offset=np.where(valid & act, 0.0, 1.0).astype(f32),
                   sign=np.where(valid, np.where(act, 1.0, -1.0), 0.0).astype(f32),
                   strength=grn.strength[order].astype(f32), logic_or=logic_or, basal=grn.basal.astype(f32),
                   n_regulators=int(regs.max(initial=-1)) + 1,
                   ordered=bool((regs < target[:, None]).all()))

    def arguments(self) -> tuple:
        """The arrays in the order the kernels take them."""
        return (self.basal, self.start, self.reg, self.single, self.hn, self.offset, self.sign, self.strength,
                self.logic_or)


def _production(acc, i, xn, basal, start, reg, single, hn, offset, sign, strength, logic_or):
    """``acc[b] = b_i + Σ_τ K_τ φ_τ0 φ_τ1`` over the cells b of a block (the bracket of P_i, module docstring).

    ``xn`` (n_regulators, B) holds ``x^n`` of the regulators; the loop over ``b`` is the vectorised one.
    """
    nb = acc.shape[0]
    for b in range(nb):
        acc[b] = basal[i]
    for t in range(start[i], start[i + 1]):
        k, u, h0, o0, s0 = strength[t], xn[reg[t, 0]], hn[t, 0], offset[t, 0], sign[t, 0]
        if single[t]:
            for b in range(nb):
                acc[b] += k * (o0 + s0 * u[b] / (u[b] + h0))
            continue
        w, h1, o1, s1 = xn[reg[t, 1]], hn[t, 1], offset[t, 1], sign[t, 1]
        if logic_or[t]:
            for b in range(nb):
                p = o0 + s0 * u[b] / (u[b] + h0)
                q = o1 + s1 * w[b] / (w[b] + h1)
                acc[b] += k * (p + q - p * q)
        else:
            for b in range(nb):
                acc[b] += k * (o0 + s0 * u[b] / (u[b] + h0)) * (o1 + s1 * w[b] / (w[b] + h1))


def _multiply(acc, i, scale, pert, factor):
    """``acc[b] *= s_b · m_ib``: the cell scale, and the perturbation multiplier when gene i is perturbed."""
    hit = False
    for g in pert:
        hit = hit or g == i
    if hit:
        for b in range(acc.shape[0]):
            acc[b] *= scale[b] * factor[b]
    else:
        for b in range(acc.shape[0]):
            acc[b] *= scale[b]


def _power(x, xn, hill):
    """``xn[j] = x[j]^n`` for the regulators (x ≥ 0)."""
    if hill == 2.0:
        for j in range(xn.shape[0]):
            for b in range(xn.shape[1]):
                xn[j, b] = x[j, b] * x[j, b]
    else:
        for j in range(xn.shape[0]):
            for b in range(xn.shape[1]):
                xn[j, b] = x[j, b] ** hill


_GAMMA, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # SplitMix64 (Steele et al.)
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
             -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)  # Cephes logf
_SIN_POLY = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)  # Cephes sinf on [−π/4, π/4]
_COS_POLY = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)  # Cephes cosf


def _compile():
    """The compiled kernels: ``sweep`` (steady state), ``step``, ``normals``, ``relax`` (normals and steps).

    ``fastmath`` and ``error_model='numpy'`` (no zero-division check), so that the loops over a block vectorise.
    """
    import numba

    jit = numba.njit(fastmath=True, error_model="numpy", nogil=True)
    production, multiply, power = jit(_production), jit(_multiply), jit(_power)
    as_bits, from_bits = _bitcasts()
    f32, u32, i32, u64 = np.float32, np.uint32, np.int32, np.uint64
    gamma, mix1, mix2 = u64(_GAMMA), u64(_MIX1), u64(_MIX2)
    lp, sp, cp = [tuple(f32(c) for c in poly) for poly in (_LOG_POLY, _SIN_POLY, _COS_POLY)]

    def box_muller(a, c):
        """Two independent standard normals from u1 = (2a + 1)/2^24 (a < 2^23) and u2 = c/2^24 (c < 2^24).

        ``r = √(−2 ln u1)``, ``(r cos 2πu2, r sin 2πu2)`` (Box & Muller 1958), float32: ln by the exponent and the
        Cephes polynomial on [√½, √2), sin and cos by Cephes polynomials on [−π/4, π/4] and the quadrant.
        Branch-free, so that a loop of it vectorises.
        """
        bits = as_bits(f32(u32(2) * a + u32(1)))
        e = f32(i32(bits >> u32(23)) - i32(127 + 24))
        m = from_bits((bits & u32(0x7FFFFF)) | u32(0x3F800000))  # u1 = m 2^e, m in [1, 2)
        big = f32(m > f32(1.4142135623730951))
        x = m * (f32(1.0) - f32(0.5) * big) - f32(1.0)  # m in [√½, √2), x = m − 1
        e = e + big
        x2 = x * x
        y = lp[0]
        for coef in lp[1:]:
            y = y * x + coef
        ln = x + (y * x * x2 - f32(0.5) * x2 + e * f32(-2.12194440e-4)) + e * f32(0.693359375)  # ln 2 in two parts
        r = np.sqrt(f32(-2.0) * ln)
        t = f32(c) * f32(2.0**-22)  # 4 u2 in [0, 4)
        q = i32(t + f32(0.5))  # nearest quadrant
        p = (t - f32(q)) * f32(np.pi / 2)
        p2 = p * p
        sn = p + p * p2 * (sp[2] + p2 * (sp[1] + p2 * sp[0]))
        cs = f32(1.0) - f32(0.5) * p2 + p2 * p2 * (cp[2] + p2 * (cp[1] + p2 * cp[0]))
        odd = f32(q & i32(1))  # rotate (cos p, sin p) by q quarter turns
        sign_c = f32(1.0) - f32(2.0) * f32(((q + i32(1)) >> i32(1)) & i32(1))
        sign_s = f32(1.0) - f32(2.0) * f32((q >> i32(1)) & i32(1))
        return r * sign_c * (cs + odd * (sn - cs)), r * sign_s * (sn + odd * (cs - sn))

    box_muller = jit(box_muller)

    def splitmix(key, i):
        """Output number i of the SplitMix64 generator started at ``key`` (64 random bits; Steele et al. 2014)."""
        h = key + (i + u64(1)) * gamma
        h = (h ^ (h >> u64(30))) * mix1
        h = (h ^ (h >> u64(27))) * mix2
        return h ^ (h >> u64(31))

    splitmix = jit(splitmix)

    def normals(z, key, counter):
        """``z`` (even length) ← standard normals; pair j from SplitMix64 output number ``counter + j`` of ``key``."""
        half = z.shape[0] // 2
        for j in range(half):
            h = splitmix(key, counter + u64(j))
            z[j], z[j + half] = box_muller(u32(h >> u64(41)), u32((h >> u64(8)) & u64(0xFFFFFF)))

    normals = jit(normals)

    def negative_binomial(mu, theta, key, out):
        """``out`` ← negative-binomial counts of means ``mu`` (flat float64) and dispersion θ (variance μ + μ²/θ).

        The Gamma–Poisson law, drawn by inversion of its CDF with one uniform each (SplitMix64 output j of
        ``key``): ``P(0) = (1 − q)^θ``, ``P(k) = P(k − 1) (k − 1 + θ) q / k`` with ``q = μ / (μ + θ)``, about
        ``1 + μ`` terms; a mean above :data:`NB_INVERSION_MAX` is drawn as ``Poisson(Gamma(θ, μ/θ))`` instead
        (numba's generator, seeded from ``key``).
        """
        np.random.seed(np.uint32(key >> u64(32)))
        for j in range(mu.shape[0]):
            m = mu[j]
            if m > NB_INVERSION_MAX:
                out[j] = np.random.poisson(np.random.gamma(theta, m / theta))
                continue
            u = np.float64(splitmix(key, u64(j)) >> u64(11)) * 2.0**-53  # in [0, 1)
            q = m / (m + theta)
            p = np.exp(theta * np.log1p(-q))
            cdf, k = p, 0
            while u >= cdf and p > 0.0:
                k += 1
                p *= (k - 1 + theta) * q / k
                cdf += p
            out[j] = k

    negative_binomial = numba.njit(nogil=True, error_model="numpy")(negative_binomial)

    def sweep(x, xn, scale, pert, factor, basal, start, reg, single, hn, offset, sign, strength, logic_or, hill):
        """Noise-free steady state ``x_i = P_i(x)`` of a block (G, B), genes in order (regulators first)."""
        acc = np.empty(x.shape[1], dtype=np.float32)
        for i in range(x.shape[0]):
            production(acc, i, xn, basal, start, reg, single, hn, offset, sign, strength, logic_or)
            multiply(acc, i, scale, pert, factor)
            for b in range(x.shape[1]):
                x[i, b] = acc[b]
            if i < xn.shape[0]:
                power(x[i:i + 1], xn[i:i + 1], hill)

    def step(x, xn, z, scale, pert, factor, basal, start, reg, single, hn, offset, sign, strength, logic_or, hill,
             dt, amplitude):
        """One Euler–Maruyama step of a block in place: ``x ← max(x + (P(x) − x) dt + σ √dt √(P + x) z, 0)``.

        ``z`` (G, B) standard normals; P from the levels before the step (``xn`` refreshed first).
        """
        power(x, xn, hill)
        acc = np.empty(x.shape[1], dtype=np.float32)
        for i in range(x.shape[0]):
            production(acc, i, xn, basal, start, reg, single, hn, offset, sign, strength, logic_or)
            multiply(acc, i, scale, pert, factor)
            for b in range(x.shape[1]):
                v = x[i, b]
                v += (acc[b] - v) * dt + amplitude * np.sqrt(acc[b] + v) * z[i, b]
                x[i, b] = max(v, np.float32(0.0))

    step = jit(step)

    def relax(x, xn, z, scale, pert, factor, basal, start, reg, single, hn, offset, sign, strength, logic_or, hill,
              dt, amplitude, steps, key):
        """``steps`` Euler–Maruyama steps of a block, the normals of step k numbered from ``k · len(z) / 2``."""
        noise = z[:x.size].reshape(x.shape)
        for k in range(steps):
            normals(z, key, u64(k) * u64(z.shape[0] // 2))
            step(x, xn, noise, scale, pert, factor, basal, start, reg, single, hn, offset, sign, strength, logic_or,
                 hill, dt, amplitude)

    return SimpleNamespace(sweep=jit(sweep), step=step, relax=jit(relax), normals=normals, box_muller=box_muller,
                           negative_binomial=negative_binomial)


def _bitcasts():
    """Two numba intrinsics: float32 reinterpreted as uint32 and back (for the exponent of a float)."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def as_bits(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(32))
        return types.uint32(types.float32), codegen

    @intrinsic
    def from_bits(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.FloatType())
        return types.float32(types.uint32), codegen

    return as_bits, from_bits


def negative_binomial(mu: np.ndarray, theta: float, seed: int | list[int]) -> np.ndarray:
    """Negative-binomial counts, float32 of the shape of ``mu`` (means, ≥ 0), dispersion θ: variance μ + μ²/θ.

    The law of ``Poisson(Gamma(θ, μ/θ))`` (:func:`sciml.perturbation.sim.simulate.counts_from_levels`), drawn by
    the compiled inversion of its CDF (about twice as fast), uniforms counter-based from ``seed`` (an entropy
    for ``numpy.random.SeedSequence``).
    """
    mu = np.ascontiguousarray(mu, dtype=np.float64)
    out = np.empty(mu.shape, dtype=np.float32)
    key = np.random.SeedSequence(seed).generate_state(1, np.uint64)[0]
    _kernels().negative_binomial(mu.reshape(-1), np.float64(theta), key, out.reshape(-1))
    return out


_KERNELS: list[SimpleNamespace] = []
_KERNELS_LOCK = threading.Lock()


def _kernels() -> SimpleNamespace:
    """The compiled kernels of :func:`_compile`, built once at first use: numba is imported then, not at import."""
    with _KERNELS_LOCK:
        if not _KERNELS:
            _KERNELS.append(_compile())
    return _KERNELS[0]


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
