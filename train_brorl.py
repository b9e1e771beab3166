"""BroRL: RL with verifiable rewards, scaled by broadening exploration (many rollouts per prompt).

Hu et al., "BroRL: Scaling Reinforcement Learning via Broadened Exploration", arXiv 2510.01180.
One step, top to bottom in `train()`, its helpers right above it (the command line below it):

    prompts -> N rollouts each (rollout.py) -> rewards (reward.py) -> dynamic sampling (drop groups
    whose N rewards are all equal) -> group-relative advantages -> clipped policy-gradient update
    (update.py) watched by the knowledge-shrinkage monitor (monitor.py) -> log -> periodic eval
    (eval.py) -> checkpoint

Everything around the step (processes, model loading, resume, checkpoints, metrics files) is
run.py's; this file is the config, the presets and the step.

What a large N changes (arXiv 2510.01180 Sec. 2, Theorem 1): to first order, one update of the
paper's surrogate (raw rewards) changes the probability mass on correct tokens by two terms that are
never negative (from the sampled correct and incorrect tokens) plus an unsampled coupling term that
can be, whose expectation Σ p²(1 - p)^N falls as N grows (Lemma 2, Corollary 3). The estimators here
subtract a group baseline, and then for one softmax (the theorem's setting) the first-order change
of a group's total correct mass is never negative at any N; what large N still changes is whether
single correct answers that were not sampled lose probability (Fig. 3 (ii)/(iii)), and Fig. 3
compares N at equal steps, N times the samples (at equal samples, under SGD, the simulator's correct
mass is the same at every N). `python simulate.py` makes this concrete (Theorem 1 checked, the
paper's Fig. 3 simulator; docs/theory.md), and the shrinkage monitor (monitor.py: shrink_frac,
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
import contextlib
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import torch
import tyro
from accelerate import PartialState
from tqdm import tqdm

import benchmarks
import eval as evaluation
import monitor
import reward
import rollout
import sandbox
import update
from allocation import ALLOCATIONS, checks as allocation_checks
from checkpoints import checkpoint_folders
from run import (Run, WriteFailure, file_failure, remove_leftovers, resume_changes, saved_config,
                 setup, where_to_resume)
from tasks import InputError

DATA_DIR = Path(__file__).parent / "data"


@dataclass
class Config:
    """Every setting of a run, CPU defaults; presets below are plain overrides. A knob that a
    component's own settings also have (rollout.SamplingParams, update.UpdateConfig,
    reward.VerifyConfig) takes its default from there, so each default is declared once."""

    # ---- run ----
    preset: str = "cpu-demo"
    """named overrides applied before the other flags: cpu-demo, smoke, brorl-paper, prorl-paper,
    brorl-1gpu"""
    output_dir: Annotated[str | None, tyro.conf.arg(
        metavar="DIR", help_behavior_hint="(default: runs/<preset>__<seed>__<unix time>)")] = None
    """where logs and checkpoints go"""
    resume: bool = False
    """continue from the latest checkpoint in --output-dir"""
    init_from: str | None = None
    """start from another run's checkpoint (RUN/checkpoints/step_N): weights, optimizer; own --lr"""
    seed: int = 0
    """seed for data order, sampling and mini-batch splits"""
    device: Literal["auto", "cpu"] = "auto"
    """auto: the GPU accelerate assigns this process when there is one; cpu: never use a GPU"""
    threads: int = 0
    """torch CPU threads (0: torch's default)"""
    mixed_precision: Literal["auto", "no", "bf16"] = "auto"
    """bf16: compute in bf16 over fp32 master weights (always fp32); auto: the launch config's"""
    process_group_timeout_min: float = 60.0
    """minutes a process waits for the others at a collective (a 1.5B save takes long)"""
    # ---- model and data ----
    model: str = "tiny"
    """policy: a save_pretrained directory, a hub name, or 'tiny' (the warmed-up toy model)"""
    model_revision: str | None = None
    """hub revision (branch, tag or commit) when --model is a hub name"""
    train_data: str = str(DATA_DIR / "arith_train.jsonl")
    """training tasks (jsonl with prompt, answer, task)"""
    test_data: str = str(DATA_DIR / "arith_test.jsonl")
    """held-out tasks for the periodic evaluation"""
    chat_template: bool = evaluation.EvalSettings.chat_template
    """wrap prompts in the tokenizer's chat template when it has one"""
    # ---- rollouts (paper Sec. 3: BroRL N=512 x 128 prompts, ProRL N=16 x 512) ----
    n_rollouts: int = rollout.SamplingParams.n
    """N, rollouts per prompt: BroRL scales this to hundreds"""
    prompts_per_step: int = 32
    """prompts sampled per step"""
    # the choices are allocation.ALLOCATIONS's names
    allocation: Literal[tuple(ALLOCATIONS)] = "fixed"
    """fixed: N rollouts per prompt (the paper); knapsack: screen every prompt, then spend the rest
    of prompts_per_step x N where a group most likely becomes informative (N: the mean)"""
    screen_rollouts: int = 4
    """knapsack allocation: rollouts per prompt in the screening pass (part of its group)"""
    allocation_cap: int = 1024
    """knapsack allocation: most rollouts one prompt gets, screening included"""
    allocation_history: bool = False
    """knapsack allocation: also count each prompt's rollouts at its previous visit (Knapsack RL's
    previous-epoch success rate) as evidence beside the screening"""
    temperature: float = rollout.SamplingParams.temperature
    """rollout sampling temperature"""
    top_p: float = rollout.SamplingParams.top_p
    """rollout nucleus sampling mass"""
    max_new_tokens: int = rollout.SamplingParams.max_new_tokens
    """response length limit (tokens)"""
    zero_truncated_reward: bool = False
    """score a response cut at max_new_tokens 0 (ProRLv2's stop-properly penalty)"""
    gen_batch_seqs: int = rollout.SamplingParams.max_batch_seqs
    """most sequences decoded at once (vLLM: max_num_seqs, kept >= N)"""
    engine: Literal["auto", "hf", "vllm"] = "auto"
    """rollouts: hf (transformers), vllm (colocated); auto: vllm when installed with a GPU"""
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """vLLM weight dtype (auto: bfloat16 under bf16 mixed precision, else float32; see tis_cap)"""
    gpu_memory_utilization: float = 0.5
    """vLLM: share of GPU memory for its weights and KV cache (the trainer needs the rest)"""
    vllm_max_model_len: int = 0
    """vLLM: longest prompt + response it must hold (0: the model's context length)"""
    vllm_request_seeds: bool = False
    """vLLM: seed every request (bit-exact resume and sharded eval; slow at large N)"""
    vllm_count_preemptions: bool = False
    """vLLM: log gen_preemptions, to size gen_batch_seqs (its statistics cost CPU per token)"""
    tis_cap: float = update.UpdateConfig.tis_cap
    """truncated importance sampling: token losses times min(π_old/π_sampler, C) (0: off)"""
    # ---- advantages and update ----
    # the choices are update.ADVANTAGES's names
    advantage: Literal[tuple(update.ADVANTAGES)] = "grpo"
    """grpo: group mean/std; dr_grpo: group mean; reinforce_pp_baseline: + batch whitening;
    focal_grpo: grpo x (1 - group success rate), F-GRPO's weight against shrinkage"""
    dynamic_sampling: bool = True
    """drop groups whose N rewards are all equal (zero advantage); the kept fraction is pass_rate"""
    refill_rounds: int = 0
    """DAPO refill: up to this many more rounds of prompts until prompts_per_step are kept"""
    lr: float = 1e-4
    """AdamW learning rate"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    eps_low: float = update.UpdateConfig.eps_low
    """lower clip range ε_low of the PPO ratio"""
    eps_high: float = update.UpdateConfig.eps_high
    """upper clip range ε_high (clip-higher, DAPO)"""
    kl_coef: float = update.UpdateConfig.kl_coef
    """β, weight of the KL penalty to the reference policy (0: no reference model)"""
    kl_estimator: Literal["k1", "k2", "k3"] = update.UpdateConfig.kl_estimator
    """KL penalty of l = log π_θ/π_ref: k1 = l, k2 = l²/2 (ProRLv2), k3 = e^-l - 1 + l (GRPO)"""
    ref_reset_every: int = 0
    """reset the reference policy to the current one every this many steps (ProRL; 0: never)"""
    minibatches: int = update.UpdateConfig.minibatches
    """PPO mini-batches (optimizer steps) per step; the paper keeps this fixed as N grows"""
    micro_batch_tokens: int = update.UpdateConfig.micro_batch_tokens
    """real tokens (prompt + response) per packed forward/backward micro-batch; a longer row goes
    alone (gradient accumulation fills the mini-batch)"""
    logprob_chunk_tokens: int = update.UpdateConfig.logprob_chunk_tokens
    """response tokens per output-layer chunk when computing log-probs"""
    gradient_checkpointing: bool = False
    """recompute the transformer's activations in backward (much less memory for long responses)"""
    checkpoint_every: int = 1
    """with gradient_checkpointing: recompute every k-th decoder layer only, the others keep their
    activations (faster, more memory; bench/RESULTS.md)"""
    compile_layers: bool = False
    """torch.compile each decoder layer (dynamic shapes: fused norms, rotary and MLP); the first
    passes take a minute or more to compile"""
    max_grad_norm: float = update.UpdateConfig.max_grad_norm
    """gradient clipping norm"""
    # ---- loop, eval, checkpoints ----
    total_steps: int = 120
    """RL steps"""
    eval_every: int = 20
    """in-training eval (a cheap proxy) every this many steps, at step 0 and at the end"""
    eval_samples: int = 4
    """samples per test problem; eval_pass1 is their mean reward"""
    eval_temperature: float = 1.0
    """evaluation sampling temperature"""
    eval_top_p: float = 1.0
    """evaluation nucleus sampling mass"""
    eval_max_problems: int = 0
    """evaluate on the first M problems of the test set and of each benchmark (0: all)"""
    eval_benchmarks: tuple[str, ...] = ()
    """benchmarks.py names also scored at every eval (e.g. aime2024 humaneval rg/gcd)"""
    eval_data_dir: str = ""
    """directory of benchmark files in their sources' layouts (eval.py --data-dir)"""
    save_every: int = 1
    """checkpoint every this many steps (1: a killed run loses at most the current step)"""
    keep_checkpoints: int = 2
    """number of most recent checkpoints kept"""
    shrink_monitor_samples: int = 256
    """distinct correct responses re-scored after each update by the shrinkage monitor (0: off)"""
    probe_prompts: int = 0
    """probe-set monitor (Fig. 3 (ii)/(iii)): held-out and training prompts (0: off)"""
    probe_samples: int = 8
    """samples per probe prompt at step 0; the first correct one becomes the prompt's probe"""
    # ---- verifiers (reward.py) ----
    verify_workers: int = evaluation.EvalSettings.verify_workers
    """verifier processes for math / Reasoning Gym, and programs run at once for code"""
    verify_timeout: float = reward.VerifyConfig.timeout
    """limit per distinct math / Reasoning Gym answer, seconds (a timeout scores 0)"""
    code_test_timeout: float = reward.VerifyConfig.test_timeout
    """limit per code test case, seconds (CPU and wall clock)"""
    verify_step_timeout: float = reward.VerifyConfig.step_timeout
    """wall-clock budget for scoring one round of rollouts, shared equally by its prompts: a check
    past its prompt's share scores 0 (verify/over_budget > 0: raise it)"""
    unsafe_no_sandbox: bool = reward.VerifyConfig.unsafe_no_sandbox
    """without bubblewrap, run code tasks' programs under rlimits only (no isolation)"""


