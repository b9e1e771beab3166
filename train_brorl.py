"""BroRL: RL with verifiable rewards, scaled by broadening exploration (many rollouts per prompt).

Hu et al., "BroRL: Scaling Reinforcement Learning via Broadened Exploration", arXiv 2510.01180.
One step, top to bottom in `train()` below:

    prompts -> N rollouts each (rollout.py) -> rewards (reward.py) -> dynamic sampling (drop groups
    whose N rewards are all equal) -> group-relative advantages -> clipped policy-gradient update
    (update.py) -> knowledge-shrinkage monitor -> log -> periodic eval (eval.py) -> checkpoint

Why a large N helps (arXiv 2510.01180 Sec. 2, Theorem 1): to first order, one update changes the
probability mass on correct tokens by two terms that are never negative (from the sampled correct
and incorrect tokens) plus an unsampled coupling term, the only one that can shrink it. That term
scales with the squared probability of the tokens that were NOT sampled, whose expectation
Σ p²(1 - p)^N falls as N grows (Lemma 2, Corollary 3): with hundreds of rollouts per prompt it
fades, and the correct mass grows. `python simulate.py` makes this concrete
(Theorem 1 checked, the paper's Fig. 3 simulator), and the shrinkage monitor below (shrink_frac,
shrink_worst; the probe set with --probe-prompts) measures it at LLM scale.

The default (`--preset cpu-demo`) is BroRL itself at laptop scale: a tiny Qwen2-style model, warmed
up on 2-digit addition until it solves about a quarter of held-out problems at T=1 (built once and
cached, see tiny_model.py), trained with N=256 rollouts per prompt on a 2-core CPU in minutes.

    python train_brorl.py                                   # the CPU demo
    python train_brorl.py --preset smoke --output-dir /tmp/smoke
    python train_brorl.py --output-dir runs/demo --resume   # continue a killed run
    accelerate launch --config_file configs/fsdp_8gpu.yaml train_brorl.py --preset brorl-paper
    tensorboard --logdir runs

Several processes (`accelerate launch`): each process generates for its share of the prompts (with
its own vLLM engine on a GPU), the update is data-parallel (DDP, or FSDP from the accelerate config)
with the token mean and the advantage whitening taken over the whole batch, per-step metrics are
averaged over processes, evaluation is sharded over processes, and only the main process logs and
writes files.
"""

import argparse
import copy
import dataclasses
import errno
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import tyro
from accelerate import Accelerator
from accelerate.utils import DistributedType, InitProcessGroupKwargs, gather_object
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

import benchmarks
import eval as evaluation
import reward
import rollout
import sandbox
import update
from common import (CHECKPOINT, InputError, check_answers, check_model_path, check_prompt_lengths,
                    latest_checkpoint, load_policy, load_tasks)
from tiny_model import ensure_tiny_model

DATA_DIR = Path(__file__).parent / "data"


@dataclass
class Config:
    # ---- run ----
    preset: str = "cpu-demo"
    """named set of overrides applied before the other flags: cpu-demo, smoke, brorl-paper,
    prorl-paper"""
    output_dir: str | None = None
    """where logs and checkpoints go (default: runs/<preset>__<seed>__<unix time>)"""
    resume: bool = False
    """continue from the latest checkpoint in --output-dir"""
    init_from: str | None = None
    """start this new run from another run's checkpoint folder (.../checkpoints/step_N): its weights
    and optimizer state, with this run's own settings and --lr (a BroRL branch of a ProRL run;
    --resume refuses new N)"""
    seed: int = 0
    """seed for data order, sampling and mini-batch splits"""
    device: Literal["auto", "cpu"] = "auto"
    """auto: the GPU accelerate assigns this process when there is one; cpu: never use a GPU"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    process_group_timeout_min: float = 60.0
    """how long a process waits at a collective for the others (a 1.5B checkpoint save or a slow
    verifier batch on one process must not kill the run; torch's own default is 10-30 min by
    backend)"""
    # ---- model and data ----
    model: str = "tiny"
    """policy: a local save_pretrained directory, a hub name, or 'tiny' (the embedded warmed-up toy
    model)"""
    model_revision: str | None = None
    """hub revision (branch, tag or commit) when --model is a hub name"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """parameter dtype of the policy"""
    train_data: str = str(DATA_DIR / "arith_train.jsonl")
    """training tasks (jsonl with prompt, answer, task)"""
    test_data: str = str(DATA_DIR / "arith_test.jsonl")
    """held-out tasks for the periodic evaluation"""
    chat_template: bool = True
    """wrap prompts in the tokenizer's chat template when it has one"""
    # ---- rollouts (paper Sec. 3: BroRL N=512 x 128 prompts, ProRL N=16 x 512) ----
    n_rollouts: int = 256
    """N, rollouts per prompt: BroRL scales this to hundreds"""
    prompts_per_step: int = 32
    """prompts sampled per step"""
    temperature: float = 1.0
    """rollout sampling temperature"""
    top_p: float = 1.0
    """rollout nucleus sampling mass"""
    max_new_tokens: int = 8
    """response length limit (tokens)"""
    zero_truncated_reward: bool = False
    """score a response cut at max_new_tokens as 0, whatever answer it holds (ProRLv2's
    stop-properly penalty at 0)"""
    gen_batch_seqs: int = 2048
    """most sequences decoded at once (vLLM: max_num_seqs, kept >= N)"""
    engine: Literal["auto", "hf", "vllm"] = "auto"
    """rollout engine: hf (transformers), vllm (in-process, colocated); auto: vllm when installed
    with a GPU"""
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """vLLM weight dtype (auto: --dtype; bf16 sampling beside fp32 training is what tis_cap corrects)"""
    gpu_memory_utilization: float = 0.5
    """vLLM: share of GPU memory for its weights and KV cache (the trainer needs the rest)"""
    vllm_max_model_len: int = 0
    """vLLM: longest prompt + response it must hold (0: the model's context length)"""
    vllm_request_seeds: bool = False
    """vLLM: seed every request from the step's generator (reproducible request by request: a
    resumed run draws what an uninterrupted one would, a sharded eval equals one process's); slow on
    a GPU at large N. Off: each engine is seeded once (--seed + process index)"""
    tis_cap: float = 0.0
    """truncated importance sampling cap C: weight token losses by min(π_old/π_sampler, C) (0: off)"""
    # ---- advantages and update ----
    advantage: Literal[tuple(update.ADVANTAGES)] = "grpo"  # the choices are update.ADVANTAGES's names
    """grpo: group mean/std; dr_grpo: group mean only (Dr. GRPO); reinforce_pp_baseline: group mean,
    then batch whitening (ProRLv2/BroRL)"""
    dynamic_sampling: bool = True
    """drop groups whose N rewards are all equal (zero advantage); the kept fraction is pass_rate"""
    refill_rounds: int = 0
    """dynamic sampling refill (DAPO): up to this many extra rounds of prompts until
    prompts_per_step groups are kept"""
    lr: float = 1e-4
    """AdamW learning rate"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    eps_low: float = 0.2
    """lower clip range ε_low of the PPO ratio"""
    eps_high: float = 0.28
    """upper clip range ε_high (clip-higher, DAPO)"""
    kl_coef: float = 0.0
    """β, weight of the KL penalty to the reference policy (0: no reference model)"""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL penalty with l = log π_θ - log π_ref: k1 = l (zero expected gradient as a loss); k2 = l²/2
    (ProRLv2; gradient of KL(π_θ||π_ref)); k3 = exp(-l) - 1 + l (GRPO; gradient of
    KL(π_ref||π_θ))"""
    ref_reset_every: int = 0
    """reset the reference policy to the current one every this many steps (ProRL; 0: never)"""
    minibatches: int = 2
    """PPO mini-batches (optimizer steps) per step; the paper keeps this fixed as N grows"""
    micro_batch_tokens: int = 16384
    """token budget of a forward/backward micro-batch (gradient accumulation fills the mini-batch)"""
    logprob_chunk_tokens: int = 4096
    """response tokens per output-layer chunk when computing log-probs"""
    gradient_checkpointing: bool = False
    """recompute the transformer's activations in backward (much less memory for long responses)"""
    max_grad_norm: float = 1.0
    """gradient clipping norm"""
    # ---- loop, eval, checkpoints ----
    total_steps: int = 120
    """RL steps"""
    eval_every: int = 20
    """in-training eval every this many steps (and at step 0 and the end): a cheap proxy at the
    training length; the paper's numbers come from eval.py on the saved checkpoints"""
    eval_samples: int = 4
    """samples per test problem; eval_pass1 is their mean reward"""
    eval_temperature: float = 1.0
    """evaluation sampling temperature"""
    eval_top_p: float = 1.0
    """evaluation nucleus sampling mass"""
    eval_max_problems: int = 0
    """evaluate on the first M problems of the test set and of each benchmark (0: all)"""
    eval_benchmarks: tuple[str, ...] = ()
    """benchmarks.py names also scored at every eval and logged per benchmark (e.g. aime2024
    humaneval rg/gcd)"""
    eval_data_dir: str = ""
    """directory of benchmark files in their sources' layouts (eval.py --data-dir)"""
    save_every: int = 1
    """checkpoint every this many steps (1: a killed run loses at most the current step)"""
    keep_checkpoints: int = 2
    """number of most recent checkpoints kept"""
    shrink_monitor_samples: int = 256
    """distinct correct responses re-scored after each update by the shrinkage monitor (0: off)"""
    probe_prompts: int = 0
    """probe-set monitor (paper Fig. 3 (ii)/(iii)): correct responses drawn at step 0 on this many
    held-out and as many training prompts, re-scored at every eval (0: off)"""
    probe_samples: int = 8
    """samples per probe prompt at step 0; the first correct one becomes the prompt's probe"""
    # ---- verifiers (reward.py) ----
    verify_workers: int = 2
    """verifier processes for math / Reasoning Gym, and programs run at once for code"""
    verify_timeout: float = 5.0
    """hard limit per distinct math / Reasoning Gym answer, seconds (a timeout scores 0 and is
    logged)"""
    code_test_timeout: float = 2.0
    """limit per code test case, seconds (CPU and wall clock)"""
    unsafe_no_sandbox: bool = False
    """without bubblewrap, run code tasks' programs under rlimits only instead of refusing them (no
    isolation)"""


