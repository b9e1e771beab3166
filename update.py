"""The policy-gradient step: group-relative advantages, the clipped surrogate with KL, and log-probs
computed without ever holding a [batch, seq, vocab] float32 tensor.

Per step the trainer hands over S rollouts in G groups (N per prompt, or as allocated) with binary
rewards. The loss is the token-level PPO-clip objective of ProRL/BroRL (paper Sec. 3, from DAPO,
arXiv 2503.14476, eq. 8):

    L(θ) = -(1/T) Σ_tokens min(r_t·A, clip(r_t, 1 - ε_low, 1 + ε_high)·A) + β·KL_t,
    r_t = π_θ(y_t | x, y_<t) / π_old(y_t | x, y_<t),

with T the number of response tokens in the mini-batch (token-mean aggregation, so long responses
are not down-weighted), asymmetric "clip-higher" ε_high > ε_low, and an optional KL penalty to a
frozen reference policy that the trainer resets to the current policy every few hundred steps
(ProRL, arXiv 2505.24864, Sec. 3.2).

When the samples come from an inference engine (vLLM) rather than the trainer, π_old is the
trainer's recomputation and the engine's own log-probs π_sampler differ slightly (other kernels,
other precision). Truncated importance sampling (Yao et al., "Your Efficient RL Framework Secretly
Brings You Off-Policy RL Training", 2025; used by ProRLv2/BroRL) multiplies each token's loss by
min(π_old / π_sampler, C), a detached weight that makes the gradient that of samples from π_old.

Across processes (accelerate/DDP/FSDP), each process holds part of the batch; `all_sum` sums a
tensor over processes, so the token mean and the whitening statistics are those of the whole batch,
and the update equals the single-process one on the same global batch.

Where to change things: an advantage estimator is one entry of `ADVANTAGES`; the loss of a token
(ratio, clip, TIS, KL) is `per_token_loss`; `ppo_update` is only the loop around it (mini-batches,
micro-batches, DDP's no_sync, FSDP's lockstep passes).
"""

import argparse
import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.functional import scaled_dot_product_attention
from torch.utils.checkpoint import checkpoint

# The update's settings and its batch --------------------------------------------------------------


@dataclass(kw_only=True)
class UpdateConfig:
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    minibatches: int = 2
    micro_batch_tokens: int = 16384
    max_grad_norm: float = 1.0
    temperature: float = 1.0  # the sampler's T: log-probs of the tempered softmax it drew from
    logprob_chunk_tokens: int = 4096
    tis_cap: float = 0.0  # C of truncated importance sampling; 0: off


@dataclass
class TrainBatch:
    """The rollouts kept for the update, as plain tensors (B rollouts)."""

    prompt_ids: torch.Tensor  # [B, P] left-padded
    prompt_mask: torch.Tensor  # [B, P]
    response_ids: torch.Tensor  # [B, R] right-padded
    response_mask: torch.Tensor  # [B, R]
    advantages: torch.Tensor  # [B]
    # [B] each row's weight in the loss: N / n_g for a prompt given n_g rollouts (1 at fixed N)
    # times its multiplicity (see merge_duplicates); None: all 1
    weights: torch.Tensor | None = None
    # [B, R] the inference engine's log-probs, when known
    sampler_logprobs: torch.Tensor | None = None
    # [B] PPO mini-batch of each row (merge_duplicates); None: ppo_update draws
    minibatch: torch.Tensor | None = None


# ALGO LOGIC: advantages ---------------------------------------------------------------------------
# Every estimator maps the step's rewards [S] to advantages [S], rollout s answering prompt group[s]
# (groups may differ in size: the per-prompt allocation gives prompts different N), so
# `ADVANTAGES` below is the one place a new one is added (train_brorl.py's --advantage choices and
# its loop both read it). Estimators with batch-wide statistics take them over every process.


def whiten(values: torch.Tensor, eps: float = 1e-6, weights: torch.Tensor | None = None
           ) -> torch.Tensor:
    """(x - mean) / (std + eps), with the mean and the unbiased std (as torch.std) of every element
    on every process, each counted `weights` times (default 1). Nothing to whiten (no process holds
    an element) gives zeros.

    >>> whiten(torch.tensor([1.0, 2.0, 3.0]), eps=0.0)
    tensor([-1.,  0.,  1.])
    """
    weights = torch.ones_like(values) if weights is None else weights
    moments = torch.stack([weights.sum(), (weights * values).sum(),
                           (weights * values**2).sum()])
    count, total, squares = all_sum(moments.double()).tolist()
    if count == 0:
        return torch.zeros_like(values)
    mean = total / count
    variance = max((squares - count * mean**2) / max(count - 1, 1), 0.0)
    return (values - mean) / (variance**0.5 + eps)


