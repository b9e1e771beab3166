"""TRY NOT TO MODIFY: the plumbing of a training run, kept out of the step in train_brorl.py.

- `setup(cfg) -> Run`: the process group, the run folder (locked), the data, the policy (and the
  reference policy for the KL term), the optimizer, the rollout engine, and where the run starts:
  step 0, a resumed checkpoint (bit-identical continuation: every process's RNG, the data position,
  the optimizer) or another run's checkpoint (--init-from);
- the run folder: config.json and the rules for resuming, atomic checkpoints (written to a temp
  folder, fsynced, renamed; pruned by rename), metrics.jsonl and tensorboard (`MetricsLog`);
- launch checks and the one-line failures `main()` prints (a full disk, a killed run).

Under `accelerate launch` every process runs all of this; only the main process writes files.
"""

import contextlib
import copy
import dataclasses
import errno
import fcntl
import gc
import io
import itertools
import json
import math
import os
import random
import shutil
import stat
import types
import typing
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, InitProcessGroupKwargs, gather_object
from accelerate.utils import load as accelerate_load
from accelerate.utils.constants import RNG_STATE_NAME
from torch.utils.tensorboard import SummaryWriter

import benchmarks
import reward
import rollout
import update
from allocation import ALLOCATIONS, Fixed
from checkpoints import (CHECKPOINT, DIGEST_MAX_BYTES, checkpoint_folders, checkpoint_problem,
                         file_digest, latest_checkpoint, read_trainer_state)
from tasks import InputError, check_answers, error_line, first_of, load_tasks
from tiny_model import ensure_tiny_model