PRESETS: dict[str, dict] = {
    "cpu-demo": {},
    "smoke": dict(n_rollouts=16, prompts_per_step=4, total_steps=2, eval_every=2, eval_samples=2,
                  eval_max_problems=32, shrink_monitor_samples=32),
}

# The paper's recipe (arXiv 2510.01180, Sec. 3-4.2): continue RL from the ProRLv2 checkpoint at
# 16K response length, BroRL with N=512 x 128 prompts, the ProRL baseline with N=16 x 512, both with
# the same number of PPO mini-batches per step and η = η_0·sqrt(B_new/B_0). Values the paper does not
# give are marked "open" with the source used instead.
PROMPTS_PRORL, N_PRORL, PROMPTS_BRORL, N_BRORL = 512, 16, 128, 512
LR_PRORL = 2e-6  # open for BroRL (η_0): ProRL v1's constant learning rate
PAPER_RECIPE = dict(
    model="nvidia/Nemotron-Research-Reasoning-Qwen-1.5B",
    model_revision=None,  # must be given: the ProRLv2 commit of the repository (see validate())
    # fp32 master weights; the accelerate config adds bf16 autocast (FSDP mixed precision)
    dtype="float32",
    vllm_dtype="bfloat16",
    train_data=str(DATA_DIR / "paper_mix_train.jsonl"),  # python data/make_paper_mix.py
    test_data=str(DATA_DIR / "paper_mix_val.jsonl"),
    max_new_tokens=16384,  # "continued at 16,384 context"
    # Length handling: the paper gives only the 16K limit. Its framework's recipe, ProRLv2, scores
    # truncated responses 0 (NeMo-RL ProRLv2 guide and examples/configs/prorlv2.yaml:
    # stop_properly_penalty_coef 0.0; OpenRLHF's ProRLv2 example: --stop_properly_penalty_coef) and
    # adds a scheduled cosine length penalty (ProRLv2 blog post, Aug 2025), which is NOT implemented
    # here: its constants are not published.
    zero_truncated_reward=True,
    temperature=1.2,  # open: ProRL v1's rollout temperature
    top_p=1.0,
    advantage="reinforce_pp_baseline",  # ProRLv2/BroRL
    dynamic_sampling=True,
    refill_rounds=4,  # open: DAPO refills until the batch is full; 4 extra rounds bound the cost
    eps_low=0.2, eps_high=0.28,  # ProRLv2 post
    kl_coef=1e-4,  # open: BroRL gives no β; a small value in the ProRL family's range
    kl_estimator="k2",  # ProRLv2: ½(log ratio)², clamped to [-10, 10]
    ref_reset_every=200,  # ProRLv2: every 200-500 steps
    # open: ProRL v1's 64-prompt mini-batches at the baseline's 512 prompts; BroRL keeps the count
    minibatches=8,
    tis_cap=2.0,  # truncated importance sampling; C=2 as recommended by Yao et al. (2025)
    # 16K response + up to 4K prompt
    engine="vllm", gpu_memory_utilization=0.5, vllm_max_model_len=20480,
    gen_batch_seqs=1024,
    micro_batch_tokens=32768, logprob_chunk_tokens=4096, gradient_checkpointing=True,
    # In-training eval: a cheap proxy (64 problems per benchmark x 4 samples at the 16K training
    # length) to watch the run; Table 1's protocol (every problem x 16 samples at 32K tokens, hours
    # on 8 GPUs) is `eval.py --suite all` on the saved checkpoints. Sampling as in Table 1: T 0.6,
    # top-p 0.95.
    eval_every=20, eval_samples=4, eval_temperature=0.6, eval_top_p=0.95, eval_max_problems=64,
    eval_benchmarks=("aime2024", "aime2025", "amc2023", "math500", "minerva", "olympiadbench",
                     "humaneval"),
    save_every=10,  # a 1.5B checkpoint with optimizer state is ~20 GB: not every step
    shrink_monitor_samples=256,
    verify_workers=16,
)
BATCH_RATIO = (N_BRORL * PROMPTS_BRORL) / (N_PRORL * PROMPTS_PRORL)  # B_new / B_0 = 8
PRESETS["brorl-paper"] = dict(PAPER_RECIPE, n_rollouts=N_BRORL, prompts_per_step=PROMPTS_BRORL,
                              total_steps=191, lr=LR_PRORL * math.sqrt(BATCH_RATIO))
# Table 1: +191 BroRL steps vs +535 ProRL steps
PRESETS["prorl-paper"] = dict(PAPER_RECIPE, n_rollouts=N_PRORL, prompts_per_step=PROMPTS_PRORL,
                              total_steps=535, lr=LR_PRORL)