def group_sums(values: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """[G]: the sum of each group's elements (group[s] is the prompt of rollout s).

    >>> group_sums(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))
    tensor([1., 1.])
    """
    return values.new_zeros(len(torch.bincount(group))).index_add_(0, group, values)


def group_mean(values: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """[S]: the mean of each element's group.

    >>> group_mean(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))
    tensor([0.5000, 0.5000, 1.0000])
    """
    sizes = torch.bincount(group).to(values.dtype)
    return (group_sums(values, group) / sizes.clamp(min=1))[group]


def group_centered(rewards: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """R_i - mean(R_group): each rollout against the other rollouts of its prompt."""
    return rewards - group_mean(rewards, group)


def grpo_advantages(rewards: torch.Tensor, group: torch.Tensor, *, eps: float = 1e-6
                    ) -> torch.Tensor:
    """GRPO (DeepSeekMath, arXiv 2402.03300, eq. 3): A_i = (R_i - mean(R_group)) / std(R_group).

    rewards, group: [S] (rollout s answers prompt group[s]). The std is the unbiased group std, as
    in TRL and DeepSeekMath.

    >>> grpo_advantages(torch.tensor([1., 0., 0., 0.]), torch.tensor([0, 0, 0, 0]))
    tensor([ 1.5000, -0.5000, -0.5000, -0.5000])
    """
    centered = group_centered(rewards, group)
    size = torch.bincount(group)[group].to(rewards.dtype)
    variance = group_mean(centered**2, group) * size / (size - 1).clamp(min=1)
    return centered / (variance.sqrt() + eps)


def dr_grpo_advantages(rewards: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO (Liu et al., "Understanding R1-Zero-Like Training", arXiv 2503.20783, Sec. 3.1):
    A_i = R_i - mean(R_group), without GRPO's division by the group std, which up-weights prompts
    that are nearly always or nearly never solved. (Dr. GRPO's other change, dropping the
    per-response length normalisation, is already the loss here: a token mean over the mini-batch,
    DAPO eq. 8.)

    >>> dr_grpo_advantages(torch.tensor([1., 0., 0., 0.]), torch.tensor([0, 0, 0, 0]))
    tensor([ 0.7500, -0.2500, -0.2500, -0.2500])
    """
    return group_centered(rewards, group)


def prompt_weights(group: torch.Tensor, n_rollouts: float) -> torch.Tensor:
    """[S] N / n_g for a rollout of a prompt given n_g rollouts: the objective is a mean over
    prompts, so an allocation changes how well a prompt's gradient is estimated, not how much the
    prompt counts (all 1 at fixed N).

    >>> prompt_weights(torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1, 1]), n_rollouts=5).unique().tolist()
    [0.625, 2.5]
    """
    return n_rollouts / torch.bincount(group)[group].float()


def reinforce_pp_baseline_advantages(rewards: torch.Tensor, group: torch.Tensor, *,
                                     eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE++-baseline (arXiv 2501.03262; the ProRLv2/BroRL estimator, arXiv 2510.01180
    Sec. 3): A_i = whiten(R_i - mean(R_group)), the whitening over the whole batch (every process).

    rewards, group: [S]. verl whitens over tokens; we whiten over samples (each rollout counts
    once), which differs only when response lengths differ within the batch. When no process kept
    a group (dynamic sampling dropped them all) there is nothing to whiten: the (empty) advantages
    are zeros. Groups of different sizes (the per-prompt allocation) are whitened with each prompt
    counted once, as the loss counts them: `prompt_weights` with N the mean group size over every
    process (all 1 at fixed N).
    """
    sizes = torch.bincount(group)
    rows, prompts = all_sum(torch.tensor([len(group), int((sizes > 0).sum())],
                                         dtype=torch.float64)).tolist()
    weights = prompt_weights(group, rows / max(prompts, 1)).to(rewards.dtype)
    return whiten(group_centered(rewards, group), eps, weights)


def focal_grpo_advantages(rewards: torch.Tensor, group: torch.Tensor, *, gamma: float = 1.0,
                          eps: float = 1e-6) -> torch.Tensor:
    """F-GRPO (Plyusov et al., arXiv 2602.06717, Sec. 4): GRPO's advantages times the focal weight
    g = (1 - μ̂_pos)^γ, μ̂_pos the group's success rate (its mean reward, 0/1 rewards). A group the
    policy nearly always solves moves it less: its update concentrates correct mass on the answers
    already sampled most, which is how unsampled correct answers lose probability (Theorem 1's
    coupling term, Fig. 3 (ii)/(iii)). Targets shrinkage through the expected gradient, not N. Still
    group-baselined (g is one number per group), so the total ΔQ_pos stays >= 0. γ: open (the
    paper's abstract gives none); 1 here.

    >>> focal_grpo_advantages(torch.tensor([1., 1., 1., 0.]), torch.tensor([0, 0, 0, 0]))
    tensor([ 0.1250,  0.1250,  0.1250, -0.3750])
    """
    success = group_mean(rewards, group).clamp(0, 1)
    return grpo_advantages(rewards, group, eps=eps) * (1 - success) ** gamma


# name -> advantage estimator, all called as ADVANTAGES[name](rewards [S], group [S]) -> [S]
ADVANTAGES: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
    "focal_grpo": focal_grpo_advantages,
}


# ALGO LOGIC: loss ---------------------------------------------------------------------------------


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL penalty to the reference policy on tokens sampled from π_θ (Schulman,
    "Approximating KL Divergence", 2020).

    With log-ratio l = log π_θ - log π_ref, clamped to [-10, 10] as in ProRLv2:
    k1 = l, k2 = l²/2 (ProRLv2's choice), k3 = exp(-l) - 1 + l (GRPO's).

    As values, k1 and k3 are unbiased estimates of KL(π_θ || π_ref) and k2 a biased one. As losses,
    what matters is their gradient with the samples held fixed, and in expectation over y ~ π_θ:
      k1: E[∇ log π_θ(y)] = 0, zero expected gradient: it only adds noise;
      k2: E[l · ∇ log π_θ(y)] = ∇ KL(π_θ || π_ref), the gradient of the KL it estimates;
      k3: E[(1 - π_ref/π_θ) · ∇ log π_θ(y)] = ∇ KL(π_ref || π_θ), the other direction's gradient.
    (tests/test_update.py checks all three on a small categorical distribution.)
    """
    log_ratio = (logprobs - ref_logprobs).clamp(-10.0, 10.0)
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.exp(-log_ratio) - 1.0 + log_ratio
    raise ValueError(f"unknown KL estimator '{estimator}' (k1, k2 or k3)")


def sampler_mismatch(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor,
                     mask: torch.Tensor) -> dict:
    """How far the inference engine's log-probs are from the trainer's on the sampled tokens: mean
    and max |Δ| with Δ = log π_old - log π_sampler, and the implied KL(π_sampler || π_old),
    estimated from the sampler's own samples with k3 = exp(Δ) - 1 - Δ (Schulman's low-variance
    estimator), in float64 with expm1: for an fp32 engine |Δ| is ~1e-6 and k3 ~1e-12, below
    float32's rounding of exp(Δ) - 1, which would give k3 a random sign."""
    live = mask.bool()
    delta = (old_logprobs - sampler_logprobs)[live].double()
    # over every process's tokens (each holds a different number after deal_rows)
    abs_sum, kl_sum, tokens = all_sum(torch.stack([
        delta.abs().sum(), (torch.expm1(delta) - delta).sum(),
        torch.tensor(delta.numel(), dtype=torch.float64)])).tolist()
    largest = float(all_max(torch.cat([delta.abs(), delta.new_zeros(1)]).max()))  # 0: no token
    tokens = max(tokens, 1.0)
    return {"mismatch_abs_mean": abs_sum / tokens, "mismatch_abs_max": largest,
            "mismatch_kl": kl_sum / tokens}