PRESETS: dict[str, dict] = {
    "cpu-demo": {},
    "smoke": dict(n_rollouts=16, prompts_per_step=4, total_steps=2, eval_every=2, eval_samples=2,
                  eval_max_problems=32, shrink_monitor_samples=32),
}

# The paper's recipe (arXiv 2510.01180, Sec. 3-4.2): continue RL from the ProRLv2 checkpoint at
# 16K response length, BroRL with N=512 x 128 prompts, the ProRL baseline with N=16 x 512, both with
# the same number of PPO mini-batches per step and η = η_0·sqrt(B_new/B_0). Values the paper does
# not give are marked "open" with the source used instead.
PROMPTS_PRORL, N_PRORL, PROMPTS_BRORL, N_BRORL = 512, 16, 128, 512
LR_PRORL = 2e-6  # open for BroRL (η_0): ProRL v1's constant learning rate
PAPER_RECIPE = dict(
    model="nvidia/Nemotron-Research-Reasoning-Qwen-1.5B",
    model_revision=None,  # must be given: the ProRLv2 commit of the repository (see validate())
    # fp32 master weights (the trainer's only kind: pure-bf16 AdamW steps of lr 2e-6 round away)
    mixed_precision="bf16",
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
    # ProRLv2's runnable configs by BroRL's first author: NeMo-RL docs/guides/prorlv2.md
    # (ratio_clip_max 0.27), OpenRLHF examples/scripts/train_prorlv2_math_hybrid_engine.sh
    # (eps_clip_low_high 0.2 0.27); the ProRLv2 post's prose says 0.28 (DAPO's): the code wins
    eps_low=0.2, eps_high=0.27,
    kl_coef=1e-4,  # open: BroRL gives no β; a small value in the ProRL family's range
    kl_estimator="k2",  # ProRLv2: ½(log ratio)², clamped to [-10, 10]
    ref_reset_every=200,  # ProRLv2: every 200-500 steps
    # open: ProRL v1's 64-prompt mini-batches at the baseline's 512 prompts; BroRL keeps the count
    minibatches=8,
    tis_cap=2.0,  # truncated importance sampling; C=2 as recommended by Yao et al. (2025)
    # 16K response + up to 4K prompt. The engine sleeps during the update: while it samples, the
    # trainer keeps only its shards of weights, AdamW and reference (~4 GB per GPU on 8), so vLLM
    # takes 80% (docs/scaling.md: sizing the KV cache)
    engine="vllm", gpu_memory_utilization=0.8, vllm_max_model_len=20480,
    gen_batch_seqs=1024,
    micro_batch_tokens=32768, logprob_chunk_tokens=4096, gradient_checkpointing=True,
    # In-training eval: a cheap proxy (64 problems per benchmark x 4 samples at the 16K training
    # length) to watch the run; Table 1's protocol (every problem x 16 samples at 32K tokens, hours
    # on 8 GPUs) is `eval.py --suite all` on the saved checkpoints. Sampling as in Table 1: T 0.6,
    # top-p 0.95.
    eval_every=20, eval_samples=4, eval_temperature=0.6, eval_top_p=0.95, eval_max_problems=64,
    eval_benchmarks=("aime2024", "aime2025", "amc2023", "math500", "minerva", "olympiadbench",
                     "humaneval"),
    shrink_monitor_samples=256,
    verify_workers=16,
)
BATCH_RATIO = (N_BRORL * PROMPTS_BRORL) / (N_PRORL * PROMPTS_PRORL)  # B_new / B_0 = 8
PRESETS["brorl-paper"] = dict(PAPER_RECIPE, n_rollouts=N_BRORL, prompts_per_step=PROMPTS_BRORL,
                              total_steps=191, lr=LR_PRORL * math.sqrt(BATCH_RATIO))
