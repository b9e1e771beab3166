"""Rollouts allocated per prompt (allocation.py; train_brorl.py --allocation knapsack): screen every
prompt with a few rollouts, then spend the rest of the step's budget where a group most likely
becomes informative."""

import json

import pytest
import torch

import allocation
import train_brorl
import update
from checkpoints import latest_checkpoint, read_plain_data
from conftest import accelerate_launch, run_script
from tasks import InputError


def train_config(*flags: str):
    return train_brorl.parse_config(["--preset", "smoke", *flags])


def test_informative_probability_is_the_chance_a_simulated_group_ends_mixed():
    # prompts drawn from the prior, screened with 4 rollouts, then given n more: how many groups
    # hold both a right and a wrong answer, against the formula's prediction
    torch.manual_seed(0)
    prior, screened = (0.4, 0.3), 4
    generator = torch.Generator().manual_seed(0)
    p = torch.distributions.Beta(*prior).sample((200_000,))
    for extra in (1, 8, 64):
        rollouts = torch.rand(len(p), screened + extra, generator=generator) < p[:, None]
        correct = rollouts[:, :screened].sum(1)
        mixed = rollouts.any(1) & ~rollouts.all(1)
        for seen in (0, 2, screened):
            simulated = mixed[correct == seen].double().mean()
            predicted = allocation.informative_probability(
                torch.tensor([seen]), screened, torch.tensor([[float(extra)]]), prior)
            assert float(predicted) == pytest.approx(float(simulated), abs=0.01), (extra, seen)


def test_the_prior_is_fit_to_the_screening_of_many_prompts():
    torch.manual_seed(0)
    p = torch.distributions.Beta(0.5, 0.25).sample((50_000,))
    correct = torch.binomial(torch.full_like(p, 8.0), p)
    a, b = allocation.success_rate_prior(correct, screened=8)
    assert a == pytest.approx(0.5, rel=0.1) and b == pytest.approx(0.25, rel=0.1)


def test_the_budget_is_spent_exactly_on_groups_that_can_still_become_informative():
    # screened 4 each: all wrong, mixed, all right, all right
    correct = torch.tensor([0.0, 2.0, 4.0, 4.0])
    extra = allocation.allocate_rollouts(correct, screened=4, budget=30, cap=12)
    assert sum(extra) == 30 and max(extra) <= 12
    assert extra[1] == 0  # the mixed group is informative already
    assert extra[2] == extra[3]  # the same evidence, the same share
    # more than the unanimous groups can take: the rest is spread over the others, evenly
    assert allocation.allocate_rollouts(correct, screened=4, budget=40, cap=12) == [12, 4, 12, 12]
    assert allocation.allocate_rollouts(torch.tensor([1.0, 2.0, 3.0]), 4, 7, 10) == [3, 2, 2]


def test_rare_successes_are_hunted_where_the_batch_says_they_are_likely():
    # a batch where most prompts are solved every time: one more all-right screening is likely a
    # solved prompt, an all-wrong one is rare and likelier to hide a success
    correct = torch.tensor([4.0] * 30 + [2.0] * 6 + [0.0] * 4)
    extra = allocation.allocate_rollouts(correct, screened=4, budget=200, cap=64)
    assert extra[-1] > extra[0] > 0