def per_token_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                   mask: torch.Tensor, cfg: UpdateConfig,
                   sampler_logprobs: torch.Tensor | None = None,
                   ref_logprobs: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loss of each response token (arXiv 2510.01180 Sec. 3; DAPO, arXiv 2503.14476, eq. 8):

        loss_t = -min(r_t·A, clip(r_t, 1 - ε_low, 1 + ε_high)·A) · w_t + β·KL_t,
        r_t = π_θ(y_t) / π_old(y_t),   w_t = min(π_old(y_t) / π_sampler(y_t), C)  (TIS)

    logprobs (with gradient), old_logprobs, sampler_logprobs, ref_logprobs, mask: [B, R];
    advantages: [B], one per rollout, shared by its tokens. `mask` is 0 on padding and may carry row
    weights (`merge_duplicates`). TIS applies when cfg.tis_cap > 0 and sampler log-probs are given,
    the KL term when cfg.kl_coef > 0 and reference log-probs are given. `ppo_update` sums the result
    and divides by the mini-batch's token count (the token mean).

    Returns the loss [B, R], where the clipped branch is the active minimum [B, R] (bool), and the
    masked KL_t [B, R] (zeros without a KL term).
    """
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    unclipped = ratio * adv
    # clip-higher: ε_high > ε_low
    clipped = ratio.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * adv
    loss = -torch.minimum(unclipped, clipped) * mask
    was_clipped = (clipped < unclipped) & mask.bool()
    if cfg.tis_cap > 0 and sampler_logprobs is not None:
        # no gradient
        tis_weight = torch.exp(old_logprobs - sampler_logprobs).clamp(max=cfg.tis_cap)
        loss = loss * tis_weight
    kl = torch.zeros_like(loss)
    if cfg.kl_coef > 0 and ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs, cfg.kl_estimator) * mask
        loss = loss + cfg.kl_coef * kl
    return loss, was_clipped, kl


# ALGO LOGIC: the update ---------------------------------------------------------------------------


def split_minibatches(weights: torch.Tensor, minibatches: int,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """[B] mini-batch index of each row: the rows in a random order, cut into `minibatches` runs of
    about equal total weight (equal row counts when every weight is 1).

    >>> split_minibatches(torch.ones(6), 2, torch.Generator().manual_seed(0)).bincount().tolist()
    [3, 3]
    """
    perm = torch.randperm(len(weights), generator=generator)
    # float64: in float32 the 1e-9 below vanishes next to 1
    cumulative = weights.double()[perm].cumsum(0)
    share = torch.floor(cumulative * minibatches / cumulative[-1:].clamp(min=1e-9) - 1e-9)
    index = torch.empty(len(weights), dtype=torch.long)
    index[perm] = share.long().clamp(min=0, max=minibatches - 1)
    return index


def row_weights_and_minibatches(batch: TrainBatch, minibatches: int,
                                generator: torch.Generator | None = None
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's weight (1 where the batch records none) and its PPO mini-batch (the split
    `merge_duplicates` recorded, or a fresh `split_minibatches` draw): one rule for both callers,
    since merging is exact only when it splits as the update does."""
    weights = torch.ones(len(batch.advantages)) if batch.weights is None else batch.weights.float()
    if batch.minibatch is not None:
        if len(batch.minibatch) and int(batch.minibatch.max()) >= minibatches:
            raise ValueError(f"the batch records {int(batch.minibatch.max()) + 1} mini-batches, "
                             f"the update was asked for {minibatches}")
        return weights, batch.minibatch
    return weights, split_minibatches(weights, minibatches, generator)


def merge_duplicates(batch: TrainBatch, minibatches: int = 1,
                     generator: torch.Generator | None = None) -> TrainBatch:
    """Keep one row per distinct (prompt, response, advantage) within each PPO mini-batch, weighted
    by how often it occurred there.

    The rows are first split into `minibatches` mini-batches exactly as `ppo_update` would split
    the unmerged batch (`split_minibatches` with the same generator), then merged within each, and
    the result records each row's mini-batch. Exact: identical rows have identical log-probs and
    advantages, so k copies in one mini-batch contribute k times one copy's gradient to that
    mini-batch's optimizer step. (Merging first and splitting afterwards would put all k copies in
    one mini-batch, a different update as soon as there are two.) With hundreds of rollouts per
    prompt and short answers many responses repeat, and the update then costs what the distinct
    responses cost. Rows keep the order of their first occurrence.
    """
    n_rows = len(batch.advantages)
    weights, minibatch = row_weights_and_minibatches(batch, minibatches, generator)
    prompt_length = batch.prompt_mask.sum(-1, keepdim=True)
    response_length = batch.response_mask.sum(-1, keepdim=True)
    # exact, as integers
    advantage_bits = batch.advantages.float().view(torch.int32).long()[:, None]
    key = torch.cat([batch.prompt_ids, batch.response_ids, prompt_length, response_length,
                     advantage_bits, minibatch[:, None]], dim=-1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    n_unique = len(unique)  # 0 when dynamic sampling kept no group
    first = torch.full((n_unique,), n_rows).scatter_reduce_(0, inverse, torch.arange(n_rows),
                                                            "amin")
    counts = torch.zeros(n_unique).scatter_add_(0, inverse, weights)
    order = first.argsort()
    rows = first[order]
    return TrainBatch(batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows],
                      batch.response_mask[rows], batch.advantages[rows], counts[order],
                      None if batch.sampler_logprobs is None else batch.sampler_logprobs[rows],
                      minibatch[rows])


def row_lengths(batch: TrainBatch) -> torch.Tensor:
    """[B] each row's real tokens: its prompt's and its response's."""
    return batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)


def micro_batches(batch: TrainBatch, rows: list[int], max_tokens: int) -> list[list[int]]:
    """Split `rows` into micro-batches of at most `max_tokens` real tokens (prompt + response: a
    micro-batch is one `Pack`, so nothing is padded), first-fit decreasing: rows longest first, each
    into the first micro-batch with room; a row longer than the budget goes alone. Micro-batches
    come in the order they were opened, the longest rows' first. A row without a response token is
    left out: it has no log-prob and no loss (and a pack of such rows, nothing to backpropagate)."""
    lengths = row_lengths(batch).tolist()
    answered = batch.response_mask.any(-1).tolist()
    batches, loads = [], []
    # stable: equal lengths keep their order
    for i in sorted((i for i in rows if answered[i]), key=lambda i: -lengths[i]):
        fits = next((b for b, load in enumerate(loads) if load + lengths[i] <= max_tokens), None)
        if fits is None:
            batches.append([i])
            loads.append(lengths[i])
        else:
            batches[fits].append(i)
            loads[fits] += lengths[i]
    return batches


