"""Exact coverage metrics from a policy's probabilities, for tasks whose correct answers are listed.

Sampled pass@k has an error of about sqrt(p(1-p)/n). When a task lists every correct answer (the
"any_of" kind, data/make_many_answers.py), teacher-forcing the response that states each answer
gives its probability p_a under the policy, and from those the metrics are exact, at any k. Per
prompt, with p_a over its listed correct answers:

- correct_mass  Q = Σ_a p_a, the correct probability mass Q_pos of Theorem 1 (arXiv 2510.01180,
  Sec. 2);
- pass@k        1 − (1 − Q)^k, the probability that at least one of k independent samples is
  correct;
- distinct@k    Σ_a [1 − (1 − p_a)^k], the expected number of distinct correct answers among k
  samples (answer a is among them with probability 1 − (1 − p_a)^k);

and against the same answers' probabilities at step 0, Fig. 3 (ii)/(iii) for a language model:

- above_start_frac  the share of correct answers whose log-probability rose (by more than `tol`);
- worst_drop        the most negative change of a correct answer's log-probability (0 if none fell);
- retained_mass     Σ_a min(p_a, p_a⁰) / Σ_a p_a⁰, the share of the step-0 correct mass still in
  place (F-GRPO's retained positive mass, arXiv 2602.06717): growth on one answer does not make up
  for a loss on another.

Per-prompt metrics are averaged over prompts (each prompt weighs alike, as eval.py's pass@k);
above_start_frac and worst_drop are over all (prompt, answer) pairs. A response is the string
ANSWER_RESPONSE states the answer in, then EOS, as the tiny model is taught to answer
(tiny_model.sft_batch): for a policy that writes its correct answers only that way the metrics are
exact; for one that writes others too (reasoning before the box) correct_mass, pass@k and
distinct@k are lower bounds. The probabilities are at the sampling temperature, without top-p.

Inputs are flat: `logp` [A], one sequence log-prob per listed answer, and `group` [A], the prompt
each answer belongs to (as rollouts are grouped, rollout.Rollouts.group).
"""

import dataclasses

import torch

import reward
import rollout
import update

ANSWER_RESPONSE = "\\boxed{{{}}}"  # the response that states an answer, before EOS
# task kinds whose gold lists every correct answer -> how to read the list from the data's answer
LISTED_ANSWERS = {"any_of": reward.read_any_of_gold}
KS = (4, 16, 64, 256)  # the k of pass@k and distinct@k that report() gives (k=1: correct_mass)


# ---- the metrics (pure functions of log-probs) ---------------------------------------------------


