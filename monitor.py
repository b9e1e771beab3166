"""The knowledge-shrinkage monitor: the paper's Fig. 3 (ii)/(iii) quantity at LLM scale.

Theorem 1 of arXiv 2510.01180 (Sec. 2) says one update can lower the probability of correct
responses through the unsampled coupling term, and that this fades as N grows. Two monitors watch
it happen in a real run:

- every step, `ShrinkageWatch` re-scores up to `shrink_monitor_samples` distinct correct responses
  of the step after the update: `shrink_frac` is the share whose sequence log-prob fell;
- at every eval, the probe set (correct responses drawn once at step 0 on held-out and training
  prompts) is re-scored against its step-0 log-probs, split by whether the step sampled the
  probe's prompt: the analog of Fig. 3's sampled / unsampled correct responses. A task that lists
  its correct answers (coverage.py) is probed on every one of them, and the report adds their
  exact coverage metrics (`coverage_held_out_pass@256`, ...).
"""

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

import checkpoints
import coverage
import rollout
import update
from tasks import InputError


def shrinkage(before: torch.Tensor, after: torch.Tensor, tol: float = 1e-6) -> tuple[float, float]:
    """Fraction of correct responses whose sequence log-prob fell by more than `tol` nats across
    the update, and the worst change (most negative after - before; 0 if none fell).

    >>> shrinkage(torch.tensor([-1.0, -2.0, -3.0]), torch.tensor([-0.5, -2.5, -3.0]))
    (0.3333333333333333, -0.5)
    """
    if before.numel() == 0:
        return 0.0, 0.0
    change = after - before
    return int((change < -tol).sum()) / change.numel(), min(0.0, float(change.min()))


def monitor_rows(rollouts: rollout.Rollouts, rewards: torch.Tensor, limit: int) -> list[int]:
    """Up to `limit` distinct correct responses (one row per distinct (prompt, response)), evenly
    spread."""
    seen, rows = set(), []
    for row in (rewards.flatten() == 1.0).nonzero().squeeze(-1).tolist():
        key = (int(rollouts.group[row]), rollouts.texts[row])
        if key not in seen:
            seen.add(key)
            rows.append(row)
    if len(rows) > limit:
        rows = [rows[i * len(rows) // limit] for i in range(limit)]
    return rows


class ShrinkageWatch:
    """The step's correct responses scored before the update; `after` scores them again. Both
    passes run on every process, also one with no correct response (FSDP gathers in each pass)."""

    def __init__(self, policy, watched: update.TrainBatch, update_cfg: update.UpdateConfig):
        self.batch, self.update_cfg = watched, update_cfg
        self.before = update.batch_logprobs(policy, watched, update_cfg).sum(-1)

    def after(self, policy) -> dict[str, float]:
        """shrink_frac, shrink_worst (see `shrinkage`) and how many responses were watched."""
        after = update.batch_logprobs(policy, self.batch, self.update_cfg).sum(-1)
        shrink_frac, shrink_worst = shrinkage(self.before, after)
        return {"shrink_frac": shrink_frac, "shrink_worst": shrink_worst,
                "shrink_watched": len(self.before)}


CORRECT_FRACTION_QUARTERS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))
CORRECT_FRACTION_BINS = ("0", *(f"{lo:g}-{hi:g}" for lo, hi in CORRECT_FRACTION_QUARTERS), "1")


def correct_fraction_histogram(rewards: torch.Tensor, group: torch.Tensor) -> dict[str, float]:
    """Share of the step's prompts by the fraction of their rollouts that were correct (rollout s
    answers prompt group[s]): all wrong, four quarters of (0, 1), all right. The two ends are
    compute spent on groups with no signal (Sec. 3)."""
    fraction = update.group_sums(rewards.float(), group) / torch.bincount(group)
    bins = {"correct_frac/0": fraction == 0, "correct_frac/1": fraction == 1}
    for lo, hi in CORRECT_FRACTION_QUARTERS:
        bins[f"correct_frac/{lo:g}-{hi:g}"] = (fraction > lo) & (fraction <= hi) & (fraction < 1)
    return {name: float(mask.float().mean()) for name, mask in bins.items()}