def minibatch_micro_batches(batch: TrainBatch, minibatch_of: torch.Tensor, minibatches: int,
                            max_tokens: int) -> list[list[list[int]]]:
    """[k]: the micro-batches of PPO mini-batch k (the rows with minibatch_of == k). The update
    runs them, and π_old and π_ref are computed in the same ones, so that the first mini-batch's
    ratio is exactly 1 (the same kernels on the same shapes) rather than off by what the batch's
    shape moves (in bf16, ~1e-2)."""
    return [micro_batches(batch, (minibatch_of == k).nonzero().squeeze(-1).tolist(), max_tokens)
            for k in range(minibatches)]


def lockstep_passes(local_passes: int) -> int:
    """How many forward (and backward) passes every process runs: the most that any process needs.

    Under FSDP every pass gathers each layer's shards from all processes, so a process that ran
    fewer passes than another would leave it waiting in a collective until the process-group
    timeout; the processes with fewer rows pad with `idle_pass`."""
    return int(all_max(torch.tensor(local_passes)))


def in_lockstep(policy, chunks: list[list[int]], accumulate: bool = False):
    """This process's micro-batches (row lists), then None for each pass it pads with (`idle_pass`)
    up to `lockstep_passes`. `accumulate`: under DDP, all but the last pass in `no_sync`, so that
    the gradients are all-reduced once, after the last."""
    passes = lockstep_passes(len(chunks))
    for i in range(passes):
        no_sync = accumulate and i < passes - 1 and hasattr(policy, "no_sync")
        with policy.no_sync() if no_sync else contextlib.nullcontext():
            yield chunks[i] if i < len(chunks) else None


def idle_pass(policy, cfg: UpdateConfig, device) -> torch.Tensor:
    """A forward over two placeholder tokens (id 0), for a process that has no rows left but must
    take part in the other processes' collectives. Returns the log-prob [1, 1]; times 0 it gives a
    backward with zero gradient that still runs DDP's all-reduce / FSDP's reduce-scatter."""
    placeholder = torch.zeros(1, 1, dtype=torch.long)
    pack = pack_rows(TrainBatch(placeholder, torch.ones_like(placeholder), placeholder,
                                torch.ones_like(placeholder), torch.zeros(1)), [0])
    return policy(pack.to(device), cfg.temperature, cfg.logprob_chunk_tokens)[0]


def batch_logprobs(policy, batch: TrainBatch, cfg: UpdateConfig) -> torch.Tensor:
    """No-grad log-probs [B, R] (for π_old, π_ref and the shrinkage monitor), in the update's
    micro-batches (`minibatch_micro_batches` of the split `merge_duplicates` recorded; all rows
    together when none is).

    policy: a `Policy` (or its DDP/FSDP wrapper). Several processes: every process runs as many
    passes as the one with the most (padded with `idle_pass`), also a process with no rows at
    all."""
    out = torch.zeros(batch.response_ids.shape, dtype=torch.float32)
    device = next(policy.parameters()).device
    minibatch_of = (torch.zeros(len(batch.advantages), dtype=torch.long)
                    if batch.minibatch is None else batch.minibatch)
    minibatches = int(minibatch_of.max()) + 1 if len(minibatch_of) else 0
    chunks = [mb for per_minibatch in minibatch_micro_batches(batch, minibatch_of, minibatches,
                                                              cfg.micro_batch_tokens)
              for mb in per_minibatch]
    with torch.no_grad():
        for rows in in_lockstep(policy, chunks):
            if rows is None:
                idle_pass(policy, cfg, device)
                continue
            pack = pack_rows(batch, rows)
            logprobs, _ = policy(pack.to(device), cfg.temperature, cfg.logprob_chunk_tokens)
            out[rows, : pack.live.shape[1]] = logprobs.float().cpu()
    return out


def micro_batch_loss(policy, batch: TrainBatch, rows: list[int], weights: torch.Tensor,
                     old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None,
                     cfg: UpdateConfig, device) -> tuple[torch.Tensor, dict]:
    """`per_token_loss` summed over one micro-batch's tokens (a row of weight w counted w times),
    and the sums of the statistics over them."""
    pack = pack_rows(batch, rows)
    r = pack.live.shape[1]
    mask = batch.response_mask[rows, :r].to(device).float() * weights[rows, None].to(device)
    logprobs, entropy = policy(pack.to(device), cfg.temperature, cfg.logprob_chunk_tokens)
    old = old_logprobs[rows, :r].to(device)
    # copied to the device only for the terms that are on (TIS, KL)
    sampler = batch.sampler_logprobs if cfg.tis_cap > 0 else None
    sampler = None if sampler is None else sampler[rows, :r].to(device)
    ref = ref_logprobs if cfg.kl_coef > 0 else None
    ref = None if ref is None else ref[rows, :r].to(device)
    loss_tok, was_clipped, kl = per_token_loss(logprobs, old, batch.advantages[rows].to(device),
                                               mask, cfg, sampler, ref)
    sums = {"loss": float(loss_tok.detach().sum()), "clip_frac": float((was_clipped * mask).sum()),
            "entropy": float((entropy * mask).sum()),
            "kl": float(kl.detach().sum()) if ref is not None else 0.0}
    return loss_tok.sum(), sums


UPDATE_STATS = ("loss", "clip_frac", "kl", "entropy", "grad_norm")  # what ppo_update returns


