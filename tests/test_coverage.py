"""coverage.py: exact coverage metrics from listed answers' probabilities, and their hooks in the
probe-set monitor (monitor.py) and in eval.py."""

import copy
import doctest
import itertools
import json
import math

import pytest
import torch

import coverage
import eval as evaluation
import monitor
import reward
import rollout
import update
from conftest import NO_BWRAP, ROOT, run_script

GOLD_A, GOLD_B = {"any_of": ["42", "49", "56"]}, {"any_of": ["7", "14"]}
TASKS = [{"prompt": "7|40..59=", "answer": GOLD_A, "task": "any_of"},
         {"prompt": "1+2=", "answer": "3", "task": "arith"},
         {"prompt": "7|5..19=", "answer": GOLD_B, "task": "any_of"}]


def test_doctests():
    assert doctest.testmod(coverage).failed == 0


# ---- the metrics against sampling and brute force ---------------------------------------------


@pytest.mark.parametrize("k", [1, 16, 256])
def test_pass_at_k_and_distinct_answers_match_sampling_from_a_categorical(k):
    correct = torch.tensor([0.3, 0.1, 0.02, 0.004, 0.0005], dtype=torch.float64)
    outcomes = torch.cat([correct, 1 - correct.sum()[None]])  # the last outcome: every wrong one
    trials = 4000
    draws = torch.multinomial(outcomes.expand(trials, -1), k, replacement=True,
                              generator=torch.Generator().manual_seed(k))  # [trials, k]
    seen = torch.stack([(draws == a).any(-1) for a in range(len(correct))], -1).double()
    logp, group = correct.log(), torch.zeros(len(correct), dtype=torch.long)
    # each answer is among the k draws or not: a Bernoulli variable with the exact mean
    # 1 - (1 - p_a)^k; its mean over the trials is off by more than 5 standard deviations with
    # probability < 6e-7
    each = 1 - (1 - correct) ** k
    bound = 5 * (each * (1 - each) / trials).sqrt()
    assert ((seen.mean(0) - each).abs() <= bound).all()
    # distinct@k sums those variables, so its error is within the sum of their bounds
    distinct = float(coverage.distinct_at_k(logp, group, k)[0])
    assert abs(seen.sum(-1).mean() - distinct) <= bound.sum()
    assert distinct == pytest.approx(float(each.sum()), rel=1e-12)
    passed = 1 - (1 - correct.sum()) ** k
    pass_bound = 5 * math.sqrt(passed * (1 - passed) / trials) + 1e-12  # pass@256 is ~1
    assert abs(float(seen.amax(-1).mean()) - float(coverage.pass_at_k(logp, group, k)[0])) \
        <= pass_bound


def test_pass_at_k_and_distinct_answers_equal_brute_force_over_every_sequence_of_draws():
    outcomes = [0.4, 0.15, 0.05, 0.4]  # three correct answers, then one wrong
    k, correct = 3, range(3)
    at_least_one = distinct = 0.0
    for draws in itertools.product(range(len(outcomes)), repeat=k):  # all 64 sequences
        chance = math.prod(outcomes[d] for d in draws)
        at_least_one += chance * any(d in correct for d in draws)
        distinct += chance * len(set(draws) & set(correct))
    logp = torch.tensor(outcomes[:3], dtype=torch.float64).log()
    group = torch.zeros(3, dtype=torch.long)
    # float64: 64 products of 3 factors summed, each rounding <= 2^-53 relative
    assert float(coverage.pass_at_k(logp, group, k)[0]) == pytest.approx(at_least_one, abs=1e-14)
    assert float(coverage.distinct_at_k(logp, group, k)[0]) == pytest.approx(distinct, abs=1e-14)
    assert float(coverage.pass_at_k(logp, group, 1)[0]) == pytest.approx(0.6, abs=1e-15)


def test_metrics_over_several_prompts_average_prompts_and_count_answers():
    p = torch.tensor([0.5, 0.3, 0.01, 0.2, 0.001], dtype=torch.float64)
    p0 = torch.tensor([0.4, 0.4, 0.01, 0.1, 0.002], dtype=torch.float64)
    group = torch.tensor([5, 5, 5, 9, 9])  # prompt ids need not start at 0
    out = coverage.report(p.log(), group, p0.log(), ks=(1, 64))
    assert out["correct_mass"] == pytest.approx((0.81 + 0.201) / 2)
    assert out["pass@64"] == pytest.approx((1 - 0.19 ** 64 + 1 - 0.799 ** 64) / 2)
    # rose: 0.5 and 0.2; unchanged (0.01) does not count; fell: 0.3 and 0.001
    assert out["above_start_frac"] == pytest.approx(2 / 5)
    assert out["worst_drop"] == pytest.approx(math.log(0.001 / 0.002))
    # prompt 5 keeps 0.4 + 0.3 + 0.01 of its 0.81, prompt 9 0.1 + 0.001 of its 0.102
    assert out["retained_mass"] == pytest.approx((0.71 / 0.81 + 0.101 / 0.102) / 2)


