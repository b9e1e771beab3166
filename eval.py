"""Score a policy on the paper's benchmark suites: pass@1 (the mean reward over k samples per
problem, the paper's protocol) with a 95% bootstrap interval, and the unbiased pass@k of Chen et al.
2021 (arXiv 2107.03374) for k = 1, 2, 4, ..., K; per benchmark, per suite, and per Reasoning Gym
category. On task files that list every correct answer (the any_of kind), also the exact coverage
metrics of coverage.py: pass@k up to k=256 and the expected distinct correct answers, from the
policy's probabilities (the hf engine).

Works on any checkpoint directory (a `save_pretrained` folder: the trainer's
`checkpoints/step_*/model`, the tiny model as `--model tiny`, a downloaded hub model) without the
trainer. The benchmarks and where their data comes from are in benchmarks.py; one with no data is
listed as skipped with the reason, never scored.

    python eval.py --model PATH --suite all --out runs/eval/prorl.json      # the paper's table
    python eval.py --model PATH --benchmarks aime2024 humaneval --samples 4
    python eval.py --model PATH --data data/arith_test.jsonl                # any task file
    python eval.py --model PATH --suite math --engine vllm                  # vLLM (GPU default)
    python eval.py --compare runs/eval/prorl.json runs/eval/brorl.json
    accelerate launch --config_file configs/ddp_cpu.yaml eval.py --model PATH --out runs/eval/x.json

Defaults follow the paper's protocol (arXiv 2510.01180, Table 1): k=16 samples, temperature 0.6,
top-p 0.95, 32K-token responses (never more than the model's context). Every sample goes to `<out>`
with `.samples.jsonl` for `.json` (benchmark, problem id, response, extracted answer, reward) so any
score can be audited; an interrupted run started again with the same --out resumes from that file
without redoing finished problems (the redone ones draw new samples: same distribution, not the same
tokens), and refuses when the model, the sampling settings or a benchmark's data differ from the run
that wrote it. Every score is printed and stored with the sampling settings that produced it (pass@1
at T=1 and at T=0.6 are different numbers for one model).

Under `accelerate launch` (any config: configs/ddp_cpu.yaml, configs/fsdp_8gpu.yaml) each process
loads the whole model on its own device and generates its share of the batches of problems; the
main process alone prints the table and writes --out and the samples file. With the hf engine and a
given --problems-per-batch the numbers equal one process's (a batch's seed depends only on its
position).
"""

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from accelerate import PartialState
from accelerate.utils import gather_object