def validate(cfg: Config) -> None:
    """One clear line per bad value, before any work starts."""
    checks = [
        (cfg.preset in PRESETS, f"unknown preset '{cfg.preset}' (known: {', '.join(PRESETS)})"),
        (cfg.n_rollouts >= 2,
         f"n_rollouts must be >= 2 (a group baseline needs two rollouts), got {cfg.n_rollouts}"),
        (cfg.prompts_per_step >= 1, f"prompts_per_step must be >= 1, got {cfg.prompts_per_step}"),
        (cfg.minibatches >= 1, f"minibatches must be >= 1, got {cfg.minibatches}"),
        (0 <= cfg.refill_rounds <= 8, f"refill_rounds must be in [0, 8], got {cfg.refill_rounds}"),
        ((cfg.n_rollouts * cfg.prompts_per_step) % cfg.minibatches == 0,
         f"batch of {cfg.prompts_per_step} prompts x {cfg.n_rollouts} rollouts is not divisible into "
         f"{cfg.minibatches} mini-batches"),
        (0 <= cfg.eps_low < 1, f"eps_low must be in [0, 1), got {cfg.eps_low}"),
        (cfg.eps_high >= 0, f"eps_high must be >= 0, got {cfg.eps_high}"),
        (cfg.temperature > 0 and cfg.eval_temperature > 0, "temperatures must be > 0"),
        (0 < cfg.top_p <= 1 and 0 < cfg.eval_top_p <= 1, "top_p values must be in (0, 1]"),
        (cfg.lr > 0, f"lr must be > 0, got {cfg.lr}"),
        (cfg.kl_coef >= 0, f"kl_coef must be >= 0, got {cfg.kl_coef}"),
        (0 < cfg.gpu_memory_utilization <= 1,
         f"gpu_memory_utilization must be in (0, 1], got {cfg.gpu_memory_utilization}"),
        (cfg.tis_cap == 0 or cfg.tis_cap >= 1, f"tis_cap must be 0 (off) or >= 1, got {cfg.tis_cap}"),
        (cfg.vllm_max_model_len >= 0, f"vllm_max_model_len must be >= 0, got {cfg.vllm_max_model_len}"),
        (min(cfg.max_new_tokens, cfg.gen_batch_seqs, cfg.micro_batch_tokens,
             cfg.logprob_chunk_tokens) >= 1,
         "max_new_tokens, gen_batch_seqs, micro_batch_tokens and logprob_chunk_tokens must be >= 1"),
        (cfg.total_steps >= 0 and min(cfg.eval_every, cfg.save_every, cfg.keep_checkpoints) >= 1,
         "total_steps must be >= 0; eval_every, save_every and keep_checkpoints >= 1"),
        (cfg.eval_samples >= 1, f"eval_samples must be >= 1, got {cfg.eval_samples}"),
        (cfg.verify_workers >= 1, f"verify_workers must be >= 1, got {cfg.verify_workers}"),
        (cfg.process_group_timeout_min > 0,
         f"process_group_timeout_min must be > 0, got {cfg.process_group_timeout_min}"),
        (cfg.verify_timeout > 0 and cfg.code_test_timeout > 0,
         "verify_timeout and code_test_timeout must be > 0"),
        (not cfg.resume or cfg.output_dir, "--resume needs --output-dir (the run to continue)"),
        (cfg.probe_prompts >= 0 and cfg.probe_samples >= 1,
         "probe_prompts must be >= 0 and probe_samples >= 1"),
        (not cfg.init_from or (Path(cfg.init_from) / "trainer_state.pt").is_file(),
         "--init-from needs a complete checkpoint folder (with trainer_state.pt), "
         f"e.g. RUN/checkpoints/step_000150: {cfg.init_from}"),
        (cfg.model != PAPER_RECIPE["model"] or cfg.model_revision,
         f"--model-revision is required with {PAPER_RECIPE['model']}: the paper starts from its "
         "ProRLv2 commit, and the repository's main branch later received the BroRL checkpoint "
         "(see README)"),
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)
    if cfg.eval_benchmarks:
        benchmarks.select(names=list(cfg.eval_benchmarks))
    if cfg.model != "tiny":
        check_model_path(cfg.model)
    for path in (cfg.train_data, cfg.test_data):
        if not Path(path).is_file():
            paper_mix = Path(path).name.startswith("paper_mix")
            hint = " (build it: python data/make_paper_mix.py)" if paper_mix else ""
            raise InputError(f"data file not found: {path}{hint}")


# What a resumed run may change (each change is printed): how long it runs, how often it evaluates and
# saves, and how many threads and verifier processes do the work. Everything else defines the run.
RESUME_MAY_CHANGE = ("total_steps", "eval_every", "save_every", "keep_checkpoints", "threads",
                     "verify_workers")


def upgrade_saved_config(saved: dict) -> dict:
    """A config.json written before `normalize_std` became an advantage of its own: grpo with
    normalize_std false was Dr. GRPO's mean-only baseline, which is now `--advantage dr_grpo`."""
    if "normalize_std" not in saved:
        return saved
    upgraded = {key: value for key, value in saved.items() if key != "normalize_std"}
    if saved["normalize_std"] is False and saved.get("advantage") == "grpo":
        upgraded["advantage"] = "dr_grpo"
    return upgraded


def saved_config(output_dir: Path) -> Config | None:
    """The config.json an earlier run wrote in `output_dir` (None when there is none)."""
    path = output_dir / "config.json"
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path} is not valid JSON ({e}): fix it, or resume into a new "
                         "--output-dir") from None
    defaults = dataclasses.asdict(Config())
    saved = upgrade_saved_config(saved) if isinstance(saved, dict) else saved
    if not isinstance(saved, dict) or set(saved) - set(defaults):
        unknown = sorted(set(saved) - set(defaults)) if isinstance(saved, dict) else saved
        raise InputError(f"{path} is not a train_brorl.py config (unknown keys: {unknown!r})")
    return Config(**{k: tuple(v) if isinstance(defaults[k], tuple) else v for k, v in saved.items()})


def config_changes(before: Config, after: Config) -> list[str]:
    """The settings that differ ("total_steps 2 -> 3"), leaving out --resume and how the folder was
    spelled."""
    names = [f.name for f in dataclasses.fields(Config) if f.name not in ("resume", "output_dir")]
    return [f"{name} {getattr(before, name)!r} -> {getattr(after, name)!r}" for name in names
            if getattr(before, name) != getattr(after, name)]


def parse_config(argv: list[str] | None = None) -> Config:
    """`--preset NAME` picks the defaults; every other flag overrides them. With --resume, the run's own
    config.json is the default instead, and a flag may change it only if it is in RESUME_MAY_CHANGE:
    resuming without retyping the flags continues the same run, never another preset's."""
    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default=Config.preset)
    pre.add_argument("--output-dir", "--output_dir")
    pre.add_argument("--resume", action="store_true")
    known = pre.parse_known_args(argv)[0]
    saved = saved_config(Path(known.output_dir)) if known.resume and known.output_dir else None
    if saved is None and known.preset not in PRESETS:
        raise InputError(f"unknown preset '{known.preset}' (known: {', '.join(PRESETS)})")
    defaults = saved or dataclasses.replace(Config(preset=known.preset), **PRESETS[known.preset])
    cfg = tyro.cli(Config, default=defaults, args=argv, description=__doc__)
    if saved is not None:
        refused = [change for change in config_changes(saved, cfg)
                   if change.split()[0] not in RESUME_MAY_CHANGE]
        if refused:
            raise InputError(f"--resume continues the run in {known.output_dir} with its config.json, "
                             f"and these flags change what it is: {'; '.join(refused)} (drop them, or "
                             "start a new --output-dir)")
    validate(cfg)
    if cfg.output_dir is None:  # named here, so config.json and an interrupted run's message name it
        cfg = dataclasses.replace(cfg, output_dir=f"runs/{cfg.preset}__{cfg.seed}__{int(time.time())}")
    return cfg