def test_mass_moved_between_correct_answers_keeps_pass_at_k_but_loses_coverage():
    before = torch.tensor([0.3, 0.3], dtype=torch.float64).log()
    after = torch.tensor([0.59, 0.01], dtype=torch.float64).log()  # one answer takes the other's
    group = torch.zeros(2, dtype=torch.long)
    start, now = coverage.report(before, group, ks=(16,)), coverage.report(after, group, before,
                                                                          ks=(16,))
    assert now["pass@16"] == pytest.approx(start["pass@16"])
    assert start["distinct@16"] == pytest.approx(2 * (1 - 0.7 ** 16))  # 1.99
    assert now["distinct@16"] == pytest.approx(2 - 0.41 ** 16 - 0.99 ** 16)  # 1.15
    assert (now["above_start_frac"], now["retained_mass"]) == (0.5, pytest.approx(0.31 / 0.6))
    unchanged = coverage.report(before, group, before, ks=())
    assert (unchanged["above_start_frac"], unchanged["worst_drop"],
            unchanged["retained_mass"]) == (0.0, 0.0, 1.0)


def test_bad_inputs_are_clear_errors():
    logp, group = torch.tensor([-1.0]), torch.tensor([0])
    with pytest.raises(ValueError, match="pass@k needs k >= 1"):
        coverage.pass_at_k(logp, group, 0)
    with pytest.raises(ValueError, match="step-0 log-probs have shape"):
        coverage.report(logp, group, torch.tensor([-1.0, -2.0]))


# ---- the policy's probabilities, and the hooks -------------------------------------------------


@pytest.fixture
def tiny(untrained_policy):
    model, tokenizer = untrained_policy
    return copy.deepcopy(model), tokenizer  # update.Policy switches a model's attention


def test_answer_rows_hold_every_listed_answer_as_the_model_would_write_it(tiny):
    _, tokenizer = tiny
    rows = coverage.answer_rollouts(tokenizer, TASKS, chat_template=False)
    assert rows.texts == ["\\boxed{42}", "\\boxed{49}", "\\boxed{56}", "\\boxed{14}",
                          "\\boxed{7}"]  # in the gold's string order
    assert rows.group.tolist() == [0, 0, 0, 2, 2]  # the task each answer belongs to
    ends = rows.response_ids.gather(1, rows.response_mask.sum(-1, keepdim=True) - 1)
    assert (ends == tokenizer.eos_token_id).all()  # a response ends as the policy ends it
    assert tokenizer.decode(rows.prompt_ids[3][rows.prompt_mask[3].bool()]) == "7|5..19="
    assert coverage.answer_rollouts(tokenizer, TASKS[1:2], chat_template=False) is None
    assert all(reward.score(t, text, TASKS[g]["answer"]) == 1.0 for t, text, g in
               zip(["any_of"] * 5, rows.texts, rows.group.tolist()))


# fp32 sums of <= 128 terms (the hidden size) in another order differ by <= 128 * 2^-24 = 8e-6 per
# token log-prob (tests/test_update.py's FP32_SHAPE_ATOL); a response sums <= 6 of them
SEQUENCE_ATOL = 6 * 1e-5


def test_sequence_logprobs_are_the_models_own_probabilities_of_each_answer(tiny):
    model, tokenizer = tiny
    rows = coverage.answer_rollouts(tokenizer, TASKS, chat_template=False)
    expected = []
    with torch.no_grad():
        for i in range(len(rows.texts)):  # one unpadded sequence at a time, transformers' forward
            prompt = rows.prompt_ids[i][rows.prompt_mask[i].bool()]
            response = rows.response_ids[i][rows.response_mask[i].bool()]
            logits = model(torch.cat([prompt, response])[None]).logits[0].float()
            logprobs = logits[len(prompt) - 1:-1].log_softmax(-1)
            expected.append(float(logprobs.gather(1, response[:, None]).sum()))
    logp = coverage.sequence_logprobs(update.Policy(model), rows, update.UpdateConfig())
    assert torch.allclose(logp, torch.tensor(expected), atol=SEQUENCE_ATOL)
    assert coverage.measure(model, tokenizer, TASKS, chat_template=False, ks=(1,)) == \
        coverage.report(logp, rows.group, ks=(1,))


