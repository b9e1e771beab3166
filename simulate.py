"""The paper's mass-balance analysis made executable: Theorem 1 checked, and the Fig. 3 simulator.

Setting (BroRL, arXiv 2510.01180, Sec. 2 and App. C). One softmax over a vocabulary, logits z,
p = softmax(z). P are the correct tokens, the rest incorrect. N tokens are drawn; A ⊆ P are the
distinct sampled correct tokens, B the distinct sampled incorrect ones, U the unsampled ones.
Sampled tokens get reward R_c (correct) or R_w (incorrect), R_c ≥ 0 ≥ R_w; unsampled tokens get 0.

    Q_pos = Σ_{i∈P} p_i,  Q_neg = 1 - Q_pos          P_pos = Σ_{i∈A} p_i,  P_neg = Σ_{i∈B} p_i
    A_2 = Σ_{i∈A} p_i²,  B_2 = Σ_{i∈B} p_i²,  U_pos,2 = Σ_{i∈U∩P} p_i²,  U_neg,2 = Σ_{i∈U\\P} p_i²
    S_R = R_c·P_pos + R_w·P_neg                        (the "batch mood", in [R_w, R_c])

Update: a gradient step of size η on the TRPO-style linear surrogate -(1/N)·Σ_{i∈A∪B} R_i·p_i.
Since ∂p_i/∂z_j = p_i(δ_ij - p_j), the step is

    Δz_j = (η/N)·p_j·(R_j - S_R)                                              (paper eq. 3)

and to first order Δp_i = p_i(Δz_i - Σ_j p_j Δz_j). Summing over P:
Σ_{i∈P} p_iΔz_i = (η/N)[(R_c - S_R)A_2 - S_R·U_pos,2] and
Σ_j p_jΔz_j = (η/N)[R_c·A_2 + R_w·B_2 - S_R(A_2 + B_2 + U_pos,2 + U_neg,2)], so

    ΔQ_pos = Σ_{i∈P} p_iΔz_i - Q_pos·Σ_j p_jΔz_j
           = (η/N)[(R_c - S_R)·Q_neg·A_2 + (S_R - R_w)·Q_pos·B_2
                   + S_R·(Q_pos·U_neg,2 - Q_neg·U_pos,2)]

(Theorem 1). S_R ≤ R_c·P_pos ≤ R_c and S_R ≥ R_w·P_neg ≥ R_w, so the two sampled terms are never
negative; only the unsampled coupling term S_R·(Q_pos·U_neg,2 - Q_neg·U_pos,2) can shrink the
correct mass. Lemma 2: a token of probability p stays unsampled in N i.i.d. draws with probability
(1 - p)^N, so E[p²·1{unsampled}] = p²(1 - p)^N; Corollary 3: the expected unsampled second moment
Σ_i p_i²(1 - p_i)^N falls with N. Larger N leaves less mass to the term that can be negative.

`--check-theorem` verifies all of this numerically (float64 autograd through the update and the
softmax, random instances; Monte Carlo for Lemma 2). The trainer steps another loss,
-(1/N)·Σ_j A_j·log p_{y_j} with group-baselined advantages A_j (update.ADVANTAGES): the same
three terms for it are `logprob_update_terms`, whose docstring shows why the unsampled term vanishes
and the total is never negative then, and `--check-estimators` checks that for every estimator
beside raw rewards, whose total can be negative. The default run is the simulator of Fig. 3
(Sec. 4.1): 128,000 tokens of which 10,000 are correct (reward +1, the rest -1), logits 0 seeded
with z=3 on the correct tokens and one anchor token at z=5, N draws per step, rewards centred on the
batch mean, an AdamW step (lr 1e-3) on -(1/N)·Σ_draws r̃_j·p_{token j}, 1000 steps. Where the paper
is silent these are options: the anchor (incorrect and held fixed at z=5 by default: "fixed"),
AdamW's other settings (torch's defaults), and the seeds. The paper gives AdamW's learning rate but
no weight decay; we keep torch's default 0.01 (a careful reproduction changes nothing the paper does
not state), and `--weight-decay 0` is the alternative: it raises the N=512 share of correct tokens
above their start from 64% to 82%, and leaves the worst drops at a few 1e-6 either way
(docs/theory.md has both tables). Which tokens are correct does not matter: every token has its own
free logit, so labels are exchangeable; the correct tokens are the first `--n-correct` ones, the
anchor is the last.

Fig. 3 compares N at equal steps, so a larger N has drawn N times the tokens. `--equal-samples`
gives every N the same number of draws instead (samples / N steps), and `--optimizer sgd` with
`--lr-scaling linear` (lr·N) makes the expected step per draw the same at every N, so what is left
of an N-dependence comes from how the draws are grouped.

    python simulate.py --check-theorem
    python simulate.py --check-estimators
    python simulate.py --out runs/fig3                  # the paper's setup, 4 seeds
    python simulate.py --out runs/fig3-equal-samples-sgd --equal-samples 102400 --optimizer sgd \\
        --lr 300 --lr-scaling linear
"""