# ---- the probe set ------------------------------------------------------------------------------


def draw_probes(sampler, tokenizer, train_tasks: list[dict], test_tasks: list[dict], count: int,
                params: rollout.SamplingParams, chat_template: bool, seed: int,
                score: Callable[[list[dict], rollout.Rollouts], torch.Tensor]) -> dict:
    """The fixed probe set, drawn once at step 0: for each of the first `count` held-out prompts
    and as many training prompts, the first correct response among `params.n` samples (a prompt
    with none has no probe). Fig. 3 of arXiv 2510.01180 follows correct responses the policy
    already produced and asks whether training raises or lowers them; a held-out prompt is never
    sampled by a step, a training prompt by some (`probe_report` splits by the step's prompts,
    the analog of Fig. 3 (ii) vs (iii), Sec. 2.2). `score` gives each rollout's reward. A
    prompt whose task lists its correct answers (coverage.answer_rollouts) has every listed answer
    as a probe instead, marked in `listed`."""
    tasks = test_tasks[:count] + train_tasks[:count]
    held_out = [i < min(count, len(test_tasks)) for i in range(len(tasks))]
    prompt_ids = rollout.encode_prompts(tokenizer, [t["prompt"] for t in tasks], chat_template)
    drawn = rollout.generate(sampler, tokenizer, prompt_ids, params,
                             torch.Generator().manual_seed(seed + 7919))
    correct = score(tasks, drawn) == 1.0
    listed = coverage.answer_rollouts(tokenizer, tasks, chat_template)  # None: no task lists them
    rows = []
    for g in range(len(tasks)):
        hits = (correct & (drawn.group == g)).nonzero().squeeze(-1)
        if len(hits) and (listed is None or g not in listed.group):
            rows.append(int(hits[0]))
    if listed is not None:  # a task that lists its correct answers is probed on every one
        rows += range(len(drawn.texts), len(drawn.texts) + len(listed.texts))
        drawn = rollout.concat_rollouts([drawn, listed], tokenizer.pad_token_id, [0, 0])
    probes = {"prompt_ids": drawn.prompt_ids[rows], "prompt_mask": drawn.prompt_mask[rows],
              "response_ids": drawn.response_ids[rows],
              "response_mask": drawn.response_mask[rows],
              "prompts": [tasks[int(drawn.group[r])]["prompt"] for r in rows],
              "held_out": torch.tensor([held_out[int(drawn.group[r])] for r in rows],
                                       dtype=torch.bool)}
    if listed is not None:
        probes["listed"] = torch.arange(len(rows)) >= len(rows) - len(listed.texts)
    return probes


def probe_logprobs(policy, probes: dict, update_cfg: update.UpdateConfig,
                   micro_batch_tokens: int = 0) -> torch.Tensor:
    """[P] per-token mean log-prob of each probe response (a mean, so long and short responses
    weigh alike)."""
    batch = update.TrainBatch(probes["prompt_ids"], probes["prompt_mask"], probes["response_ids"],
                              probes["response_mask"], torch.zeros(len(probes["prompts"])))
    if micro_batch_tokens:
        update_cfg = dataclasses.replace(update_cfg, micro_batch_tokens=micro_batch_tokens)
    logprobs = update.batch_logprobs(policy, batch, update_cfg)
    return (logprobs * batch.response_mask).sum(-1) / batch.response_mask.sum(-1).clamp(min=1)


PROBE_KEYS = ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "prompts", "held_out")