def plateau_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The revive experiment's saturated policy (docs/revive.md) in miniature, as its N=512 groups
    showed it at the branch point: 512 prompts always solved, solved 90-100% of the time, or never
    solved. Returns their success rates p, a 4-rollout screening's right answers, and a previous
    visit of 16 rollouts ([G, 2]: right, rollouts)."""
    generator = torch.Generator().manual_seed(seed)
    p = torch.cat([torch.ones(230), 0.9 + 0.099 * torch.rand(246, generator=generator),
                   torch.zeros(36)]).double()
    correct = torch.binomial(torch.full_like(p, 4.0), p, generator=generator)
    previous = torch.stack([torch.binomial(torch.full_like(p, 16.0), p, generator=generator),
                            torch.full_like(p, 16.0)], dim=1)
    return p, correct, previous


def informative_given_screening(p, correct, extra):
    """The expected informative groups once `extra` rollouts follow the screening, with the true
    success rates."""
    return float(torch.where(correct == 4, 1 - p**extra,
                             torch.where(correct == 0, 1 - (1 - p) ** extra, 1.0)).sum())


def test_a_beta_prior_cannot_see_unsolvable_prompts_so_on_a_plateau_fixed_n_finds_more_signal():
    # A Beta fit to 4-rollout screenings is U-shaped and reads an all-wrong screening as a rare
    # success to hunt, so the allocation moves rollouts from the prompts that can still fail to
    # ones that can never succeed: it predicts more informative groups than fixed N=16 and gets
    # fewer.
    p, correct, _ = plateau_batch(seed=0)
    prior = allocation.success_rate_prior(correct, screened=4)
    extra = torch.tensor(allocation.allocate_rollouts(correct, screened=4, budget=512 * 12,
                                                       cap=508), dtype=torch.float64)
    fixed = torch.full_like(extra, 12.0)

    def predicted(more):
        return float(allocation.informative_probability(correct, 4, more[:, None], prior).sum())

    assert predicted(extra) > predicted(fixed)
    assert (informative_given_screening(p, correct, extra)
            < 0.95 * informative_given_screening(p, correct, fixed))
    assert extra[p == 0].mean() > 3 * extra[(0 < p) & (p < 1)].mean()  # the never-solved took them


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_each_prompts_previous_visit_as_evidence_the_allocation_beats_fixed_n_on_a_plateau(
        seed):
    # 0 right of 16 last time and 0 of 4 now reads as unsolvable, not as a rare success to hunt
    p, correct, previous = plateau_batch(seed)

    def informative(history):
        extra = allocation.allocate_rollouts(correct, 4, 512 * 12, 508, history)
        return informative_given_screening(p, correct, torch.tensor(extra, dtype=torch.float64))

    fixed = informative_given_screening(p, correct, torch.full_like(p, 12.0))
    assert informative(previous) > fixed > informative(None)


def test_a_prompt_never_solved_at_its_last_visit_gets_fewer_rollouts_than_one_solved_sometimes():
    # the batch of test_rare_successes_are_hunted_where_the_batch_says_they_are_likely; the four
    # all-wrong screenings' prompts were seen before: two never solved in 16, two solved 3 times
    correct = torch.tensor([4.0] * 30 + [2.0] * 6 + [0.0] * 4)
    history = torch.zeros(40, 2)
    history[36:] = torch.tensor([[0.0, 16.0], [0.0, 16.0], [3.0, 16.0], [3.0, 16.0]])
    extra = allocation.allocate_rollouts(correct, screened=4, budget=200, cap=64,
                                          history=history)
    assert sum(extra) == 200
    assert extra[38] == extra[39] > extra[36] == extra[37]
    # prompts not drawn before (zeros) have only their screening, as without a history
    assert (allocation.allocate_rollouts(correct, 4, 200, 64, torch.zeros(40, 2))
            == allocation.allocate_rollouts(correct, 4, 200, 64))


def test_each_prompt_drawn_remembers_its_latest_visit():
    history = torch.zeros(5, 2, dtype=torch.float64)
    # tasks 3 and 1: 2 of 3 right, 0 of 2
    allocation.record_visits(history, [3, 1], torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0]),
                              torch.tensor([0, 0, 0, 1, 1]))
    assert history.tolist() == [[0, 0], [0, 2], [0, 0], [2, 3], [0, 0]]
    # task 3 again: its new visit replaces the old one; task 1 keeps its own
    allocation.record_visits(history, [3], torch.tensor([1.0] * 4), torch.tensor([0] * 4))
    assert history.tolist() == [[0, 0], [0, 2], [0, 0], [4, 4], [0, 0]]
    # task 0 twice in one step (an epoch ended inside it): both groups count
    allocation.record_visits(history, [0, 0], torch.tensor([1.0, 0.0, 0.0]),
                              torch.tensor([0, 1, 1]))
    assert history[0].tolist() == [1, 3]


def test_a_prompt_counts_the_same_in_the_loss_however_many_rollouts_it_was_given():
    group = torch.tensor([0] * 4 + [1] * 40 + [2] * 4)  # 48 rollouts, N=16 on average
    weights = update.prompt_weights(group, n_rollouts=16)
    per_prompt = torch.zeros(3).index_add_(0, group, weights)
    assert per_prompt.tolist() == pytest.approx([16.0, 16.0, 16.0])
    # fixed N: every row weighs 1, the plain mean over samples
    assert (update.prompt_weights(torch.arange(8).repeat_interleave(16), 16) == 1).all()


def metric_rows(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "rollouts" in r]


def latest_history(run_dir):
    """The prompt history in the run's latest checkpoint: [T, 2] right and all rollouts."""
    checkpoint = latest_checkpoint(run_dir)
    return read_plain_data(checkpoint / "trainer_state.pt")["allocation"]["prompt_history"]


