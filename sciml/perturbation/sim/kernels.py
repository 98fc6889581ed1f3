"""The compiled (numba) engine of the GRN simulator: its packed terms and kernels.

:meth:`sciml.perturbation.sim.grn.GRN.langevin_compiled` relaxes blocks of cells with :func:`kernels` (the steady-state
sweep and the Euler–Maruyama steps of the chemical Langevin model, counter-based normals: SplitMix64 and a float32
Box–Muller) over :class:`PackedTerms`; :func:`negative_binomial` draws counts by inversion. numba is imported at the
first call of :func:`kernels`, not at import.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

NB_INVERSION_MAX = 50.0  # means above: negative-binomial counts as Gamma–Poisson (the inversion takes ~1 + μ terms)


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
    kernels().negative_binomial(mu.reshape(-1), np.float64(theta), key, out.reshape(-1))
    return out


_KERNELS: list[SimpleNamespace] = []
_KERNELS_LOCK = threading.Lock()


def kernels() -> SimpleNamespace:
    """The compiled kernels of :func:`_compile`, built once at first use: numba is imported then, not at import."""
    with _KERNELS_LOCK:
        if not _KERNELS:
            _KERNELS.append(_compile())
    return _KERNELS[0]