def load_or_draw_probes(path: Path, source: Path | None, draw: Callable[[], dict], policy,
                        update_cfg: update.UpdateConfig, main_process: bool,
                        wait_for_everyone: Callable[[], None]) -> dict:
    """The run's probe set at `path`: kept with the run, so a resumed run re-scores the same
    probes, and copied from `source` (the run an --init-from branch starts from), so every branch
    is measured against the same probes and the same step-0 log-probs; else drawn by `draw()`. A
    new probe set also gets its noise floor: the largest change of any probe between two scorings
    with unchanged weights (one batched and padded, one row at a time), the rounding a change must
    exceed to count as a change. Every process calls this."""
    if path.exists() and not path.is_file():
        raise InputError(f"{path} is not a file: move it away")
    if main_process and not path.is_file():
        if source is not None and source.is_file():
            shutil.copy(source, path)
        else:
            torch.save(draw(), path)
    wait_for_everyone()
    probes = checkpoints.read_plain_data(path)
    if not isinstance(probes, dict) or not set(PROBE_KEYS) <= probes.keys():
        raise InputError(f"{path} is not a probe set (a dict of {', '.join(PROBE_KEYS)})")
    if "base" not in probes:
        probes["base"] = probe_logprobs(policy, probes, update_cfg)
        alone = probe_logprobs(policy, probes, update_cfg, micro_batch_tokens=1)
        probes["noise_floor"] = float((alone - probes["base"]).abs().max()) if len(alone) else 0.0
        if main_process:
            torch.save(probes, path)
            held_out = int(probes["held_out"].sum())
            print(f"probe set: {len(probes['prompts'])} correct responses ({held_out} on held-out "
                  f"prompts), noise floor {probes['noise_floor']:.2e} nats/token")
    return probes


def probe_report(probes: dict, now: torch.Tensor, sampled_prompts: set[str]) -> dict[str, float]:
    """The change of each probe's per-token mean log-prob since step 0, as in Fig. 3 (ii)/(iii):
    the fraction that rose by more than the noise floor, the fraction that fell by more, and the
    worst drop; over all probes, and separately over probes whose prompt this step sampled and
    the rest."""
    change, floor = now - probes["base"], probes["noise_floor"]
    sampled = torch.tensor([p in sampled_prompts for p in probes["prompts"]], dtype=torch.bool)
    report = {"probe_noise_floor": floor}
    for name, mask in (("probe", torch.ones_like(sampled)), ("probe_sampled", sampled),
                       ("probe_unsampled", ~sampled)):
        report[f"{name}_count"] = int(mask.sum())
        if mask.any():
            report[f"{name}_improved_frac"] = float((change[mask] > floor).float().mean())
            report[f"{name}_dropped_frac"] = float((change[mask] < -floor).float().mean())
            report[f"{name}_worst_drop"] = min(0.0, float(change[mask].min()))
            report[f"{name}_mean_change"] = float(change[mask].mean())
    if "listed" in probes:
        report.update(listed_coverage(probes, now))
    return report


def listed_coverage(probes: dict, now: torch.Tensor) -> dict[str, float]:
    """coverage.report() of the probes that are listed correct answers (draw_probes), against
    their step-0 log-probs, over held-out and over training prompts: `coverage_held_out_pass@16`,
    ... A rise counts above the noise floor."""
    listed, length = probes["listed"], probes["response_mask"].sum(-1)
    logp, logp0 = now * length, probes["base"] * length  # sequence log-probs from the means
    keys = [(p, bool(h)) for p, h in zip(probes["prompts"], probes["held_out"])]
    ids = {key: i for i, key in enumerate(dict.fromkeys(keys))}  # a prompt in both splits: two
    group = torch.tensor([ids[key] for key in keys])
    report = {}
    for name, mask in (("held_out", listed & probes["held_out"]),
                       ("train", listed & ~probes["held_out"])):
        if mask.any():
            metrics = coverage.report(logp[mask], group[mask], logp0[mask],
                                      tol=probes["noise_floor"] * length[mask])
            report.update({f"coverage_{name}_{key}": value for key, value in metrics.items()})
    return report