def write_config(output_dir: Path, cfg: Config) -> None:
    """config.json, printing what differs from the one already there (a resume's allowed changes, or a
    restart from scratch with other settings): it is never replaced by another config silently."""
    try:
        earlier = saved_config(output_dir)
    except InputError as e:  # torn by a kill before the first checkpoint: nothing to keep
        print(f"replacing {e}")
        earlier = None
    for change in config_changes(earlier, cfg) if earlier else []:
        print(f"config.json: {change}")
    tmp = output_dir / "config.json.tmp"
    tmp.write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
    os.replace(tmp, output_dir / "config.json")


# ---- checkpoints: atomic (temp dir, fsync, rename); a save_pretrained model and accelerate's state ---


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    for item in path.rglob("*"):
        if item.is_file():
            with open(item, "rb") as f:
                os.fsync(f.fileno())
        else:
            fsync_dir(item)
    fsync_dir(path)


def remove_leftovers(output_dir: Path) -> None:
    """`.step_N.tmp` (a save that died) and `.step_N.deleting` (a pruning that died) are never read
    again, and each is a whole checkpoint (about 20 GB at paper scale): removed when a run starts or
    resumes."""
    root = output_dir / "checkpoints"
    for leftover in sorted(root.glob(".step_*")) if root.is_dir() else []:
        print(f"removing {leftover}, left by an interrupted save or pruning")
        shutil.rmtree(leftover, ignore_errors=True)


def check_output_dir(output_dir: Path) -> None:
    """One line, before any work, when the output folder can't be written (a file, read-only, no
    access)."""
    if output_dir.exists() and not output_dir.is_dir():
        raise InputError(f"--output-dir is a file, not a folder: {output_dir}")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write_probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise InputError(f"cannot write to --output-dir {output_dir}: {e.strerror}") from None


def save_checkpoint(output_dir: Path, step: int, accelerator: Accelerator, policy, tokenizer,
                    state: dict, keep: int) -> Path:
    """`model/`: the policy as save_pretrained (what eval.py and from_pretrained load); `state/`:
    accelerate's save_state (policy, reference policy, optimizer, every process's RNG; sharded under
    FSDP); `trainer_state.pt`: step and data position, written last. Every process calls this."""
    root = output_dir / "checkpoints"
    final, tmp = root / f"step_{step:06d}", root / f".step_{step:06d}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "state").mkdir(parents=True)  # before any process writes its RNG state there
    accelerator.wait_for_everyone()
    weights = accelerator.get_state_dict(policy)  # gathered on the main process under FSDP
    if accelerator.is_main_process:
        accelerator.unwrap_model(policy).model.save_pretrained(
            tmp / "model",
            state_dict={name.removeprefix("model."): tensor for name, tensor in weights.items()})
        tokenizer.save_pretrained(tmp / "model")
    accelerator.save_state(tmp / "state")
    accelerator.wait_for_everyone()
    # the size of every file, so a damaged checkpoint is recognised on resume
    if accelerator.is_main_process:
        sizes = {str(f.relative_to(tmp)): f.stat().st_size for f in tmp.rglob("*") if f.is_file()}
        state = {**state, "files": sizes}
        torch.save(state, tmp / "trainer_state.pt")
        fsync_tree(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        fsync_dir(root)
        for old in sorted(p for p in root.iterdir() if CHECKPOINT.match(p.name))[:-keep]:
            # renamed first, so a kill never leaves half a checkpoint
            doomed = root / f".{old.name}.deleting"
            shutil.rmtree(doomed, ignore_errors=True)
            os.replace(old, doomed)
            shutil.rmtree(doomed)
    accelerator.wait_for_everyone()
    return final


# ---- metrics: one JSON object per row in metrics.jsonl, the same scalars in tensorboard ------------


class MetricsLog:
    """metrics.jsonl and tensorboard, continued after `start_step` (the checkpoint's step; -1
    without one): rows and events an earlier attempt logged past it (after its last checkpoint, or
    all of them when it died before the first) are dropped, so a resumed or rerun folder logs every
    step once and in order."""

    def __init__(self, output_dir: Path, start_step: int):
        self.path = output_dir / "metrics.jsonl"
        if self.path.exists():
            lines = self.path.read_text(errors="replace").splitlines()
            rows = [line for line in lines if self.row_step(line) <= start_step]
            if len(rows) < len(lines):
                print(f"metrics.jsonl: dropped {len(lines) - len(rows)} rows an earlier attempt logged "
                      f"after step {start_step}")
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(row + "\n" for row in rows))
            os.replace(tmp, self.path)
        # purge_step: tensorboard hides the earlier event files' events at steps >= it
        self.writer = SummaryWriter(str(output_dir), purge_step=start_step + 1)
        self.file = open(self.path, "a")

    @staticmethod
    def row_step(line: str) -> float:
        """The row's step; a line torn by a kill counts as lost."""
        try:
            return json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError):
            return float("inf")

    def log(self, step: int, scalars: dict, prefix: str) -> None:
        self.file.write(json.dumps({"step": step, **scalars}) + "\n")
        self.file.flush()
        for key, value in scalars.items():
            self.writer.add_scalar(f"{prefix}/{key}", value, step)
        self.writer.flush()

    def close(self) -> None:
        self.file.close()
        self.writer.close()


def run_eval(sampler, tokenizer, tasks, cfg: Config, settings: evaluation.EvalSettings, step: int,
             metrics: MetricsLog | None, output_dir: Path, shard: evaluation.Shard) -> float:
    """The held-out task file plus `eval_benchmarks`, scored by eval.py's code; the final eval also
    writes eval.json (the layout `python eval.py --out` writes) and its per-sample audit file. Every
    process calls this and scores its share of the problems (the paper's eval takes hours: one
    process alone would leave the others waiting past the process-group timeout); the main process
    (`metrics` given) writes."""
    final = step == cfg.total_steps
    samples_path = output_dir / "eval.samples.jsonl" if final else None
    if final and metrics is not None:
        # a resumed run's final eval is a new one, not a continuation
        samples_path.unlink(missing_ok=True)
    selected = benchmarks.select(names=list(cfg.eval_benchmarks)) if cfg.eval_benchmarks else []
    data_dir = Path(cfg.eval_data_dir) if cfg.eval_data_dir else None
    held_out_tasks = [{**t, "id": str(i)} for i, t in enumerate(tasks)]
    result = evaluation.evaluate_suite(sampler, tokenizer, selected, settings, data_dir,
                                       cfg.eval_max_problems, samples_path,
                                       extra={"test_data": held_out_tasks},
                                       progress=lambda message: None, shard=shard)
    held_out = result["benchmarks"]["test_data"]
    if metrics is None:
        return held_out["pass1"]
    # which pass@1 this is (T=1 or 0.6)
    protocol = {f"eval_{name}": value for name, value in result["settings"].items()
                if name in ("samples", "temperature", "top_p", "max_new_tokens")}
    pass_at_k = {f"eval_pass@{k}": v for k, v in held_out["pass_at_k"].items()}
    per_benchmark = {f"{name}/pass1": e["pass1"] for name, e in result["benchmarks"].items()
                     if name != "test_data"}
    per_suite = {f"suite/{suite}": value for suite, value in result["suites"].items()}
    metrics.log(step, {**protocol, "eval_pass1": held_out["pass1"], **pass_at_k, **per_benchmark,
                       **per_suite}, prefix="eval")
    if final:
        result["model"] = str(output_dir)
        (output_dir / "eval.json").write_text(json.dumps(result, indent=2))
    return held_out["pass1"]


