"""Rollouts per prompt (--allocation): how a step's budget of prompts_per_step x N rollouts is
spread over its prompts. The paper gives every prompt the same N (arXiv 2510.01180, Sec. 3); the
other allocation here is a research instrument beside it, plugged into the trainer as
`run.allocation`: `sample` and `record` in `train_brorl.sample_groups`, `metrics` in the step's
logs, `checks` in `train_brorl.validate`, and one key of the checkpoint (run.py):

- `fixed`: N rollouts for every prompt (the default);
- `knapsack`: screen every prompt with screen_rollouts, then give the rest of the budget where a
  group most likely becomes informative (Knapsack RL, arXiv 2509.25849), with
  --allocation-history also from each prompt's previous visit. Each process allocates its own
  share: every engine generates as many samples as with fixed N and no prompt moves between
  processes.

Groups then differ in size; `update.prompt_weights` keeps each prompt counting once in the loss.
Both log `n_per_prompt/*`: the rollouts given per prompt over every process.
"""

from collections.abc import Callable

import torch

import rollout
import update
from tasks import InputError

# sample(counts) -> (rollouts, rewards [S]) of the round's prompts; counts None: N each
Sample = Callable[[list[int] | None], tuple[rollout.Rollouts, torch.Tensor]]


def checks(cfg) -> list[tuple[bool, str]]:
    """The allocation's lines of train_brorl.validate: (ok, the one-line error)."""
    default = type(cfg)()
    knapsack_only = [name for name in ("screen_rollouts", "allocation_cap", "allocation_history")
                     if getattr(cfg, name) != getattr(default, name)]
    return [
        (cfg.allocation == "fixed" or 2 <= cfg.screen_rollouts < cfg.n_rollouts,
         f"screen_rollouts must be in [2, n_rollouts={cfg.n_rollouts}) (a screened group needs two "
         f"rollouts, and some of the budget must be left to allocate), got {cfg.screen_rollouts}"),
        (cfg.allocation == "fixed" or cfg.n_rollouts <= cfg.allocation_cap <= 2**24,
         f"allocation_cap must be in [n_rollouts={cfg.n_rollouts}, 2^24] (else the budget of "
         f"prompts_per_step x n_rollouts cannot be spent), got {cfg.allocation_cap}"),
        (cfg.allocation == "knapsack" or not knapsack_only,
         f"{', '.join(knapsack_only)}: only --allocation knapsack reads it, and this run's "
         "allocation is fixed"),
    ]


class Fixed:
    """N rollouts for every prompt."""

    def __init__(self, cfg, n_tasks: int, pad_id: int):
        self.n = cfg.n_rollouts

    def sample(self, sample: Sample, task_ids: list[int]) -> tuple[rollout.Rollouts, torch.Tensor]:
        """One round's rollouts and rewards for the training tasks `task_ids` (this process's)."""
        return sample(None)

    def record(self, task_ids: list[int], rewards: torch.Tensor, group: torch.Tensor) -> None:
        """What the step's groups (group g answers task task_ids[g]) teach the next steps."""

    def metrics(self, group: torch.Tensor, kept: torch.Tensor) -> dict[str, float]:
        """`n_per_prompt/*`: rollouts per prompt, all N here (kept_mean 0 when no process kept a
        group)."""
        kept_any = float(update.all_sum(kept.sum().float())) > 0
        n = float(self.n)
        return {"n_per_prompt/min": n, "n_per_prompt/median": n, "n_per_prompt/p90": n,
                "n_per_prompt/max": self.n, "n_per_prompt/kept_mean": n if kept_any else 0.0}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict, source: str) -> None:
        pass