def ppo_update(policy, optimizer, batch: TrainBatch, old_logprobs: torch.Tensor, cfg: UpdateConfig,
               ref_logprobs: torch.Tensor | None = None, generator: torch.Generator | None = None
               ) -> dict:
    """One BroRL step: `cfg.minibatches` optimizer steps over a random split of the batch (the paper
    keeps the number of mini-batches per step fixed when N grows), or over the split that
    `merge_duplicates` recorded. Rows of weight w count w times (in the token mean and the
    statistics alike); a mini-batch holds about 1/minibatches of the total weight. Returns
    token-mean statistics (over every process's tokens) and the mean gradient norm.

    policy: a `Policy`, or its DDP/FSDP wrapper with this process's share of the batch (token counts
    are then summed over processes). Every process runs the same number of optimizer steps and,
    in each mini-batch, the same number of forward/backward passes: as many as the process with the
    most micro-batches, the others padding with zero-gradient passes (`in_lockstep`), also when
    they have no rows in the mini-batch."""
    device = next(policy.parameters()).device
    weights, minibatch_of = row_weights_and_minibatches(batch, cfg.minibatches, generator)
    # DDP averages gradients over processes; undo it
    processes = dist.get_world_size() if dist.is_initialized() else 1
    stats = dict.fromkeys(UPDATE_STATS, 0.0)
    tokens_seen, steps = 0.0, 0
    per_minibatch = minibatch_micro_batches(batch, minibatch_of, cfg.minibatches,
                                            cfg.micro_batch_tokens)
    policy.train()
    for k, chunks in enumerate(per_minibatch):
        in_minibatch = minibatch_of == k
        local_tokens = (batch.response_mask[in_minibatch].sum(-1) * weights[in_minibatch]).sum()
        n_tokens = float(all_sum(local_tokens))
        if n_tokens == 0:  # no process has a row in this mini-batch
            continue
        optimizer.zero_grad(set_to_none=True)
        for rows in in_lockstep(policy, chunks, accumulate=True):
            if rows is None:  # no rows left here: a zero-gradient pass in step with the others
                (idle_pass(policy, cfg, device).sum() * 0.0).backward()
                continue
            loss_sum, sums = micro_batch_loss(policy, batch, rows, weights, old_logprobs,
                                              ref_logprobs, cfg, device)
            token_mean = loss_sum * processes / n_tokens  # over the whole mini-batch
            token_mean.backward()
            for key, value in sums.items():
                stats[key] += value
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
        if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor
            grad_norm = grad_norm.full_tensor()
        if not torch.isfinite(grad_norm):  # the same norm on every process (all-reduced)
            raise FloatingPointError(f"mini-batch {k + 1} of {len(per_minibatch)}: the gradient "
                                     f"norm is {float(grad_norm)}, not applied")
        stats["grad_norm"] += float(grad_norm)
        optimizer.step()
        tokens_seen, steps = tokens_seen + float(local_tokens), steps + 1
    optimizer.zero_grad(set_to_none=True)  # the gradients' memory goes to the sampler, not idle
    policy.eval()
    # token means over every process's tokens, as the loss is (each holds a different number)
    token_means = ("loss", "clip_frac", "kl", "entropy")
    *sums, tokens_seen = all_sum(torch.tensor([*(stats[key] for key in token_means), tokens_seen],
                                              dtype=torch.float64)).tolist()
    for key, total in zip(token_means, sums):
        stats[key] = total / max(tokens_seen, 1)
    stats["grad_norm"] /= max(steps, 1)  # the mean over the optimizer steps taken
    return stats


# TRY NOT TO MODIFY: log-probs without padding (packed rows, varlen attention) ---------------------


def _chunk_logprobs(hidden: torch.Tensor, lm_head_weight: torch.Tensor, targets: torch.Tensor,
                    temperature: float):
    # [chunk, V]: the only vocab-sized tensor
    logits = (hidden @ lm_head_weight.T).float() / temperature
    logsumexp = logits.logsumexp(dim=-1)
    logprobs = logits.gather(-1, targets[:, None]).squeeze(-1) - logsumexp
    with torch.no_grad():
        entropy = logsumexp - (logits.softmax(-1) * logits).sum(-1)
    return logprobs, entropy


@dataclass
class Pack:
    """Some rows of a `TrainBatch` as one sequence without padding: each row's prompt then its
    response, row after row, positions restarting at 0 for each, attention kept inside each row
    (`packed_attention`). A micro-batch is one pack, whatever its rows' lengths."""

    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    cu_seqlens: torch.Tensor  # [n + 1] int32: where each row starts in the pack, then T
    max_length: int  # the longest row
    predictors: torch.Tensor  # [n_response_tokens]: the position whose state predicts each one
    live: torch.Tensor  # [n, r] bool: the response tokens of each row (r: the longest response)

    def to(self, device) -> "Pack":
        return Pack(self.input_ids.to(device), self.position_ids.to(device),
                    self.cu_seqlens.to(device), self.max_length, self.predictors.to(device),
                    self.live.to(device))


def pack_rows(batch: TrainBatch, rows: list[int]) -> Pack:
    """The rows as one `Pack` (every row needs a prompt token: it predicts the first response
    token).

    >>> pack = pack_rows(TrainBatch(torch.tensor([[0, 5], [6, 7]]), torch.tensor([[0, 1], [1, 1]]),
    ...                             torch.tensor([[8, 0], [9, 3]]), torch.tensor([[1, 0], [1, 1]]),
    ...                             torch.zeros(2)), [0, 1])
    >>> pack.input_ids.tolist(), pack.position_ids.tolist(), pack.predictors.tolist()
    ([[5, 8, 6, 7, 9, 3]], [[0, 1, 0, 1, 2, 3]], [0, 3, 4])
    """
    index = torch.as_tensor(rows, dtype=torch.long)
    prompt_mask = batch.prompt_mask[index].bool()
    if not prompt_mask.any(-1).all():
        raise ValueError("pack_rows: a row has an empty prompt (nothing predicts its first token)")
    response_mask = batch.response_mask[index].bool()
    # prompts are left-padded and responses right-padded: each row's tokens are contiguous
    mask = torch.cat([prompt_mask, response_mask], dim=-1)
    ids = torch.cat([batch.prompt_ids[index], batch.response_ids[index]], dim=-1)
    place = mask.flatten().cumsum(0).view_as(mask) - 1  # each token's position in the pack
    lengths = mask.sum(-1)
    cu_seqlens = torch.zeros(len(rows) + 1, dtype=torch.int32)
    cu_seqlens[1:] = lengths.cumsum(0)
    longest_response = int(response_mask.sum(-1).max())
    return Pack(ids[mask][None], (mask.cumsum(-1) - 1)[mask][None], cu_seqlens,
                int(lengths.max()), place[:, prompt_mask.shape[1]:][response_mask] - 1,
                response_mask[:, :longest_response])