# Table 1: +191 BroRL steps vs +535 ProRL steps
PRESETS["prorl-paper"] = dict(PAPER_RECIPE, n_rollouts=N_PRORL, prompts_per_step=PROMPTS_PRORL,
                              total_steps=535, lr=LR_PRORL)
# One 80 GB GPU, `python train_brorl.py --preset brorl-1gpu --model-revision REV`: the recipe with
# BroRL's N=512 over 16 prompts, ProRL's batch B_0 (8,192 samples), so η = η_0 by the square-root
# rule (open: the paper ran 8+ GPUs). vLLM takes 60% of the GPU beside the fp32 weights and AdamW's
# moments (docs/scaling.md); the update's compiled layers, every 2nd checkpointed, over passes of
# 16K tokens are the fastest one H100 measured (bench/RESULTS.md).
PRESETS["brorl-1gpu"] = dict(PAPER_RECIPE, n_rollouts=N_BRORL, prompts_per_step=16, lr=LR_PRORL,
                             total_steps=200, gpu_memory_utilization=0.6, verify_workers=8,
                             micro_batch_tokens=16384, checkpoint_every=2, compile_layers=True)


def component_configs(cfg: Config) -> tuple[rollout.SamplingParams, update.UpdateConfig,
                                             reward.VerifyConfig, evaluation.EvalSettings]:
    """What the rollouts, the update, the verifiers and the in-training eval each take of `cfg`:
    every field of theirs that Config has under the same name, and the others as named here."""
    def take(component, **renamed):
        shared = ({f.name for f in dataclasses.fields(component)}
                  & {f.name for f in dataclasses.fields(Config)})
        return component(**{**{name: getattr(cfg, name) for name in shared}, **renamed})

    verify_cfg = take(reward.VerifyConfig, timeout=cfg.verify_timeout,
                      test_timeout=cfg.code_test_timeout, step_timeout=cfg.verify_step_timeout)
    return (take(rollout.SamplingParams, n=cfg.n_rollouts, max_batch_seqs=cfg.gen_batch_seqs),
            take(update.UpdateConfig),
            verify_cfg,
            take(evaluation.EvalSettings, samples=cfg.eval_samples,
                 temperature=cfg.eval_temperature, top_p=cfg.eval_top_p,
                 max_batch_seqs=cfg.gen_batch_seqs, verify_config=verify_cfg))