class Knapsack(Fixed):
    """A screening of every prompt, then the rest of the budget by value (allocate_rollouts)."""

    def __init__(self, cfg, n_tasks: int, pad_id: int):
        super().__init__(cfg, n_tasks, pad_id)
        # a prompt never gets more than the whole step's budget, whatever the cap
        self.screen, self.pad_id = cfg.screen_rollouts, pad_id
        self.cap = min(cfg.allocation_cap, cfg.n_rollouts * cfg.prompts_per_step)
        self.train_data = cfg.train_data
        # --allocation-history: [T, 2] right and all rollouts at each training task's latest visit
        # (zeros: not drawn yet), the same on every process
        self.history = (torch.zeros(n_tasks, 2, dtype=torch.float64) if cfg.allocation_history
                        else None)

    def sample(self, sample: Sample, task_ids: list[int]) -> tuple[rollout.Rollouts, torch.Tensor]:
        rollouts, rewards = sample([self.screen] * len(task_ids))
        correct = update.group_sums(rewards, rollouts.group)
        budget = len(task_ids) * (self.n - self.screen)
        history = None if self.history is None else self.history[task_ids]
        extra = allocate_rollouts(correct, self.screen, budget, self.cap - self.screen, history)
        more, more_rewards = sample(extra)
        return (rollout.concat_rollouts([rollouts, more], self.pad_id, group_offsets=[0, 0]),
                torch.cat([rewards, more_rewards]))

    def record(self, task_ids: list[int], rewards: torch.Tensor, group: torch.Tensor) -> None:
        if self.history is not None:
            record_visits(self.history, task_ids, rewards, group)

    def metrics(self, group: torch.Tensor, kept: torch.Tensor) -> dict[str, float]:
        """`n_per_prompt/*` over every process, from the histogram of rollouts per prompt summed
        over them: each quantile is some prompt's count."""
        n_per_prompt = torch.bincount(group)
        largest = int(update.all_max(n_per_prompt.max()))
        # then one all_sum: the histogram of rollouts per prompt, the kept prompts' rollouts, count
        summed = update.all_sum(torch.cat([torch.bincount(n_per_prompt, minlength=largest + 1),
                                           torch.stack([n_per_prompt[kept].sum(), kept.sum()])]))
        n_all = torch.repeat_interleave(torch.arange(largest + 1), summed[:-2]).float()
        n_kept = summed[-2:].float()
        return {"n_per_prompt/min": float(n_all.min()),
                "n_per_prompt/median": float(n_all.quantile(0.5, interpolation="lower")),
                "n_per_prompt/p90": float(n_all.quantile(0.9, interpolation="lower")),
                "n_per_prompt/max": largest,
                "n_per_prompt/kept_mean": float(n_kept[0] / n_kept[1]) if n_kept[1] else 0.0}

    def state_dict(self) -> dict:
        return {"prompt_history": self.history}

    def load_state_dict(self, state: dict, source: str) -> None:
        if self.history is None:
            return
        history = state.get("prompt_history")
        if history is None:
            raise InputError(f"{source} holds no prompt history (--allocation-history): resume it "
                             "with the flags it was started with")
        if history.shape != self.history.shape:
            raise InputError(f"{source} remembers {len(history)} training prompts and "
                             f"{self.train_data} holds {len(self.history)}: resume with the run's "
                             "own training data")
        self.history = history


# name -> allocation, all built as ALLOCATIONS[name](cfg, training tasks, tokenizer's pad id)
ALLOCATIONS: dict[str, type[Fixed]] = {"fixed": Fixed, "knapsack": Knapsack}


# ---- the knapsack's math -----------------------------------------------------------------------