def token_logprobs(model, pack: Pack, temperature: float = 1.0, chunk_tokens: int = 4096
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies of the packed rows' response tokens under π_T = softmax(z/T).

    Returns two [n, r] float32 tensors (rows as packed, 0 where the response is padding).

    Memory: the transformer body runs once over the pack; the output layer and log-softmax run over
    chunks of at most `chunk_tokens` response tokens, each under activation checkpointing, so the
    peak vocab-sized tensor is [chunk_tokens, V] in forward and backward alike.
    """
    # no K/V cache: nothing here generates, and a cache would only hold memory
    hidden = model.base_model(
        input_ids=pack.input_ids, position_ids=pack.position_ids, use_cache=False,
        attention_mask=PACKED_MASK,
        cu_seq_lens_q=pack.cu_seqlens, cu_seq_lens_k=pack.cu_seqlens,
        max_length_q=pack.max_length, max_length_k=pack.max_length).last_hidden_state[0]
    return chunked_logprobs(model, hidden[pack.predictors], pack.input_ids[0, pack.predictors + 1],
                            pack.live, temperature, chunk_tokens)


def chunked_logprobs(model, flat_hidden: torch.Tensor, flat_targets: torch.Tensor,
                     live: torch.Tensor, temperature: float = 1.0, chunk_tokens: int = 4096
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The output layer and log-softmax over the final states that predict the response tokens
    ([n_tokens, H], with their targets), in chunks of at most `chunk_tokens`, each under activation
    checkpointing when there is a gradient; log-probs and entropies laid out as `live` ([n, r]
    bool, row-major), 0 elsewhere."""
    weight = model.get_output_embeddings().weight
    pieces = []
    for start in range(0, len(flat_targets), chunk_tokens):
        args = (flat_hidden[start : start + chunk_tokens], weight,
                flat_targets[start : start + chunk_tokens], temperature)
        pieces.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False)
                      if torch.is_grad_enabled() else _chunk_logprobs(*args))
    logprobs = flat_hidden.new_zeros(live.shape, dtype=torch.float32)
    entropy = torch.zeros_like(logprobs)
    if pieces:
        logprobs = logprobs.masked_scatter(live, torch.cat([p[0] for p in pieces]))
        entropy = entropy.masked_scatter(live, torch.cat([p[1] for p in pieces]))
    return logprobs, entropy


def length_buckets(lengths: list[int], call_cost: int = 128**2) -> list[list[int]]:
    """Sequences grouped for batched attention, longest first: a group is padded to its longest,
    and takes the next sequence while its padded attention (rows x longest²) exceeds its real one
    (Σ L²) by at most `call_cost`, the attention one more SDPA call costs as much as: equal lengths
    make one group, short sequences share calls, long ones of other lengths get their own.

    >>> length_buckets([300, 9, 300, 200, 8, 1])
    [[0, 2], [3], [1, 4, 5]]
    """
    buckets, real = [], 0
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if buckets and (len(buckets[-1]) + 1) * lengths[buckets[-1][0]] ** 2 <= (
                real + lengths[i] ** 2 + call_cost):
            buckets[-1].append(i)
            real += lengths[i] ** 2
        else:
            buckets.append([i])
            real = lengths[i] ** 2
    return buckets


def _causal_attention_per_sequence(query, key, value, cu_seqlens, scaling):
    """Exact causal attention inside each packed sequence, by SDPA without a mask: the sequences of
    each `length_buckets` group are laid out as rows of the group's longest length, each filled out
    with the tokens after it in the pack. Causality keeps every real position from the filler after
    it, and nothing reads the filler's outputs, so the filler gets zero gradient. One gather lays
    out every group and one gathers the outputs back (in backward, a scatter each).

    query: [1, heads, T, head_dim]; key, value: [1, kv_heads, T, head_dim]; returns [1, T, heads,
    head_dim]."""
    bounds = cu_seqlens.tolist()
    starts, lengths = bounds[:-1], [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    buckets = length_buckets(lengths)
    shapes = [(len(bucket), lengths[bucket[0]]) for bucket in buckets]  # rows, width
    # where each laid-out token comes from in the pack; where each sequence's outputs land
    sources, places, offset = [], {}, 0
    for bucket, (rows, width) in zip(buckets, shapes):
        columns = torch.arange(width)
        sources.append((torch.tensor([starts[i] for i in bucket])[:, None] + columns).flatten())
        for row, i in enumerate(bucket):
            places[i] = offset + row * width + columns[: lengths[i]]
        offset += rows * width
    laid_out = torch.cat(sources).clamp(max=bounds[-1] - 1).to(query.device)
    in_pack_order = torch.cat([places[i] for i in range(len(lengths))]).to(query.device)
    # [T, heads, head_dim] -> the groups' [rows x width, heads, head_dim] pieces
    groups = (x[0].transpose(0, 1)[laid_out].split([rows * width for rows, width in shapes])
              for x in (query, key, value))
    pieces = []
    for shape, q, k, v in zip(shapes, *groups):
        # [rows, heads, width, head_dim]: with the batch dimension, CPU SDPA takes its fused
        # kernel (without one, its math path)
        q, k, v = (x.unflatten(0, shape).transpose(1, 2) for x in (q, k, v))
        attended = scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling,
                                                enable_gqa=True)
        pieces.append(attended.transpose(1, 2).flatten(0, 1))
    # in the dtype attention gave (bf16 under CPU autocast, whatever the inputs')
    return torch.cat(pieces)[in_pack_order][None]