def probe_set(run: Run, cfg: Config, sampling: rollout.SamplingParams,
              update_cfg: update.UpdateConfig, verify_cfg: reward.VerifyConfig) -> dict:
    """The run's probe set (monitor.py): drawn at step 0 with probe_samples samples per prompt,
    kept with the run, shared by the branches of an --init-from run."""
    def draw() -> dict:
        return monitor.draw_probes(run.sampler, run.tokenizer, run.train_tasks, run.test_tasks,
                                   cfg.probe_prompts,
                                   dataclasses.replace(sampling, n=cfg.probe_samples),
                                   cfg.chat_template, cfg.seed,
                                   lambda tasks, rollouts: score_rollouts(tasks, rollouts, cfg,
                                                                          verify_cfg))
    source = Path(cfg.init_from).parent.parent / "probes.pt" if cfg.init_from else None
    return monitor.load_or_draw_probes(run.output_dir / "probes.pt", source, draw, run.policy,
                                       update_cfg, run.main_process,
                                       run.accelerator.wait_for_everyone)


# ---- the step, in call order ---------------------------------------------------------------------


@dataclass
class Groups:
    """One step's rollouts on this process and their rewards, over every dynamic-sampling round."""

    tasks: list[dict]  # this process's G prompts' tasks
    rollouts: rollout.Rollouts  # [S rows]: row s answers tasks[rollouts.group[s]]
    rewards: torch.Tensor  # [S] verifiable rewards
    rounds: int  # generation rounds (1 + refills)
    gen_time: float  # seconds spent generating
    prompts: set[str]  # every prompt the step drew, on all processes (the probe monitor's split)
    preemptions: int  # vLLM's preemptions over the step's rounds (counted with the option)
    verify_stats: reward.VerifyStats


# step_generator's streams: the first round's rollouts (with --allocation knapsack the screening,
# then the allocated rollouts); the mini-batch split (merge_duplicates records it in the batch, and
# the update follows the record); the r-th refill's rollouts are stream SPLIT + r
ROLLOUTS, SPLIT = 0, 1


def step_generator(cfg: Config, step: int, stream: int, process: int = 0) -> torch.Generator:
    """A fresh generator per (step, stream, process): a resumed run draws exactly what an
    uninterrupted one would."""
    seed = cfg.seed * 1_000_003 + step * 17 + stream + process * 1_000_000_007
    return torch.Generator().manual_seed(seed)


def next_prompts(n_tasks: int, position: int, count: int, seed: int) -> list[int]:
    """The task indices `position .. position + count` of an endless stream of seeded per-epoch
    shuffles of `n_tasks` tasks."""
    orders: dict[int, torch.Tensor] = {}
    batch = []
    for p in range(position, position + count):
        epoch, index = divmod(p, n_tasks)
        if epoch not in orders:
            orders[epoch] = torch.randperm(n_tasks,
                                           generator=torch.Generator().manual_seed(seed + epoch))
        batch.append(int(orders[epoch][index]))
    return batch


def score_rollouts(tasks: list[dict], rollouts: rollout.Rollouts, cfg: Config, verify_cfg,
                   stats: reward.VerifyStats | None = None) -> torch.Tensor:
    """The verifiable reward of every rollout [S] (rollout s answers tasks[rollouts.group[s]])."""
    groups = rollouts.group.tolist()
    items = [(tasks[g]["task"], text, tasks[g]["answer"])
             for g, text in zip(groups, rollouts.texts)]
    rewards = torch.tensor(reward.score_batch(items, cfg.verify_workers, verify_cfg, stats, groups))
    # an unfinished response earns nothing, even with a \boxed{} answer
    if cfg.zero_truncated_reward:
        rewards[rollouts.truncated] = 0.0
    return rewards