@dataclass
class Run:
    """What `setup` builds for the step: every field is this process's."""

    accelerator: Accelerator
    output_dir: Path
    train_tasks: list[dict]
    test_tasks: list[dict]
    tokenizer: object
    policy: torch.nn.Module  # an update.Policy, prepared (DDP/FSDP-wrapped under accelerate launch)
    ref_policy: torch.nn.Module | None  # π_ref of the KL term (kl_coef > 0)
    optimizer: torch.optim.Optimizer
    engine: rollout.VLLMEngine | None  # None: the hf engine samples from the policy itself
    step: int  # the last step done: 0, or the resumed checkpoint's
    data_position: int  # how many training prompts the run has drawn so far
    metrics: "MetricsLog | None"  # the main process's; None on the others
    allocation: Fixed  # how many rollouts each prompt gets (allocation.ALLOCATIONS, Fixed's kinds)
    # FSDP2 with the hf engine: a whole (unsharded) copy of the model that samples, refreshed from
    # the shards after every update (like a vLLM engine's weights); None otherwise
    hf_sampler: torch.nn.Module | None = None
    reference_step: int = 0  # π_ref is the policy of this step (its last reset; 0: the start)
    folder_lock: io.TextIOBase | None = None  # the main process's lock_run_folder, held to the end

    @property
    def sharded(self) -> bool:
        return is_sharded(self.policy)

    @property
    def main_process(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def processes(self) -> int:
        return self.accelerator.num_processes

    @property
    def sampler(self):
        """What rollouts and evals generate with: the vLLM engine, or the policy's own model."""
        return self.engine or self.hf_sampler or self.accelerator.unwrap_model(self.policy).model

    def engine_sleep(self) -> None:
        """Hand the GPU memory of the vLLM engine to the update."""
        if self.engine is not None:
            self.engine.sleep()

    def engine_wake(self) -> None:
        """Load the updated weights into the vLLM engine: the next rollouts sample the new
        policy."""
        if self.engine is not None:
            if self.sharded:
                reshard(self.policy)
            self.engine.wake_up(self.accelerator.unwrap_model(self.policy).model)
        if self.hf_sampler is not None:
            copy_full_weights(self.policy, self.hf_sampler)

    def reset_reference(self, step: int) -> None:
        """π_ref <- π_θ (ProRL's reference reset), shard by shard under FSDP2, kept on disk once
        (reference/step_N) for the checkpoints that follow."""
        if self.sharded:
            reshard(self.policy)
            reshard(self.ref_policy)
        with torch.no_grad():
            for ref, param in zip(self.ref_policy.parameters(),
                                  self.accelerator.unwrap_model(self.policy).parameters(),
                                  strict=True):
                ref.copy_(param)
        save_reference(self.output_dir, step, self.ref_policy, self.accelerator)
        self.reference_step = step

    def mean_over_processes(self, scalars: dict, summed: tuple[str, ...]) -> dict:
        """Each scalar's mean over processes (equal shares of prompts), the `summed` ones' sum."""
        if self.processes == 1:
            return scalars
        values = torch.tensor(list(scalars.values()), dtype=torch.float64,
                              device=self.accelerator.device)
        means = dict(zip(scalars, self.accelerator.reduce(values, "mean").cpu().tolist()))
        return {key: value * self.processes if key in summed else value
                for key, value in means.items()}

    def log(self, step: int, scalars: dict, prefix: str) -> None:
        """A row of metrics.jsonl and tensorboard, which the main process writes. Every process
        calls this: a write that fails stops them all with its line."""
        self.on_main(lambda: self.metrics.log(step, scalars, prefix))

    def on_main(self, write: Callable[[], object]) -> None:
        """`write` (of the run's files) on the main process; every process calls this, and a write
        that fails stops them all with its line."""
        with refused_together(self.accelerator, WriteFailure):
            if self.main_process:
                write()

    def save(self, step: int, cfg) -> None:
        """An atomic checkpoint of this step (every process calls this)."""
        trainer_state = {"step": step, "data_position": self.data_position,
                         "config": dataclasses.asdict(cfg), "reference_step": self.reference_step,
                         "allocation": self.allocation.state_dict()}
        sharded = sharded_state(self.policy, self.optimizer) if self.sharded else None
        save_checkpoint(self.output_dir, step, self.accelerator, self.policy, self.tokenizer,
                        trainer_state, cfg.keep_checkpoints, sharded)
        if self.main_process and self.ref_policy is not None:
            prune_references(self.output_dir)

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self.engine is not None:
            # before the process group goes: vLLM tears down its own groups first
            self.engine.close()
            # vLLM's constructor keeps the frames that called it alive (from outside Python's gc),
            # and with them load_run's locals: the prepared policy among them
            clear_finished_frames(load_run.__code__)
        policy = weakref.ref(self.policy)
        self.policy = self.ref_policy = self.hf_sampler = self.optimizer = None  # the run ends
        end_process_group(self.accelerator, policy)
        if self.folder_lock is not None:
            self.folder_lock.close()


def clear_finished_frames(code: types.CodeType) -> None:
    """Drop the locals of every finished frame of `code` that something still holds."""
    for obj in gc.get_objects():
        if type(obj) is types.FrameType and obj.f_code is code:  # no attribute lookups
            obj.clear()


def end_process_group(accelerator: Accelerator, policy: weakref.ref) -> None:
    """Destroy the process group once the prepared policy is gone (`policy`: a weak reference, the
    strong ones dropped). A DDP module's reducer holds the group; freed after the group left
    torch's registry, it would destroy the group holding the GIL and wait for gloo's worker
    threads, one of which may wait for the GIL to free its last collective: a hang at exit. Freed
    last from the registry, the group goes through torch's destructor that releases the GIL."""
    accelerator.free_memory()  # accelerate's references, and reference cycles (gc)
    if isinstance(policy(), torch.nn.parallel.DistributedDataParallel):
        raise RuntimeError("end_process_group: the DDP policy is still referenced; freed after "
                           "the process group, it can hang the process at exit")
    accelerator.end_training()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(cfg) -> Run:
    """Everything before the first step, for a train_brorl.Config: the process group, the run
    folder (locked), then `load_run`. A bad launch, folder, data file or model is refused in one
    line before anything large is loaded, and a folder made for this run is removed again."""
    if cfg.device == "auto":
        rollout.check_gpus_usable()
    process_group = InitProcessGroupKwargs(timeout=timedelta(minutes=cfg.process_group_timeout_min))
    # the trainer builds the FSDP2 mesh of a parallelism_config itself (fsdp_mesh): accelerate's own
    # refuses CPU processes
    os.environ.pop("ACCELERATE_USE_PARALLELISM_CONFIG", None)
    # (else no process group on CPU)
    accelerator = Accelerator(cpu=cfg.device == "cpu" or not torch.cuda.is_available(),
                              mixed_precision=None if cfg.mixed_precision == "auto"
                              else cfg.mixed_precision, kwargs_handlers=[process_group])
    main_process, processes = accelerator.is_main_process, accelerator.num_processes
    check_launch(accelerator.distributed_type, processes)
    output_dir = Path(cfg.output_dir)
    new_folder = not output_dir.exists()
    folder_lock = None
    with refused_together(accelerator):
        if main_process:
            check_output_dir(output_dir)
            folder_lock = lock_run_folder(output_dir)  # before anything in it is removed or written
            remove_leftovers(output_dir)
    try:
        return load_run(cfg, accelerator, folder_lock)
    except BaseException:
        if new_folder and folder_lock is not None:
            remove_if_empty(output_dir)
        raise


class WriteFailure(Exception):
    """A file of the run that some process could not write, in one line (main() adds where the run
    resumes from)."""


def one_line(e: InputError | OSError) -> str:
    """A refusal's line: bad input, or a file of the run that cannot be read or written."""
    return str(e) if isinstance(e, InputError) else file_failure(e) or f"{e.strerror}: {e.filename}"


@contextlib.contextmanager
def refused_together(accelerator: Accelerator, error: type[Exception] = InputError):
    """Every process stops with one line (as `error`) when the block refuses (InputError, OSError,
    a file torch could not write) on any (the first process's line): a process stopping alone
    would leave the others to die in their next collective. Every process runs the block's end,
    which is a barrier."""
    refusal = None
    try:
        yield
    except (InputError, OSError) as e:
        refusal = one_line(e)
    except BaseException as e:  # a file a library could not write (file_failure), else not ours
        refusal = file_failure(e)
        if refusal is None:
            raise
    if accelerator.num_processes > 1:
        refusal = next(filter(None, gather_object([refusal])), None)
    if refusal:
        raise error(refusal)


def remove_if_empty(output_dir: Path) -> None:
    """Remove a run folder holding nothing but its lock."""
    if [path.name for path in output_dir.iterdir()] == [".lock"]:
        (output_dir / ".lock").unlink()
        output_dir.rmdir()


def check_sharding(checkpoint: Path, sharded: bool, named: str, advice: str) -> None:
    """A checkpoint loads into a run sharded as the one that saved it: FSDP2's shards, or
    accelerate's whole state."""
    if (checkpoint / "state" / SHARDED).is_dir() != sharded:
        saved_by, launched = ("a plain", "with FSDP2") if sharded else ("an FSDP2", "without FSDP")
        raise InputError(f"{named} was saved by {saved_by} run and this one is launched "
                         f"{launched}: {advice}")


def resume_point(cfg, output_dir: Path, sharding: bool, main_process: bool
                 ) -> tuple[Path | None, dict | None]:
    """The checkpoint this run continues from and its trainer state (None, None: a new run), or
    one line saying why the folder's checkpoints cannot be continued by these settings."""
    checkpoint = latest_checkpoint(output_dir, say=print if main_process else lambda message: None)
    saved = checkpoint_folders(output_dir)
    if checkpoint is None and saved:  # a new run would overwrite and prune them
        raise InputError(f"{output_dir} holds checkpoints and none is complete (the newest, "
                         f"{saved[-1].name}: {checkpoint_problem(saved[-1]) or 'not one'}): move "
                         "them away to start over, or pass another --output-dir")
    if checkpoint is None:
        if cfg.resume and main_process:
            print(f"--resume: no checkpoint in {output_dir} yet, starting from scratch")
        return None, None
    if not cfg.resume:
        raise InputError(f"{output_dir} already has checkpoints: pass --resume to continue it, or "
                         "another --output-dir")
    check_sharding(checkpoint, sharding, str(checkpoint),
                   "resume it with the accelerate config it was started with")
    state = read_trainer_state(checkpoint)
    changed = resume_changes(state["config"], cfg)
    if changed:  # config.json edited or lost since: the run would go on as another
        raise InputError(f"{checkpoint} was trained with other settings than these: "
                         f"{first_of(changed, 3, '; ')} (config.json edited or lost? restore it, "
                         "or start a new --output-dir)")
    if state["step"] > cfg.total_steps:
        raise InputError(f"--total-steps {cfg.total_steps} is below the step of {checkpoint}: "
                         "nothing to run (a larger one continues the run)")
    return checkpoint, state


def load_data(cfg) -> tuple[list[dict], list[dict]]:
    """The training and held-out tasks, their answers checked, and the code sandbox when a task or
    an in-training benchmark runs programs."""
    train_tasks, test_tasks = load_tasks(cfg.train_data), load_tasks(cfg.test_data)
    test_tasks = test_tasks[: cfg.eval_max_problems] if cfg.eval_max_problems else test_tasks
    check_answers(train_tasks, cfg.train_data)
    check_answers(test_tasks, cfg.test_data)
    eval_benchmarks = (benchmarks.select(names=list(cfg.eval_benchmarks)) if cfg.eval_benchmarks
                       else [])
    eval_suites = {b.suite for b in eval_benchmarks}
    reward.require_sandbox({t["task"] for t in train_tasks + test_tasks} | eval_suites,
                           cfg.unsafe_no_sandbox)
    return train_tasks, test_tasks


def load_run(cfg, accelerator: Accelerator, folder_lock: io.TextIOBase | None) -> Run:
    """The run in its folder (on the main process, locked): the data, the policy (and the reference
    policy for the KL term), the optimizer, the engine, the checkpoint resumed from."""
    main_process = accelerator.is_main_process
    rank, processes = accelerator.process_index, accelerator.num_processes
    sharding, output_dir = wants_fsdp(), Path(cfg.output_dir)
    checkpoint, state = resume_point(cfg, output_dir, sharding, main_process)
    if cfg.prompts_per_step % processes:
        raise InputError(f"prompts_per_step ({cfg.prompts_per_step}) must be divisible by the "
                         f"{processes} processes")
    engine_name = rollout.default_engine() if cfg.engine == "auto" else cfg.engine
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    train_tasks, test_tasks = load_data(cfg)
    with accelerator.main_process_first():  # the main process builds the tiny model's cache entry
        model_path = (str(checkpoint / "model") if checkpoint
                      else str(Path(cfg.init_from) / "model") if cfg.init_from
                      else str(ensure_tiny_model()) if cfg.model == "tiny" else cfg.model)
    revision = None if checkpoint or cfg.init_from else cfg.model_revision
    # fp32 master weights; bf16 compute, when asked for, is accelerate's autocast or FSDP2's policy
    model, tokenizer = rollout.load_policy(model_path, "float32", "cpu", revision)
    try:
        update.check_packable(model)
    except ValueError as e:
        raise InputError(f"{model_path}: {e}") from None
    context = min(getattr(model.config, "max_position_embeddings", math.inf),
                  cfg.vllm_max_model_len or math.inf)
    prompt_limit = context - cfg.max_new_tokens
    for path in (cfg.train_data, cfg.test_data):
        rollout.check_prompt_lengths(path, tokenizer, prompt_limit, cfg.chat_template)
    if cfg.gradient_checkpointing:
        checkpoint_layers(model, cfg.checkpoint_every)
    hf_sampler = None
    if sharding:
        policy, ref_policy, hf_sampler = fsdp2_models(accelerator, model, cfg.kl_coef > 0,
                                                      engine_name == "hf", cfg.compile_layers)
    else:
        ref_policy = (update.Policy(copy.deepcopy(model).requires_grad_(False)) if cfg.kl_coef > 0
                      else None)
        policy = update.Policy(model)
        if cfg.compile_layers:
            for each in (policy, ref_policy):
                compile_layers(each)
    # over the shards under FSDP2 (fully_shard replaced the parameters)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if not sharding:
        policy, optimizer = accelerator.prepare(policy, optimizer)
        if ref_policy is not None:
            # moved to the device (and autocast like the policy), not DDP-wrapped; kept out of
            # accelerate's checkpoints (reference/ holds it once per reset)
            ref_policy = accelerator.prepare_model(ref_policy, evaluation_mode=True)
            accelerator.register_save_state_pre_hook(lambda models, weights, folder: weights.pop())
            accelerator.register_load_state_pre_hook(lambda models, folder: models.pop())
    engine = None
    if engine_name == "vllm":
        compute_dtype = "bfloat16" if accelerator.mixed_precision == "bf16" else "float32"
        engine = rollout.VLLMEngine(model_path,
                                    dtype=compute_dtype if cfg.vllm_dtype == "auto"
                                    else cfg.vllm_dtype, revision=revision, seed=cfg.seed + rank,
                                    request_seeds=cfg.vllm_request_seeds,
                                    max_model_len=cfg.vllm_max_model_len or None,
                                    max_num_seqs=max(cfg.gen_batch_seqs, cfg.n_rollouts),
                                    gpu_memory_utilization=cfg.gpu_memory_utilization,
                                    count_preemptions=cfg.vllm_count_preemptions)
    step, data_position, reference_step = 0, 0, 0
    allocation = ALLOCATIONS[cfg.allocation](cfg, len(train_tasks), tokenizer.pad_token_id)
    seed_everything(cfg.seed)
    if checkpoint:
        # policy, optimizer, this process's RNG (one process's own file can be the damaged one)
        with refused_together(accelerator):
            load_training_state(accelerator, checkpoint, sharding, policy, optimizer,
                                "move the checkpoint away to resume from the one before it")
        step, data_position = state["step"], state["data_position"]
        allocation.load_state_dict(state["allocation"], str(checkpoint))
        if ref_policy is not None:
            reference_step = state["reference_step"]
            load_reference(output_dir, reference_step, ref_policy)
        if main_process:
            print(f"resumed from {checkpoint} at step {step}")
    elif cfg.init_from:
        start_from_checkpoint(accelerator, policy, optimizer, ref_policy, Path(cfg.init_from), cfg)
    if ref_policy is not None and not checkpoint:  # π_ref of a new run: its start
        save_reference(output_dir, 0, ref_policy, accelerator)
    metrics = None
    with refused_together(accelerator):
        if main_process:
            print(f"run folder: {output_dir} (curves: tensorboard --logdir {output_dir})")
            # the metrics first: a refused resume leaves config.json as it was
            metrics = MetricsLog(output_dir, start_step=step if checkpoint else -1)
            write_config(output_dir, cfg)
    if metrics is not None:
        settings_text = "\n".join(f"    {k} = {v!r}" for k, v in dataclasses.asdict(cfg).items())
        metrics.writer.add_text("config", settings_text)
    if hf_sampler is not None:
        copy_full_weights(policy, hf_sampler)
    return Run(accelerator, output_dir, train_tasks, test_tasks, tokenizer, policy, ref_policy,
               optimizer, engine, step, data_position, metrics, allocation, hf_sampler,
               reference_step, folder_lock)


# ---- FSDP2: the project shards with torch's fully_shard itself, on CPU (gloo) and GPU alike ------


def wants_fsdp(environ=os.environ) -> bool:
    """The accelerate config asks for FSDP (`distributed_type: FSDP`, which `accelerate launch`
    passes on as ACCELERATE_USE_FSDP)."""
    return environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def is_sharded(module: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def checkpoint_layers(model, every: int = 1) -> None:
    """Activation checkpointing on every `every`-th decoder layer (1: all of them); the others keep
    their activations for backward."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = model.base_model.layers
    if every != 1 and not all(isinstance(layer, GradientCheckpointingLayer) for layer in layers):
        raise InputError(f"checkpoint_every {every}: {type(model).__name__}'s decoder layers "
                         "cannot be checkpointed one by one (use 1)")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for i, layer in enumerate(layers):
        layer.gradient_checkpointing = i % every == 0


def compile_layers(policy: update.Policy | None) -> None:
    """torch.compile on each decoder layer in place (parameter names unchanged: checkpoints and
    vLLM's weight stream see the same model), dynamic shapes since every pack has its own length.
    After any deep copy of the model: a copy of a compiled layer would run the original's."""
    if policy is None:
        return
    # training, no-grad, recompute and generation passes each get their own graphs, FSDP2's hooks
    # more: room for them all before dynamo falls back to eager
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    for layer in policy.model.base_model.layers:
        layer.compile(dynamic=True)


def fully_shard_policy(policy: update.Policy, bf16: bool = True, mesh=None) -> update.Policy:
    """FSDP2 (torch's `fully_shard`), the same on CPU and GPU: each decoder layer is a unit, the
    rest (embeddings, final norm, output layer, tied or not) is the root's. With `bf16`: compute in
    bf16 over fp32 master weights; gradients are reduced in fp32 and the output is NOT cast, so the
    log-probs stay fp32 (PPO ratios, TIS weights and the monitors compare them to each other)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    precision = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None,
                                     reduce_dtype=torch.float32)
    for layer in policy.model.base_model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=precision)
    fully_shard(policy, mesh=mesh, mp_policy=precision)
    return policy


def fsdp2_models(accelerator: Accelerator, model, with_reference: bool, hf_engine: bool,
                 compiled: bool = False):
    """(policy, reference or None, hf sampler or None) under FSDP2, from the model every process
    loaded. Rank 0's weights are broadcast first: with the configs' cpu_ram_efficient_loading,
    transformers loads them on local rank 0 only and zeroes them elsewhere. The reference is
    sharded like the policy (its KL forward runs where the policy's does); with `compiled`, both
    have their layers compiled before they are sharded (the sampler is not)."""
    if accelerator.mixed_precision not in ("no", "bf16"):
        raise InputError(f"mixed_precision '{accelerator.mixed_precision}' under FSDP: use bf16 "
                         "(or 'no')")
    if os.environ.get("FSDP_VERSION", "1") != "2":
        raise InputError("the accelerate config asks for FSDP version 1: set fsdp_version: 2 "
                         "(the project shards with FSDP2)")
    model.to(accelerator.device)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            torch.distributed.broadcast(tensor, src=0)
    bf16, mesh = accelerator.mixed_precision == "bf16", fsdp_mesh(accelerator)
    hf_sampler = copy.deepcopy(model).requires_grad_(False) if hf_engine else None
    policies = [update.Policy(model)]
    if with_reference:
        policies.append(update.Policy(copy.deepcopy(model).requires_grad_(False)))
    for policy in policies:
        if compiled:
            compile_layers(policy)
        fully_shard_policy(policy, bf16, mesh)
    return policies[0], policies[1] if with_reference else None, hf_sampler


def fsdp_mesh(accelerator: Accelerator, environ=os.environ):
    """The processes FSDP2 shards over: all of them (None), or, when the accelerate config has a
    `parallelism_config` with dp_replicate_size R and dp_shard_size S, hybrid sharding (HSDP): each
    weight sharded over S processes (a node's GPUs) and replicated R times (over nodes), so the
    per-layer all-gathers stay inside a node and only the gradients cross the network."""
    if environ.get("PARALLELISM_CONFIG_DP_REPLICATE_SIZE") is None:
        return None
    sizes = {name: int(environ.get(f"PARALLELISM_CONFIG_{name.upper()}_SIZE", "1"))
             for name in ("dp_replicate", "dp_shard", "tp", "cp", "sp")}
    if sizes["tp"] * sizes["cp"] * sizes["sp"] != 1:
        raise InputError("the accelerate config's parallelism_config asks for tensor, context or "
                         "sequence parallelism: only dp_replicate_size and dp_shard_size are "
                         "supported")
    if sizes["dp_replicate"] * sizes["dp_shard"] != accelerator.num_processes:
        raise InputError(f"parallelism_config: dp_replicate_size {sizes['dp_replicate']} x "
                         f"dp_shard_size {sizes['dp_shard']} must equal the "
                         f"{accelerator.num_processes} processes")
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(accelerator.device.type, (sizes["dp_replicate"], sizes["dp_shard"]),
                            mesh_dim_names=("dp_replicate", "dp_shard"))


def reshard(module: torch.nn.Module) -> None:
    """Back to fp32 shards everywhere: FSDP2 leaves the root unit's parameters gathered (in the
    compute dtype) after a forward, for the backward that usually follows."""
    from torch.distributed.fsdp import FSDPModule

    for unit in module.modules():
        if isinstance(unit, FSDPModule):
            unit.reshard()


def copy_full_weights(policy: update.Policy, plain: torch.nn.Module) -> None:
    """`plain` <- the whole tensors of the FSDP2-sharded policy's model (every process gathers the
    same tensors in the same order)."""
    reshard(policy)
    with torch.no_grad():
        for (name, shard), (plain_name, param) in zip(policy.model.named_parameters(),
                                                       plain.named_parameters(), strict=True):
            assert name == plain_name, (name, plain_name)
            param.copy_(shard.full_tensor())


# the checkpoint's state/ subfolder of FSDP2 shards (torch.distributed.checkpoint)
SHARDED = "sharded"


def sharded_state(policy, optimizer) -> dict:
    """The FSDP2 state of a run, as torch.distributed.checkpoint saves and loads it: every process
    writes and reads its own shards."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    reshard(policy)
    policy_state, optimizer_state = get_state_dict(policy, optimizer)
    return {"policy": policy_state, "optimizer": optimizer_state}


def load_errors() -> tuple[type[BaseException], ...]:
    """What loading a file damaged at its saved size raises: any of several types, which torch's
    distributed checkpoint wraps in a BaseException (imported here, when one is raised: the package
    takes 0.5 s to import)."""
    from torch.distributed.checkpoint.api import CheckpointException

    return Exception, CheckpointException


def load_training_state(accelerator: Accelerator, checkpoint: Path, sharded: bool, policy,
                        optimizer, advice: str, rng: bool = True) -> None:
    """A checkpoint's policy and optimizer (FSDP2's shards under `sharded`) and, with `rng`, every
    process's RNG (accelerate's state, which holds all three without FSDP2); or one line with
    `advice` when a file damaged at its saved size does not load."""
    try:
        if rng:  # accelerate passes over an RNG file that does not load: the run would differ
            accelerate_load(checkpoint / "state" / f"{RNG_STATE_NAME}_{accelerator.process_index}"
                            ".pkl")
        if rng or not sharded:
            accelerator.load_state(checkpoint / "state")
        if sharded:
            load_sharded_state(checkpoint / "state" / SHARDED, policy, optimizer)
    except PermissionError:  # not damage: never advise moving it away
        raise
    except load_errors() as e:
        raise InputError(f"{checkpoint}/state does not load ({error_line(e)}): {advice}") from None


def load_sharded_state(folder: Path, policy, optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = sharded_state(policy, optimizer)
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(policy, optimizer, model_state_dict=state["policy"],
                   optim_state_dict=state["optimizer"])


# ---- the reference policy: on disk once per version, not in every checkpoint --------------------


# the run folder's reference/step_N: π_ref as reset at step N (step_000000: the run's start)
REFERENCE = "reference"


def save_reference(output_dir: Path, step: int, ref_policy, accelerator: Accelerator) -> None:
    """π_ref written once when it changes (the run's start, each reset) rather than into every
    checkpoint (7 GB of each at 1.5B); atomic like a checkpoint. Every process calls this and
    writes its own shards under FSDP2 (torch.distributed.checkpoint)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    final = output_dir / REFERENCE / f"step_{step:06d}"
    tmp = final.with_name(f".{final.name}.tmp")
    with refused_together(accelerator, WriteFailure):  # each part ends together, as a checkpoint's
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
    if is_sharded(ref_policy):
        reshard(ref_policy)
    with refused_together(accelerator, WriteFailure):
        dcp.save(get_model_state_dict(ref_policy), checkpoint_id=tmp)
    with refused_together(accelerator, WriteFailure):
        if accelerator.is_main_process:
            fsync_tree(tmp)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            fsync_dir(final.parent)


def load_reference(run_dir: Path, step: int, ref_policy) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    folder = run_dir / REFERENCE / f"step_{step:06d}"
    if not (folder / ".metadata").is_file():
        raise InputError(f"the reference policy of {run_dir} at step {step} is missing: {folder}")
    state = get_model_state_dict(ref_policy)
    try:
        dcp.load(state, checkpoint_id=folder)
    except load_errors() as e:
        raise InputError(f"the reference policy of {run_dir} at step {step} does not load "
                         f"({error_line(e)}): {folder}") from None
    set_model_state_dict(ref_policy, state)


def prune_references(output_dir: Path) -> None:
    """Remove the reference/ versions that no kept checkpoint uses (a damaged one, which a resume
    passes over, uses none)."""
    try:
        checkpoints = [p for p in checkpoint_folders(output_dir) if checkpoint_problem(p) is None]
    except PermissionError:  # a checkpoint this user may not read may use any of them: keep all
        return
    used = {f"step_{read_trainer_state(p)['reference_step']:06d}"
            for p in checkpoints}
    for folder in (output_dir / REFERENCE).iterdir():
        if CHECKPOINT.match(folder.name) and folder.name not in used:
            shutil.rmtree(folder)


# ---- config.json: what a resumed run may change ------------------------------------------------


# What a resumed run may change (each change is printed): how long it runs, how often it evaluates
# and saves, and how many threads and verifier processes do the work. Everything else defines the
# run.
RESUME_MAY_CHANGE = ("total_steps", "eval_every", "save_every", "keep_checkpoints", "threads",
                     "verify_workers", "process_group_timeout_min")


def saved_config(output_dir: Path, config_class: type):
    """The config.json an earlier run wrote in `output_dir`, as a `config_class` (None when there is
    none)."""
    path = output_dir / "config.json"
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, an integer of 4,300 digits
        why = "nested too deep" if isinstance(e, RecursionError) else e
        raise InputError(f"{path} is not valid JSON ({why}): fix it, or resume into a new "
                         "--output-dir") from None
    defaults = dataclasses.asdict(config_class())
    if not isinstance(saved, dict) or set(saved) - set(defaults):
        unknown = sorted(set(saved) - set(defaults)) if isinstance(saved, dict) else saved
        raise InputError(f"{path} is not a train_brorl.py config (unknown keys: {unknown!r})")
    missing = sorted(set(defaults) - set(saved))
    if missing:  # a default would change the run unseen
        raise InputError(f"{path} lacks {first_of(missing, 3)}: restore it (a setting "
                         "added since the run began: add it with the value the run had), or resume "
                         "into a new --output-dir")
    hints = typing.get_type_hints(config_class)
    for key, value in saved.items():
        if not holds(hints[key], value):
            raise InputError(f"{path}: {key} is {value!r}, not {type_name(hints[key])}: fix it, "
                             "or resume into a new --output-dir")
    return config_class(**{k: tuple(v) if isinstance(defaults[k], tuple) else v
                           for k, v in saved.items()})


def holds(annotation, value) -> bool:
    """Whether `value`, read from JSON, is one of the values a config field's type allows (bool,
    int, float, str, None, Literal, unions of them, tuple[X, ...] as a JSON list)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        return any(holds(arg, value) for arg in args)
    if origin is tuple:
        return isinstance(value, list) and all(holds(args[0], item) for item in value)
    if annotation is float:  # JSON's NaN and Infinity included, which no setting can be
        return type(value) in (int, float) and math.isfinite(value)
    return type(value) is annotation  # NoneType for None


def type_name(annotation) -> str:
    if annotation is float:
        return "a finite float"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace(
        "typing.", "")


def config_changes(before, after) -> list[str]:
    """The settings that differ ("total_steps 2 -> 3"), leaving out --resume and how the folder was
    spelled. Either side is a config or its JSON (a checkpoint's copy, which lacks the settings
    added since: those are not compared)."""
    before, after = (json.loads(json.dumps(c if isinstance(c, dict) else dataclasses.asdict(c)))
                     for c in (before, after))
    return [f"{name} {before[name]!r} -> {value!r}" for name, value in after.items()
            if name not in ("resume", "output_dir") and before.get(name, value) != value]


def resume_changes(before, after) -> list[str]:
    """The `config_changes` that make a resume another run (all but RESUME_MAY_CHANGE's)."""
    return [change for change in config_changes(before, after)
            if change.split()[0] not in RESUME_MAY_CHANGE]


def write_config(output_dir: Path, cfg) -> None:
    """config.json, printing what differs from the one already there (a resume's allowed changes, or
    a restart from scratch with other settings): it is never replaced by another config
    silently."""
    try:
        earlier = saved_config(output_dir, type(cfg))
    except InputError as e:  # torn by a kill before the first checkpoint: nothing to keep
        print(f"replacing {e}")
        earlier = None
    for change in config_changes(earlier, cfg) if earlier else []:
        print(f"config.json: {change}")
    tmp = output_dir / "config.json.tmp"
    tmp.write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
    os.replace(tmp, output_dir / "config.json")


# ---- checkpoints: atomic (temp dir, fsync, rename); a save_pretrained model and accelerate's state


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
    """`.step_N.tmp` (a save that died) and `.step_N.deleting` (a pruning that died), of checkpoints
    and of references, are never read again, and each is as large as a model or a whole checkpoint
    (27 GB at paper scale): removed when a run starts or resumes."""
    leftovers = [*(output_dir / "checkpoints").glob(".step_*"),
                 *(output_dir / REFERENCE).glob(".step_*")]
    for leftover in sorted(leftovers):
        print(f"removing {leftover}, left by an interrupted save or pruning")
        shutil.rmtree(leftover, ignore_errors=True)


def lock_run_folder(output_dir: Path) -> io.TextIOBase:
    """An exclusive lock on the run folder while the returned file is open (the kernel drops it
    when the process ends, however it ends): a run or resume into a folder that another run is
    still writing (ranks left running by a killed launcher, a second terminal) is refused instead
    of pruning and overwriting the other's checkpoints."""
    path = output_dir / ".lock"
    try:  # never through a link: its target is not the run's to write
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:  # a link, a folder or an unreadable file by that name
        why = "a symbolic link" if e.errno == errno.ELOOP else e.strerror
        raise InputError(f"{path}: {why}: move it away") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{path} is not a plain file: move it away")
    lock = os.fdopen(fd, "r+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise InputError(f"{output_dir} is being written by another run (process {holder}): stop "
                         "it first, or pass another --output-dir") from None
    except OSError:  # a file system without locks: the run goes on unguarded
        print(f"{output_dir}: the file system cannot lock it; run one process on it at a time")
        return lock
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def check_output_dir(output_dir: Path) -> None:
    """One line, before any work, when the output folder can't be written (a file, read-only, no
    access)."""
    if output_dir.exists() and not output_dir.is_dir():
        raise InputError(f"--output-dir is a file, not a folder: {output_dir}")
    for name, folder in [("checkpoints", True), ("config.json", False), ("metrics.jsonl", False)]:
        path = output_dir / name
        if path.exists() and path.is_dir() != folder:
            raise InputError(f"{path} is a {'file' if folder else 'folder'}: move it away")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write_probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise InputError(f"cannot write to --output-dir {output_dir}: {e.strerror}") from None


def save_checkpoint(output_dir: Path, step: int, accelerator: Accelerator, policy, tokenizer,
                    state: dict, keep: int, sharded: dict | None = None) -> Path:
    """`model/`: the policy as save_pretrained (what eval.py and from_pretrained load); `state/`:
    accelerate's save_state (policy, optimizer, every process's RNG) and, under
    FSDP2, `sharded` (the `sharded_state`: every process's shards); `trainer_state.pt`: step and
    data position, written last. Every process calls this."""
    root = output_dir / "checkpoints"
    final, tmp = root / f"step_{step:06d}", root / f".step_{step:06d}.tmp"
    # each part every process writes ends together: a process that cannot write stops them all
    with refused_together(accelerator, WriteFailure):
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "state").mkdir(parents=True)  # before any process writes its RNG state there
    if sharded is None:
        weights = accelerator.get_state_dict(policy)
    else:  # gathered on the main process
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        weights = get_model_state_dict(policy, options=StateDictOptions(full_state_dict=True,
                                                                        cpu_offload=True))
        # a tied weight once, under the name its module registered first (as without sharding)
        names = {name for name, _ in [*policy.named_parameters(), *policy.named_buffers()]}
        weights = {name: tensor for name, tensor in weights.items() if name in names}
    with refused_together(accelerator, WriteFailure):
        if accelerator.is_main_process:
            plain = {name.removeprefix("model."): tensor for name, tensor in weights.items()}
            accelerator.unwrap_model(policy).model.save_pretrained(tmp / "model", state_dict=plain)
            tokenizer.save_pretrained(tmp / "model")
        accelerator.save_state(tmp / "state")
    if sharded is not None:
        import torch.distributed.checkpoint as dcp

        with refused_together(accelerator, WriteFailure):
            dcp.save(sharded, checkpoint_id=tmp / "state" / SHARDED)
    # the size of every file and the digest of the small ones: a damaged checkpoint is recognised
    with refused_together(accelerator, WriteFailure):
        if accelerator.is_main_process:
            sizes = {str(f.relative_to(tmp)): f.stat().st_size for f in tmp.rglob("*")
                     if f.is_file()}
            digests = {name: file_digest(tmp / name) for name, size in sizes.items()
                       if size <= DIGEST_MAX_BYTES}
            torch.save({**state, "files": sizes, "digests": digests}, tmp / "trainer_state.pt")
            fsync_tree(tmp)
            if final.exists():  # damaged, since the resume passed over it: kept for its owner
                names = (root / f"{final.name}.damaged{i or ''}" for i in itertools.count())
                aside = next(name for name in names if not name.exists())
                print(f"keeping the damaged {final} as {aside.name}")
                os.replace(final, aside)
            os.replace(tmp, final)
            fsync_dir(root)
            prune_checkpoints(root, keep)
    return final


def intact(checkpoint: Path) -> bool:
    """No `checkpoint_problem`; one this user may not read is not judged (pruning leaves it)."""
    try:
        return checkpoint_problem(checkpoint) is None
    except PermissionError:
        return False


def prune_checkpoints(root: Path, keep: int) -> None:
    """Delete all but the newest `keep` complete checkpoints in `root`; a folder that is not a
    complete checkpoint is not this run's to delete."""
    complete = [p for p in sorted(root.iterdir())
                if CHECKPOINT.match(p.name) and intact(p)]
    for old in complete[:-keep]:
        doomed = root / f".{old.name}.deleting"  # renamed first: a kill leaves no half checkpoint
        shutil.rmtree(doomed, ignore_errors=True)
        os.replace(old, doomed)
        shutil.rmtree(doomed)


# ---- metrics: one JSON object per row in metrics.jsonl, the same scalars in tensorboard ----------


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
                print(f"metrics.jsonl: dropped {len(lines) - len(rows)} rows an earlier attempt "
                      f"logged after step {start_step}")
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(row + "\n" for row in rows))
            os.replace(tmp, self.path)
        # purge_step: tensorboard hides the earlier event files' events at steps >= it
        self.writer = SummaryWriter(str(output_dir), purge_step=start_step + 1)
        self.file = open(self.path, "a")

    @staticmethod
    def row_step(line: str) -> float:
        """The row's step; a line torn by a kill (or not a row at all) counts as lost."""
        try:
            step = json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError, IndexError):
            return float("inf")
        return step if type(step) is int else float("inf")

    def log(self, step: int, scalars: dict, prefix: str) -> None:
        self.file.write(json.dumps({"step": step, **scalars}) + "\n")
        self.file.flush()
        for key, value in scalars.items():
            self.writer.add_scalar(f"{prefix}/{key}", value, step)
        self.writer.flush()

    def close(self) -> None:
        self.file.close()
        self.writer.close()


