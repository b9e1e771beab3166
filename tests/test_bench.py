"""The GPU benchmarks' code on CPU in miniature: a lent GPU's minutes go to measuring, not to a
crash or a wrong number that a CPU could have shown."""

import copy
import json
import sys

import pytest
import torch

import update
from bench import gpu_check, update_levers
from bench.update_packing import skewed_batch

TINY = ["--tiny", "--device", "cpu", "--rows", "4", "--prompt-len", "16", "--response-len", "48",
        "--skewed-cap", "128", "--micro-batch-tokens", "256"]


def levers(monkeypatch, tmp_path, *variants: str, profile: bool = False) -> list[dict]:
    out = tmp_path / "levers.json"
    monkeypatch.setattr(sys, "argv", ["update_levers.py", *TINY, "--only", *variants,
                                      "--json", str(out)] + (["--profile"] if profile else []))
    monkeypatch.setattr(update, "_chunk_logprobs", update._chunk_logprobs)  # restored after
    update_levers.main()
    return json.loads(out.read_text())


def test_update_levers_measures_each_variant_on_both_batches(monkeypatch, capsys, tmp_path):
    variants = ["checkpoint every 2nd", "no entropy"]
    rows = levers(monkeypatch, tmp_path, *variants, profile=True)
    assert [(r["variant"], r["batch"]) for r in rows] == [
        (v, b) for v in variants for b in ("full-length rows", "skewed lengths")]
    assert all("error" not in r and r["tokens/s (fwd+bwd+AdamW)"] > 0 for r in rows)
    printed = capsys.readouterr().out
    # each variant's update profiled on each batch, its top kernels listed
    assert printed.count("# profile, ") == 2 * len(variants)
    assert "aten::mm" in printed


@pytest.mark.slow  # compiling on CPU: ~10 s
def test_update_levers_compiled_output_chunk_gives_the_eager_log_probs(monkeypatch, capsys,
                                                                         tmp_path):
    eager = update._chunk_logprobs
    rows = levers(monkeypatch, tmp_path, "compiled output chunk")
    assert all("error" not in r for r in rows)
    compiled = update._chunk_logprobs  # what the variant left in place
    assert compiled is not eager
    g = torch.Generator().manual_seed(0)
    # logits z = h·w of order 1 (16 products of two N(0, 1/4) each)
    hidden, weight = torch.randn(37, 16, generator=g) / 2, torch.randn(50, 16, generator=g) / 2
    targets = torch.randint(0, 50, (37,), generator=g)
    for a, b in zip(eager(hidden, weight, targets, 0.7), compiled(hidden, weight, targets, 0.7)):
        # fp32 sums in another order: <= 50 terms (the log-sum-exp's) of size <= 4 (|z| / 0.7,
        # 4 sigma), each off by 2^-24 of its size: 1.2e-5
        assert torch.allclose(a, b, atol=2e-5)


@pytest.mark.parametrize("autocast", [False, True])
def test_gpu_checks_first_pass_ratio_reads_exactly_one_where_the_update_computes_it(
        untrained_policy, autocast):
    model, _ = untrained_policy
    policy = update.Policy(copy.deepcopy(model))
    policy.model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    batch = skewed_batch(12, 24, model.config.vocab_size, seed=0, prompt_median=4,
                         response_median=8)
    cfg = update.UpdateConfig(minibatches=1, micro_batch_tokens=64)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        old = update.batch_logprobs(policy, batch, cfg)
        assert gpu_check.first_pass_log_ratio(policy, optimizer, batch, old, cfg) == 0.0
        # and it sees a ratio off 1: π_old from other weights
        update.ppo_update(policy, optimizer, batch, old, cfg)
        assert gpu_check.first_pass_log_ratio(policy, optimizer, batch, old, cfg) > 1e-4


def test_the_mfu_numerator_counts_the_matrix_products_the_update_runs_plus_causal_attention():
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    config = transformers.Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, tie_word_embeddings=False)
    model = transformers.Qwen2ForCausalLM(config)
    policy = update.Policy(model)
    # prompts ~10 and responses ~20 tokens: the output layer runs on the responses only
    batch = skewed_batch(6, 64, 512, seed=0, prompt_median=10, response_median=20)
    with FlopCounterMode(display=False) as counter:  # matrix products (not CPU attention)
        policy(update.pack_rows(batch, list(range(6))))[0].sum().backward()
    lengths = update.row_lengths(batch).double()
    causal_attention = float(6 * 2 * 64 * (lengths**2).sum())
    # the output layer's chunk is checkpointed: its forward runs again in backward, which MFU
    # does not count
    recompute = 2 * 512 * 64 * int(batch.response_mask.sum())
    counted = counter.get_total_flops() - recompute
    assert gpu_check.update_flops(model, batch) == counted + causal_attention