def group_extremes(rewards: torch.Tensor, group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The lowest and the highest reward of each group, [G] each (rollout s is in group[s])."""
    size = len(torch.bincount(group))
    lowest = rewards.new_zeros(size).scatter_reduce(0, group, rewards, "amin", include_self=False)
    highest = rewards.new_zeros(size).scatter_reduce(0, group, rewards, "amax", include_self=False)
    return lowest, highest


def informative_groups(rewards: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """[G] bool: groups whose rewards are not all equal (some right, some wrong), the ones with a
    learning signal."""
    lowest, highest = group_extremes(rewards, group)
    return highest > lowest


def sample_groups(run: Run, cfg: Config, step: int, sampling: rollout.SamplingParams,
                  verify_cfg: reward.VerifyConfig) -> Groups:
    """N rollouts for each of this process's share of `prompts_per_step` prompts (paper Sec. 3:
    BroRL's N is in the hundreds), or as many in all as spread by `run.allocation`
    (allocation.py); then their verifiable rewards (each distinct answer checked once). With
    dynamic sampling and refill_rounds, more rounds of prompts are drawn until `prompts_per_step`
    informative groups were found over all processes (DAPO)."""
    verify_stats, prompts, tasks, task_ids = reward.VerifyStats(), set(), [], []
    round_rollouts, round_rewards, round_offsets = [], [], []
    gen_time, preemptions, informative_found = 0.0, 0, 0.0

    def sample(prompt_ids, round_tasks, generator, counts):
        nonlocal gen_time, preemptions
        start = time.time()
        rollouts = rollout.generate(run.sampler, run.tokenizer, prompt_ids, sampling, generator,
                                    counts)
        if run.engine is not None and run.engine.preemptions is not None:
            preemptions += run.engine.preemptions
        gen_time += time.time() - start
        return rollouts, score_rollouts(round_tasks, rollouts, cfg, verify_cfg, verify_stats)

    for refill in range(1 + cfg.refill_rounds):
        drawn = next_prompts(len(run.train_tasks), run.data_position, cfg.prompts_per_step,
                             cfg.seed)
        prompts.update(run.train_tasks[i]["prompt"] for i in drawn)
        round_ids = drawn[run.rank :: run.processes]  # this process's share
        round_tasks = [run.train_tasks[i] for i in round_ids]
        round_offsets.append(len(tasks))  # group ids index into tasks
        tasks += round_tasks
        task_ids += round_ids
        run.data_position += cfg.prompts_per_step
        prompt_ids = rollout.encode_prompts(run.tokenizer, [t["prompt"] for t in round_tasks],
                                            cfg.chat_template)
        generator = step_generator(cfg, step, ROLLOUTS if refill == 0 else SPLIT + refill, run.rank)
        # fixed N: one sample(None), N each; knapsack: a screening, then the rest of the budget
        rollouts, rewards = run.allocation.sample(
            lambda counts: sample(prompt_ids, round_tasks, generator, counts), round_ids)
        round_rollouts.append(rollouts)
        round_rewards.append(rewards)
        found = informative_groups(rewards, rollouts.group).sum().float()
        informative_found += float(update.all_sum(found))
        if not cfg.dynamic_sampling or informative_found >= cfg.prompts_per_step:
            break
    rollouts = (rollout.concat_rollouts(round_rollouts, run.tokenizer.pad_token_id, round_offsets)
                if len(round_rollouts) > 1 else round_rollouts[0])
    rewards = torch.cat(round_rewards)
    run.allocation.record(task_ids, rewards, rollouts.group)
    return Groups(tasks, rollouts, rewards, len(round_rollouts), gen_time, prompts, preemptions,
                  verify_stats)


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


def keep_target_groups(informative: torch.Tensor, target: int, rank: int, processes: int
                       ) -> torch.Tensor:
    """[G] bool: this process's share of exactly `target` informative groups over all processes, as
    DAPO and verl keep a fixed batch size after a dynamic-sampling refill. Groups are in collection
    order (round by round), so the first ones collected are kept and the surplus of the last round
    is dropped."""
    counts = torch.zeros(processes)
    counts[rank] = informative.sum()
    quota = kept_group_quotas([int(c) for c in update.all_sum(counts).tolist()], target)[rank]
    keep = informative.clone()
    keep[informative.nonzero().squeeze(-1)[quota:]] = False
    return keep


def rows_batch(rollouts: rollout.Rollouts, rows: list[int], advantages: torch.Tensor | None = None,
               weights: torch.Tensor | None = None) -> update.TrainBatch:
    """Some rows of the step's rollouts as the update's batch (advantages 0 when not given)."""
    advantages = torch.zeros(len(rows)) if advantages is None else advantages
    return update.TrainBatch(rollouts.prompt_ids[rows], rollouts.prompt_mask[rows],
                             rollouts.response_ids[rows], rollouts.response_mask[rows], advantages,
                             weights, rollouts.logprobs[rows])


def policy_update(run: Run, batch: update.TrainBatch, update_cfg: update.UpdateConfig) -> dict:
    """The clipped policy-gradient step against π_old (and π_ref if β > 0), with how far the
    sampler's log-probs were from the trainer's (no rows on any process: no passes, zero stats)."""
    # every process gets about the same compute in each mini-batch (exact; FSDP runs in lockstep)
    batch = update.deal_rows(batch, run.accelerator.unwrap_model(run.policy).linear_cost)
    old_logprobs = update.batch_logprobs(run.policy, batch, update_cfg)
    mismatch = update.sampler_mismatch(old_logprobs, batch.sampler_logprobs, batch.response_mask)
    ref_logprobs = (update.batch_logprobs(run.ref_policy, batch, update_cfg)
                    if run.ref_policy is not None else None)
    stats = update.ppo_update(run.policy, run.optimizer, batch, old_logprobs, update_cfg,
                              ref_logprobs)
    return {**stats, **mismatch}


# summed over processes in the logs, every other scalar is averaged
THROUGHPUTS = ("samples_per_s", "gen_samples_per_s", "gen_tokens_per_s", "kept_groups",
               "gen_preemptions", "rollouts")


def step_metrics(groups: Groups, informative: torch.Tensor, kept: torch.Tensor,
                 batch: update.TrainBatch, n_kept_rows: int, update_stats: dict, shrink: dict,
                 n_per_prompt: dict, step_time: float) -> dict[str, float]:
    """The step's row of metrics.jsonl (this process's values, but for `n_per_prompt`, the
    allocation's: over every process)."""
    rewards, rollouts = groups.rewards, groups.rollouts
    lengths = rollouts.response_mask.sum(-1).float()
    lowest, highest = group_extremes(rewards, rollouts.group)
    return {
        "reward_mean": float(rewards.mean()),
        # the paper's dynamic-sampling pass rate (Table 2): groups with some right, some wrong
        "pass_rate": float(informative.float().mean()),
        "solve_all_frac": float((lowest == 1).float().mean()),
        "solve_none_frac": float((highest == 0).float().mean()),
        "rollouts": rewards.numel(),  # the step's sample budget (summed over processes)
        **n_per_prompt,  # rollouts given per prompt
        "samples_per_s": rewards.numel() / step_time,
        "gen_samples_per_s": rewards.numel() / groups.gen_time,
        "response_len": float(lengths.mean()),
        "truncated_frac": float(rollouts.truncated.float().mean()),
        "gen_tokens_per_s": float(lengths.sum()) / groups.gen_time,
        **monitor.correct_fraction_histogram(rewards, rollouts.group),
        **shrink,
        "distinct_frac": len(batch.advantages) / max(n_kept_rows, 1),
        "gen_rounds": groups.rounds,
        "gen_preemptions": groups.preemptions,
        "kept_groups": float(kept.sum()),
        "step_time": step_time,
        **update_stats,
        **groups.verify_stats.as_log(),
    }


def evaluate(run: Run, cfg: Config, settings: evaluation.EvalSettings, probes: dict | None,
             update_cfg: update.UpdateConfig, step: int, sampled_prompts: set[str], say) -> None:
    """The held-out task file plus eval_benchmarks, scored by eval.py's code (every process scores
    its share of the problems), and the probe set re-scored; the final eval also writes eval.json
    and its per-sample audit file, the layout `python eval.py --out` writes."""
    final = step == cfg.total_steps
    samples_path = run.output_dir / "eval.samples.jsonl" if final else None
    if final and run.main_process:
        samples_path.unlink(missing_ok=True)  # a resumed run's final eval is a new one
    selected = benchmarks.select(names=list(cfg.eval_benchmarks)) if cfg.eval_benchmarks else []
    data_dir = Path(cfg.eval_data_dir) if cfg.eval_data_dir else None
    held_out_tasks = [{**t, "id": str(i)} for i, t in enumerate(run.test_tasks)]
    shard = evaluation.Shard.of_processes(run.accelerator)  # this process's share
    result = evaluation.evaluate_suite(run.sampler, run.tokenizer, selected, settings, data_dir,
                                       cfg.eval_max_problems, samples_path,
                                       extra={"test_data": held_out_tasks},
                                       progress=lambda message: None, shard=shard)
    run.log(step, evaluation.training_scalars(result), prefix="eval")
    if final:
        result["model"] = str(run.output_dir)
        run.on_main(lambda: (run.output_dir / "eval.json").write_text(json.dumps(result, indent=2)))
    if probes is not None:  # every process: the passes run in lockstep
        now = monitor.probe_logprobs(run.policy, probes, update_cfg)
        run.log(step, monitor.probe_report(probes, now, sampled_prompts), prefix="eval")
    if run.main_process:
        protocol = evaluation.sampling_protocol(dataclasses.asdict(settings))
        say(f"step {step}: eval_pass1 {result['benchmarks']['test_data']['pass1']:.3f} "
            f"({protocol})")


def train(cfg: Config) -> Path:
    """Run (or resume) training; returns the output directory. Under `accelerate launch`, every
    process runs this."""
    run = setup(cfg)  # TRY NOT TO MODIFY: processes, data, policy, optimizer, engine, resume
    sampling, update_cfg, verify_cfg, eval_settings = component_configs(cfg)
    if run.main_process:
        print(evaluation.training_protocol(cfg.eval_max_problems, cfg.eval_samples,
                                           cfg.max_new_tokens))
    probes = probe_set(run, cfg, sampling, update_cfg, verify_cfg) if cfg.probe_prompts else None
    if run.step == 0:
        evaluate(run, cfg, eval_settings, probes, update_cfg, 0, set(), print)
    run.accelerator.wait_for_everyone()

    progress = tqdm(range(run.step + 1, cfg.total_steps + 1), desc="BroRL", initial=run.step,
                    total=cfg.total_steps, disable=not run.main_process)
    for step in progress:
        step_start = time.time()
        # ALGO LOGIC: N rollouts per prompt (or as allocated) and their rewards; dynamic sampling
        # keeps groups with 0 < #correct < N (all-equal groups carry no signal), exactly
        # prompts_per_step of them
        groups = sample_groups(run, cfg, step, sampling, verify_cfg)
        run.engine_sleep()  # vLLM hands its GPU memory to the update
        group = groups.rollouts.group  # [S]: the prompt of each rollout
        informative = informative_groups(groups.rewards, group)
        kept = (keep_target_groups(informative, cfg.prompts_per_step, run.rank, run.processes)
                if cfg.dynamic_sampling else torch.ones_like(informative))

        # ALGO LOGIC: group-relative advantages of the kept groups' rows; identical rows merged
        # within each mini-batch (split first, as the update will split them)
        kept_rows = kept[group].nonzero().squeeze(-1).tolist()  # rows of groups.rollouts
        advantages = update.ADVANTAGES[cfg.advantage](groups.rewards[kept_rows], group[kept_rows])
        weights = update.prompt_weights(group, cfg.n_rollouts)[kept_rows]
        batch = update.merge_duplicates(rows_batch(groups.rollouts, kept_rows, advantages, weights),
                                        cfg.minibatches, step_generator(cfg, step, SPLIT, run.rank))

        # ALGO LOGIC: the clipped policy-gradient step, watched by the knowledge-shrinkage monitor
        # (did any correct response lose probability?)
        watch = None
        if cfg.shrink_monitor_samples:  # 0: no passes, and no shrink_* metrics rather than zeros
            rows = monitor.monitor_rows(groups.rollouts, groups.rewards, cfg.shrink_monitor_samples)
            watched = rows_batch(groups.rollouts, rows)
            watch = monitor.ShrinkageWatch(run.policy, watched, update_cfg)
        update_stats = policy_update(run, batch, update_cfg)
        shrink = watch.after(run.policy) if watch else {}
        if run.ref_policy is not None and cfg.ref_reset_every and step % cfg.ref_reset_every == 0:
            # ProRL's reference reset; the optimizer state is kept
            run.reset_reference(step)
        run.engine_wake()  # vLLM loads the updated weights: the next rollouts sample them

        # TRY NOT TO MODIFY: logging, evaluation, checkpoint
        scalars = step_metrics(groups, informative, kept, batch, len(kept_rows), update_stats,
                               shrink, run.allocation.metrics(group, kept),
                               time.time() - step_start)
        scalars = run.mean_over_processes(scalars, summed=THROUGHPUTS)
        run.log(step, scalars, prefix="train")
        progress.set_postfix(reward=f"{scalars['reward_mean']:.3f}",
                             pass_rate=f"{scalars['pass_rate']:.2f}")
        if step % cfg.eval_every == 0 or step == cfg.total_steps:
            evaluate(run, cfg, eval_settings, probes, update_cfg, step, groups.prompts,
                     progress.write)
        run.accelerator.wait_for_everyone()
        if step % cfg.save_every == 0 or step == cfg.total_steps:
            run.save(step, cfg)
    run.close()
    return run.output_dir


# ---- the command line: presets and flags into a checked Config, --resume's own config.json ---


def validate(cfg: Config) -> None:
    """One clear line per bad value, before any work starts."""
    # within float32's range, where the update computes
    not_finite = [f"{name} {value}" for name, value in dataclasses.asdict(cfg).items()
                  if isinstance(value, float) and not abs(value) <= torch.finfo().max]
    too_large = [f"{name} {value}" for name, value in dataclasses.asdict(cfg).items()
                 if type(value) is int and not -2**63 <= value < 2**63]
    checks = [
        (not not_finite, f"settings must be finite float32 numbers, got {', '.join(not_finite)}"),
        (not too_large, f"whole-number settings must be below 2^63, got {', '.join(too_large)}"),
        (cfg.preset in PRESETS, f"unknown preset '{cfg.preset}' (known: {', '.join(PRESETS)})"),
        (cfg.n_rollouts >= 2,
         f"n_rollouts must be >= 2 (a group baseline needs two rollouts), got {cfg.n_rollouts}"),
        (cfg.prompts_per_step >= 1, f"prompts_per_step must be >= 1, got {cfg.prompts_per_step}"),
        (cfg.n_rollouts * cfg.prompts_per_step <= 2**24,
         f"a step of {cfg.n_rollouts} x {cfg.prompts_per_step} samples is over 2^24 (the paper's "
         "is 512 x 128 = 2^16)"),
        (1 <= cfg.minibatches <= cfg.n_rollouts * cfg.prompts_per_step,
         f"minibatches must be in [1, the {cfg.n_rollouts * cfg.prompts_per_step} rollouts of a "
         f"step], got {cfg.minibatches}"),
        (cfg.checkpoint_every >= 1, f"checkpoint_every must be >= 1, got {cfg.checkpoint_every}"),
        (0 <= cfg.refill_rounds <= 8, f"refill_rounds must be in [0, 8], got {cfg.refill_rounds}"),
        (0 <= cfg.eps_low < 1, f"eps_low must be in [0, 1), got {cfg.eps_low}"),
        (cfg.eps_high >= 0, f"eps_high must be >= 0, got {cfg.eps_high}"),
        (cfg.temperature >= rollout.MIN_TEMPERATURE
         and cfg.eval_temperature >= rollout.MIN_TEMPERATURE,
         f"temperatures must be >= {rollout.MIN_TEMPERATURE} (vLLM samples any lower one at "
         f"{rollout.MIN_TEMPERATURE})"),
        (0 < cfg.top_p <= 1 and 0 < cfg.eval_top_p <= 1, "top_p values must be in (0, 1]"),
        (cfg.lr > 0, f"lr must be > 0, got {cfg.lr}"),
        (cfg.weight_decay >= 0, f"weight_decay must be >= 0, got {cfg.weight_decay}"),
        (cfg.max_grad_norm > 0, f"max_grad_norm must be > 0, got {cfg.max_grad_norm}"),
        (0 <= cfg.seed < 2**32, f"seed must be in [0, 2^32), got {cfg.seed}"),
        (0 <= cfg.threads <= 2**16,
         f"threads must be in [0, 2^16] (0: torch's default), got {cfg.threads}"),
        (min(cfg.ref_reset_every, cfg.shrink_monitor_samples, cfg.eval_max_problems) >= 0,
         "ref_reset_every, shrink_monitor_samples and eval_max_problems must be >= 0 (0: off, "
         "off, all)"),
        (cfg.kl_coef >= 0, f"kl_coef must be >= 0, got {cfg.kl_coef}"),
        (0 < cfg.gpu_memory_utilization <= 1,
         f"gpu_memory_utilization must be in (0, 1], got {cfg.gpu_memory_utilization}"),
        (cfg.tis_cap == 0 or cfg.tis_cap >= 1,
         f"tis_cap must be 0 (off) or >= 1, got {cfg.tis_cap}"),
        (cfg.vllm_max_model_len >= 0,
         f"vllm_max_model_len must be >= 0, got {cfg.vllm_max_model_len}"),
        (min(cfg.max_new_tokens, cfg.gen_batch_seqs, cfg.micro_batch_tokens,
             cfg.logprob_chunk_tokens) >= 1,
         "max_new_tokens, gen_batch_seqs, micro_batch_tokens and logprob_chunk_tokens must be "
         ">= 1"),
        (cfg.total_steps >= 0 and min(cfg.eval_every, cfg.save_every, cfg.keep_checkpoints) >= 1,
         "total_steps must be >= 0; eval_every, save_every and keep_checkpoints >= 1"),
        (cfg.eval_samples >= 1, f"eval_samples must be >= 1, got {cfg.eval_samples}"),
        (1 <= cfg.verify_workers < sandbox.PROBE_SLOT,
         f"verify_workers must be in [1, {sandbox.PROBE_SLOT}), got {cfg.verify_workers}"),
        (0 < cfg.process_group_timeout_min <= 60 * 24 * 7,
         f"process_group_timeout_min must be in (0, a week], got {cfg.process_group_timeout_min}"),
        (min(cfg.verify_timeout, cfg.code_test_timeout) > 0 and cfg.verify_step_timeout >= 1,
         "verify_timeout and code_test_timeout must be > 0, verify_step_timeout >= 1 (seconds; "
         "checks past it score 0)"),
        (not cfg.resume or cfg.output_dir, "--resume needs --output-dir (the run to continue)"),
        (cfg.output_dir != "", "--output-dir must not be empty (it would be this folder)"),
        (not cfg.eval_data_dir or Path(cfg.eval_data_dir).is_dir(),
         f"--eval-data-dir is not a folder: {cfg.eval_data_dir}"),
        (cfg.probe_prompts >= 0 and cfg.probe_samples >= 1,
         "probe_prompts must be >= 0 and probe_samples >= 1"),
        (not cfg.init_from or (Path(cfg.init_from) / "trainer_state.pt").is_file(),
         "--init-from needs a complete checkpoint folder (with trainer_state.pt), "
         f"e.g. RUN/checkpoints/step_000150: {cfg.init_from}"),
        (cfg.model != PAPER_RECIPE["model"] or cfg.model_revision,
         f"--model-revision is required with {PAPER_RECIPE['model']}: the paper starts from its "
         "ProRLv2 commit, and the repository's main branch later received the BroRL checkpoint "
         "(see docs/scaling.md)"),
        *allocation_checks(cfg),
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)
    if cfg.eval_benchmarks:
        benchmarks.select(names=list(cfg.eval_benchmarks))
    if cfg.model != "tiny":
        rollout.check_model_path(cfg.model)
    for path in (cfg.train_data, cfg.test_data):
        if not Path(path).is_file():
            paper_mix = Path(path).name.startswith("paper_mix")
            hint = " (build it: python data/make_paper_mix.py)" if paper_mix else ""
            raise InputError(f"data file not found: {path}{hint}")


# --help's description: the docstring's first line and its commands (the rest is for readers)
HELP = "\n\n".join([__doc__.splitlines()[0],
                     *[p for p in __doc__.split("\n\n") if p.startswith("    python")],
                     "The step, the theory and the options: docs/brorl.md, docs/theory.md."])


def parse_config(argv: list[str] | None = None) -> Config:
    """`--preset NAME` picks the defaults; every other flag overrides them. With --resume, the run's
    own config.json is the default instead, and once the run has a checkpoint a flag may change it
    only if it is in RESUME_MAY_CHANGE: resuming without retyping the flags continues the same run,
    never another preset's."""
    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default=Config.preset)
    pre.add_argument("--output-dir", "--output_dir")
    pre.add_argument("--resume", action="store_true")
    pre.add_argument("--dtype")
    known = pre.parse_known_args(argv)[0]
    if known.dtype:
        raise InputError("--dtype: the trainer keeps fp32 master weights (AdamW's small steps "
                         "round away in bf16); compute in bf16 with --mixed-precision bf16, "
                         "sample in bf16 with --vllm-dtype bfloat16")
    saved = (saved_config(Path(known.output_dir), Config) if known.resume and known.output_dir
             else None)
    if saved is None and known.preset not in PRESETS:
        raise InputError(f"unknown preset '{known.preset}' (known: {', '.join(PRESETS)})")
    defaults = saved or dataclasses.replace(Config(preset=known.preset), **PRESETS[known.preset])
    cfg = tyro.cli(Config, default=defaults, args=argv, description=HELP)
    if saved is not None and checkpoint_folders(Path(known.output_dir)):  # a run to continue
        refused = resume_changes(saved, cfg)
        if refused:
            raise InputError(f"--resume continues the run in {known.output_dir} with its "
                             f"config.json, and these flags change what it is: "
                             f"{'; '.join(refused)} (drop them, or start a new --output-dir)")
    validate(cfg)
    # named here, so config.json and an interrupted run's message name it
    if cfg.output_dir is None:
        cfg = dataclasses.replace(cfg,
                                  output_dir=f"runs/{cfg.preset}__{cfg.seed}__{int(time.time())}")
    return cfg