def eval_protocol(cfg: Config) -> str:
    """What the in-training eval measures, printed at the start so no one mistakes it for the
    paper's table."""
    problems = f"the first {cfg.eval_max_problems} problems" if cfg.eval_max_problems else "all problems"
    return (f"in-training eval (a proxy): {problems} of the test data and of each benchmark x "
            f"{cfg.eval_samples} samples at {cfg.max_new_tokens} tokens; the paper's Table 1 protocol "
            "(every problem x 16 samples at 32K tokens) is eval.py on the saved checkpoints")


def step_generator(cfg: Config, step: int, stream: int, process: int = 0) -> torch.Generator:
    """A fresh generator per (step, purpose, process): a resumed run draws exactly what an
    uninterrupted one would."""
    seed = cfg.seed * 1_000_003 + step * 17 + stream + process * 1_000_000_007
    return torch.Generator().manual_seed(seed)


def next_prompts(tasks: list[dict], position: int, count: int, seed: int) -> list[dict]:
    """Tasks `position .. position + count` of an endless stream of seeded per-epoch shuffles."""
    orders: dict[int, torch.Tensor] = {}
    batch = []
    for p in range(position, position + count):
        epoch, index = divmod(p, len(tasks))
        if epoch not in orders:
            orders[epoch] = torch.randperm(len(tasks),
                                           generator=torch.Generator().manual_seed(seed + epoch))
        batch.append(tasks[int(orders[epoch][index])])
    return batch


def rows_batch(rollouts: rollout.Rollouts, rows: list[int], advantages: torch.Tensor,
               weights: torch.Tensor | None = None) -> update.TrainBatch:
    return update.TrainBatch(rollouts.prompt_ids[rows], rollouts.prompt_mask[rows],
                             rollouts.response_ids[rows], rollouts.response_mask[rows], advantages,
                             weights, rollouts.logprobs[rows])


def informative_groups(rewards: torch.Tensor) -> torch.Tensor:
    """[G] bool: groups whose N rewards are not all equal (0 < #correct < N), the ones with a
    learning signal."""
    return rewards.max(dim=1).values > rewards.min(dim=1).values


def check_launch(distributed_type: DistributedType, processes: int, environ=os.environ) -> None:
    """Refuse a launch that would silently run something other than its accelerate config. On a
    machine without GPUs accelerate runs an FSDP config as plain data parallelism
    (`Accelerator(cpu=True)`: unsharded state, no FSDP code path) or, with `cpu=False`, as
    independent single processes (`DistributedType.NO`) that all write the same output folder. FSDP
    on CPU is not available through accelerate (its FSDP setup covers accelerator devices only), so
    both are refused."""
    wants_fsdp = environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if wants_fsdp and distributed_type != DistributedType.FSDP:
        raise InputError(f"the accelerate config asks for FSDP, which needs GPUs; here it would run as "
                         f"{distributed_type.value} instead: use configs/ddp_cpu.yaml on a machine "
                         "without GPUs")
    launched = int(environ.get("WORLD_SIZE", "1"))
    if launched != processes:
        raise InputError(f"launched as {launched} processes, but each would run alone "
                         f"({distributed_type.value}) and all would write the same output folder: "
                         "check the accelerate config")


def kept_group_quotas(counts: list[int], target: int) -> list[int]:
    """How many informative groups each process keeps so that all together keep exactly `target` (or
    all, when fewer were found): each process up to its equal share first, then the shortfall is
    filled from processes that found more, lowest rank first. Identical on every process (it sees
    every count)."""
    quotas = [min(count, target // len(counts)) for count in counts]
    left = target - sum(quotas)
    for process, count in enumerate(counts):
        extra = min(count - quotas[process], left)
        quotas[process] += extra
        left -= extra
    return quotas


def keep_target_groups(informative: torch.Tensor, target: int, rank: int, processes: int,
                       reduce_sum) -> torch.Tensor:
    """[G] bool: this process's share of exactly `target` informative groups over all processes, as
    DAPO and verl keep a fixed batch size after a dynamic-sampling refill. Groups are in collection
    order (round by round), so the first ones collected are kept and the surplus of the last round
    is dropped."""
    counts = torch.zeros(processes)
    counts[rank] = informative.sum()
    quota = kept_group_quotas([int(c) for c in reduce_sum(counts).tolist()], target)[rank]
    keep = informative.clone()
    keep[informative.nonzero().squeeze(-1)[quota:]] = False
    return keep


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


CORRECT_FRACTION_QUARTERS = ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0))
CORRECT_FRACTION_BINS = ("0", *(f"{lo:g}-{hi:g}" for lo, hi in CORRECT_FRACTION_QUARTERS), "1")


def correct_fraction_histogram(rewards: torch.Tensor) -> dict[str, float]:
    """Share of the step's prompts by the fraction of their N rollouts that were correct: all wrong,
    four quarters of (0, 1), all right. The two ends are compute spent on groups with no signal
    (Sec. 3)."""
    fraction = rewards.float().mean(dim=1)
    bins = {"correct_frac/0": fraction == 0, "correct_frac/1": fraction == 1}
    for lo, hi in CORRECT_FRACTION_QUARTERS:
        bins[f"correct_frac/{lo:g}-{hi:g}"] = (fraction > lo) & (fraction <= hi) & (fraction < 1)
    return {name: float(mask.float().mean()) for name, mask in bins.items()}


def start_from_checkpoint(accelerator: Accelerator, optimizer, checkpoint: Path, cfg: Config) -> None:
    """--init-from: load another run's policy and optimizer state (AdamW's moments and step count
    carry over: restarting them cost a large-N branch 15-25 points in its first step, see
    experiments/revive.py), then give the optimizer this run's learning rate and re-seed, since this
    is a new run with its own seed."""
    source = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
    if (source["config"]["kl_coef"] > 0) != (cfg.kl_coef > 0):
        had = "had" if source["config"]["kl_coef"] > 0 else "had no"
        raise InputError(f"--init-from {checkpoint}: its run {had} reference policy (kl_coef > 0), "
                         "and this run must match it")
    accelerator.load_state(checkpoint / "state")
    for group in optimizer.param_groups:
        group["lr"] = cfg.lr
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if accelerator.is_main_process:
        print(f"initialised from {checkpoint} (step {source['step']}: weights and optimizer state), "
              f"lr {cfg.lr:g}")


def log_probes(probes: dict | None, policy, update_cfg, reduce_max, sampled_prompts: set[str],
               step: int, metrics: "MetricsLog | None") -> None:
    """Re-score the probe set (every process: the passes run in lockstep) and log its report at this
    eval."""
    if probes is not None:
        report = probe_report(probes, probe_logprobs(policy, probes, update_cfg, reduce_max),
                              sampled_prompts)
        if metrics is not None:
            metrics.log(step, report, prefix="eval")


# ---- the probe-set knowledge-shrinkage monitor: the paper's Fig. 3 (ii)/(iii) quantity ------------


def score_rollouts(tasks: list[dict], rollouts: rollout.Rollouts, cfg: Config, verify_cfg,
                   stats: reward.VerifyStats | None = None) -> torch.Tensor:
    """The verifiable reward of every rollout [S] (rollout s answers tasks[rollouts.group[s]])."""
    items = [(tasks[g]["task"], text, tasks[g]["answer"])
             for g, text in zip(rollouts.group.tolist(), rollouts.texts)]
    rewards = torch.tensor(reward.score_batch(items, cfg.verify_workers, verify_cfg, stats))
    if cfg.zero_truncated_reward:  # an unfinished response earns nothing, even with a \boxed{} answer
        rewards[rollouts.truncated] = 0.0
    return rewards


