"""eval.py: the unbiased pass@k estimator and the command line."""

import itertools
import json
import math
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest
import torch

import eval as evaluation
import tiny_model
from checkpoints import resolve_model_dir
from conftest import ROOT, a_trainer_state, accelerate_launch, run_script
from eval import (EvalSettings, SampleLog, Shard, bootstrap_ci, k_values, metrics, pass_at_k,
                  read_result, run_benchmark)
from tasks import InputError, load_tasks

FIXTURES = ROOT / "tests" / "fixtures" / "benchmarks"


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (c correct) that contain a correct one."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n, c, k", [(n, c, k) for n in (1, 4, 7) for c in range(n + 1)
                          for k in range(1, n + 1)])
def test_pass_at_k_equals_brute_force_enumeration(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k))


def test_pass_at_k_hand_values():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - math.comb(7, 2) / math.comb(10, 2))
    assert pass_at_k(16, 0, 16) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_k_values():
    assert k_values(16) == [1, 2, 4, 8, 16]
    assert k_values(6) == [1, 2, 4, 6]
    assert k_values(1) == [1]


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_problems():
    assert bootstrap_ci([1.0] * 10) == (1.0, 1.0)
    few, many = [0.0, 1.0] * 5, [0.0, 1.0] * 500
    lo, hi = bootstrap_ci(few)
    assert lo < 0.5 < hi and 0 <= lo and hi <= 1
    assert bootstrap_ci(many)[1] - bootstrap_ci(many)[0] < (hi - lo) / 5
    assert metrics([2, 0, 1], 2)["pass1"] == pytest.approx(0.5)


def eval_args(model_dir, out, *extra) -> list[str]:
    return ["eval.py", "--model", str(model_dir), "--samples", "2", "--max-new-tokens", "12",
            "--problems-per-batch", "2", "--out", str(out), *extra]


def eval_cli(model_dir, out, *extra, check=True):
    return run_script(*eval_args(model_dir, out, *extra), check=check)


def launched_eval_cli(model_dir, out, *extra, config="configs/ddp_cpu.yaml", check=True):
    """eval_cli under `accelerate launch --config_file CONFIG`: 2 processes."""
    return accelerate_launch(*eval_args(model_dir, out, *extra), config=config, check=check)


def generated_per_process(stdout: str) -> dict[int, int]:
    """Process index -> how many problems it says it generated (two processes share stdout, so
    one's line may land in the middle of the other's)."""
    return {int(index): int(count) for index, count
            in re.findall(r"process (\d+) of 2 generated (\d+) problems", stdout)}


def sample_rows(out) -> list[dict]:
    return [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]


SIX_PROBLEMS = ("--data", "data/arith_test.jsonl", "--max-problems", "6")  # 3 batches of 2


@pytest.fixture(scope="module")
def finished_eval(untrained_model_dir, tmp_path_factory) -> Path:
    """`eval_cli` of the untrained model on SIX_PROBLEMS, run once for the tests below: they read or
    resume a copy (`eval_copy`)."""
    out = tmp_path_factory.mktemp("eval") / "result.json"
    eval_cli(untrained_model_dir, out, *SIX_PROBLEMS)
    return out


@pytest.fixture
def eval_copy(finished_eval, tmp_path) -> Path:
    """This test's own copy of the finished eval: result.json and its samples."""
    for path in (finished_eval, finished_eval.with_suffix(".samples.jsonl")):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path / finished_eval.name