def test_a_knapsack_run_spends_exactly_the_fixed_runs_budget_and_can_remember_each_visit(
        tmp_path):
    allocation = ["--allocation", "knapsack", "--screen-rollouts", "4", "--allocation-cap", "64",
                  "--prompts-per-step", "8"]
    # two processes (DDP over gloo) with dynamic sampling refills: each process spends its own
    # share of every round's budget; with --allocation-history, resumed after step 2
    two = ["--output-dir", str(tmp_path / "two")]
    accelerate_launch("train_brorl.py", "--preset", "smoke", *two, *allocation,
                      "--allocation-history", "--refill-rounds", "2", "--total-steps", "2")
    accelerate_launch("train_brorl.py", *two, "--resume", "--total-steps", "3")
    rows = metric_rows(tmp_path / "two")
    assert all(r["rollouts"] == 8 * 16 * r["gen_rounds"] for r in rows)  # prompts x n_rollouts
    assert all(r["n_per_prompt/min"] >= 4 and r["n_per_prompt/max"] <= 64 for r in rows)
    assert all(r["kept_groups"] <= 8 for r in rows)
    assert any(r["n_per_prompt/max"] > 16 for r in rows)
    # the quantiles are of every process's prompts together, so each is some prompt's count
    assert all(float(r[f"n_per_prompt/{q}"]).is_integer()
               for r in rows for q in ("min", "median", "p90", "max"))
    # every prompt drawn, on either process and before or after the resume, is remembered
    assert latest_history(tmp_path / "two")[:, 1].sum() == sum(r["rollouts"] for r in rows)


def test_a_resumed_run_whose_training_file_changed_size_is_refused_in_one_line(tmp_path):
    train = tmp_path / "train.jsonl"
    lines = open("data/arith_train.jsonl").readlines()
    train.write_text("".join(lines[:16]))
    flags = ["--output-dir", str(tmp_path / "run"), "--train-data", str(train)]
    run_script("train_brorl.py", "--preset", "smoke", *flags, "--allocation", "knapsack",
               "--allocation-history", "--total-steps", "1")
    train.write_text("".join(lines[:20]))
    refused = run_script("train_brorl.py", *flags, "--resume", check=False)
    assert refused.returncode != 0
    assert "remembers 16 training prompts and" in refused.stderr.strip().splitlines()[-1]


def test_a_checkpoint_without_the_prompt_history_it_needs_is_refused_in_one_line():
    cfg = train_config("--allocation", "knapsack", "--allocation-history")
    knapsack = allocation.Knapsack(cfg, n_tasks=16, pad_id=0)
    with pytest.raises(InputError, match="step_000002 holds no prompt history"):
        knapsack.load_state_dict({}, "step_000002")
    knapsack.load_state_dict({"prompt_history": torch.ones(16, 2, dtype=torch.float64)}, "x")
    assert knapsack.history.sum() == 32
    # without --allocation-history a saved history is not needed
    allocation.Knapsack(train_config("--allocation", "knapsack"), 16, 0).load_state_dict({}, "x")