# ---- launch checks and one-line failures -------------------------------------------------------


def check_launch(distributed_type: DistributedType, processes: int, environ=os.environ) -> None:
    """Refuse a launch that would silently run something other than its accelerate config: several
    processes that each run alone (`DistributedType.NO`) and all write the same output folder."""
    launched = int(environ.get("WORLD_SIZE", "1"))
    if launched != processes:
        raise InputError(f"launched as {launched} processes, but each would run alone "
                         f"({distributed_type.value}) and all would write the same output folder: "
                         "check the accelerate config")


def start_from_checkpoint(accelerator: Accelerator, policy, optimizer, ref_policy, checkpoint: Path,
                          cfg) -> None:
    """--init-from: load another run's policy, optimizer state and reference (AdamW's moments and
    step count carry over: fresh moments make the first steps sign-like, each parameter moving by
    the full learning rate, which sets a branch back), then give the optimizer this run's learning
    rate and re-seed, since this is a new run with its own seed. Under FSDP2 from an FSDP2 run's
    shards, else from accelerate's state."""
    source = read_trainer_state(checkpoint)
    if (source["config"]["kl_coef"] > 0) != (cfg.kl_coef > 0):
        had = "had" if source["config"]["kl_coef"] > 0 else "had no"
        raise InputError(f"--init-from {checkpoint}: its run {had} reference policy "
                         "(kl_coef > 0), and this run must match it")
    sharded = is_sharded(policy)
    check_sharding(checkpoint, sharded, f"--init-from {checkpoint}",
                   "start from a checkpoint of a run launched as this one")
    load_training_state(accelerator, checkpoint, sharded, policy, optimizer,
                        "--init-from another checkpoint", rng=False)  # re-seeded below
    if ref_policy is not None:
        load_reference(checkpoint.parent.parent, source["reference_step"], ref_policy)
    for group in optimizer.param_groups:
        group["lr"] = cfg.lr
    seed_everything(cfg.seed)
    if accelerator.is_main_process:
        print(f"initialised from {checkpoint} (step {source['step']}: weights and optimizer "
              f"state), lr {cfg.lr:g}")