import benchmarks
import coverage
import reward
import rollout
import sandbox
from checkpoints import resolve_model_dir
from rollout import load_policy, load_tokenizer, model_fingerprint
from tasks import InputError, check_answers, first_of, load_tasks


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples is correct) from n samples with c correct:
    1 - C(n-c, k) / C(n, k), computed as a stable product (Chen et al. 2021, Fig. 3).

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 2), pass_at_k(4, 0, 4), pass_at_k(4, 3, 2)
    (0.25, 0.5, 0.0, 1.0)
    """
    if k > n:
        raise ValueError(f"k={k} exceeds the number of samples n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def k_values(samples: int) -> list[int]:
    """Powers of two up to `samples`, and `samples` itself."""
    ks = [2**i for i in range(samples.bit_length()) if 2**i <= samples]
    return ks if ks[-1] == samples else ks + [samples]


def bootstrap_ci(per_problem: list[float], resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean over problems, resampling problems with replacement."""
    values = np.asarray(per_problem, dtype=float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def metrics(correct: list[int], samples: int) -> dict:
    """pass@1, its interval and pass@k from the number of correct samples of each problem."""
    per_problem = [c / samples for c in correct]
    pass_at = {str(k): float(np.mean([pass_at_k(samples, c, k) for c in correct]))
               for k in k_values(samples)}
    return {"problems": len(correct), "samples": samples, "pass1": float(np.mean(per_problem)),
            "ci95": bootstrap_ci(per_problem), "pass_at_k": pass_at}


@dataclass(kw_only=True)
class EvalSettings:
    samples: int = 16
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 32768  # capped at the model's context
    seed: int = 0
    chat_template: bool = True
    max_batch_seqs: int = 1024
    # problems generated (and logged) together, the unit of resumption (0: fill max_batch_seqs)
    problems_per_batch: int = 0
    verify_workers: int = 2
    verify_config: reward.VerifyConfig = field(default_factory=reward.VerifyConfig)


MAX_SAMPLES = 2**16  # per problem: pass@k far beyond any reported, each sample held in memory

# Settings that change what a sample is (its distribution or its reward). The seed and the batching
# are not among them: a resumed run redraws unfinished problems anyway (same distribution, new
# tokens).
SAMPLE_DEFINING_SETTINGS = ("samples", "temperature", "top_p", "max_new_tokens", "chat_template")


def data_version(records: list[dict]) -> str:
    """A short hash of a benchmark's records: a samples file scored on other data is not resumed."""
    canonical = json.dumps(records, sort_keys=True, default=str).encode()
    return hashlib.sha256(canonical).hexdigest()[:16]


def samples_header(settings: EvalSettings, model: dict | None,
                   loaded: list[tuple[str, list[dict], dict]]) -> dict:
    """What produced a samples file: the model, the sampling settings, the verifier's limits and a
    hash of each benchmark's records (its data version); as it reads back from JSON, so it compares
    equal to itself."""
    header = {"model": model,
              "settings": {**{name: getattr(settings, name) for name in SAMPLE_DEFINING_SETTINGS},
                           "verify_config": asdict(settings.verify_config)},
              "benchmarks": {name: data_version(records) for name, records, _ in loaded}}
    return json.loads(json.dumps(header, default=str))


def header_differences(earlier: dict, now: dict) -> list[str]:
    """What differs between two samples headers; a benchmark in only one of them is no
    difference."""
    differences = [] if earlier.get("model") == now["model"] else ["model"]
    differences += [name for name in {**earlier.get("settings", {}), **now["settings"]}
                    if earlier.get("settings", {}).get(name) != now["settings"].get(name)]
    return differences + [f"{name} data" for name, digest in now["benchmarks"].items()
                          if earlier.get("benchmarks", {}).get(name, digest) != digest]


class SampleLog:
    """The per-sample jsonl. Its first line, {"header": ...}, says what produced the samples (model,
    sampling settings, benchmark data versions): a run started again with the same --out resumes
    only when they match, and otherwise stops with one line, leaving the file as it was, so samples
    of two models or two protocols are never mixed. On a match the file is read back (torn lines
    and unfinished problems dropped) and appended after each batch of problems."""

    def __init__(self, path: Path | None, samples: int, header: dict | None = None):
        """header: required with a path (what produced the samples); unused without one."""
        self.path, self.done = path, {}
        if path is None:
            return
        rows: dict[tuple[str, str], list[dict]] = {}
        if path.is_file():
            lines = path.read_text(errors="replace").splitlines()
            try:
                earlier = json.loads(lines[0])["header"] if lines else header
            except (json.JSONDecodeError, KeyError, TypeError):
                earlier = None
            if not (isinstance(earlier, dict) and all(isinstance(earlier.get(key, {}), dict)
                                                      for key in ("settings", "benchmarks"))):
                earlier = {"model": "unknown (no header line)", "settings": {}, "benchmarks": {}}
            differences = header_differences(earlier, header)
            if differences:
                raise InputError(f"{path} holds samples from another model or protocol "
                                 f"(differs in: {', '.join(differences)}): pass another --out, or "
                                 "delete it to start over")
            header = {**header,
                      "benchmarks": {**earlier.get("benchmarks", {}), **header["benchmarks"]}}
            for line in lines[1:]:  # a row that is not one this class wrote is dropped, as torn
                try:
                    row = json.loads(line)
                    if type(row.get("reward")) in (int, float):
                        rows.setdefault((row["benchmark"], row["id"]), []).append(row)
                except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                    continue
        self.done = {key: r[:samples] for key, r in rows.items() if len(r) >= samples}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")  # keep only finished problems, atomically
        tmp.write_text(json.dumps({"header": header}) + "\n"
                       + "".join(json.dumps(r) + "\n" for rs in self.done.values() for r in rs))
        tmp.replace(path)

    def append(self, rows: list[dict]) -> None:
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
                f.flush()


@dataclass
class Shard:
    """This process's part of an evaluation run by several processes (the trainer or eval.py under
    `accelerate launch`): batches of problems are dealt out round-robin, `gather(item)` returns
    every process's item in rank order (collective: every process calls it equally often), and only
    process 0 writes the sample log."""
    index: int = 0
    count: int = 1
    gather: Callable[[object], list] = lambda item: [item]
    generated: int = 0  # problems this process has generated so far

    @classmethod
    def of_processes(cls, state) -> "Shard":
        """The share of this process of an accelerate launch (an Accelerator or a PartialState)."""
        return cls(state.process_index, state.num_processes, lambda item: gather_object([item]))


def response_limit(policy, settings: EvalSettings) -> int:
    """The response length limit: max_new_tokens, never more than the model's context."""
    return min(settings.max_new_tokens,
               getattr(policy.config, "max_position_embeddings", settings.max_new_tokens))


def run_benchmark(policy, tokenizer, name: str, records: list[dict], settings: EvalSettings,
                  log: SampleLog | None = None, shard: Shard | None = None) -> dict:
    """Sample `settings.samples` responses per problem (all k of a problem in one request), score
    them with reward.py, and return the benchmark's metrics; problems already in `log` are not
    redone.

    With a `shard`, each process generates every `shard.count`-th batch and the rows are gathered
    after each round; a batch's seed depends only on its position, so the numbers equal one
    process's on the same problems (with a vLLM engine, when it seeds requests: rollout.VLLMEngine's
    request_seeds).

    policy: a transformers model (the hf engine) or a rollout.VLLMEngine."""
    log = log or SampleLog(None, settings.samples)
    shard = shard or Shard()
    params = rollout.SamplingParams(n=settings.samples, temperature=settings.temperature,
                                    top_p=settings.top_p,
                                    max_new_tokens=response_limit(policy, settings),
                                    max_batch_seqs=settings.max_batch_seqs)
    stats = reward.VerifyStats()
    todo = [r for r in records if (name, r["id"]) not in log.done]
    # batches of at most max_batch_seqs sequences, and at least one for every process
    per_batch = settings.problems_per_batch or max(1, min(
        settings.max_batch_seqs // settings.samples, math.ceil(len(todo) / shard.count)))
    starts, done_before = list(range(0, len(todo), per_batch)), len(log.done)
    for round_start in range(0, len(starts), shard.count):
        rows = []
        if round_start + shard.index < len(starts):
            start = starts[round_start + shard.index]
            batch = todo[start:start + per_batch]
            shard.generated += len(batch)
            prompt_ids = rollout.encode_prompts(tokenizer, [t["prompt"] for t in batch],
                                                settings.chat_template)
            generator = torch.Generator().manual_seed(settings.seed * 1_000_003 + done_before
                                                      + start)
            rollouts = rollout.generate(policy, tokenizer, prompt_ids, params, generator)
            groups = rollouts.group.tolist()
            items = [(batch[g]["task"], text, batch[g]["answer"])
                     for g, text in zip(groups, rollouts.texts)]
            rewards = reward.score_batch(items, settings.verify_workers, settings.verify_config,
                                         stats, groups)
            rows = [{"benchmark": name, "id": batch[g]["id"], "sample": j % settings.samples,
                     "response": text,
                     "extracted": reward.final_answer(batch[g]["task"], text), "reward": r}
                    for j, (g, text, r) in enumerate(zip(groups, rollouts.texts, rewards))]
        # in batch order, as one process writes them
        rows = [row for part in shard.gather(rows) for row in part]
        log.append(rows)
        for row in rows:
            log.done.setdefault((name, row["id"]), []).append(row)
    correct = [int(sum(row["reward"] == 1.0 for row in log.done[(name, r["id"])]))
               for r in records]
    timeouts, errors = (sum(counts)
                        for counts in zip(*shard.gather((stats.timeouts, stats.errors))))
    result = {**metrics(correct, settings.samples), "correct_per_problem": correct,
              "verifier_timeouts": timeouts, "verifier_errors": errors}
    # tasks that list their correct answers: exact coverage from the policy's probabilities (a
    # transformers policy; every process computes it whole, in lockstep)
    covered = (coverage.measure(policy, tokenizer, records, settings.chat_template,
                                settings.temperature)
               if isinstance(policy, torch.nn.Module) else None)
    return result if covered is None else {**result, "coverage": covered}


def evaluate_suite(policy, tokenizer, selected: list[benchmarks.Benchmark], settings: EvalSettings,
                   data_dir: Path | None = None, max_problems: int = 0,
                   samples_path: Path | None = None,
                   extra: dict[str, list[dict]] | None = None, progress=print,
                   model: dict | None = None,
                   shard: Shard | None = None) -> dict:
    """Every benchmark that has data, in the JSON layout eval.py writes; `extra` adds named task
    lists; `model` identifies the policy in the samples file's header
    (rollout.model_fingerprint). Under a `shard`, every process calls this and gets the same
    result."""
    start = time.time()
    shard = shard or Shard()
    # recorded as sampled: a 32K limit on a 4K-context model samples (and resumes) as a 4K one
    settings = replace(settings, max_new_tokens=response_limit(policy, settings))
    result = {"settings": asdict(settings), "benchmarks": {}, "skipped": {}}
    loaded = [(name, records, {"suite": "", "source": "given", "note": "", "category": ""})
              for name, records in (extra or {}).items()]
    for bench in selected:
        records, origin = benchmarks.load(bench, data_dir)
        if not records:
            result["skipped"][bench.name] = origin
            continue
        loaded.append((bench.name, records, {"suite": bench.suite, "source": origin,
                                             "note": bench.note, "category": bench.category}))
    # only process 0 writes the samples; the others stop with it when it refuses the file
    path = samples_path if shard.index == 0 else None
    log, refusal = SampleLog(None, settings.samples), None
    try:
        log = SampleLog(path, settings.samples,
                        samples_header(settings, model, loaded) if path else None)
    except InputError as e:
        refusal = str(e)
    done, refusal = shard.gather((log.done, refusal))[0]  # what process 0 read back
    if refusal:
        raise InputError(refusal)
    log.done = done
    problems = 0
    for name, records, about in loaded:
        records = records[:max_problems] if max_problems else records
        check_answers(records, f"{name} ({about['source']})")
        scores = run_benchmark(policy, tokenizer, name, records, settings, log, shard)
        result["benchmarks"][name] = {**about, **scores}
        problems += len(records)
        progress(f"{name}: pass@1 {100 * scores['pass1']:.2f} over {len(records)} problems "
                 f"({about['source']})")
    scored = result["benchmarks"].values()
    result["suites"] = group_means((e["suite"], e["pass1"]) for e in scored if e["suite"])
    categories = group_means((e["category"], e["pass1"]) for e in scored if e["category"])
    result["reasoning_gym_categories"] = dict(sorted(categories.items()))
    result["seconds"] = time.time() - start
    result["problems_per_s"] = problems / max(result["seconds"], 1e-9)
    return result


def training_scalars(result: dict) -> dict[str, float]:
    """What the trainer logs of an `evaluate_suite` result with its held-out `test_data`: the
    sampling protocol (which pass@1 this is: T=1 or 0.6), pass@1 and pass@k on the held-out tasks,
    pass@1 per benchmark and per suite."""
    held_out = result["benchmarks"]["test_data"]
    protocol = {f"eval_{name}": value for name, value in result["settings"].items()
                if name in ("samples", "temperature", "top_p", "max_new_tokens")}
    pass_at_k = {f"eval_pass@{k}": v for k, v in held_out["pass_at_k"].items()}
    per_benchmark = {f"{name}/pass1": e["pass1"] for name, e in result["benchmarks"].items()
                     if name != "test_data"}
    per_suite = {f"suite/{suite}": value for suite, value in result["suites"].items()}
    covered = {f"eval_coverage_{name}": v for name, v in held_out.get("coverage", {}).items()}
    return {**protocol, "eval_pass1": held_out["pass1"], **pass_at_k, **per_benchmark, **per_suite,
            **covered}


def training_protocol(max_problems: int, samples: int, max_new_tokens: int) -> str:
    """What the in-training eval measures, printed at the start so no one mistakes it for the
    paper's table."""
    problems = f"the first {max_problems} problems" if max_problems else "all problems"
    return (f"in-training eval (a proxy): {problems} of the test data and of each benchmark x "
            f"{samples} samples at {max_new_tokens} tokens; the paper's Table 1 protocol "
            "(every problem x 16 samples at 32K tokens) is eval.py on the saved checkpoints")


def group_means(pairs) -> dict[str, float]:
    """Mean pass@1 per group from (group, pass@1) pairs: a suite's score is the mean over its
    benchmarks (the paper's "Math", "Code", "Reasoning Gym"); a Reasoning Gym category's, over its
    tasks."""
    groups: dict[str, list[float]] = {}
    for group, value in pairs:
        groups.setdefault(group, []).append(value)
    return {group: float(np.mean(values)) for group, values in groups.items()}


def sampling_protocol(settings: dict) -> str:
    """The sampling settings a score depends on, in one line: "k=16, T=0.6, top-p 0.95, max 32768
    tokens"."""
    return (f"k={settings['samples']}, T={settings['temperature']}, top-p {settings['top_p']}, "
            f"max {settings['max_new_tokens']} tokens")


def format_table(result: dict) -> str:
    ks = sorted({k for e in result["benchmarks"].values() for k in e["pass_at_k"]}, key=int)
    header = f"{'benchmark':<28} {'problems':>8}  {'pass@1 (95% CI)':<22}"
    lines = [f"sampling: {sampling_protocol(result['settings'])}",
             header + "".join(f"{'pass@' + k:>9}" for k in ks)]
    for name, e in result["benchmarks"].items():
        label = f"{name} [{e['note']}]" if e["note"] else name
        ci = f"{100 * e['pass1']:.2f} ({100 * e['ci95'][0]:.1f}-{100 * e['ci95'][1]:.1f})"
        columns = [f"{100 * e['pass_at_k'][k]:>9.2f}" if k in e["pass_at_k"] else f"{'':>9}"
                   for k in ks]
        lines.append(f"{label:<28} {e['problems']:>8}  {ci:<22}" + "".join(columns))
        if "coverage" in e:  # exact, from the policy's probabilities (coverage.py)
            lines.append(f"{'':<28} exact: " + ", ".join(f"{name} {value:.4g}" for name, value
                                                          in e["coverage"].items()))
    for title, averages in (("suite", result["suites"]),
                            ("reasoning gym category", result["reasoning_gym_categories"])):
        if averages:
            lines.append("")
            lines += [f"{title + ' ' + name:<38} pass@1 {100 * value:.2f}"
                      for name, value in averages.items()]
    if result["skipped"]:
        lines.append("")
        lines += [f"skipped {name}: {reason}" for name, reason in result["skipped"].items()]
    return "\n".join(lines)


def read_result(path: Path) -> dict:
    """A results JSON eval.py wrote (--out), or InputError in one line."""
    try:
        result = json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise InputError(f"no such result file: {path}") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path} is not a readable JSON file ({e})") from None
    sections = ("benchmarks", "suites")
    if not isinstance(result, dict) or not all(isinstance(result.get(key), dict)
                                               for key in sections):
        raise InputError(f"{path} is not an eval.py result file (it needs 'benchmarks' and "
                         "'suites')")
    for section in sections:
        for name, entry in result[section].items():  # a benchmark's {"pass1": ...}, a suite's
            if type(entry.get("pass1") if isinstance(entry, dict) else entry) not in (int, float):
                raise InputError(f"{path}: {section} {name!r} has no pass@1 number")
    return result


def compare(path_a: Path, path_b: Path) -> str:
    """Two result files side by side: pass@1 per benchmark and suite, and B - A."""
    a, b = (read_result(p) for p in (path_a, path_b))
    lines = [f"{'':<30} {Path(path_a).stem[:12]:>12} {Path(path_b).stem[:12]:>12} {'B - A':>8}"]
    for section in ("benchmarks", "suites"):
        names = list(dict.fromkeys([*a[section], *b[section]]))
        for name in names:
            entries = (r[section].get(name) for r in (a, b))
            va, vb = (e["pass1"] if isinstance(e, dict) else e for e in entries)
            fa, fb = (f"{100 * v:12.2f}" if v is not None else f"{'-':>12}" for v in (va, vb))
            diff = f"{100 * (vb - va):+8.2f}" if va is not None and vb is not None else f"{'':>8}"
            lines.append(f"{('suite ' if section == 'suites' else '') + name:<30} {fa} {fb} {diff}")
    return "\n".join(lines)


def plot_pass_at_k(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, e in result["benchmarks"].items():
        ks = sorted(map(int, e["pass_at_k"]))
        ax.plot(ks, [100 * e["pass_at_k"][str(k)] for k in ks], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (%)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = EvalSettings()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a model folder (save_pretrained layout), a checkpoint, a "
                        "training run's folder (its latest checkpoint), tiny (the trainer's "
                        "default model) or a hub name")
    parser.add_argument("--suite",
                        help=f"benchmark suite: {', '.join(benchmarks.SUITES)} or all "
                             "(default: all)")
    parser.add_argument("--benchmarks", nargs="+",
                        help=f"benchmarks by name ({', '.join(benchmarks.BENCHMARKS)})")
    parser.add_argument("--data",
                        help="also score a jsonl task file in the project's schema "
                             "(prompt, answer, task)")
    parser.add_argument("--data-dir", type=Path,
                        help="jsonl files in the benchmarks' own layouts (see benchmarks.py)")
    parser.add_argument("--samples", type=int, default=d.samples,
                        help="samples per problem k (pass@1 is their mean)")
    parser.add_argument("--temperature", type=float, default=d.temperature,
                        help="sampling temperature (paper: 0.6)")
    parser.add_argument("--top-p", type=float, default=d.top_p,
                        help="nucleus sampling mass (paper: 0.95)")
    parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens,
                        help="response length limit (paper: 32K; capped at the model's context)")
    parser.add_argument("--max-problems", type=int, default=0,
                        help="score only the first M problems of each (0: all)")
    parser.add_argument("--problems-per-batch", type=int, default=d.problems_per_batch,
                        help="problems generated together, the unit of resumption "
                             "(0: as many as --max-batch-seqs allows)")
    parser.add_argument("--max-batch-seqs", type=int, default=d.max_batch_seqs,
                        help="sequences decoded together")
    parser.add_argument("--engine", choices=["hf", "vllm"],
                        help="hf: transformers; vllm: vLLM in-process "
                             "(default: vllm when installed with a GPU, unless --device cpu)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                        help="vLLM: share of GPU memory it may use")
    parser.add_argument("--device", choices=["auto", "cpu"], default="auto",
                        help="auto: the GPU accelerate assigns this process when there is one; "
                             "cpu: never use a GPU")
    parser.add_argument("--process-group-timeout-min", type=float, default=60.0,
                        help="under accelerate launch: minutes a process waits for the others' "
                             "batches at a gather")
    parser.add_argument("--no-chat-template", action="store_true",
                        help="feed prompts raw even if the tokenizer has a chat template")
    parser.add_argument("--seed", type=int, default=d.seed, help="sampling seed")
    parser.add_argument("--verify-workers", type=int, default=d.verify_workers,
                        help="verifier processes / concurrent code sandboxes")
    parser.add_argument("--verify-timeout", type=float, default=d.verify_config.timeout,
                        help="hard limit per distinct answer, seconds")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="without bubblewrap, run code benchmarks' programs under rlimits only "
                             "instead of refusing them")
    parser.add_argument("--out", type=Path,
                        help="results JSON (x.json); per-sample records go to x.samples.jsonl "
                             "(resumable)")
    parser.add_argument("--plot", type=Path, help="write pass@k curves as a PNG here")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"),
                        help="print two result files side by side")
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """Every flag out of its bounds named, in one line."""
    bounds = [
        (1 <= args.samples <= MAX_SAMPLES, f"--samples must be in [1, {MAX_SAMPLES}]"),
        (rollout.MIN_TEMPERATURE <= args.temperature < math.inf,
         f"--temperature must be finite and >= {rollout.MIN_TEMPERATURE}"),
        (0 < args.top_p <= 1, "--top-p must be in (0, 1]"),
        (args.max_new_tokens >= 1, "--max-new-tokens must be >= 1"),
        (0 <= args.seed < 2**32, "--seed must be in [0, 2^32)"),
        (1 <= args.verify_workers < sandbox.PROBE_SLOT,
         f"--verify-workers must be in [1, {sandbox.PROBE_SLOT})"),
        (0 < args.verify_timeout < math.inf, "--verify-timeout must be finite and > 0"),
        (args.problems_per_batch >= 0, "--problems-per-batch must be >= 0"),
        (args.max_batch_seqs >= 1, "--max-batch-seqs must be >= 1"),
        (0 < args.process_group_timeout_min <= 60 * 24 * 7,
         "--process-group-timeout-min must be in (0, a week]"),
        (0 < args.gpu_memory_utilization <= 1, "--gpu-memory-utilization must be in (0, 1]"),
        (args.max_problems >= 0, "--max-problems must be >= 0 (0: all)")]
    refused = [message for holds, message in bounds if not holds]
    if refused:
        raise InputError("; ".join(refused))
    if args.data_dir is not None and not args.data_dir.is_dir():
        raise InputError(f"--data-dir is not a directory: {args.data_dir}")


def run_eval(args: argparse.Namespace) -> None:
    """What the command line asks: a comparison of two results, or an evaluation."""
    if args.compare:
        # under accelerate launch, one table (from the main process)
        if PartialState(cpu=True).is_main_process:
            print(compare(*args.compare))
        return
    if not args.model:
        raise InputError("--model is required (or --compare A.json B.json)")
    check_args(args)
    earlier = None  # the result already at --out
    if args.out and (args.out.is_dir() or args.out.is_file()):
        try:
            earlier = read_result(args.out)
        except InputError:
            raise InputError(f"--out {args.out} exists and is not an eval.py result: it would "
                             "be written over; pass another --out") from None
    if args.model == "tiny":
        import tiny_model  # 1 s of imports that only this model needs

        model = str(tiny_model.ensure_tiny_model())
    else:
        model = resolve_model_dir(args.model)
    extra = {}
    if args.data:
        tasks = load_tasks(args.data)
        extra[Path(args.data).stem] = [{**t, "id": str(i)} for i, t in enumerate(tasks)]
    selected = (benchmarks.select(names=args.benchmarks) if args.benchmarks else
                benchmarks.select(args.suite or "all") if args.suite or not args.data else [])
    if earlier is not None:  # its results would be replaced by others
        held = sorted({*earlier["benchmarks"], *earlier.get("skipped", {})})
        asked = sorted({*extra, *(b.name for b in selected)})
        if held != asked:
            raise InputError(f"--out {args.out} holds results of {first_of(held, 4)}, not of "
                             f"{first_of(asked, 4)}: pass another --out")
    task_kinds = {b.suite for b in selected} | {t["task"] for ts in extra.values() for t in ts}
    reward.require_sandbox(task_kinds, args.unsafe_no_sandbox)
    if args.device == "auto":
        rollout.check_gpus_usable()
    engine = args.engine or ("hf" if args.device == "cpu" else rollout.default_engine())
    if engine == "vllm" and args.device == "cpu" and torch.cuda.is_available():
        raise InputError("--engine vllm runs on the GPU here: pass --engine hf with "
                         "--device cpu")
    if engine == "hf":
        # before any process group: under the FSDP configs (cpu_ram_efficient_loading)
        # transformers would load the weights on rank 0 only and zeros elsewhere
        policy, tokenizer = load_policy(model)
    # a process group only under accelerate launch; each process on its own device
    state = PartialState(cpu=args.device == "cpu" or not torch.cuda.is_available(),
                         timeout=timedelta(minutes=args.process_group_timeout_min))
    shard = Shard.of_processes(state)
    # the checkpoint's own dtype; every k samples of a problem in one request
    if engine == "vllm":
        tokenizer = load_tokenizer(model)
        policy = rollout.VLLMEngine(model, dtype="auto",
                                    max_num_seqs=max(args.max_batch_seqs, args.samples),
                                    gpu_memory_utilization=args.gpu_memory_utilization,
                                    seed=args.seed + state.process_index)
    else:
        policy.to(state.device)
    verify_config = reward.VerifyConfig(timeout=args.verify_timeout,
                                        unsafe_no_sandbox=args.unsafe_no_sandbox)
    settings = EvalSettings(samples=args.samples, temperature=args.temperature,
                            top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                            seed=args.seed, chat_template=not args.no_chat_template,
                            max_batch_seqs=args.max_batch_seqs,
                            problems_per_batch=args.problems_per_batch,
                            verify_workers=args.verify_workers,
                            verify_config=verify_config)
    samples_path = args.out.with_suffix(".samples.jsonl") if args.out else None
    result = evaluate_suite(policy, tokenizer, selected, settings, args.data_dir,
                            args.max_problems, samples_path, extra,
                            progress=print if state.is_main_process else lambda message: None,
                            model=model_fingerprint(model), shard=shard)
    if state.num_processes > 1:
        print(f"process {state.process_index} of {state.num_processes} generated "
              f"{shard.generated} problems")
    if not state.is_main_process:
        return
    result["model"] = model
    print(format_table(result))
    print(f"{result['problems_per_s']:.2f} problems/s ({args.samples} samples each)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    if args.plot:
        plot_pass_at_k(result, args.plot)


def main() -> None:
    args = parse_args()
    try:
        run_eval(args)
    except (InputError, rollout.EngineError, sandbox.SandboxUnavailable) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        kept = (f"the same command resumes from {args.out.with_suffix('.samples.jsonl')}"
                if args.out else "no --out, nothing kept")
        sys.exit(f"\ninterrupted: {kept}")
    except OSError as e:
        # --out in a read-only folder, a full disk, a folder where a file should be
        sys.exit(f"error: {e.strerror or e}: {e.filename or ''}")


if __name__ == "__main__":
    main()