def main() -> None:
    cfg = None
    try:
        cfg = parse_config()
        output_dir = train(cfg)
    except (InputError, rollout.EngineError, sandbox.SandboxUnavailable) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit(f"\ninterrupted: {where_to_resume(cfg and cfg.output_dir)}")
    except FloatingPointError as e:  # nothing of this step was saved
        sys.exit(f"error: {e} (a lower --lr or --max-grad-norm? a resume keeps the run's; "
                 "--init-from a checkpoint starts a new run with others); "
                 f"{where_to_resume(cfg and cfg.output_dir)}")
    except (OSError, RuntimeError, WriteFailure) as e:
        failure = str(e) if isinstance(e, WriteFailure) else file_failure(e)
        if failure is None:
            raise
        if cfg is not None and cfg.output_dir and PartialState().is_main_process:
            # the half-written checkpoint: free its space now (unless the folder is what failed);
            # the main process alone, which holds the folder: another may still be writing into it
            with contextlib.suppress(OSError):
                remove_leftovers(Path(cfg.output_dir))
        sys.exit(f"error: {failure}; {where_to_resume(cfg and cfg.output_dir)}")
    if PartialState().is_main_process:
        print(f"done: {output_dir}/metrics.jsonl, checkpoints in {output_dir}/checkpoints, "
              f"curves: tensorboard --logdir {output_dir}")


if __name__ == "__main__":
    main()