def where_to_resume(output_dir: str | None) -> str:
    """What an interrupted run left: the checkpoint it continues from, and the command that does
    it (None: it stopped before its settings were read)."""
    if output_dir is None:
        return "nothing ran"
    try:
        checkpoint = latest_checkpoint(Path(output_dir), say=lambda message: None)
    except OSError:  # the failure itself, said before this
        return "its checkpoints cannot all be read"
    if checkpoint is None:
        return "no checkpoint was saved yet (a rerun starts from step 0)"
    launch = ("python train_brorl.py" if os.environ.get("WORLD_SIZE", "1") == "1"
              else "the same accelerate launch of train_brorl.py")
    return (f"the last complete checkpoint is {checkpoint}; continue with: "
            f"{launch} --output-dir {output_dir} --resume")


# Environment failures that deserve one line, not a traceback: the disk, the folder, the
# permissions.
ONE_LINE_OS_ERRORS = {errno.ENOSPC: "no space left on device writing",
                      errno.EDQUOT: "disk quota exceeded writing",
                      errno.EROFS: "read-only file system writing",
                      errno.EACCES: "permission denied on", errno.EPERM: "not permitted on"}


def file_failure(e: BaseException) -> str | None:
    """The one-line name of a failed write or read of the run's files, or None for any other
    error. Python reports a full disk as an OSError with errno ENOSPC; torch.save as a RuntimeError
    from its zip writer, with no errno (on a full device: "unexpected pos 704 vs 598", or
    "PytorchStreamWriter failed writing file ..."); safetensors as its own error with the OS's
    message; torch.distributed.checkpoint wraps each process's error in a CheckpointException."""
    if type(e).__name__ == "CheckpointException" and getattr(e, "failures", None):
        e = next(iter(e.failures.values()))[0]  # (the first process's error, its traceback)
    if type(e).__name__ == "SafetensorError" and "os error 28" in str(e):
        return "no space left on device writing the model's weights (safetensors)"
    if isinstance(e, OSError) and e.errno in ONE_LINE_OS_ERRORS:
        return f"{ONE_LINE_OS_ERRORS[e.errno]} {e.filename or 'a file'}"
    if isinstance(e, RuntimeError) and any(sign in str(e) for sign in ("PytorchStreamWriter",
                                                                       "unexpected pos")):
        return "a checkpoint file could not be written (no space left on device?)"
    return None