@functools.cache
def varlen_kernel() -> tuple[Callable, Mapping] | None:
    """torch's FlashAttention-2 over packed sequences (torch >= 2.10, CUDA) and its parameters, or
    None; imported on first use (it loads torch's compiler stack, seconds)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn, inspect.signature(varlen_attn).parameters


def _varlen_attention(query, key, value, cu_seqlens, max_length, scaling):
    varlen_attn, parameters = varlen_kernel()
    # [1, heads, T, head_dim] -> [T, heads, head_dim], as varlen_attn takes them
    query, key, value = (x[0].transpose(0, 1) for x in (query, key, value))
    # the signature moved between torch releases: causal as a window (>= 2.10) or a flag
    options = {"scale": scaling} if "scale" in parameters else {}
    if not options and scaling is not None and abs(scaling * query.shape[-1] ** 0.5 - 1) > 1e-6:
        raise ValueError(f"packed_attention: this torch's varlen_attn takes no scale, and the "
                         f"model's attention scale {scaling} is not 1/sqrt(head_dim)")
    options.update({"window_size": (-1, 0)} if "window_size" in parameters
                   else {"is_causal": True})
    if "enable_gqa" in parameters:
        options["enable_gqa"] = True
    else:
        heads_per_group = query.shape[1] // key.shape[1]
        key = key.repeat_interleave(heads_per_group, dim=1)
        value = value.repeat_interleave(heads_per_group, dim=1)
    cu_seqlens = cu_seqlens.to(query.device)
    return varlen_attn(query, key, value, cu_seqlens, cu_seqlens, max_length, max_length,
                       **options)[None]  # [1, T, heads, head_dim]


def attention_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype SDPA computes `query` in: autocast's where it is on (SDPA is on autocast's
    lower-precision list; rotary embeddings can hand attention fp32 queries under autocast).

    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     attention_dtype(torch.zeros(1))
    torch.bfloat16
    """
    device = query.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype


def packed_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                     scaling: float | None = None, *, sdpa: Callable, **kwargs):
    """transformers' attention interface (`PACKED_ATTENTION`) for a `Pack`: causal attention inside
    each row and never across, nothing computed for padding. On CUDA in bf16/fp16 (or autocast to
    them), torch's own FlashAttention-2 varlen kernel; elsewhere (CPU, fp32) causal SDPA over the
    rows grouped by length, exact. A call without a pack (generation, evaluation) is
    transformers' `sdpa` unchanged (bound by `register_packed_attention`).

    query: [1, heads, T, head_dim]; key, value: [1, kv_heads, T, head_dim]; returns [1, T, heads,
    head_dim] and no weights."""
    cu_seqlens = kwargs.get("cu_seq_lens_q")
    if cu_seqlens is None:
        return sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                    **kwargs)
    if dropout:
        raise ValueError("packed_attention: attention dropout is not supported")
    dtype = attention_dtype(query)
    if query.is_cuda and dtype in (torch.bfloat16, torch.float16) and varlen_kernel() is not None:
        query, key, value = (x.to(dtype) for x in (query, key, value))
        return _varlen_attention(query, key, value, cu_seqlens, kwargs["max_length_q"],
                                 scaling), None
    return _causal_attention_per_sequence(query, key, value, cu_seqlens, scaling), None


# What a pack passes transformers as its attention mask: a "prepared" 4-D mask, which transformers
# hands to every layer as it is (building none: rows come from the pack's cu_seqlens) and which
# `packed_attention` never reads
PACKED_MASK = torch.ones(1, 1, 1, 1, dtype=torch.bool)

# `packed_attention`'s name in transformers' attention interface (`Policy` sets it on the model it
# wraps): the model stays transformers' own class, and the name is not saved with its config.
PACKED_ATTENTION = "brorl_packed"


def register_packed_attention() -> None:
    """Register `packed_attention` (and sdpa's masks for calls without a pack) with transformers.
    Done by `Policy`, not at import: importing transformers' attention code takes seconds, which
    scripts that only need `ADVANTAGES` (simulate.py) should not pay."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PACKED_ATTENTION,
                                functools.partial(packed_attention, sdpa=sdpa_attention_forward))
    AttentionMaskInterface.register(PACKED_ATTENTION, sdpa_mask)


def check_packable(model) -> None:
    """A ValueError naming what the packed log-probs would get wrong for this model, if anything."""
    config = model.config
    if "sliding_attention" in getattr(config, "layer_types", ()):
        raise ValueError("sliding-window attention is not supported in packs")
    # `chunked_logprobs` computes the logits as hidden @ W.T, as most causal LMs do
    if (getattr(model.get_output_embeddings(), "bias", None) is not None
            or getattr(config, "final_logit_softcapping", None)
            or getattr(config, "logit_scale", None) not in (None, 1.0)):
        raise ValueError("the output layer has a bias, a logit scale or soft-capping, which the "
                         "chunked log-probs do not apply")


class Policy(torch.nn.Module):
    """The causal LM with `token_logprobs` as its forward, its attention `packed_attention`.

    DDP and FSDP synchronise gradients and gather shards through hooks on a module's forward; the
    log-prob path bypasses the LM's own forward (to skip the full-vocabulary logits), so the trainer
    wraps this module instead of the bare LM. Single-process, it is a thin shell."""

    def __init__(self, model):
        super().__init__()
        check_packable(model)
        config = model.config
        register_packed_attention()
        model.set_attn_implementation(PACKED_ATTENTION)
        self.model = model
        # a sequence of L tokens costs ∝ L·linear_cost + L² (`row_costs`): a decoder layer's
        # weights over the width of its attention (the 1.5B Qwen2: 30,500)
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.linear_cost = (sum(p.numel() for p in model.base_model.layers[0].parameters())
                            / (heads * head_dim))

    def forward(self, pack: Pack, temperature: float = 1.0, chunk_tokens: int = 4096):
        return token_logprobs(self.model, pack, temperature, chunk_tokens)


# TRY NOT TO MODIFY: the processes of `accelerate launch` (reductions, the rows dealt by cost;
# one process: the tensor itself) ------------------------------------------------------------------


def _all_reduce(tensor: torch.Tensor, op) -> torch.Tensor:
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return tensor
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    reduced = tensor.to(device, copy=True)
    dist.all_reduce(reduced, op=op)
    return reduced.cpu()


def all_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of `tensor` over every process."""
    return _all_reduce(tensor, dist.ReduceOp.SUM)


def all_max(tensor: torch.Tensor) -> torch.Tensor:
    """The largest value of `tensor` over every process."""
    return _all_reduce(tensor, dist.ReduceOp.MAX)


def row_costs(batch: TrainBatch, linear_cost: float) -> torch.Tensor:
    """[B] each row's compute, up to a constant: L·linear_cost + L² for a sequence of L tokens
    (the weights' FLOPs grow with L, causal attention's with L²; `Policy.linear_cost` weighs the
    two for the model)."""
    lengths = row_lengths(batch).double()
    return lengths * (linear_cost + lengths)