def draw_probes(sampler, tokenizer, train_tasks: list[dict], test_tasks: list[dict], cfg: Config,
                verify_cfg: reward.VerifyConfig) -> dict:
    """The fixed probe set, drawn once at step 0: for each of the first `probe_prompts` held-out
    prompts and as many training prompts, the first correct response among `probe_samples` samples
    (a prompt with none has no probe). Fig. 3 of arXiv 2510.01180 follows correct responses the
    policy already produced and asks whether training raises or lowers them; the held-out ones are
    never trained on, the training ones are sampled by some steps, which is the paper's sampled /
    unsampled split (Sec. 2.2, Fig. 3 (ii) vs (iii))."""
    tasks = test_tasks[: cfg.probe_prompts] + train_tasks[: cfg.probe_prompts]
    held_out = [i < min(cfg.probe_prompts, len(test_tasks)) for i in range(len(tasks))]
    prompt_ids = rollout.encode_prompts(tokenizer, [t["prompt"] for t in tasks], cfg.chat_template)
    params = rollout.SamplingParams(n=cfg.probe_samples, temperature=cfg.temperature, top_p=cfg.top_p,
                                    max_new_tokens=cfg.max_new_tokens,
                                    max_batch_seqs=cfg.gen_batch_seqs)
    drawn = rollout.generate(sampler, tokenizer, prompt_ids, params,
                             torch.Generator().manual_seed(cfg.seed + 7919))
    correct = score_rollouts(tasks, drawn, cfg, verify_cfg) == 1.0
    rows = []
    for g in range(len(tasks)):
        hits = (correct & (drawn.group == g)).nonzero().squeeze(-1)
        if len(hits):
            rows.append(int(hits[0]))
    return {"prompt_ids": drawn.prompt_ids[rows], "prompt_mask": drawn.prompt_mask[rows],
            "response_ids": drawn.response_ids[rows], "response_mask": drawn.response_mask[rows],
            "prompts": [tasks[int(drawn.group[r])]["prompt"] for r in rows],
            "held_out": torch.tensor([held_out[int(drawn.group[r])] for r in rows], dtype=torch.bool)}


def probe_logprobs(policy, probes: dict, update_cfg: update.UpdateConfig, reduce_max,
                   micro_batch_tokens: int = 0):
    """[P] per-token mean log-prob of each probe response (a mean, so long and short responses weigh
    alike)."""
    batch = update.TrainBatch(probes["prompt_ids"], probes["prompt_mask"], probes["response_ids"],
                              probes["response_mask"], torch.zeros(len(probes["prompts"])))
    if micro_batch_tokens:
        update_cfg = dataclasses.replace(update_cfg, micro_batch_tokens=micro_batch_tokens)
    logprobs = update.batch_logprobs(policy, batch, update_cfg, reduce_max=reduce_max)
    return (logprobs * batch.response_mask).sum(-1) / batch.response_mask.sum(-1).clamp(min=1)


def load_or_draw_probes(output_dir: Path, cfg: Config, accelerator: Accelerator, sampler, policy,
                        tokenizer, train_tasks, test_tasks, update_cfg, verify_cfg,
                        reduce_max) -> dict | None:
    """`probes.pt` of this run: kept with the run, so a resumed run re-scores the same probes, and
    copied from the source run by --init-from, so every branch is measured against the same probes
    and the same step-0 log-probs. A new probe set also gets its noise floor: the largest change of
    any probe between two scorings with unchanged weights (one batched and padded, one row at a
    time), the rounding a change must exceed to count as a change."""
    if not cfg.probe_prompts:
        return None
    path = output_dir / "probes.pt"
    if accelerator.is_main_process and not path.is_file():
        source = Path(cfg.init_from).parent.parent / "probes.pt" if cfg.init_from else None
        if source is not None and source.is_file():
            shutil.copy(source, path)
        else:
            torch.save(draw_probes(sampler, tokenizer, train_tasks, test_tasks, cfg, verify_cfg), path)
    accelerator.wait_for_everyone()
    probes = torch.load(path, weights_only=False)
    if "base" not in probes:
        probes["base"] = probe_logprobs(policy, probes, update_cfg, reduce_max)
        alone = probe_logprobs(policy, probes, update_cfg, reduce_max, micro_batch_tokens=1)
        probes["noise_floor"] = float((alone - probes["base"]).abs().max()) if len(alone) else 0.0
        if accelerator.is_main_process:
            torch.save(probes, path)
            held_out = int(probes["held_out"].sum())
            print(f"probe set: {len(probes['prompts'])} correct responses ({held_out} on held-out "
                  f"prompts), noise floor {probes['noise_floor']:.2e} nats/token")
    return probes


def probe_report(probes: dict, now: torch.Tensor, sampled_prompts: set[str]) -> dict[str, float]:
    """The change of each probe's per-token mean log-prob since step 0, as in Fig. 3 (ii)/(iii): the
    fraction that rose by more than the noise floor, the fraction that fell by more, and the worst
    drop; over all probes, and separately over probes whose prompt this step sampled and the
    rest."""
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
    return report