import argparse
import csv
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from update import ADVANTAGES

# ---- Theorem 1 -----------------------------------------------------------------------------------


def theorem1_terms(z, correct, sampled_correct, sampled_wrong, r_c: float, r_w: float, eta: float,
                   n: int):
    """The three terms of Theorem 1 and their sum, for one softmax: (sampled_pos, sampled_neg,
    unsampled, total).

    z: [V] logits; correct, sampled_correct (A), sampled_wrong (B): [V] bool masks.
    """
    p = torch.softmax(z, dim=-1)
    unsampled = ~(sampled_correct | sampled_wrong)
    q_pos = p[correct].sum()
    q_neg = p[~correct].sum()  # = 1 - Q_pos, summed directly to avoid cancellation when Q_pos ≈ 1
    a_2, b_2 = (p[sampled_correct] ** 2).sum(), (p[sampled_wrong] ** 2).sum()
    u_pos_2, u_neg_2 = (p[unsampled & correct] ** 2).sum(), (p[unsampled & ~correct] ** 2).sum()
    s_r = r_c * p[sampled_correct].sum() + r_w * p[sampled_wrong].sum()
    scale = eta / n
    sampled_pos = scale * (r_c - s_r) * q_neg * a_2
    sampled_neg = scale * (s_r - r_w) * q_pos * b_2
    unsampled_term = scale * s_r * (q_pos * u_neg_2 - q_neg * u_pos_2)
    return sampled_pos, sampled_neg, unsampled_term, sampled_pos + sampled_neg + unsampled_term


def surrogate_delta_z(z, sampled_correct, sampled_wrong, r_c: float, r_w: float, eta: float,
                      n: int):
    """Δz = -η·∇(surrogate), by autograd."""
    z = z.detach().clone().requires_grad_(True)
    p = torch.softmax(z, dim=-1)
    rewards = torch.where(sampled_correct, r_c, 0.0) + torch.where(sampled_wrong, r_w, 0.0)
    surrogate = -(rewards.to(z.dtype) * p).sum() / n  # each distinct sampled token counted once
    return -eta * torch.autograd.grad(surrogate, z)[0]


def first_order_change(z, mask, delta_z):
    """Σ_{i∈mask} Δp_i to first order for the logit change Δz, by autograd: ∇(Σ_{i∈mask} p_i)·Δz."""
    z = z.detach().clone().requires_grad_(True)
    return (torch.autograd.grad(torch.softmax(z, dim=-1)[mask].sum(), z)[0] * delta_z).sum()


def first_order_delta_q_pos(z, correct, sampled_correct, sampled_wrong, r_c: float, r_w: float,
                            eta: float, n: int):
    """ΔQ_pos to first order by autograd: Δz = -η·∇(surrogate), then ∇Q_pos · Δz."""
    return first_order_change(
        z, correct, surrogate_delta_z(z, sampled_correct, sampled_wrong, r_c, r_w, eta, n))


def random_instance(g: torch.Generator):
    """Random vocabulary, logits (flat or peaked), correct set, N draws, rewards, step size."""
    vocab = int(torch.randint(2, 2000, (1,), generator=g))
    peak = float(torch.rand(1, generator=g)) * 8  # 0: flat, 8: very peaked
    z = torch.randn(vocab, generator=g, dtype=torch.float64) * peak
    correct = torch.rand(vocab, generator=g) < float(torch.rand(1, generator=g))
    n = int(torch.randint(1, 1024, (1,), generator=g))
    draws = torch.multinomial(torch.softmax(z, -1), n, replacement=True, generator=g)
    sampled = torch.zeros(vocab, dtype=torch.bool)
    sampled[draws] = True
    r_c, r_w = float(torch.rand(1, generator=g)) * 2, -float(torch.rand(1, generator=g)) * 2
    return (z, correct, sampled & correct, sampled & ~correct, r_c, r_w,
            float(torch.rand(1, generator=g)), n)


def unsampled_second_moment_mc(p: torch.Tensor, n: int, trials: int, g: torch.Generator):
    """Monte Carlo mean and standard error of Σ_i p_i²·1{i unsampled in n draws} (Lemma 2)."""
    draws = torch.multinomial(p.expand(trials, -1), n, replacement=True, generator=g)
    counts = torch.zeros(trials, len(p), dtype=torch.long).scatter_add_(
        1, draws, torch.ones_like(draws))
    moments = ((counts == 0) * p**2).sum(-1)
    return float(moments.mean()), float(moments.std() / trials**0.5)