def _per_prompt(values: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """[G] sums of `values` over each prompt's answers, prompts in the order of their ids."""
    _, prompt = torch.unique(group, return_inverse=True)
    return torch.zeros(int(prompt.max()) + 1, dtype=values.dtype).index_add_(0, prompt, values)


def correct_mass(logp: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """[G] Q = Σ_a p_a per prompt, in float64, at most 1 (the listed answers are distinct
    responses, so their probabilities sum to at most 1 but for rounding).

    >>> correct_mass(torch.tensor([0.5, 0.25, 0.1]).log(), torch.tensor([0, 0, 1]))
    tensor([0.7500, 0.1000], dtype=torch.float64)
    """
    return _per_prompt(logp.double().exp(), group).clamp(max=1.0)


def _at_least_once(p: torch.Tensor, k: int) -> torch.Tensor:
    """1 − (1 − p)^k, accurate for small p and large k."""
    return -torch.expm1(k * torch.log1p(-p))


def pass_at_k(logp: torch.Tensor, group: torch.Tensor, k: int) -> torch.Tensor:
    """[G] the exact probability that at least one of k independent samples is correct:
    1 − (1 − Q)^k.

    >>> pass_at_k(torch.tensor([0.5, 0.25, 0.1]).log(), torch.tensor([0, 0, 1]), 2)
    tensor([0.9375, 0.1900], dtype=torch.float64)
    """
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got {k}")
    return _at_least_once(correct_mass(logp, group), k)


def distinct_at_k(logp: torch.Tensor, group: torch.Tensor, k: int) -> torch.Tensor:
    """[G] the expected number of distinct correct answers among k independent samples:
    Σ_a 1 − (1 − p_a)^k.

    >>> distinct_at_k(torch.tensor([0.5, 0.25, 0.1]).log(), torch.tensor([0, 0, 1]), 2)
    tensor([1.1875, 0.1900], dtype=torch.float64)
    """
    if k < 1:
        raise ValueError(f"distinct@k needs k >= 1, got {k}")
    return _per_prompt(_at_least_once(logp.double().exp().clamp(max=1.0), k), group)


def above_start_frac(logp: torch.Tensor, logp0: torch.Tensor,
                     tol: float | torch.Tensor = 0.0) -> float:
    """Share of correct answers whose log-prob rose by more than `tol` (one for all, or [A]) since
    step 0 (Fig. 3 (ii)).

    >>> above_start_frac(torch.tensor([-1.0, -2.0, -3.0, -4.0]), torch.tensor([-2.0, -2.0, -1.0,
    ...                                                                         -5.0]))
    0.5
    """
    return float(((logp - logp0) > tol).double().mean())


def worst_drop(logp: torch.Tensor, logp0: torch.Tensor) -> float:
    """The most negative change of a correct answer's log-prob since step 0, 0 if none fell
    (Fig. 3 (iii), in log-prob).

    >>> worst_drop(torch.tensor([-1.0, -2.5, -3.0]), torch.tensor([-2.0, -2.0, -1.0]))
    -2.0
    """
    return min(0.0, float((logp - logp0).min()))


def retained_mass(logp: torch.Tensor, logp0: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """[G] Σ_a min(p_a, p_a⁰) / Σ_a p_a⁰ per prompt: the step-0 correct mass still in place.

    >>> retained_mass(torch.tensor([0.6, 0.1, 0.2]).log(), torch.tensor([0.4, 0.4, 0.4]).log(),
    ...               torch.tensor([0, 0, 1]))
    tensor([0.6250, 0.5000], dtype=torch.float64)
    """
    p, p0 = logp.double().exp(), logp0.double().exp()
    return _per_prompt(torch.minimum(p, p0), group) / _per_prompt(p0, group)


def report(logp: torch.Tensor, group: torch.Tensor, logp0: torch.Tensor | None = None,
           ks=KS, tol: float | torch.Tensor = 0.0) -> dict[str, float]:
    """Every metric above, averaged over prompts: correct_mass (which is pass@1 and distinct@1),
    pass@k and distinct@k for each k of `ks`; with the step-0 log-probs `logp0`, also
    above_start_frac (rises over `tol`), worst_drop and retained_mass.

    >>> logp = torch.tensor([0.5, 0.25, 0.1], dtype=torch.float64).log()
    >>> report(logp, torch.tensor([0, 0, 1]), ks=(2,))
    {'correct_mass': 0.425, 'pass@2': 0.56375, 'distinct@2': 0.68875}
    """
    out = {"correct_mass": float(correct_mass(logp, group).mean())}
    for k in ks:
        out[f"pass@{k}"] = float(pass_at_k(logp, group, k).mean())
        out[f"distinct@{k}"] = float(distinct_at_k(logp, group, k).mean())
    if logp0 is not None:
        if logp0.shape != logp.shape:
            raise ValueError(f"step-0 log-probs have shape {tuple(logp0.shape)}, the answers' "
                             f"{tuple(logp.shape)}")
        out["above_start_frac"] = above_start_frac(logp, logp0, tol)
        out["worst_drop"] = worst_drop(logp, logp0)
        out["retained_mass"] = float(retained_mass(logp, logp0, group).mean())
    return out


# ---- the policy's probabilities of the listed answers --------------------------------------------


def listed_answers(task: dict) -> list[str] | None:
    """Every correct answer of `task` if its kind lists them (LISTED_ANSWERS), else None."""
    read = LISTED_ANSWERS.get(task["task"])
    return None if read is None else read(task["answer"])


def answer_rollouts(tokenizer, tasks: list[dict], chat_template: bool) -> rollout.Rollouts | None:
    """One row per listed correct answer of each task that lists them: its prompt, then
    ANSWER_RESPONSE of the answer and EOS; `group` is the task's index in `tasks`. None when no task
    lists its answers."""
    listed = [(g, answers) for g, answers in enumerate(map(listed_answers, tasks))
              if answers is not None]
    if not listed:
        return None
    prompt_ids = rollout.encode_prompts(tokenizer, [tasks[g]["prompt"] for g, _ in listed],
                                        chat_template)
    rows = [(i, tokenizer.encode(ANSWER_RESPONSE.format(answer), add_special_tokens=False)
             + [tokenizer.eos_token_id]) for i, (_, answers) in enumerate(listed)
            for answer in answers]
    answer_rows = rollout.pack_rollouts(tokenizer, prompt_ids, [i for i, _ in rows],
                                        [response for _, response in rows],
                                        [[0.0] * len(response) for _, response in rows],
                                        [False] * len(rows))
    task_of = torch.tensor([g for g, _ in listed])
    return dataclasses.replace(answer_rows, group=task_of[answer_rows.group])


def sequence_logprobs(policy, rows: rollout.Rollouts, update_cfg: update.UpdateConfig
                      ) -> torch.Tensor:
    """[A] each row's response log-prob, by the trainer's packed path (update.batch_logprobs).
    policy: an update.Policy (or its DDP/FSDP wrapper; every process calls this)."""
    batch = update.TrainBatch(rows.prompt_ids, rows.prompt_mask, rows.response_ids,
                              rows.response_mask, torch.zeros(len(rows.texts)))
    return (update.batch_logprobs(policy, batch, update_cfg) * rows.response_mask).sum(-1)


def measure(model, tokenizer, tasks: list[dict], chat_template: bool, temperature: float = 1.0,
            ks=KS) -> dict[str, float] | None:
    """report() of a causal LM (or an update.Policy) on the tasks that list their answers, at the
    sampling temperature; None if none does."""
    rows = answer_rollouts(tokenizer, tasks, chat_template)
    if rows is None:
        return None
    policy = model if isinstance(model, update.Policy) else update.Policy(model)
    logp = sequence_logprobs(policy, rows, update.UpdateConfig(temperature=temperature))
    return report(logp, rows.group, ks=ks)