def train(cfg: Config) -> Path:
    """Run (or resume) training; returns the output directory. Under `accelerate launch`, every
    process runs this."""
    # ---- setup ----
    process_group = InitProcessGroupKwargs(timeout=timedelta(minutes=cfg.process_group_timeout_min))
    # (else no process group on CPU)
    accelerator = Accelerator(cpu=cfg.device == "cpu" or not torch.cuda.is_available(),
                              kwargs_handlers=[process_group])
    main_process = accelerator.is_main_process
    rank, processes = accelerator.process_index, accelerator.num_processes
    check_launch(accelerator.distributed_type, processes)

    # over processes (update.py's token mean and whitening)
    def reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
        if processes == 1:
            return tensor
        return accelerator.reduce(tensor.to(accelerator.device), "sum").cpu()

    # over processes (update.py's pass counts, for FSDP)
    def reduce_max(tensor: torch.Tensor) -> torch.Tensor:
        if processes == 1:
            return tensor
        every_process = accelerator.gather(tensor.reshape(1).to(accelerator.device))
        return every_process.max().cpu()

    output_dir = Path(cfg.output_dir or f"runs/{cfg.preset}__{cfg.seed}__{int(time.time())}")
    if main_process:
        check_output_dir(output_dir)
        remove_leftovers(output_dir)
    checkpoint = latest_checkpoint(output_dir, say=print if main_process else lambda message: None)
    if checkpoint and not cfg.resume:
        raise InputError(f"{output_dir} already has checkpoints: pass --resume to continue it, or "
                         "another --output-dir")
    if cfg.resume and checkpoint is None and main_process:
        print(f"--resume: no checkpoint in {output_dir} yet, starting from scratch")
    if cfg.prompts_per_step % processes:
        raise InputError(f"prompts_per_step ({cfg.prompts_per_step}) must be divisible by the "
                         f"{processes} processes")
    engine_name = rollout.default_engine() if cfg.engine == "auto" else cfg.engine
    if accelerator.distributed_type == DistributedType.FSDP and engine_name == "hf":
        raise InputError("FSDP shards the model across processes: generate with --engine vllm")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    train_tasks, test_tasks = load_tasks(cfg.train_data), load_tasks(cfg.test_data)
    test_tasks = test_tasks[: cfg.eval_max_problems] if cfg.eval_max_problems else test_tasks
    check_answers(train_tasks, cfg.train_data)
    check_answers(test_tasks, cfg.test_data)
    eval_benchmarks = benchmarks.select(names=list(cfg.eval_benchmarks)) if cfg.eval_benchmarks else []
    eval_suites = {b.suite for b in eval_benchmarks}
    reward.require_sandbox({t["task"] for t in train_tasks + test_tasks} | eval_suites,
                           cfg.unsafe_no_sandbox)
    with accelerator.main_process_first():  # the main process builds the tiny model's cache entry
        model_path = (str(checkpoint / "model") if checkpoint
                      else str(Path(cfg.init_from) / "model") if cfg.init_from
                      else str(ensure_tiny_model()) if cfg.model == "tiny" else cfg.model)
    revision = None if checkpoint or cfg.init_from else cfg.model_revision
    model, tokenizer = load_policy(model_path, cfg.dtype, "cpu", revision)
    context = min(getattr(model.config, "max_position_embeddings", math.inf),
                  cfg.vllm_max_model_len or math.inf)
    prompt_limit = context - cfg.max_new_tokens
    for path in (cfg.train_data, cfg.test_data):
        check_prompt_lengths(path, tokenizer, prompt_limit, cfg.chat_template)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ref_policy = update.Policy(copy.deepcopy(model).requires_grad_(False)) if cfg.kl_coef > 0 else None
    policy = update.Policy(model)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    policy, optimizer = accelerator.prepare(policy, optimizer)
    if ref_policy is not None:
        # sharded under FSDP, not DDP-wrapped
        ref_policy = accelerator.prepare_model(ref_policy, evaluation_mode=True)
    engine = None
    if engine_name == "vllm":
        engine = rollout.VLLMEngine(model_path,
                                    dtype=cfg.dtype if cfg.vllm_dtype == "auto" else cfg.vllm_dtype,
                                    revision=revision, seed=cfg.seed + rank,
                                    request_seeds=cfg.vllm_request_seeds,
                                    max_model_len=cfg.vllm_max_model_len or None,
                                    max_num_seqs=max(cfg.gen_batch_seqs, cfg.n_rollouts),
                                    gpu_memory_utilization=cfg.gpu_memory_utilization)
    sampler = engine or accelerator.unwrap_model(policy).model  # what rollouts and evals generate with
    step, data_position = 0, 0
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if checkpoint:
        accelerator.load_state(checkpoint / "state")  # policy, reference, optimizer, this process's RNG
        state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
        step, data_position = state["step"], state["data_position"]
        if main_process:
            print(f"resumed from {checkpoint} at step {step}")
    elif cfg.init_from:
        start_from_checkpoint(accelerator, optimizer, Path(cfg.init_from), cfg)
    metrics = None
    if main_process:
        write_config(output_dir, cfg)
        metrics = MetricsLog(output_dir, start_step=step if checkpoint else -1)
        settings_text = "\n".join(f"    {k} = {v!r}" for k, v in dataclasses.asdict(cfg).items())
        metrics.writer.add_text("config", settings_text)
    sampling = rollout.SamplingParams(n=cfg.n_rollouts, temperature=cfg.temperature, top_p=cfg.top_p,
                                      max_new_tokens=cfg.max_new_tokens,
                                      max_batch_seqs=cfg.gen_batch_seqs)
    update_cfg = update.UpdateConfig(
        eps_low=cfg.eps_low, eps_high=cfg.eps_high, kl_coef=cfg.kl_coef, kl_estimator=cfg.kl_estimator,
        minibatches=cfg.minibatches, micro_batch_tokens=cfg.micro_batch_tokens,
        max_grad_norm=cfg.max_grad_norm, temperature=cfg.temperature,
        logprob_chunk_tokens=cfg.logprob_chunk_tokens, tis_cap=cfg.tis_cap)
    verify_cfg = reward.VerifyConfig(timeout=cfg.verify_timeout, test_timeout=cfg.code_test_timeout,
                                     unsafe_no_sandbox=cfg.unsafe_no_sandbox)
    eval_settings = evaluation.EvalSettings(
        samples=cfg.eval_samples, temperature=cfg.eval_temperature, top_p=cfg.eval_top_p,
        max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, chat_template=cfg.chat_template,
        max_batch_seqs=cfg.gen_batch_seqs, verify_workers=cfg.verify_workers, verify_config=verify_cfg)
    # printed beside each score
    sampling_protocol = evaluation.sampling_protocol(dataclasses.asdict(eval_settings))
    if main_process:
        print(eval_protocol(cfg))
    eval_shard = evaluation.Shard(rank, processes, lambda item: gather_object([item]))
    probes = load_or_draw_probes(output_dir, cfg, accelerator, sampler, policy, tokenizer,
                                 train_tasks, test_tasks, update_cfg, verify_cfg, reduce_max)
    if step == 0:
        start_pass1 = run_eval(sampler, tokenizer, test_tasks, cfg, eval_settings, 0, metrics,
                               output_dir, eval_shard)
        log_probes(probes, policy, update_cfg, reduce_max, set(), 0, metrics)
        if main_process:
            print(f"step 0: eval_pass1 {start_pass1:.3f} ({sampling_protocol})")
    accelerator.wait_for_everyone()

    progress = tqdm(range(step + 1, cfg.total_steps + 1), desc="BroRL", initial=step,
                    total=cfg.total_steps,
                    disable=not main_process)
    for step in progress:
        step_start, sampled_prompts = time.time(), set()
        # ALGO LOGIC: N rollouts for each prompt (paper Sec. 3: BroRL's N is in the hundreds), then
        # verifiable rewards [G prompts, N rollouts] (each distinct answer checked once). Dynamic
        # sampling keeps groups with 0 < #correct < N (all-equal groups carry no signal); with
        # refill_rounds, more prompts are drawn until prompts_per_step groups are found, and exactly
        # that many are kept (DAPO).
        verify_stats = reward.VerifyStats()
        parts, part_rewards, gen_time, found_so_far = [], [], 0.0, 0.0
        for refill in range(1 + cfg.refill_rounds):
            round_start = time.time()
            round_prompts = next_prompts(train_tasks, data_position, cfg.prompts_per_step, cfg.seed)
            round_tasks = round_prompts[rank::processes]  # this process's share
            sampled_prompts.update(task["prompt"] for task in round_prompts)  # for the probe split
            data_position += cfg.prompts_per_step
            prompt_ids = rollout.encode_prompts(tokenizer, [t["prompt"] for t in round_tasks],
                                                cfg.chat_template)
            generator = step_generator(cfg, step, 0 if refill == 0 else 1 + refill, rank)
            parts.append(rollout.generate(sampler, tokenizer, prompt_ids, sampling, generator))
            gen_time += time.time() - round_start
            round_rewards = score_rollouts(round_tasks, parts[-1], cfg, verify_cfg, verify_stats)
            part_rewards.append(round_rewards.view(len(round_tasks), -1))
            found_so_far += float(reduce_sum(informative_groups(part_rewards[-1]).sum().float()))
            if not cfg.dynamic_sampling or found_so_far >= cfg.prompts_per_step:
                break
        if engine is not None:
            engine.sleep()  # hand the GPU memory to the update
        rollouts = rollout.concat_rollouts(parts, tokenizer.pad_token_id) if len(parts) > 1 else parts[0]
        rewards = torch.cat(part_rewards)
        informative = informative_groups(rewards)
        kept = (keep_target_groups(informative, cfg.prompts_per_step, rank, processes, reduce_sum)
                if cfg.dynamic_sampling else torch.ones_like(informative))
        advantages = update.ADVANTAGES[cfg.advantage](rewards[kept], reduce_sum=reduce_sum)
        kept_mask = kept[:, None].expand_as(rewards).flatten()  # [G·N]: the rows of the kept groups
        kept_rows = kept_mask.nonzero().squeeze(-1).tolist()
        batch = update.merge_duplicates(rows_batch(rollouts, kept_rows, advantages.flatten()),
                                        cfg.minibatches,
                                        # split into mini-batches, then merged
                                        step_generator(cfg, step, 1, rank))

        # the knowledge-shrinkage monitor, part 1: correct responses' sequence log-probs before the
        # update (its passes run on every process, also one with no correct response: FSDP gathers
        # in each pass)
        watch = (monitor_rows(rollouts, rewards, cfg.shrink_monitor_samples)
                 if cfg.shrink_monitor_samples else [])
        watch_batch = rows_batch(rollouts, watch, torch.zeros(len(watch)))
        before = update.batch_logprobs(policy, watch_batch, update_cfg, reduce_max=reduce_max).sum(-1)

        # ALGO LOGIC: the clipped policy-gradient step against π_old (and π_ref if β > 0)
        stats = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}
        old_logprobs = update.batch_logprobs(policy, batch, update_cfg, reduce_max=reduce_max)
        mismatch = update.sampler_mismatch(old_logprobs, batch.sampler_logprobs,
                                           batch.response_mask * (batch.weights > 0)[:, None])
        if float(reduce_sum(torch.tensor(float(len(kept_rows))))) > 0:
            ref_logprobs = (update.batch_logprobs(ref_policy, batch, update_cfg, reduce_max=reduce_max)
                            if ref_policy is not None else None)
            stats = update.ppo_update(policy, optimizer, batch, old_logprobs, update_cfg, ref_logprobs,
                                      step_generator(cfg, step, 1, rank), reduce_sum, reduce_max)
        if ref_policy is not None and cfg.ref_reset_every and step % cfg.ref_reset_every == 0:
            # ProRL's reference reset; the optimizer state is kept
            ref_policy.load_state_dict(accelerator.unwrap_model(policy).state_dict())

        # the knowledge-shrinkage monitor, part 2: did any correct response lose probability?
        after = update.batch_logprobs(policy, watch_batch, update_cfg, reduce_max=reduce_max).sum(-1)
        shrink_frac, shrink_worst = update.shrinkage(before, after)
        if engine is not None:
            # the next rollouts sample the new policy
            engine.wake_up(accelerator.unwrap_model(policy).model)

        # TRY NOT TO MODIFY: logging, evaluation, checkpoint
        step_time = time.time() - step_start
        lengths = rollouts.response_mask.sum(-1).float()
        group_worst, group_best = rewards.min(dim=1).values, rewards.max(dim=1).values
        scalars = {
            "reward_mean": float(rewards.mean()),
            "pass_rate": float(informative.float().mean()),
            "solve_all_frac": float((group_worst == 1).float().mean()),
            "solve_none_frac": float((group_best == 0).float().mean()),
            "samples_per_s": rewards.numel() / step_time,
            "gen_samples_per_s": rewards.numel() / gen_time,
            "response_len": float(lengths.mean()),
            "truncated_frac": float(rollouts.truncated.float().mean()),
            "gen_tokens_per_s": float(lengths.sum()) / gen_time,
            **correct_fraction_histogram(rewards),
            "shrink_frac": shrink_frac,
            "shrink_worst": shrink_worst,
            "shrink_watched": len(watch),
            "distinct_frac": len(batch.advantages) / max(len(kept_rows), 1),
            "gen_rounds": len(parts),
            "kept_groups": float(kept.sum()),
            "step_time": step_time,
            **stats,
            **mismatch,
            **verify_stats.as_log(),
        }
        if processes > 1:  # the mean over processes (equal shares of prompts); throughputs add up
            values = torch.tensor(list(scalars.values()), dtype=torch.float64,
                                  device=accelerator.device)
            means = accelerator.reduce(values, "mean")
            scalars = dict(zip(scalars, means.cpu().tolist()))
            for key in ("samples_per_s", "gen_samples_per_s", "gen_tokens_per_s", "kept_groups"):
                scalars[key] *= processes
        if main_process:
            metrics.log(step, scalars, prefix="train")
            progress.set_postfix(reward=f"{scalars['reward_mean']:.3f}",
                                 pass_rate=f"{scalars['pass_rate']:.2f}")
        if step % cfg.eval_every == 0 or step == cfg.total_steps:
            pass1 = run_eval(sampler, tokenizer, test_tasks, cfg, eval_settings, step, metrics,
                             output_dir, eval_shard)
            log_probes(probes, policy, update_cfg, reduce_max, sampled_prompts, step, metrics)
            if main_process:
                progress.write(f"step {step}: eval_pass1 {pass1:.3f} "
                               f"({sampling_protocol})")
        accelerator.wait_for_everyone()
        if step % cfg.save_every == 0 or step == cfg.total_steps:
            trainer_state = {"step": step, "data_position": data_position,
                             "config": dataclasses.asdict(cfg)}
            save_checkpoint(output_dir, step, accelerator, policy, tokenizer, trainer_state,
                            cfg.keep_checkpoints)
    if metrics is not None:
        metrics.close()
    if engine is not None:
        engine.close()  # before the process group goes: vLLM tears down its own groups first
    accelerator.end_training()
    return output_dir