def test_eval_reports_exact_coverage_only_for_tasks_that_list_their_answers(tiny):
    model, tokenizer = tiny
    settings = evaluation.EvalSettings(samples=2, max_new_tokens=4, chat_template=False,
                                       verify_workers=1)
    records = [{**t, "id": str(i)} for i, t in enumerate(TASKS)]
    listed = evaluation.run_benchmark(model, tokenizer, "many", records[:1] + records[2:],
                                      settings)
    plain = evaluation.run_benchmark(model, tokenizer, "arith", records[1:2], settings)
    assert "coverage" not in plain
    exact = coverage.measure(model, tokenizer, TASKS, chat_template=False, temperature=0.6)
    assert listed["coverage"] == exact and {"pass@256", "distinct@256"} <= set(exact)
    result = {"settings": {}, "suites": {}, "benchmarks": {"test_data": listed}}
    scalars = evaluation.training_scalars(result)
    assert scalars["eval_coverage_pass@256"] == exact["pass@256"]


def draw(model, tokenizer, tasks):
    def score(drawn_tasks, rollouts):
        return torch.tensor(reward.score_batch(
            [(drawn_tasks[g]["task"], text, drawn_tasks[g]["answer"])
             for g, text in zip(rollouts.group.tolist(), rollouts.texts)], workers=1))
    return monitor.draw_probes(model, tokenizer, tasks[1:], tasks[:1], 2,
                               rollout.SamplingParams(n=2, max_new_tokens=4), False, 0, score)


def test_the_probe_set_holds_listed_answers_and_reports_their_coverage_against_step_0(tiny,
                                                                                     tmp_path):
    model, tokenizer = tiny
    policy, cfg = update.Policy(model), update.UpdateConfig()
    drawn = draw(model, tokenizer, TASKS)  # TASKS[0] held out, TASKS[1:] training prompts
    assert drawn["listed"].sum() == 5 and drawn["held_out"][drawn["listed"]].sum() == 3
    probes = monitor.load_or_draw_probes(tmp_path / "probes.pt", None, lambda: drawn, policy, cfg,
                                         True, lambda: None)  # step 0's log-probs, noise floor
    unchanged = monitor.probe_report(probes, monitor.probe_logprobs(policy, probes, cfg), set())
    assert (unchanged["coverage_held_out_above_start_frac"], unchanged["coverage_train_worst_drop"],
            unchanged["coverage_train_retained_mass"]) == (0.0, 0.0, 1.0)
    with torch.no_grad():  # another policy: the output layer moved
        model.lm_head.weight.add_(0.5 * torch.randn(model.lm_head.weight.shape,
                                                    generator=torch.Generator().manual_seed(0)))
    report = monitor.probe_report(probes, monitor.probe_logprobs(policy, probes, cfg), set())
    assert report["coverage_held_out_correct_mass"] != unchanged["coverage_held_out_correct_mass"]
    # the same metrics from the answers' sequence log-probs, computed apart
    rows = coverage.answer_rollouts(tokenizer, TASKS[:1], chat_template=False)
    listed = probes["listed"] & probes["held_out"]
    length = probes["response_mask"][listed].sum(-1)
    expected = coverage.report(coverage.sequence_logprobs(policy, rows, cfg), rows.group,
                               probes["base"][listed] * length, tol=probes["noise_floor"] * length)
    for name, value in expected.items():
        # a probability is off by the factor exp(±2 SEQUENCE_ATOL) at most, a log-prob change by
        # 2 SEQUENCE_ATOL (the monitor's means times the lengths: other packs, same arithmetic)
        close = (pytest.approx(value, abs=2 * SEQUENCE_ATOL) if name == "worst_drop" else
                 pytest.approx(value, rel=4 * SEQUENCE_ATOL))
        assert report[f"coverage_held_out_{name}"] == close, name


def test_a_probe_set_without_listed_answers_is_the_same_as_before(tiny):
    model, tokenizer = tiny
    probes = draw(model, tokenizer, [TASKS[1], {"prompt": "2+2=", "answer": "4", "task": "arith"}])
    assert "listed" not in probes


def test_a_training_run_on_the_many_answers_task_logs_exact_coverage(untrained_model_dir, tmp_path):
    data = ROOT / "data"
    run_script("train_brorl.py", "--preset", "smoke", "--model", str(untrained_model_dir),
               "--train-data", str(data / "many_answers_train.jsonl"),
               "--test-data", str(data / "many_answers_test.jsonl"), "--probe-prompts", "2",
               "--output-dir", str(tmp_path / "run"), env=NO_BWRAP)
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evals = {row["step"]: row for row in logged if "eval_coverage_pass@256" in row}
    probes = {row["step"]: row for row in logged if "coverage_train_retained_mass" in row}
    assert sorted(evals) == sorted(probes) == [0, 2]  # the smoke preset's evals
    for split in ("held_out", "train"):  # step 0 is the reference
        assert (probes[0][f"coverage_{split}_above_start_frac"],
                probes[0][f"coverage_{split}_worst_drop"],
                probes[0][f"coverage_{split}_retained_mass"]) == (0.0, 0.0, 1.0)
        assert 0 < probes[2][f"coverage_{split}_retained_mass"] <= 1
    assert 0 < evals[2]["eval_coverage_pass@256"] <= 1