def test_eval_cli_scores_benchmarks_from_files_and_lists_the_missing_ones(untrained_model_dir,
                                                                          tmp_path):
    out = tmp_path / "result.json"
    result = eval_cli(untrained_model_dir, out, "--benchmarks", "amc2023", "humaneval", "rg/gcd",
                      "math500", "--data-dir", str(FIXTURES), "--max-problems", "3", "--data",
                      "data/arith_test.jsonl", "--plot", str(tmp_path / "curves.png"))
    assert "pass@1 (95% CI)" in result.stdout and "problems/s" in result.stdout
    saved = json.loads(out.read_text())
    assert set(saved["benchmarks"]) == {"arith_test", "amc2023", "humaneval", "rg/gcd", "math500"}
    for entry in saved["benchmarks"].values():
        assert entry["problems"] <= 3 and set(entry["pass_at_k"]) == {"1", "2"}
        assert entry["ci95"][0] <= entry["pass1"] <= entry["ci95"][1]
    assert saved["benchmarks"]["math500"]["source"].endswith("math500.jsonl")
    assert set(saved["suites"]) == {"math", "code", "reasoning_gym"}
    assert (saved["reasoning_gym_categories"]
            == {"arithmetic": saved["benchmarks"]["rg/gcd"]["pass1"]})
    header, *samples = [json.loads(line)
                        for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * sum(e["problems"] for e in saved["benchmarks"].values())
    assert set(samples[0]) == {"benchmark", "id", "sample", "response", "extracted", "reward"}
    assert (header["header"]["settings"]["temperature"] == 0.6
            and set(header["header"]["benchmarks"]) == set(saved["benchmarks"]))
    assert "\nsampling: k=2, T=0.6, top-p 0.95, max 12 tokens\n" in result.stdout
    assert saved["settings"]["temperature"] == 0.6 and saved["settings"]["samples"] == 2
    assert (tmp_path / "curves.png").stat().st_size > 5_000
    empty = tmp_path / "no-data"
    empty.mkdir()
    offline = eval_cli(untrained_model_dir, tmp_path / "skip.json", "--benchmarks", "amc2023",
                       "--data-dir", str(empty))
    assert "skipped amc2023: no --data-dir/amc23.jsonl" in offline.stdout


def test_an_interrupted_eval_resumes_without_redoing_finished_problems(untrained_model_dir,
                                                                       eval_copy):
    out, args = eval_copy, SIX_PROBLEMS
    samples = out.with_suffix(".samples.jsonl")
    lines = samples.read_text().splitlines()
    # the header, problems 0 and 1 finished, problem 2 half written, then a torn line
    kept = lines[:6]
    samples.write_text("\n".join(kept) + '\n{"benchmark": "arith_te')
    eval_cli(untrained_model_dir, out, *args)
    after = samples.read_text().splitlines()
    # finished problems kept as they were, nothing twice
    assert after[:5] == lines[:5] and len(after) == 13
    assert json.loads(out.read_text())["benchmarks"]["arith_test"]["problems"] == 6


# the FSDP configs load a model's weights on rank 0 only unless eval.py loads before the launch's
# process group exists
@pytest.mark.parametrize("config", [
    # DDP's launched eval also runs in test_a_launched_eval_resumes... and test_train's sharded eval
    pytest.param("configs/ddp_cpu.yaml", marks=pytest.mark.slow), "configs/fsdp_cpu.yaml"])
def test_under_accelerate_launch_two_processes_split_the_problems_and_write_what_one_would(
        config, untrained_model_dir, eval_copy, tmp_path):
    alone_out, launched_out = eval_copy, tmp_path / "launched" / "result.json"
    launched = launched_eval_cli(untrained_model_dir, launched_out, *SIX_PROBLEMS, config=config)
    generated = generated_per_process(launched.stdout)
    assert set(generated) == {0, 1} and all(generated.values()), launched.stdout
    assert sum(generated.values()) == 6
    # one table and one set of files, from the main process
    assert launched.stdout.count("pass@1 (95% CI)") == 1
    assert sorted(path.name for path in launched_out.parent.iterdir()) == ["result.json",
                                                                            "result.samples.jsonl"]
    alone, sharded = (json.loads(out.read_text()) for out in (alone_out, launched_out))
    timing = ("seconds", "problems_per_s")
    assert ({key: value for key, value in sharded.items() if key not in timing}
            == {key: value for key, value in alone.items() if key not in timing})
    # every problem once, with the samples one process draws
    assert sample_rows(launched_out) == sample_rows(alone_out)
    assert len(sample_rows(launched_out)) == 1 + 6 * 2


def test_a_launched_eval_resumes_without_redoing_finished_problems_and_refuses_other_settings(
        untrained_model_dir, eval_copy):
    out, args = eval_copy, SIX_PROBLEMS
    samples = out.with_suffix(".samples.jsonl")
    lines = samples.read_text().splitlines()
    # the header, problems 0 and 1 finished, problem 2 half written, then a torn line
    samples.write_text("\n".join(lines[:6]) + '\n{"benchmark": "arith_te')
    resumed = launched_eval_cli(untrained_model_dir, out, *args)
    generated = generated_per_process(resumed.stdout)
    # problems 2 to 5, shared by both processes
    assert set(generated) == {0, 1} and all(generated.values()), resumed.stdout
    assert sum(generated.values()) == 4
    after = samples.read_text().splitlines()
    assert after[:5] == lines[:5]
    assert (sorted((row["id"], row["sample"]) for row in sample_rows(out)[1:])
            == [(str(problem), sample) for problem in range(6) for sample in range(2)])
    assert json.loads(out.read_text())["benchmarks"]["arith_test"]["problems"] == 6
    # other sampling settings: process 0 refuses the file, and the other process stops with it
    kept = samples.read_text()
    refused = launched_eval_cli(untrained_model_dir, out, *args, "--temperature", "1.0",
                                check=False)
    refusal = (f"error: {samples} holds samples from another model or protocol (differs in: "
               "temperature)")
    assert refused.returncode != 0 and refused.stderr.count(refusal) == 2, refused.stderr
    assert "[rank1]: Traceback" not in refused.stderr and samples.read_text() == kept


class ThreadedGather:
    """Stands in for accelerate's gather_object between `count` threads playing processes."""

    def __init__(self, count: int):
        self.barrier, self.slots, self.sent = (threading.Barrier(count), [None] * count,
                                               [[] for _ in range(count)])

    def shard(self, index: int) -> Shard:
        def gather(item):
            self.sent[index].append(item)
            self.slots[index] = item
            self.barrier.wait()
            everyone = list(self.slots)
            self.barrier.wait()
            return everyone
        return Shard(index, len(self.slots), gather)


def test_two_shards_each_score_half_the_batches_and_get_one_process_numbers(untrained_policy):
    model, tokenizer = untrained_policy
    records = [{**t, "id": str(i)} for i,
               t in enumerate(load_tasks(ROOT / "data" / "arith_test.jsonl")[:10])]
    # 5 batches of 2 problems
    settings = EvalSettings(samples=2, max_new_tokens=8, problems_per_batch=2)
    alone = run_benchmark(model, tokenizer, "arith", records, settings)
    gather, results = ThreadedGather(2), [None, None]

    def process(index):
        results[index] = run_benchmark(model, tokenizer, "arith", records, settings,
                                       shard=gather.shard(index))

    threads = [threading.Thread(target=process, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        assert (result["correct_per_problem"] == alone["correct_per_problem"]
                and result["pass1"] == alone["pass1"])
    rows_sent = [sum(len(item) for item in sent if isinstance(item, list)) for sent in gather.sent]
    # batches 0, 2, 4 and 1, 3: 2 problems x 2 samples each
    assert rows_sent == [3 * 2 * 2, 2 * 2 * 2]


def test_every_process_gets_problems_when_all_fit_in_one_batch(untrained_policy):
    """The trainer's in-training eval at paper settings: 64 problems x 4 samples fit one batch of
    1,024 sequences, which must not all go to process 0 while the others wait."""
    model, tokenizer = untrained_policy
    records = [{**t, "id": str(i)} for i,
               t in enumerate(load_tasks(ROOT / "data" / "arith_test.jsonl")[:6])]
    settings = EvalSettings(samples=2, max_new_tokens=4, max_batch_seqs=1024)
    gather = ThreadedGather(2)
    threads = [threading.Thread(target=run_benchmark, args=(model, tokenizer, "arith", records,
                                                             settings, None, gather.shard(index)))
               for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows_sent = [sum(len(item) for item in sent if isinstance(item, list)) for sent in gather.sent]
    assert rows_sent == [3 * 2, 3 * 2]


def test_a_rerun_with_another_model_or_sampling_settings_into_the_same_out_refuses_and_keeps_the_samples(  # noqa: E501 (test name)
        untrained_model_dir, eval_copy, tmp_path):
    out, args = eval_copy, SIX_PROBLEMS
    samples = out.with_suffix(".samples.jsonl")
    before = samples.read_text()
    other_model = shutil.copytree(untrained_model_dir, tmp_path / "other-model")
    for model, changed, named in [(other_model, (), "model"),
                                  (untrained_model_dir, ("--temperature", "1.0", "--samples", "3",
                                                         "--max-new-tokens", "9"),
                                   "samples, temperature, max_new_tokens")]:
        result = eval_cli(model, out, *args, *changed, check=False)
        assert (result.returncode != 0
                and len(result.stderr.strip().splitlines()) == 1), result.stderr
        assert (f"holds samples from another model or protocol (differs in: {named})"
                in result.stderr)
        assert samples.read_text() == before  # the earlier samples are neither reused nor truncated
    # same model and protocol: resumes
    eval_cli(untrained_model_dir, out, *args, "--max-problems", "7")
    assert samples.read_text().startswith(before)


def test_compare_prints_two_runs_side_by_side(tmp_path):
    def result(math, code):
        return {"benchmarks": {"aime2024": {"pass1": math}, "humaneval": {"pass1": code}},
                "suites": {"math": math, "code": code}}

    (tmp_path / "prorl.json").write_text(json.dumps(result(0.25, 0.5)))
    (tmp_path / "brorl.json").write_text(json.dumps({**result(0.30, 0.5),
                                                     "benchmarks": {"aime2024": {"pass1": 0.30}}}))
    printed = run_script("eval.py", "--compare", str(tmp_path / "prorl.json"),
                         str(tmp_path / "brorl.json")).stdout
    assert "prorl" in printed and "brorl" in printed
    assert any(line.split() == ["aime2024", "25.00", "30.00", "+5.00"]
               for line in printed.splitlines())
    assert any(line.split() == ["humaneval", "50.00", "-"] for line in printed.splitlines())
    assert any(line.split() == ["suite", "math", "25.00", "30.00", "+5.00"]
               for line in printed.splitlines())


def test_eval_model_may_be_a_training_run_or_a_checkpoint_folder(untrained_model_dir, tmp_path):
    run = tmp_path / "run"
    for step in (1, 2):  # the trainer's layout: checkpoints/step_N/{model, trainer_state.pt}
        checkpoint = run / "checkpoints" / f"step_{step:06d}"
        shutil.copytree(untrained_model_dir, checkpoint / "model")
        torch.save(a_trainer_state(step=step), checkpoint / "trainer_state.pt")
    latest = run / "checkpoints" / "step_000002"
    assert resolve_model_dir(str(run)) == str(latest / "model")
    assert resolve_model_dir(str(latest)) == str(latest / "model")
    assert resolve_model_dir(str(untrained_model_dir)) == str(untrained_model_dir)
    result = eval_cli(run, tmp_path / "run.json", "--data", "data/arith_test.jsonl",
                      "--max-problems", "2")
    assert (f"{run} is a training run: evaluating its latest checkpoint, {latest / 'model'}"
            in result.stdout)
    assert json.loads((tmp_path / "run.json").read_text())["model"] == str(latest / "model")


def test_compare_with_a_missing_or_foreign_file_is_one_line(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"benchmarks": {}, "suites": {}}))
    (tmp_path / "config.json").write_text(json.dumps({"n_rollouts": 16}))
    for other, message in [("missing.json", f"no such result file: {tmp_path / 'missing.json'}"),
                           ("config.json",
                            f"{tmp_path / 'config.json'} is not an eval.py result file")]:
        result = run_script("eval.py", "--compare", str(tmp_path / "a.json"), str(tmp_path / other),
                            check=False)
        assert (result.returncode != 0 and result.stderr.startswith(f"error: {message}")
                and "Traceback" not in result.stderr)


def test_a_result_file_without_pass1_numbers_is_refused_in_one_line(tmp_path):
    path = tmp_path / "result.json"
    for benchmarks, suites in [({"aime2024": {"pass1": "high"}}, {}), ({"aime2024": "x"}, {}),
                               ({}, {"math": None})]:
        path.write_text(json.dumps({"benchmarks": benchmarks, "suites": suites}))
        with pytest.raises(InputError, match="has no pass@1 number"):
            read_result(path)


def test_a_samples_file_with_a_foreign_header_or_rows_is_refused_or_read_around(tmp_path):
    path, header = tmp_path / "out.samples.jsonl", {"model": "m", "settings": {}, "benchmarks": {}}
    for foreign in ("x", {"model": "m", "settings": "x"}):
        path.write_text(json.dumps({"header": foreign}) + "\n")
        with pytest.raises(InputError, match="holds samples from another model or protocol"):
            SampleLog(path, 1, header)
    rows = [{"benchmark": "b", "id": "1", "reward": 1.0}, {"benchmark": "b", "id": "2"},
            {"benchmark": "b", "id": "3", "reward": "1"}, ["not", "a", "row"]]
    path.write_text("".join(json.dumps(r) + "\n" for r in [{"header": header}, *rows]))
    assert list(SampleLog(path, 1, header).done) == [("b", "1")]  # the others dropped, as torn


def test_eval_cli_missing_model_is_one_clear_line(tmp_path):
    result = run_script("eval.py", "--model", str(tmp_path / "nope"), "--data",
                        "data/arith_test.jsonl", check=False)
    assert result.returncode != 0
    assert result.stderr.strip() == f"error: model path does not exist: {tmp_path / 'nope'}"
    # a typo in a relative path whose first folder is here is not sent to the hub (and retried)
    result = run_script("eval.py", "--model", "data/nope", "--data", "data/arith_test.jsonl",
                        check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error: model path does not exist: data/nope (there is")


def test_an_out_that_is_not_an_eval_result_of_these_benchmarks_and_bad_counts_are_refused(
        tmp_path, monkeypatch):
    config = tmp_path / "config.json"  # a run's, say
    config.write_text('{"lr": 0.0001}')
    other = tmp_path / "aime.json"  # an eval of other benchmarks: its numbers would be replaced
    other.write_text(json.dumps({"benchmarks": {"aime2024": {"pass1": 0.3}},
                                 "suites": {"math": 0.3}, "skipped": {"aime2025": "no data"}}))
    for flags, said in [(["--out", str(config)], f"--out {config} exists and is not an eval.py "
                         "result: it would be written over"),
                        (["--out", str(tmp_path)], "is not an eval.py result"),
                        (["--out", str(other)], f"--out {other} holds results of aime2024, "
                         "aime2025, not of arith_test: pass another --out"),
                        (["--max-problems", "-3"], "--max-problems must be >= 0"),
                        (["--samples", str(2**16 + 1)], "--samples must be in [1, 65536]"),
                        (["--seed", str(2**44)], "--seed must be in [0, 2^32)"),
                        (["--verify-workers", "300"], "--verify-workers must be in [1, 255)"),
                        (["--top-p", "0", "--max-batch-seqs", "0"],
                         "--top-p must be in (0, 1]; --max-batch-seqs must be >= 1"),
                        (["--process-group-timeout-min", "inf", "--gpu-memory-utilization", "nan"],
                         "--process-group-timeout-min must be in (0, a week]; "
                         "--gpu-memory-utilization must be in (0, 1]")]:
        monkeypatch.setattr(sys, "argv", ["eval.py", "--model", "tiny", "--data",
                                          "data/arith_test.jsonl", *flags])
        with pytest.raises(SystemExit) as refused:
            evaluation.main()
        assert refused.value.code.startswith("error: ") and said in refused.value.code
    assert config.read_text() == '{"lr": 0.0001}' and "aime2025" in other.read_text()


def test_eval_scores_the_trainers_default_model_by_its_name(tmp_path):
    out = tmp_path / "x.json"
    result = run_script("eval.py", "--model", "tiny", "--data", "data/arith_test.jsonl",
                        "--samples", "1", "--max-new-tokens", "4", "--out", str(out))
    header = json.loads((tmp_path / "x.samples.jsonl").read_text().splitlines()[0])["header"]
    assert header["model"]["path"] == str(tiny_model.ensure_tiny_model().resolve())
    assert "arith_test" in result.stdout