def check_theorem(instances: int = 2000, seed: int = 0) -> bool:
    g = torch.Generator().manual_seed(seed)
    # min_sampled: smallest sampled term / the terms' size
    worst_err, min_sampled = 0.0, float("inf")
    for _ in range(instances):
        z, correct, a, b, r_c, r_w, eta, n = random_instance(g)
        sampled_pos, sampled_neg, unsampled, closed = theorem1_terms(z, correct, a, b, r_c, r_w,
                                                                     eta, n)
        auto = first_order_delta_q_pos(z, correct, a, b, r_c, r_w, eta, n)
        scale = float(abs(sampled_pos) + abs(sampled_neg) + abs(unsampled))
        if scale > 0:
            worst_err = max(worst_err, float(abs(closed - auto)) / scale)
            min_sampled = min(min_sampled, float(sampled_pos) / scale, float(sampled_neg) / scale)
    print(f"Theorem 1: {instances} random instances (V 2-2000, N 1-1023, flat to peaked logits), "
          "float64")
    print(f"  worst relative error of the closed form vs autograd: {worst_err:.2e} (relative to "
          "the terms' sizes)")
    print(f"  smallest sampled term, relative to the terms' sizes: {min_sampled:.2e} "
          "(must be >= 0 up to float64 rounding, -1e-12)")
    ok = worst_err <= 1e-6 and min_sampled >= -1e-12
    p = torch.softmax(torch.randn(500, generator=g, dtype=torch.float64) * 3, -1)
    print("Lemma 2 / Corollary 3: E[unsampled second moment] vs sum p^2 (1-p)^N, 4000 trials each")
    previous = float("inf")
    for n in (1, 4, 16, 64, 256, 1024):
        expected = float((p**2 * (1 - p) ** n).sum())
        mean, se = unsampled_second_moment_mc(p, n, 4000, g)
        within = abs(mean - expected) <= 4 * se + 1e-15
        ok &= within and expected < previous
        previous = expected
        print(f"  N={n:5d}: expected {expected:.4e}, Monte Carlo {mean:.4e} ± {se:.1e} "
              f"{'ok' if within else 'MISMATCH'}")
    print("PASS" if ok else "FAIL")
    return ok


# ---- Theorem 1 for the trainer's update ----------------------------------------------------------


def logprob_update_terms(z, correct, tokens, advantages, eta: float):
    """The three Theorem 1 terms and their sum for one step of the trainer's loss
    -(1/N)·Σ_j A_j·log p_{y_j}: (sampled_pos, sampled_neg, unsampled, total).

    z: [V] logits; correct: [V] bool; tokens: [N] the group's draws y_j; advantages: [N] their A_j.

    The trainer does not step the paper's surrogate. At ratio 1 (first mini-batch, no KL, TIS
    weights 1) its clipped loss has the gradient of -(1/N)·Σ_j A_j·log p_{y_j} over the group's
    draws j, A_j from one of update.ADVANTAGES. Since ∂log p_y/∂z_k = δ_yk - p_k, a step of size η
    moves the logits by

        Δz_k = (η/N)·(C_k - p_k·M),   C_k = Σ_{j: y_j = k} A_j (0 for an unsampled k),  M = Σ_j A_j,

    and the same algebra as Theorem 1 (A, B, U the distinct sampled correct, sampled incorrect and
    unsampled tokens; Σ_{k∈A} p_k·C_k = Σ_{j: y_j∈P} A_j·p_{y_j}) gives

        ΔQ_pos = (η/N)[Q_neg·(Σ_{j: y_j∈P} A_j·p_{y_j} - M·A_2)
                       + Q_pos·(M·B_2 - Σ_{j: y_j∉P} A_j·p_{y_j})
                       + M·(Q_pos·U_neg,2 - Q_neg·U_pos,2)],

    Theorem 1 with the batch mood S_R replaced by M and the sampled p_i·R_i by the advantage each
    token collected. Every estimator in update.ADVANTAGES centres the rewards on their group's mean
    (GRPO then divides by the group's std, REINFORCE++-baseline whitens over the batch: a positive
    scale, and a batch mean that is 0 because every group's centred rewards sum to 0), so M = 0: the
    unsampled coupling term vanishes, unsampled logits do not move, and since a correct draw's
    reward is the group's largest, A_j ≥ 0 for y_j∈P and A_j ≤ 0 for y_j∉P: both sampled terms are
    ≥ 0, so ΔQ_pos ≥ 0 in every group, at every N. Raw rewards (A_j = R_j, no baseline) leave M ≠ 0,
    and the total can be negative, as in the paper's surrogate. What the baseline does not prevent:
    every unsampled token, correct or not, changes by Δlog p_u = -Σ_k p_k·Δz_k =
    -(η/N)·Σ_j A_j·p_{y_j} (M = 0), negative whenever the sampled correct tokens outweigh the
    sampled incorrect ones, so single unsampled correct tokens still lose probability while the
    total grows.
    """
    n = len(tokens)
    p = torch.softmax(z, dim=-1)
    collected = torch.zeros_like(p).index_add_(0, tokens, advantages.to(p.dtype))  # C_k
    m = advantages.to(p.dtype).sum()
    sampled = torch.zeros_like(correct).index_fill_(0, tokens, True)
    sampled_correct, sampled_wrong, unsampled = sampled & correct, sampled & ~correct, ~sampled
    q_pos, q_neg = p[correct].sum(), p[~correct].sum()
    a_2, b_2 = (p[sampled_correct] ** 2).sum(), (p[sampled_wrong] ** 2).sum()
    u_pos_2, u_neg_2 = (p[unsampled & correct] ** 2).sum(), (p[unsampled & ~correct] ** 2).sum()
    scale = eta / n
    sampled_pos = scale * q_neg * ((p * collected)[sampled_correct].sum() - m * a_2)
    sampled_neg = scale * q_pos * (m * b_2 - (p * collected)[sampled_wrong].sum())
    unsampled_term = scale * m * (q_pos * u_neg_2 - q_neg * u_pos_2)
    return sampled_pos, sampled_neg, unsampled_term, sampled_pos + sampled_neg + unsampled_term