def deal_rows(batch: TrainBatch, linear_cost: float) -> TrainBatch:
    """Every process's rows re-dealt across the processes so that, in each PPO mini-batch, each
    process gets about the same compute (`row_costs`, largest first to the least loaded, LPT):
    under FSDP every pass waits for the slowest process, and each process's own prompts give it
    very different loads at the paper's skewed lengths.

    Exact: a row carries everything the update reads of it (tokens, advantage, weight, sampler
    log-probs, mini-batch), and the token mean and statistics are sums over every process, so
    where a row is computed changes only the order of the sums. Every process takes part (a
    collective); one process: the batch itself. Communication: the lengths and mini-batches of all
    rows to every process, then each row's tensors once, to its new process (about (P-1)/P of the
    batch's tokens at P processes, once per step)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return batch
    processes, rank = dist.get_world_size(), dist.get_rank()
    weights = torch.ones(len(batch.advantages)) if batch.weights is None else batch.weights
    minibatch = (torch.zeros(len(weights), dtype=torch.long) if batch.minibatch is None
                 else batch.minibatch)
    everyone = [None] * processes
    dist.all_gather_object(everyone, (row_costs(batch, linear_cost).tolist(), minibatch.tolist()))
    # the same plan on every process: rows largest first (ties by process, then row), each to the
    # least loaded process
    owner = [[0] * len(costs) for costs, _ in everyone]
    for k in sorted({m for _, minibatches in everyone for m in minibatches}):
        rows = sorted(((cost, source, i) for source, (costs, minibatches) in enumerate(everyone)
                       for i, (cost, m) in enumerate(zip(costs, minibatches)) if m == k),
                      key=lambda row: (-row[0], row[1], row[2]))
        loads = [0.0] * processes
        for cost, source, i in rows:
            target = loads.index(min(loads))
            owner[source][i] = target
            loads[target] += cost
    fields = dict(prompt_ids=batch.prompt_ids, prompt_mask=batch.prompt_mask,
                  response_ids=batch.response_ids, response_mask=batch.response_mask,
                  advantages=batch.advantages, weights=weights, minibatch=minibatch,
                  sampler_logprobs=batch.sampler_logprobs)
    received = []
    for source in range(processes):
        outgoing = None
        if rank == source:
            targets = torch.tensor(owner[rank], dtype=torch.long)
            outgoing = [{name: None if value is None else value[targets == target]
                         for name, value in fields.items()} for target in range(processes)]
        piece = [None]
        dist.scatter_object_list(piece, outgoing, src=source)
        received.append(piece[0])
    dealt = {name: _concat_rows([piece[name] for piece in received], name) for name in fields}
    if batch.minibatch is None:  # ppo_update draws the split
        dealt["minibatch"] = None
    return TrainBatch(**dealt)


def _concat_rows(pieces: list, name: str) -> torch.Tensor | None:
    """Rows from several processes as one tensor: prompts left-padded, the rest right-padded, to the
    widest piece (padding is masked out; 0 stands for it)."""
    if pieces[0] is None:
        return None
    if pieces[0].dim() == 1:
        return torch.cat(pieces)
    width = max(piece.shape[1] for piece in pieces)
    left = name.startswith("prompt")
    return torch.cat([torch.nn.functional.pad(piece, (width - piece.shape[1], 0) if left
                                              else (0, width - piece.shape[1]))
                      for piece in pieces])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="One group's advantages under every estimator (ADVANTAGES), and the clipped "
                    "token loss of per_token_loss at given ratios r = π_θ/π_old; the loss is in "
                    "this module's docstring.")
    parser.add_argument("--rewards", type=float, nargs="+", default=[1.0, 0.0, 0.0, 0.0],
                        help="the rewards of one prompt's rollouts (one group)")
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.5, 0.8, 1.0, 1.2, 1.5],
                        help="ratios π_θ/π_old at which to show a token's loss and gradient")
    parser.add_argument("--eps-low", type=float, default=UpdateConfig.eps_low,
                        help="clip below: r >= 1 - eps_low")
    parser.add_argument("--eps-high", type=float, default=UpdateConfig.eps_high,
                        help="clip above (clip-higher): r <= 1 + eps_high")
    args = parser.parse_args(argv)
    if len(args.rewards) < 2 or not all(abs(r) <= 1e6 for r in args.rewards):
        parser.error("--rewards: two or more numbers in [-1e6, 1e6] (one group)")
    if not all(1e-3 <= r <= 1e3 for r in args.ratios) or not (
            0 <= args.eps_low < 1 and 0 <= args.eps_high <= 1e3):
        parser.error("--ratios must be in [1e-3, 1e3], --eps-low in [0, 1), --eps-high in "
                     "[0, 1e3]")
    rewards, group = torch.tensor(args.rewards), torch.zeros(len(args.rewards), dtype=torch.long)
    print(f"the advantages of the group {args.rewards}:")
    for name, estimator in ADVANTAGES.items():
        values = " ".join(f"{a:+.3f}" for a in estimator(rewards, group).tolist())
        print(f"  {name:<22} {values}")
    cfg = UpdateConfig(eps_low=args.eps_low, eps_high=args.eps_high)
    print(f"\na token's loss -min(r·A, clip(r, {1 - cfg.eps_low:g}, {1 + cfg.eps_high:g})·A) and "
          "its gradient in log π_θ (0: clipped, the token no longer moves):")
    header = f"{'loss':>7} {'gradient':>9}"
    print(f"  {'r':>6} | A = +1: {header} | A = -1: {header}")
    for r in args.ratios:
        logprobs = torch.full((2, 1), math.log(r), requires_grad=True)
        loss, _, _ = per_token_loss(logprobs, torch.zeros(2, 1), torch.tensor([1.0, -1.0]),
                                    torch.ones(2, 1), cfg)
        loss.sum().backward()
        (up, down), (up_grad, down_grad) = loss.flatten().tolist(), logprobs.grad.flatten().tolist()
        print(f"  {r:>6g} |         {up:>7.3f} {up_grad:>9.3f} |         {down:>7.3f} "
              f"{down_grad:>9.3f}")


if __name__ == "__main__":
    main()