def informative_probability(correct: torch.Tensor, screened: int, extra: torch.Tensor,
                            prior: tuple[float, float],
                            history: torch.Tensor | None = None) -> torch.Tensor:
    """P(a group is informative once it has `extra` more rollouts | `correct` of its `screened`
    were correct), its success rate p ~ Beta(a + correct, b + screened - correct) from the
    Beta(a, b) `prior`, and with `history` ([G, 2]: right and all rollouts of each prompt's
    previous visit) their counts added as evidence too. A mixed screening already is (1); a
    unanimous one stays unanimous only if every extra rollout agrees: 1 - E[p^n] (all right so
    far) or 1 - E[(1 - p)^n] (all wrong), by E[p^n] = B(a + n, b) / B(a, b). Knapsack RL's value
    1 - p^n - (1 - p)^n (arXiv 2509.25849), made conditional on what was seen. correct: [G];
    extra: [G, K]; float64."""
    def log_beta(x, y):
        return torch.lgamma(x) + torch.lgamma(y) - torch.lgamma(x + y)

    right, seen = correct.double(), torch.full_like(correct, screened, dtype=torch.float64)
    if history is not None:
        right, seen = right + history[:, 0], seen + history[:, 1]
    a, b = (prior[0] + right)[:, None], (prior[1] + seen - right)[:, None]
    stays_right = torch.exp(log_beta(a + extra, b) - log_beta(a, b))
    stays_wrong = torch.exp(log_beta(a, b + extra) - log_beta(a, b))
    unanimous_right, unanimous_wrong = (correct == screened)[:, None], (correct == 0)[:, None]
    return 1 - torch.where(unanimous_right, stays_right, 0) - torch.where(unanimous_wrong,
                                                                          stays_wrong, 0)


def success_rate_prior(correct: torch.Tensor, screened: int) -> tuple[float, float]:
    """Beta(a, b) of the prompts' success rates, fit by moments to every process's screening
    (a beta-binomial: Var(k/m) = μ(1-μ)/m · (1 + (m-1)ρ), ρ = 1/(a+b+1)). On a plateau it is
    U-shaped, so an all-correct screening predicts a nearly always solved prompt."""
    fractions = correct.double() / screened
    count, total, squares = update.all_sum(torch.stack([
        torch.tensor(float(len(fractions)), dtype=torch.float64), fractions.sum(),
        (fractions**2).sum()])).tolist()
    mean = min(max(total / count, 1e-3), 1 - 1e-3)
    variance = squares / count - (total / count) ** 2
    rho = (variance * screened / (mean * (1 - mean)) - 1) / (screened - 1)
    rho = min(max(rho, 1e-3), 1 - 1e-3)
    strength = 1 / rho - 1
    return mean * strength, (1 - mean) * strength


def allocate_rollouts(correct: torch.Tensor, screened: int, budget: int, cap: int,
                      history: torch.Tensor | None = None) -> list[int]:
    """Extra rollouts per prompt after a screening of `screened` each (`correct` [G] right), exactly
    `budget` in all, at most `cap` per prompt: the allocation of these G prompts (one process's)
    that maximises their expected number of informative groups (Knapsack RL, arXiv 2509.25849).
    Knapsack RL reads p from the prompt's previous epoch; here the evidence is this step's
    screening, which also counts toward the group, and with `history` ([G, 2], see
    informative_probability) the previous visit's rollouts too. A mixed screening keeps its
    `screened` rollouts unless every unanimous prompt is at the cap. Each group's value
    (informative_probability) is concave in its rollouts, so taking the `budget` largest marginal
    gains over all prompts is the knapsack's optimum; ties (gains of 0: groups that are
    informative already) go to the prompt with fewer rollouts, lowest index first."""
    prior = success_rate_prior(correct, screened)
    extra = torch.arange(cap + 1, dtype=torch.float64).expand(len(correct), -1)
    gains = informative_probability(correct, screened, extra, prior, history).diff(dim=1)
    # column-major: a stable sort then breaks ties by rollouts already given, then prompt
    order = gains.T.flatten().sort(descending=True, stable=True).indices[:budget]
    return torch.bincount(order % len(correct), minlength=len(correct)).tolist()


def record_visits(history: torch.Tensor, task_ids: list[int], rewards: torch.Tensor,
                  group: torch.Tensor) -> None:
    """Each prompt this step drew on any process (group g is task task_ids[g] of this one's) gets
    its right and all rollouts in `history` ([T, 2], the training tasks'), in place of its previous
    visit's; a prompt drawn twice in the step (an epoch ends inside it) gets both groups' sum."""
    counts = torch.stack([update.group_sums(rewards.double(), group),
                          torch.bincount(group).double()], dim=1)
    ids = torch.tensor(task_ids, dtype=torch.long)
    visits = update.all_sum(torch.zeros_like(history).index_add_(0, ids, counts))
    visited = visits[:, 1] > 0
    history[visited] = visits[visited]