def logprob_update_delta_z(z, tokens, advantages, eta: float):
    """Δz = -η·∇ of -(1/N)·Σ_j A_j·log p_{y_j}, by autograd."""
    z = z.detach().clone().requires_grad_(True)
    loss = -(advantages.to(z.dtype) * torch.log_softmax(z, dim=-1)[tokens]).sum() / len(tokens)
    return -eta * torch.autograd.grad(loss, z)[0]


def random_group(g: torch.Generator):
    """A random categorical group: logits (flat or peaked) over 2-300 tokens, a correct set, N in
    [2, 63] draws."""
    vocab = int(torch.randint(2, 301, (1,), generator=g))
    z = torch.randn(vocab, generator=g, dtype=torch.float64) * float(torch.rand(1, generator=g)) * 8
    correct = torch.rand(vocab, generator=g) < float(torch.rand(1, generator=g))
    n = int(torch.randint(2, 64, (1,), generator=g))
    tokens = torch.multinomial(torch.softmax(z, -1), n, replacement=True, generator=g)
    return z, correct, tokens


def group_weights(name: str, correct_drawn):
    """The per-draw weights A_j of one group: an update.ADVANTAGES estimator on binary rewards (1
    correct, 0 not), or "raw": the rewards ±1 themselves, no baseline."""
    if name == "raw":
        return torch.where(correct_drawn, 1.0, -1.0).double()
    rewards = correct_drawn.double()
    return ADVANTAGES[name](rewards, torch.zeros(len(rewards), dtype=torch.long))


def rounding_bound(vocab: int, weights, eta: float) -> float:
    """How far float64 rounding can move a computed ΔQ_pos: every term is a sum of at most V + N
    products of probabilities (≤ 1) and weights, of size ≤ (η/N)·Σ_j |A_j|, and each sum or product
    adds at most 2^-53 relative; 4 such steps per term."""
    return 4 * (vocab + len(weights)) * 2**-53 * eta / len(weights) * float(weights.abs().sum())


# every ADVANTAGES estimator, then the two raw-reward updates: the trainer's loss with A_j = R_j =
# ±1 (no baseline), and Theorem 1's own, the paper's surrogate (R_c = 1, R_w = -1)
ESTIMATOR_ROWS = [*ADVANTAGES, "raw", "surrogate"]


def estimator_step(name: str, z, correct, tokens, eta: float = 1.0):
    """One group's step under one row of ESTIMATOR_ROWS: the closed-form (sampled_pos,
    sampled_neg, unsampled, total), Δz by autograd, and the float64 rounding bound."""
    weights = group_weights("raw" if name == "surrogate" else name, correct[tokens])
    if name == "surrogate":
        sampled = torch.zeros_like(correct).index_fill_(0, tokens, True)
        args = (sampled & correct, sampled & ~correct, 1.0, -1.0, eta, len(tokens))
        return (theorem1_terms(z, correct, *args), surrogate_delta_z(z, *args),
                rounding_bound(len(z), weights, eta))
    return (logprob_update_terms(z, correct, tokens, weights, eta),
            logprob_update_delta_z(z, tokens, weights, eta), rounding_bound(len(z), weights, eta))


def check_estimators(groups: int = 2000, seed: int = 0) -> bool:
    """Theorem 1's terms for every row of ESTIMATOR_ROWS over the same random groups: the closed
    form against autograd, the sign of the total (never below 0 with a group baseline, which is
    checked; below 0 in a few groups in a thousand with raw rewards, which is counted), and how
    often unsampled correct tokens lose probability."""
    g = torch.Generator().manual_seed(seed)
    instances = [random_group(g) for _ in range(groups)]
    print(f"Theorem 1 for the trainer's update: {groups} random categorical groups (V 2-300, "
          "N 2-63, flat to peaked logits, binary rewards), float64, η = 1; mean of each term")
    print(f"{'row':>22} | sampled correct | sampled wrong | unsampled | total     | total < 0 "
          "| unsampled < 0 | an unsampled correct token falls | worst |closed - autograd|")
    ok = True
    for name in ESTIMATOR_ROWS:
        sums, negative_total, negative_unsampled, falls, worst = torch.zeros(4), 0, 0, 0, 0.0
        for z, correct, tokens in instances:
            terms, delta_z, bound = estimator_step(name, z, correct, tokens)
            sums += torch.tensor([float(t) for t in terms])
            negative_total += float(terms[3]) < -bound
            negative_unsampled += float(terms[2]) < -bound
            delta_log_p = delta_z - (torch.softmax(z, -1) * delta_z).sum()
            unsampled_correct = correct.clone().index_fill_(0, tokens, False)
            falls += bool((delta_log_p[unsampled_correct] < -bound).any())
            error = abs(float(terms[3]) - float(first_order_change(z, correct, delta_z)))
            worst = max(worst, error / max(bound, 1e-300))
        means = sums / groups
        print(f"{name:>22} | {means[0]:15.3e} | {means[1]:13.3e} | {means[2]:9.2e} | "
              f"{means[3]:9.3e} | {negative_total:9d} | {negative_unsampled:13d} | "
              f"{falls:32d} | {worst:.2f} rounding bounds")
        ok &= worst <= 2  # closed form and autograd each within one rounding bound
        ok &= negative_total == 0 or name not in ADVANTAGES
    print("(rounding bound: 4·(V + N)·2^-53·(η/N)·Σ_j |A_j| per group; 'below 0': below minus "
          "it)")
    print("PASS" if ok else "FAIL")
    return ok