def where_to_resume(cfg: Config | None) -> str:
    """What an interrupted run left: the checkpoint it continues from, and the command that does it."""
    checkpoint = (latest_checkpoint(Path(cfg.output_dir), say=lambda message: None)
                  if cfg and cfg.output_dir else None)
    if checkpoint is None:
        return "no checkpoint was saved yet (a rerun starts from step 0)"
    return (f"the last complete checkpoint is {checkpoint}; continue with: "
            f"python train_brorl.py --output-dir {cfg.output_dir} --resume")


# Environment failures that deserve one line, not a traceback: the disk, the folder, the permissions.
ONE_LINE_OS_ERRORS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                      errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}


def write_failure(e: Exception) -> str | None:
    """The one-line name of a failed write, or None for any other error. Python reports a full disk
    as an OSError with errno ENOSPC; torch.save as a RuntimeError from its zip writer, with no errno
    (on a full device: "unexpected pos 704 vs 598", or "PytorchStreamWriter failed writing file
    ...")."""
    if isinstance(e, OSError) and e.errno in ONE_LINE_OS_ERRORS:
        return f"{ONE_LINE_OS_ERRORS[e.errno]} writing {e.filename or 'a file'}"
    if isinstance(e, RuntimeError) and any(sign in str(e) for sign in ("PytorchStreamWriter",
                                                                       "unexpected pos")):
        return "a checkpoint file could not be written (no space left on device?)"
    return None


def main() -> None:
    cfg = None
    try:
        cfg = parse_config()
        output_dir = train(cfg)
    except (InputError, rollout.EngineError, sandbox.SandboxUnavailable) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit(f"\ninterrupted: {where_to_resume(cfg)}")
    except (OSError, RuntimeError) as e:
        failure = write_failure(e)
        if failure is None:
            raise
        if cfg is not None and cfg.output_dir:
            remove_leftovers(Path(cfg.output_dir))  # the half-written checkpoint: free its space now
        sys.exit(f"error: {failure}; {where_to_resume(cfg)}")
    print(f"done: {output_dir}/metrics.jsonl, checkpoints in {output_dir}/checkpoints, "
          f"curves: tensorboard --logdir {output_dir}")


if __name__ == "__main__":
    main()
