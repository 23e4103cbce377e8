"""Numerical inference shared by the models: an exact conjugate posterior over a grid of noise
scales (time model), a censored (Tobit) grid posterior with Newton + expectation propagation
(memory model), NUTS, and small helpers.

Every routine here computes the posterior of a Pyro model defined in ``time.py`` / ``memory.py``;
the tests check that the log densities used here equal the Pyro models' traces.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyro
import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_value

LOG_2PI = math.log(2 * math.pi)

# Gauss-Hermite (probabilists') nodes/weights to average a function over a Normal: E f(m + s z).
_GH_Z, _GH_W = np.polynomial.hermite_e.hermegauss(7)
_GH_W = _GH_W / _GH_W.sum()


def jittered_cholesky(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower Cholesky factors of a stack of symmetric (k, k) matrices, (..., k, k), and the matrices
    actually factored. A matrix that is not numerically positive definite (a far-tail curvature, a
    near-duplicate row) gets a diagonal jitter of 1e-10, 1e-8, ... 1e-2 times its mean diagonal until
    it factors; the search must keep proposing, never stop on its own numerics. Raises LinAlgError
    only when even the largest jitter fails (the matrix is not finite)."""
    a = np.asarray(a, dtype=float)
    try:
        return np.linalg.cholesky(a), a
    except np.linalg.LinAlgError:
        pass
    if not np.isfinite(a).all():
        raise np.linalg.LinAlgError("matrix has non-finite entries: cannot factor it")
    k = a.shape[-1]
    scale = np.maximum(np.abs(np.einsum("...ii->...i", a)).mean(axis=-1), 1e-12)[..., None, None]
    for e in (1e-10, 1e-8, 1e-6, 1e-4, 1e-2):
        aj = a + e * scale * np.eye(k)
        try:
            return np.linalg.cholesky(aj), aj
        except np.linalg.LinAlgError:
            continue
    raise np.linalg.LinAlgError("matrix is not positive definite even with a jitter of 1e-2 x its diagonal")


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread: SVI/NUTS steps are tiny ops, and on a shared 2-core machine a
    second thread costs more in contention than it gains (measured 5x slower per SVI step)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def ndtr(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF, elementwise (float64)."""
    with one_thread():
        return torch.special.ndtr(torch.as_tensor(x, dtype=torch.float64)).numpy()


def log_ndtr(x: np.ndarray) -> np.ndarray:
    """log of the standard normal CDF, stable far into the lower tail (float64)."""
    with one_thread():
        return torch.special.log_ndtr(torch.as_tensor(x, dtype=torch.float64)).numpy()


def mills_ratio(z: np.ndarray) -> np.ndarray:
    """phi(z) / Phi(z), elementwise: the censored-normal factor's d log Phi / dz, stable for z << 0 (log space)."""
    return np.exp(-0.5 * z * z - 0.5 * LOG_2PI - log_ndtr(z))


def row_moments(x: np.ndarray, means: np.ndarray, covs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of x (n, k) and per mixture component g: x @ means[g] and x @ covs[g] @ x.

    means: (G, k), covs: (G, k, k) -> two (G, n) arrays. Done in torch on one thread: for 10,000
    rows this is ~1 ms, where multi-threaded BLAS on a loaded 2-core machine took ~30 ms per product.
    """
    with one_thread():
        xt = torch.as_tensor(x, dtype=torch.float64)
        mu = torch.as_tensor(means, dtype=torch.float64) @ xt.T  # (G, n)
        xc = xt.unsqueeze(0) @ torch.as_tensor(covs, dtype=torch.float64)  # (G, n, k)
        quad = (xc * xt.unsqueeze(0)).sum(-1)  # (G, n)
        return mu.numpy(), quad.clamp_min(0.0).numpy()


def gh_nodes() -> tuple[np.ndarray, np.ndarray]:
    return _GH_Z, _GH_W


@dataclass(frozen=True)
class GridPosterior:
    """Exact posterior of a Gaussian linear model y ~ N(X theta, sigma^2) with theta ~ N(m0, diag(s0^2))
    and log sigma ~ N(loc, scale), as a mixture over a grid of sigma values.

    Shapes: ``log_sigma`` (G,), ``weights`` (G,) summing to 1, ``means`` (G, q), ``covs`` (G, q, q).
    """

    log_sigma: np.ndarray
    weights: np.ndarray
    means: np.ndarray
    covs: np.ndarray
    log_evidence: float = math.nan
    """log p(y): the marginal likelihood, theta and log sigma integrated out over the grid (NaN where not computed).
    Two fits of the same trials under different priors compare by it (a Bayes factor)."""

    def mean(self) -> np.ndarray:
        return self.weights @ self.means  # (q,)

    def cov(self) -> np.ndarray:
        """Covariance of theta under the mixture (law of total variance): sum_g w_g (S_g + m_g m_g^T) - m m^T."""
        m = self.mean()
        second = np.einsum("g,gij->ij", self.weights, self.covs) + np.einsum(
            "g,gi,gj->ij", self.weights, self.means, self.means
        )
        return second - np.outer(m, m)

    def linear(self, a: np.ndarray) -> "GridPosterior":
        """The posterior of ``a @ theta`` (a: (r, q)): the same mixture, each component mapped."""
        return GridPosterior(self.log_sigma, self.weights, self.means @ a.T, a[None] @ self.covs @ a.T[None])

    def e_sigma2(self) -> float:
        return float(self.weights @ np.exp(2 * self.log_sigma))

    def marginal_quantiles(self, q: float) -> np.ndarray:
        """The q-quantile of every coordinate's marginal (a mixture of Normals), by bisection: shape (q,)."""
        mu = self.means  # (G, q)
        sd = np.sqrt(np.einsum("gii->gi", self.covs))
        lo = (mu - 8 * sd).min(axis=0)
        hi = (mu + 8 * sd).max(axis=0)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            cdf = self.weights @ ndtr((mid[None, :] - mu) / sd)
            lo = np.where(cdf < q, mid, lo)
            hi = np.where(cdf < q, hi, mid)
        return 0.5 * (lo + hi)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n joint draws: theta (n, q) and sigma (n,)."""
        g = rng.choice(len(self.weights), size=n, p=self.weights)
        chol, _ = jittered_cholesky(self.covs)  # (G, q, q); a grid point's covariance can be a rounding off PD
        z = rng.standard_normal((n, self.means.shape[1]))
        theta = self.means[g] + np.einsum("nij,nj->ni", chol[g], z)
        return theta, np.exp(self.log_sigma[g])


def conjugate_grid(
    x: np.ndarray,
    y: np.ndarray,
    m0: np.ndarray,
    s0: np.ndarray,
    log_sigma_loc: float,
    log_sigma_scale: float,
    *,
    points: int = 48,
) -> GridPosterior:
    """Exact posterior of theta given sigma on each grid point, weighted by p(y | sigma) p(log sigma).

    x: (n, q) design (intercept column included), y: (n,), m0/s0: (q,) prior mean/sd of theta.
    Two passes: a wide grid (loc +- 4 scale), then a grid of the same size over +- 6 posterior sd of
    log sigma, so the mixture stays accurate when the data pin sigma down.
    """
    lo = log_sigma_loc - 4 * log_sigma_scale
    hi = log_sigma_loc + 4 * log_sigma_scale
    post = _grid_pass(x, y, m0, s0, log_sigma_loc, log_sigma_scale, np.linspace(lo, hi, points))
    m = float(post.weights @ post.log_sigma)
    sd = math.sqrt(max(float(post.weights @ (post.log_sigma - m) ** 2), 0.0))
    step = (hi - lo) / (points - 1)
    half = max(6 * sd, 2 * step)
    return _grid_pass(x, y, m0, s0, log_sigma_loc, log_sigma_scale, np.linspace(m - half, m + half, points))


def _grid_pass(x, y, m0, s0, loc, scale, log_sigma) -> GridPosterior:
    n, q = x.shape
    s2 = np.exp(2 * log_sigma)  # (G,)
    prec0 = 1.0 / s0**2  # (q,)
    xtx = x.T @ x
    xty = x.T @ y
    a = np.diag(prec0)[None] + xtx[None] / s2[:, None, None]  # (G, q, q) posterior precision
    b = (prec0 * m0)[None] + xty[None] / s2[:, None]  # (G, q)
    chol, a = jittered_cholesky(a)
    means = np.linalg.solve(a, b[..., None])[..., 0]  # (G, q)
    eye = np.broadcast_to(np.eye(q), a.shape)
    covs = np.linalg.solve(a, eye)
    covs = 0.5 * (covs + np.swapaxes(covs, 1, 2))
    logdet_a = 2 * np.log(np.einsum("gii->gi", chol)).sum(axis=1)
    resid = y[None, :] - means @ x.T  # (G, n)
    quad = (resid**2).sum(axis=1) / s2 + (((means - m0[None]) / s0[None]) ** 2).sum(axis=1)
    log_ml = -0.5 * (n * (LOG_2PI + np.log(s2)) + np.log(s0**2).sum() + logdet_a + quad)
    log_prior = -0.5 * ((log_sigma - loc) / scale) ** 2
    lw = log_ml + log_prior
    w = np.exp(lw - lw.max())
    # p(y) = integral of p(y | sigma) N(log sigma; loc, scale) d log sigma, by the rectangle rule on the grid
    step = float(log_sigma[1] - log_sigma[0]) if len(log_sigma) > 1 else 1.0
    log_ev = float(lw.max() + np.log(w.sum()) + math.log(step) - math.log(scale * math.sqrt(2 * math.pi)))
    return GridPosterior(log_sigma=np.asarray(log_sigma, dtype=float), weights=w / w.sum(), means=means, covs=covs,
                         log_evidence=log_ev)


def tobit_neg_log_joint(
    eta: np.ndarray, log_sigma: np.ndarray, x_ok: np.ndarray, y_ok: np.ndarray, x_c: np.ndarray, c_c: np.ndarray,
    m0: np.ndarray, s0: np.ndarray,
) -> np.ndarray:
    """-log p(eta, data | sigma) + const for a censored Gaussian linear model, batched over G sigmas.

    eta: (G, k) coefficients (intercept first), log_sigma: (G,); x_ok: (n_ok, k) rows with an
    observed y_ok: (n_ok,); x_c: (n_c, k) rows censored from below at c_c: (n_c,) (y > c).
    f = 1/2 sum((eta - m0) / s0)^2 + n_ok log sigma + 1/2 sum(r^2) - sum(log Phi(z)),
    r = (y - x eta) / sigma, z = (x eta - c) / sigma. Returns (G,).
    """
    sig = np.exp(log_sigma)[:, None]
    r = (y_ok[None, :] - eta @ x_ok.T) / sig
    z = (eta @ x_c.T - c_c[None, :]) / sig
    return (
        0.5 * (((eta - m0) / s0) ** 2).sum(axis=1)
        + len(y_ok) * log_sigma
        + 0.5 * (r**2).sum(axis=1)
        - log_ndtr(z).sum(axis=1)
    )


def tobit_grid(
    x_ok: np.ndarray,
    y_ok: np.ndarray,
    x_c: np.ndarray,
    c_c: np.ndarray,
    m0: np.ndarray,
    s0: np.ndarray,
    log_sigma_loc: float,
    log_sigma_scale: float,
    eta0: np.ndarray,
    *,
    points: int = 32,
    ep: bool = True,
) -> GridPosterior:
    """Posterior of a censored (Tobit) Gaussian linear model with eta ~ N(m0, diag(s0^2)) and
    log sigma ~ N(loc, scale), as a mixture over a grid of sigma values.

    Given sigma, -log p(eta | sigma, data) is strictly convex (log Phi is concave), so Newton finds
    its mode in a few steps from ``eta0`` (the previous posterior mean: the warm start). Each grid
    point is weighted by its Laplace marginal likelihood times the prior of log sigma. The
    conditional posterior of eta is then computed by expectation propagation (``ep=True``; exact
    when nothing is censored), which matches the mean and variance of effects seen mostly through
    OOMs; the Gaussian at the mode (``ep=False``) put such an effect at 1.29 [0.92, 1.65] where NUTS
    gives 1.65 [1.12, 2.52] (EP: 1.64 [1.07, 2.21]). Integrating sigma out (instead of taking the
    joint mode) avoids the joint mode's underestimate of sigma when there are many coefficients
    per observation.
    """
    lo = log_sigma_loc - 4 * log_sigma_scale
    hi = log_sigma_loc + 4 * log_sigma_scale
    args = (x_ok, y_ok, x_c, c_c, m0, s0, log_sigma_loc, log_sigma_scale)
    post = _tobit_pass(*args, np.linspace(lo, hi, points), eta0, ep=False)  # coarse pass: sigma's range only
    m = float(post.weights @ post.log_sigma)
    sd = math.sqrt(max(float(post.weights @ (post.log_sigma - m) ** 2), 0.0))
    half = max(6 * sd, 2 * (hi - lo) / (points - 1))
    return _tobit_pass(*args, np.linspace(m - half, m + half, points), post.mean(), ep=ep)


def _tobit_pass(x_ok, y_ok, x_c, c_c, m0, s0, loc, scale, log_sigma, eta0, ep=True) -> GridPosterior:
    g_n, k = len(log_sigma), len(m0)
    s2 = np.exp(2 * log_sigma)  # (G,)
    sig = np.sqrt(s2)[:, None]
    prec0 = 1.0 / s0**2
    xtx = x_ok.T @ x_ok
    eta = np.tile(np.asarray(eta0, dtype=float), (g_n, 1))  # (G, k)
    f = tobit_neg_log_joint(eta, log_sigma, x_ok, y_ok, x_c, c_c, m0, s0)

    def grad_hess(eta):
        r = (y_ok[None, :] - eta @ x_ok.T) / sig  # (G, n_ok)
        z = (eta @ x_c.T - c_c[None, :]) / sig  # (G, n_c)
        lam = mills_ratio(z)
        kap = lam * (z + lam)  # d2(-log Phi)/dz2, in (0, 1); far in the tails the float arithmetic is not
        kap = np.clip(np.nan_to_num(kap, nan=1.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
        g = (eta - m0) * prec0 - (r @ x_ok) / sig - (lam @ x_c) / sig
        h = np.diag(prec0)[None] + xtx[None] / s2[:, None, None]
        if len(c_c):
            h = h + np.einsum("gn,ni,nj->gij", kap, x_c, x_c) / s2[:, None, None]
        return g, h

    for _ in range(50):
        g, h = grad_hess(eta)
        if float(np.abs(g).max()) < 1e-8:
            break
        step = -np.linalg.solve(h, g[..., None])[..., 0]
        slope = (g * step).sum(axis=1)
        t = np.ones(g_n)
        done = np.zeros(g_n, dtype=bool)
        for _ in range(40):  # backtracking per grid point (Armijo)
            fc = tobit_neg_log_joint(eta + t[:, None] * step, log_sigma, x_ok, y_ok, x_c, c_c, m0, s0)
            done |= fc <= f + 1e-4 * t * slope
            if done.all():
                break
            t = np.where(done, t, 0.5 * t)
        t = np.where(done, t, 0.0)
        eta = eta + t[:, None] * step
        f = tobit_neg_log_joint(eta, log_sigma, x_ok, y_ok, x_c, c_c, m0, s0)
        if float(np.abs(t[:, None] * step).max()) < 1e-12:
            break
    _, h = grad_hess(eta)
    chol, h = jittered_cholesky(h)
    logdet = 2 * np.log(np.einsum("gii->gi", chol)).sum(axis=1)
    covs = np.linalg.solve(h, np.broadcast_to(np.eye(k), h.shape))
    covs = 0.5 * (covs + np.swapaxes(covs, 1, 2))
    means = eta
    if ep and len(c_c):
        ep_res = _ep_moments(x_ok, y_ok, x_c, c_c, m0, s0, s2)
        if ep_res is not None:
            means, covs = ep_res
    lw = -f - 0.5 * logdet - 0.5 * ((log_sigma - loc) / scale) ** 2
    w = np.exp(lw - lw.max())
    return GridPosterior(log_sigma=np.asarray(log_sigma, dtype=float), weights=w / w.sum(), means=means, covs=covs)


def _solve_or_none(a: np.ndarray, k: int) -> np.ndarray | None:
    """inv(a) for a stack of (k, k) precision matrices; None when one is singular or not finite."""
    if not np.isfinite(a).all():
        return None
    try:
        return np.linalg.solve(a, np.broadcast_to(np.eye(k), a.shape))
    except np.linalg.LinAlgError:
        return None


def _ep_moments(x_ok, y_ok, x_c, c_c, m0, s0, s2, *, iters: int = 100, damping: float = 0.5, tol: float = 1e-6):
    """Expectation propagation for the censored factors given each sigma: moments of eta, (G, k)
    and (G, k, k), or None when it does not converge.

    Each OOM factor Phi((x eta - c) / sigma) is replaced by a Gaussian site in u = x eta whose
    parameters make the site's tilted distribution match the posterior's mean and variance
    (parallel updates, damped). Unlike the Laplace mode, this gets the mean and variance of an effect
    seen mostly through OOMs (a right-skewed posterior) nearly right.
    """
    g_n, k = len(s2), len(m0)
    prec0 = 1.0 / s0**2
    base_a = np.diag(prec0)[None] + (x_ok.T @ x_ok)[None] / s2[:, None, None]  # (G, k, k)
    base_b = (prec0 * m0)[None] + (x_ok.T @ y_ok)[None] / s2[:, None]  # (G, k)
    tau = np.zeros((g_n, len(c_c)))  # site precisions
    nu = np.zeros((g_n, len(c_c)))  # site precision * mean
    for _ in range(iters):
        a = base_a + np.einsum("gn,ni,nj->gij", tau, x_c, x_c)
        cov = _solve_or_none(a, k)
        if cov is None:  # a site's precision blew up: report non-convergence, the caller falls back
            return None
        mean = np.einsum("gij,gj->gi", cov, base_b + nu @ x_c)
        mu = mean @ x_c.T  # (G, n_c) marginal of u = x eta
        v = np.einsum("ni,gij,nj->gn", x_c, cov, x_c)
        v_cav = 1.0 / (1.0 / v - tau)
        if not (np.isfinite(v_cav).all() and (v_cav > 0).all()):
            return None
        mu_cav = v_cav * (mu / v - nu)
        sd = np.sqrt(s2[:, None] + v_cav)
        z = (mu_cav - c_c[None, :]) / sd
        r = mills_ratio(z)
        m_t = mu_cav + v_cav * r / sd  # tilted mean and variance of u
        v_t = v_cav - v_cav**2 * r * (z + r) / sd**2
        v_t = np.maximum(v_t, 1e-12 * v_cav)
        tau_new = np.maximum(1.0 / v_t - 1.0 / v_cav, 0.0)
        nu_new = m_t / v_t - mu_cav / v_cav
        nu_new = np.where(tau_new > 0, nu_new, 0.0)
        step = max(float(np.abs(tau_new - tau).max()), float(np.abs(nu_new - nu).max()))
        tau = (1 - damping) * tau + damping * tau_new
        nu = (1 - damping) * nu + damping * nu_new
        if step < tol:
            break
    else:
        return None
    a = base_a + np.einsum("gn,ni,nj->gij", tau, x_c, x_c)
    cov = _solve_or_none(a, k)
    if cov is None:
        return None
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))
    return np.einsum("gij,gj->gi", cov, base_b + nu @ x_c), cov


def gaussian_to_grid(mean: np.ndarray, cov: np.ndarray) -> GridPosterior:
    """A joint Gaussian over [eta (k), log sigma] as a mixture over Gauss-Hermite nodes of log sigma,
    each node carrying the conditional Gaussian of eta (so every fit method shares one representation)."""
    k = len(mean) - 1
    m_e, m_s = mean[:k], mean[k]
    s_ee, s_es, s_ss = cov[:k, :k], cov[:k, k], max(cov[k, k], 1e-12)
    ls = m_s + math.sqrt(s_ss) * _GH_Z
    means = m_e[None, :] + np.outer(ls - m_s, s_es / s_ss)
    cond = s_ee - np.outer(s_es, s_es) / s_ss
    return GridPosterior(log_sigma=ls, weights=_GH_W.copy(), means=means, covs=np.broadcast_to(cond, (len(ls), k, k)).copy())


def run_nuts(
    model: Callable[..., None],
    kwargs: dict,
    init: dict[str, torch.Tensor],
    *,
    num_samples: int,
    warmup_steps: int,
    seed: int,
    jit_compile: bool = True,
) -> dict[str, np.ndarray]:
    """NUTS on a Pyro model (exact, slow; for the report). Starts at ``init`` (the fast posterior's
    mean), adapts a dense mass matrix (the intercept and the one-hot effects are correlated), and
    JIT-compiles the potential (halves the time: 31 s vs 60 s for 150 + 150 draws, 13 latents, 30 trials).
    Returns draws per latent site as numpy arrays with a leading (num_samples,) axis."""
    pyro.set_rng_seed(seed)
    kernel = NUTS(
        model, init_strategy=init_to_value(values=init), full_mass=True, jit_compile=jit_compile, ignore_jit_warnings=True
    )
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True)
    with one_thread():
        mcmc.run(**kwargs)
    return {k: v.detach().numpy() for k, v in mcmc.get_samples().items()}