# ---- the Fig. 3 simulator ------------------------------------------------------------------------


@dataclass
class SimConfig:
    vocab: int = 128_000
    n_correct: int = 10_000
    correct_logit: float = 3.0
    anchor_logit: float = 5.0
    anchor_correct: bool = False
    train_anchor: bool = False
    temperature: float = 1.0
    optimizer: str = "adamw"  # or "sgd"
    lr: float = 1e-3
    lr_scaling: str = "none"  # or "linear": lr·N, the same step per draw whatever N
    weight_decay: float = 0.01  # AdamW's (SGD runs without)
    steps: int = 1000
    samples: int = 0  # > 0: every N draws this many tokens in samples / N steps (steps unused)
    ns: list[int] = field(default_factory=lambda: [4, 8, 16, 512, 51200])
    seeds: int = 4
    seed: int = 0


def softmax_(z: torch.Tensor, out: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Row softmax of z / T into `out`, rows summing to 1 in float32 (torch.softmax's CPU kernel
    loses ~4e-4 of the mass over 128,000 entries, more than the per-token changes the simulator
    tracks)."""
    torch.sub(z, z.amax(-1, keepdim=True), out=out)
    if temperature != 1.0:
        out.div_(temperature)
    out.exp_()
    return out.div_(out.sum(-1, keepdim=True))


def initial_state(cfg: SimConfig):
    """Seeded logits [V] and correct-token mask [V]: the first n_correct tokens, and the anchor
    (last) if chosen."""
    correct = torch.zeros(cfg.vocab, dtype=torch.bool)
    correct[: cfg.n_correct] = True
    correct[-1] = cfg.anchor_correct
    z = torch.where(correct, cfg.correct_logit, 0.0)
    z[-1] = cfg.anchor_logit
    return z, correct


class TokenSampler:
    """Token ids [S, n]: n i.i.d. draws from each row of p, row r drawn with its own generator (so a
    seed's trajectory is the same whichever rows it is batched with), without a per-sample Python
    loop.

    Small n: torch.multinomial. Large n: inverse-CDF sampling with the n uniforms generated already
    sorted (normalised cumulative sums of n + 1 exponential spacings are distributed as sorted
    uniforms), so the binary searches walk the CDF in order (faster than torch.multinomial at
    n = 51,200), exact up to float64 rounding. Buffers are reused: fresh multi-MB allocations every
    step cost more (page faults) than the arithmetic.
    """

    MULTINOMIAL_MAX = 4096  # above this, inverse-CDF sampling is faster

    def __init__(self, vocab: int, n: int, generators: list[torch.Generator]):
        self.n, self.generators = n, generators
        rows = len(generators)
        self.tokens = torch.empty(rows, n, dtype=torch.long)
        if n > self.MULTINOMIAL_MAX:
            self.cdf = torch.empty(rows, vocab, dtype=torch.float64)
            self.points = torch.empty(rows, n + 1, dtype=torch.float64)
            self.uniforms = torch.empty(rows, n, dtype=torch.float64)

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        if self.n <= self.MULTINOMIAL_MAX:
            for row, g in enumerate(self.generators):
                torch.multinomial(p[row], self.n, replacement=True, generator=g,
                                  out=self.tokens[row])
            return self.tokens
        torch.cumsum(p, -1, dtype=torch.float64, out=self.cdf)
        for row, g in enumerate(self.generators):
            self.points[row].uniform_(generator=g)
        self.points.log_().neg_().cumsum_(-1)
        torch.div(self.points[:, : self.n], self.points[:, self.n :],
                  out=self.uniforms).mul_(self.cdf[:, -1:])
        return torch.searchsorted(self.cdf, self.uniforms,
                                  out=self.tokens).clamp_(max=p.shape[1] - 1)


def memory_needed(cfg: SimConfig) -> int:
    """Bytes the sweep holds at its largest, about: the [seeds, V] float32 logits, probabilities,
    gradient and two AdamW moments, the sampler's float64 buffers for a large N, and the curves of
    every N (3 float32 metrics per step and seed)."""
    largest_n = max(cfg.ns)
    sampler = (8 * (cfg.vocab + 3 * largest_n + 1) if largest_n > TokenSampler.MULTINOMIAL_MAX
               else 8 * largest_n)
    curves = sum(12 * (steps_at(cfg, n) + 1) for n in cfg.ns)
    return cfg.seeds * (20 * cfg.vocab + sampler + curves)


def steps_at(cfg: SimConfig, n: int) -> int:
    """Steps at N: cfg.steps (equal steps, Fig. 3), or cfg.samples / N (equal samples)."""
    return cfg.samples // n if cfg.samples else cfg.steps


def lr_at(cfg: SimConfig, n: int) -> float:
    """The learning rate at N: cfg.lr, or cfg.lr·N with linear scaling. SGD on the mean over the
    N draws then moves the logits by lr per draw at every N, so at equal samples every N takes the
    same expected step, up to the batch-mean baseline's factor (1 - 1/N)."""
    return cfg.lr * n if cfg.lr_scaling == "linear" else cfg.lr


def seed_generator(cfg: SimConfig, n: int, seed_index: int) -> torch.Generator:
    """The random stream of one (N, seed) run, fixed by cfg.seed alone."""
    return torch.Generator().manual_seed((cfg.seed * 1_000_003 + n) * 1_009 + seed_index)


def simulate_n(cfg: SimConfig, n: int, seed_indices: list[int]) -> dict[str, torch.Tensor]:
    """The given seeds at one N, one row of logits per seed: {metric: [steps + 1,
    len(seed_indices)]}.

    One N at a time keeps the [seeds, V] working set in cache, and every [seeds, V] buffer is
    allocated once.
    """
    z0, correct = initial_state(cfg)
    rewards = torch.where(correct, 1.0, -1.0)
    z = z0.expand(len(seed_indices), -1).clone().requires_grad_(True)  # [S, V]
    lr = lr_at(cfg, n)
    optimizer = (torch.optim.AdamW([z], lr=lr, weight_decay=cfg.weight_decay, fused=True)
                 if cfg.optimizer == "adamw" else torch.optim.SGD([z], lr=lr))
    sample_tokens = TokenSampler(cfg.vocab, n, [seed_generator(cfg, n, s) for s in seed_indices])
    p, grad = torch.empty_like(z, requires_grad=False), torch.empty_like(z, requires_grad=False)
    p0 = softmax_(z0, torch.empty_like(z0), cfg.temperature)[correct]
    history = {"correct_mass": [], "frac_increased": [], "worst_change": []}

    def record(p):
        correct_p = p[:, : cfg.n_correct] if not cfg.anchor_correct else p[:, correct]
        change = correct_p - p0
        history["correct_mass"].append(correct_p.sum(-1))
        history["frac_increased"].append((change > 0).float().mean(-1))
        history["worst_change"].append(change.min(-1).values)
        if not math.isfinite(history["correct_mass"][-1].sum()):  # before anything samples from p
            raise FloatingPointError(f"N={n}: the logits left the float range at step "
                                     f"{len(history['correct_mass']) - 1}: a lower --lr?")

    with torch.no_grad():
        record(softmax_(z, p, cfg.temperature))
        for _ in range(steps_at(cfg, n)):
            tokens = sample_tokens(p)  # [S, N]
            drawn_rewards = rewards[tokens]
            # surrogate -(1/N) Σ_j r̃_j·p_{token j}, r̃_j = R_j - mean(R) (rewards centred on the
            # batch); its gradient is p_i·(Σ_j c_j·p_{token j} - Σ_{j: token j = i} c_j) / T with
            # c_j = r̃_j / N (the softmax Jacobian, no autograd): a dense term plus a scatter over
            # the N draws only
            coef = drawn_rewards.sub_(drawn_rewards.mean(-1, keepdim=True)).div_(n)
            drawn = coef.mul_(p.gather(1, tokens))  # c_j·p_{token j}
            torch.mul(p, drawn.sum(-1,
                                   keepdim=True), out=grad).scatter_add_(1, tokens, drawn.neg_())
            if cfg.temperature != 1.0:
                grad.div_(cfg.temperature)
            if not cfg.train_anchor:
                grad[:, -1] = 0.0
            z.grad = grad
            optimizer.step()
            if not cfg.train_anchor:
                z[:, -1] = cfg.anchor_logit  # held fixed (AdamW's weight decay would move it)
            record(softmax_(z, p, cfg.temperature))
    return {name: torch.stack(values) for name, values in history.items()}


def _simulate_one(cfg: SimConfig, n: int, seed_indices: list[int],
                  threads: int) -> dict[str, torch.Tensor]:
    if threads:
        torch.set_num_threads(threads)
    return simulate_n(cfg, n, seed_indices)


def simulate(cfg: SimConfig, workers: int = 1) -> dict[int, dict[str, torch.Tensor]]:
    """The sweep over N: {N: {metric: [steps + 1, seeds]}}, the same numbers whatever `workers` is
    (every (N, seed) run has its own generator). With workers > 1 the seeds of each N are split into
    `workers` slices that run in parallel processes of one thread each, costliest N first (steps ×
    (V + N)): the steps are too small to gain from intra-op threads, and slicing the seeds keeps the
    processes evenly loaded (at equal steps N=51,200 alone takes as long as all the other N
    together).
    """
    if workers <= 1:
        return {n: _simulate_one(cfg, n, list(range(cfg.seeds)), threads=0) for n in cfg.ns}
    from concurrent.futures import ProcessPoolExecutor

    slices = [part.tolist()
              for part in torch.arange(cfg.seeds).tensor_split(min(workers, cfg.seeds))]
    with ProcessPoolExecutor(max_workers=len(slices)) as pool:
        futures = {n: [pool.submit(_simulate_one, cfg, n, part, 1) for part in slices]
                   for n in sorted(cfg.ns, key=lambda n: -steps_at(cfg, n) * (cfg.vocab + n))}
        try:
            parts = {n: [f.result() for f in futures[n]] for n in cfg.ns}
        except BaseException:  # a run that diverged, or Ctrl-C: the rest need not run
            pool.shutdown(cancel_futures=True)
            raise
    return {n: {name: torch.cat([part[name] for part in parts[n]], dim=1) for name in parts[n][0]}
            for n in cfg.ns}


def summarize(results: dict[int, dict[str, torch.Tensor]]) -> dict[str, dict[str, float]]:
    return {
        str(n): {
            "correct_mass": float(m["correct_mass"][-1].mean()),
            "frac_increased": float(m["frac_increased"][-1].mean()),
            "worst_change": float(m["worst_change"][-1].mean()),
            "shrink_seed_frac": float((m["worst_change"][-1] < 0).float().mean()),
        }
        for n, m in results.items()
    }


def write_outputs(results, cfg: SimConfig, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["n", "step", "metric", "mean", "std", "min", "max"])
        for n, m in results.items():
            for name, values in m.items():
                for step in range(values.shape[0]):
                    row = values[step]
                    writer.writerow([n, step, name, f"{row.mean():.8g}",
                                     f"{row.std(unbiased=False):.8g}",
                                     f"{row.min():.8g}", f"{row.max():.8g}"])
    summary = summarize(results)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    plot(results, cfg, out / "fig3.png")
    return summary


def plot(results, cfg: SimConfig, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = {"correct_mass": "(i) total correct mass Q_pos",
              "frac_increased": "(ii) correct tokens above step 0",
              "worst_change": "(iii) worst change among correct tokens"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, (name, title) in zip(axes, titles.items()):
        for n, m in results.items():
            values = m[name]
            mean, std = values.mean(-1), values.std(-1, unbiased=False)
            x = torch.arange(len(mean)) * (n if cfg.samples else 1)
            ax.plot(x, mean, label=f"N={n}")
            ax.fill_between(x, mean - std, mean + std, alpha=0.2)
        ax.set_title(title)
        ax.set_xlabel("tokens drawn (N × step)" if cfg.samples else "step")
        if name == "worst_change":
            ax.set_yscale("symlog", linthresh=1e-7)
    axes[0].legend()
    lr = f"lr {cfg.lr:g}" + ("·N" if cfg.lr_scaling == "linear" else "")
    budget = (f"equal samples: {cfg.samples:,} draws per N" if cfg.samples
              else f"equal steps: {cfg.steps:,}")
    fig.suptitle(f"BroRL Fig. 3 simulator: V={cfg.vocab}, {cfg.n_correct} correct, {cfg.seeds} "
                 f"seeds (mean ± std); {'AdamW' if cfg.optimizer == 'adamw' else 'SGD'} {lr}, "
                 f"{budget}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def earlier_settings(path: Path) -> dict | None:
    """The settings of the simulation already written at `path` (a config.json; an unreadable one
    counts as settings of its own), or None when there is none."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        return {}


def main(argv: list[str] | None = None) -> None:
    d = SimConfig()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check-theorem", action="store_true",
                        help="verify Theorem 1 and Lemma 2 numerically, then exit")
    parser.add_argument("--check-estimators", action="store_true",
                        help="Theorem 1's terms for update.ADVANTAGES's estimators and for raw "
                             "rewards on random groups, then exit")
    parser.add_argument("--instances", type=int, default=2000,
                        help="random instances (groups) for --check-theorem / --check-estimators")
    parser.add_argument("--out", type=Path, default=Path("runs/fig3"),
                        help="output directory for the simulator")
    parser.add_argument("--vocab", type=int, default=d.vocab, help="vocabulary size")
    parser.add_argument("--n-correct", type=int, default=d.n_correct,
                        help="number of correct tokens (reward +1)")
    parser.add_argument("--correct-logit", type=float, default=d.correct_logit,
                        help="initial logit of correct tokens")
    parser.add_argument("--anchor-logit", type=float, default=d.anchor_logit,
                        help="initial logit of the anchor token")
    parser.add_argument("--anchor-correct", action="store_true",
                        help="make the anchor token correct")
    parser.add_argument("--train-anchor", action="store_true",
                        help="let the anchor's logit be trained")
    parser.add_argument("--temperature", type=float, default=d.temperature,
                        help="softmax temperature")
    parser.add_argument("--optimizer", choices=["adamw", "sgd"], default=d.optimizer,
                        help="AdamW (the paper's) or plain SGD")
    parser.add_argument("--lr", type=float, default=d.lr, help="learning rate")
    parser.add_argument("--lr-scaling", choices=["none", "linear"], default=d.lr_scaling,
                        help="linear: the learning rate at N is lr·N (the same step per draw)")
    parser.add_argument("--weight-decay", type=float, default=d.weight_decay,
                        help="AdamW weight decay (torch's default; the paper states none)")
    parser.add_argument("--steps", type=int, default=d.steps, help="RL steps")
    parser.add_argument("--equal-samples", dest="samples", type=int, default=d.samples,
                        help="compare N at equal samples instead of equal steps: every N draws "
                             "this many tokens (a multiple of every N), in samples / N steps")
    parser.add_argument("--ns", type=int, nargs="+", default=d.ns,
                        help="rollouts per step N to compare")
    parser.add_argument("--seeds", type=int, default=d.seeds,
                        help="independent runs per N (vectorised)")
    parser.add_argument("--seed", type=int, default=d.seed, help="base random seed")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="parallel processes, each running a slice of the seeds of one N at a "
                             "time (1: in this process)")
    args = parser.parse_args(argv)
    if args.check_theorem or args.check_estimators:
        if args.instances < 1:
            parser.error("--instances must be >= 1")
        check = check_theorem if args.check_theorem else check_estimators
        sys.exit(0 if check(args.instances, args.seed) else 1)
    problems = [
        (args.vocab >= 2, "--vocab must be >= 2"), (0 < args.n_correct < args.vocab,
         "--n-correct must be in [1, vocab - 1] (the last token is the anchor)"),
        (args.temperature >= 0.01 and args.lr > 0,
         "--temperature must be >= 0.01 (the trainer's least) and --lr > 0"),
        (args.weight_decay >= 0, "--weight-decay must be >= 0"),
        (args.steps >= 1 and args.seeds >= 1, "--steps and --seeds must be >= 1"),
        (min(args.ns) >= 1, "every N in --ns must be >= 1"),
        (all(abs(v) <= torch.finfo().max for v in vars(args).values() if isinstance(v, float))
         and args.lr * (max(args.ns) if args.lr_scaling == "linear" else 1) <= torch.finfo().max,
         "every number must be finite in float32, the simulator's precision (--lr x N too)"),
        (args.samples >= 0 and min(args.ns) >= 1 and all(args.samples % n == 0 for n in args.ns),
         "--equal-samples must be 0 or a positive multiple of every N in --ns"),
        (args.workers >= 1, "--workers must be >= 1"),
        (0 <= args.seed < 2**32, "--seed must be in [0, 2^32)"),
    ]
    for ok, message in problems:
        if not ok:
            parser.error(message)
    cfg = SimConfig(**{k: v for k, v in vars(args).items() if k in SimConfig.__dataclass_fields__})
    needed, memory = memory_needed(cfg), os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if needed > memory:
        parser.error(f"these sizes (--vocab, --seeds, --ns, steps) need about {needed / 2**30:.3g} "
                     f"GiB, more than this machine's {memory / 2**30:.3g} GiB")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"--out {args.out}: {e.strerror}")
    earlier = earlier_settings(args.out / "config.json")
    if earlier is not None and earlier != json.loads(json.dumps(asdict(cfg))):
        parser.error(f"--out {args.out} holds a simulation with other settings: move it away, or "
                     "pass another --out")
    start = time.time()
    try:  # first: another simulation started into this --out is refused from now on
        (args.out / "config.json").write_text(json.dumps(asdict(cfg), indent=2))
        results = simulate(cfg, args.workers)
        summary = write_outputs(results, cfg, args.out)
    except BaseException as e:
        if earlier is None and not (args.out / "summary.json").exists():  # free for other settings
            (args.out / "config.json").unlink(missing_ok=True)
        if isinstance(e, OSError):  # a full disk, say
            sys.exit(f"error: writing {e.filename or args.out}: {e.strerror}")
        if isinstance(e, FloatingPointError):
            sys.exit(f"error: {e}")
        raise
    budget = f"{cfg.samples} draws" if cfg.samples else f"{cfg.steps} steps"
    print(f"{len(cfg.ns)} values of N x {cfg.seeds} seeds x {budget} in "
          f"{time.time() - start:.1f}s -> {args.out}")
    print(f"{'N':>6} | correct_mass | frac_increased | worst_change | shrink_seed_frac")
    for n, s in summary.items():
        print(f"{n:>6} | {s['correct_mass']:12.5f} | {s['frac_increased']:14.4f} | "
              f"{s['worst_change']:12.3e} | {s['shrink_seed_frac']:16.2f}")


if __name__ == "__main__":
    main()
