"""update.py: advantages, the clipped loss and its gradient, log-probs, micro-batching, the
monitor."""

import copy
import doctest
import inspect
import dataclasses
import json
import math
import types

import pytest
import torch

import eval as evaluation
import monitor
import rollout
import update
from bench.update_memory import naive_token_logprobs
from conftest import accelerate_launch


def test_grpo_advantages_match_hand_computed_values():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    # group 0: mean 0.25, unbiased std sqrt(0.25) = 0.5; group 1: mean 0.5, std sqrt(1/3)
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, -0.5, -0.5])
    expected[4:] /= (1 / 3) ** 0.5
    assert torch.allclose(update.grpo_advantages(rewards, group, eps=0.0), expected)
    # Dr. GRPO keeps the group-mean baseline and drops the division by the std
    assert torch.allclose(update.dr_grpo_advantages(rewards, group),
                          torch.tensor([0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5]))


def test_groups_of_different_sizes_in_any_row_order_get_their_own_statistics():
    # a prompt given 2 rollouts and one given 5 (the per-prompt allocation), rows interleaved
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    group = torch.tensor([3, 7, 3, 7, 7, 7, 7])
    for name, advantage in update.ADVANTAGES.items():
        expected = torch.zeros(7)
        for g in (3, 7):
            rows = group == g
            expected[rows] = advantage(rewards[rows], torch.zeros(int(rows.sum()), dtype=int))
        if name == "reinforce_pp_baseline":
            # whitened over the batch, not per group, each prompt counted once: a row of the
            # 2-rollout prompt weighs 3.5 / 2, one of the 5-rollout prompt 3.5 / 5
            centered = update.group_centered(rewards, group)
            weights = torch.where(group == 3, 3.5 / 2, 3.5 / 5)
            expected = centered / ((weights * centered**2).sum() / (weights.sum() - 1)).sqrt()
        assert torch.allclose(advantage(rewards, group), expected), name
    assert torch.allclose(update.grpo_advantages(rewards, group, eps=0.0)[group == 7],
                          (rewards[group == 7] - 0.4) / torch.tensor([1.0, 0, 0, 0, 1]).std())


def test_every_advantage_in_the_table_takes_rewards_and_groups_and_keeps_the_shape():
    rewards, group = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]), torch.tensor([0, 0, 0, 1, 1, 1])
    # these four, and any a fork adds, which this test then holds to the same properties
    assert {"grpo", "dr_grpo", "reinforce_pp_baseline", "focal_grpo"} <= set(update.ADVANTAGES)
    for name, advantage in update.ADVANTAGES.items():
        advantages = advantage(rewards, group)
        assert advantages.shape == rewards.shape, name
        # zero-mean groups
        assert torch.allclose(advantages.view(2, 3).sum(dim=1), torch.zeros(2), atol=1e-6), name
        # a positional third argument is refused, never taken as something else
        with pytest.raises(TypeError):
            advantage(rewards, group, False)


def test_focal_grpo_scales_each_group_by_its_failure_rate():
    # a group solved 3 times in 4 keeps a quarter of GRPO's advantages, one solved once in 4 three
    # quarters, one solved every time nothing
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    group = torch.arange(3).repeat_interleave(4)
    weight = torch.tensor([0.25, 0.75, 0.0]).repeat_interleave(4)
    assert torch.allclose(update.focal_grpo_advantages(rewards, group),
                          update.grpo_advantages(rewards, group) * weight)
    assert torch.allclose(update.focal_grpo_advantages(rewards, group, gamma=2.0),
                          update.grpo_advantages(rewards, group) * weight**2)


def test_whiten_uses_the_statistics_of_every_process(monkeypatch):
    mine, theirs = torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0, 4.0])
    whole = update.whiten(torch.cat([mine, theirs]), eps=0.0)  # one process holding all five values
    # what the other process adds over torch.distributed: its count, sum and sum of squares
    monkeypatch.setattr(update, "all_sum", lambda moments: moments + torch.tensor(
        [3.0, 9.0, 29.0], dtype=torch.float64))
    assert torch.allclose(update.whiten(mine, eps=0.0), whole[:2])
    assert torch.allclose(whole, (torch.arange(5.0) - 2.0) / 2.5**0.5)  # unbiased std of 0..4
    assert update.whiten(torch.zeros(0)).shape == (0,)


def test_reinforce_pp_baseline_centres_per_group_then_whitens_over_the_batch():
    rewards, group = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    centered = torch.tensor([0.5, -0.5, 0.0, 0.0])  # batch mean 0, unbiased std sqrt(1/6)
    assert torch.allclose(update.reinforce_pp_baseline_advantages(rewards, group, eps=0.0),
                          centered / (1 / 6) ** 0.5)
    assert torch.equal(update.reinforce_pp_baseline_advantages(rewards, group),
                       update.whiten(update.group_centered(rewards, group)))


def test_reinforce_pp_baseline_whitens_allocated_groups_with_every_prompt_counted_once():
    # the per-prompt allocation: a prompt with 4 rollouts beside one with 400 (a rare success);
    # counted per sample, the large group alone would set the scale (mean A² per prompt near 22)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0] + [0.0] * 399)
    group = torch.tensor([0] * 4 + [1] * 400)
    advantages = update.reinforce_pp_baseline_advantages(rewards, group)
    per_prompt = update.group_sums(advantages**2, group) / torch.bincount(group)
    assert float(per_prompt.mean()) == pytest.approx(1.0, abs=0.01)


def test_advantages_of_a_step_that_kept_no_group_are_empty_not_a_crash():
    # dynamic sampling dropped every group
    for name, advantage in update.ADVANTAGES.items():
        assert advantage(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,), name


def test_clipped_loss_and_gradient_follow_the_hand_formula_with_asymmetric_clip():
    eps_low, eps_high = 0.2, 0.28
    old = torch.zeros(1, 4)
    # ratios 1.5 (A>0: clipped at 1.28), 1.1 (A>0: inside), 0.5 (A<0: clipped at 0.8), 0.9 (A<0:
    # inside)
    ratios = torch.tensor([[1.5, 1.1, 0.5, 0.9]])
    logprobs = ratios.log().requires_grad_(True)
    adv_per_token = torch.tensor([2.0, 2.0, -1.0, -1.0])
    losses, grads, clipped_flags = [], [], []
    for t in range(4):  # one token per rollout so each token gets its own advantage
        lp = logprobs[:, t : t + 1]
        cfg = update.UpdateConfig(eps_low=eps_low, eps_high=eps_high)
        loss, clipped, _ = update.per_token_loss(lp, old[:, t : t + 1], adv_per_token[t : t + 1],
                                                 torch.ones(1, 1), cfg)
        losses.append(float(loss.detach()))
        clipped_flags.append(bool(clipped))
        grads.append(torch.autograd.grad(loss.sum(), logprobs)[0][0, t].item())
    assert losses == pytest.approx([-1.28 * 2, -1.1 * 2, 0.8 * 1, 0.9 * 1])
    assert clipped_flags == [True, False, True, False]
    # d/dlogp of -r*A is -r*A where unclipped, 0 where the clipped branch is the active minimum
    assert grads == pytest.approx([0.0, -1.1 * 2, 0.0, 0.9 * 1])


def one_token_loss(ratio: float, advantage: float, **cfg_overrides):
    """per_token_loss of a single token (old log-prob 0) and its gradient with respect to log
    π_θ."""
    logprob = torch.tensor([[math.log(ratio)]], requires_grad=True)
    sampler, ref = cfg_overrides.pop("sampler_logprob",
                                     None), cfg_overrides.pop("ref_logprob", None)
    loss, clipped, kl = update.per_token_loss(
        logprob, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1),
        update.UpdateConfig(**cfg_overrides),
        None if sampler is None else torch.tensor([[sampler]]),
        None if ref is None else torch.tensor([[ref]]))
    gradient = torch.autograd.grad(loss.sum(), logprob)[0]
    return float(loss.detach()), bool(clipped), float(kl.detach()), float(gradient)


def test_per_token_loss_of_one_token_by_hand():
    # A > 0 and r = 1.1 inside [0.8, 1.28]: loss -r·A, gradient d(-r·A)/d log π = -r·A
    assert one_token_loss(1.1, 2.0) == pytest.approx((-2.2, False, 0.0, -2.2))
    # A > 0 and r = 1.5 above 1 + ε_high: the clipped branch -1.28·A is the minimum, and it has no
    # gradient
    assert one_token_loss(1.5, 2.0) == pytest.approx((-2.56, True, 0.0, 0.0))
    # clip-higher: r = 1.25 is clipped with a symmetric ε = 0.2, not with ε_high = 0.28
    assert one_token_loss(1.25, 1.0, eps_high=0.2)[1] and not one_token_loss(1.25, 1.0)[1]
    # A < 0 and r = 0.5 below 1 - ε_low: clipped at 0.8, no gradient
    assert one_token_loss(0.5, -1.0) == pytest.approx((0.8, True, 0.0, 0.0))


def test_per_token_loss_weights_by_the_capped_sampler_ratio_and_adds_the_kl_term():
    # TIS: the sampler gave the token log-prob -1 where π_old gives 0, so the weight is min(e, C)
    assert one_token_loss(1.1, 2.0, tis_cap=2.0,
                          sampler_logprob=-1.0) == pytest.approx((-4.4, False, 0.0, -4.4))
    assert (one_token_loss(1.1, 2.0, tis_cap=5.0, sampler_logprob=-1.0)[0]
            == pytest.approx(-2.2 * math.e))
    # tis_cap 0: off
    assert one_token_loss(1.1, 2.0, sampler_logprob=-1.0)[0] == pytest.approx(-2.2)
    # KL: k2 = l²/2 with l = log π_θ - log π_ref = log 1.1 + 0.5, added with weight β
    l = math.log(1.1) + 0.5
    loss, _, kl, gradient = one_token_loss(1.1, 2.0, kl_coef=0.1, kl_estimator="k2",
                                           ref_logprob=-0.5)
    assert kl == pytest.approx(l**2 / 2) and loss == pytest.approx(-2.2 + 0.1 * l**2 / 2)
    assert gradient == pytest.approx(-2.2 + 0.1 * l)
    assert one_token_loss(1.1, 2.0, kl_coef=0.0, ref_logprob=-0.5)[2] == 0.0  # β = 0: no KL term


def test_configs_are_built_by_keyword_so_a_swap_cannot_pass_silently():
    with pytest.raises(TypeError):
        update.UpdateConfig(0.28, 0.2)  # which is eps_low? the keyword says it
    assert update.UpdateConfig(eps_low=0.2, eps_high=0.28).eps_high == 0.28
    with pytest.raises(TypeError):
        evaluation.EvalSettings(4, 0.6)
    with pytest.raises(TypeError):
        rollout.SamplingParams(16, 1.0)


def test_kl_estimators_match_their_formulas():
    logprobs, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    l = 0.5
    assert float(update.kl_penalty(logprobs, ref, "k1")) == pytest.approx(l)
    assert float(update.kl_penalty(logprobs, ref, "k2")) == pytest.approx(l**2 / 2)
    assert float(update.kl_penalty(logprobs, ref,
                                   "k3")) == pytest.approx(torch.exp(torch.tensor(-l)).item() - 1
                                                           + l)
    with pytest.raises(ValueError, match="unknown KL estimator"):
        update.kl_penalty(logprobs, ref, "k4")


def test_kl_estimators_as_losses_have_the_gradients_their_docstring_states():
    """Expected gradient over y ~ π_θ of each estimator as a loss (samples held fixed), exactly, on
    5 tokens."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, generator=g, dtype=torch.float64).requires_grad_(True)
    ref_logprobs = torch.randn(5, generator=g, dtype=torch.float64).log_softmax(-1)

    def expected_gradient(estimator):
        logprobs = logits.log_softmax(-1)
        loss = (logprobs.exp().detach() * update.kl_penalty(logprobs, ref_logprobs,
                                                            estimator)).sum()
        return torch.autograd.grad(loss, logits)[0]

    def kl_gradient(reverse: bool):
        logprobs = logits.log_softmax(-1)
        p, q = (ref_logprobs, logprobs) if reverse else (logprobs, ref_logprobs)
        return torch.autograd.grad((p.exp() * (p - q)).sum(), logits)[0]

    # of KL(π_θ||π_ref), KL(π_ref||π_θ)
    forward, reverse = kl_gradient(reverse=False), kl_gradient(reverse=True)
    assert not torch.allclose(forward, reverse, atol=1e-3)
    assert torch.allclose(expected_gradient("k1"), torch.zeros(5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(expected_gradient("k2"), forward, atol=1e-12)
    assert torch.allclose(expected_gradient("k3"), reverse, atol=1e-12)


def make_batch(tokenizer, n_rows=6, seed=0) -> update.TrainBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 90, (int(torch.randint(2, 6, (1,),
                                                       generator=g)),), generator=g).tolist()
               for _ in range(n_rows)]
    responses = [torch.randint(3, 90, (int(torch.randint(1, 7, (1,),
                                                         generator=g)),), generator=g).tolist()
                 for _ in range(n_rows)]
    prompt_ids, prompt_mask = rollout.left_pad(prompts, tokenizer.pad_token_id)
    return update.TrainBatch(prompt_ids, prompt_mask,
                             rollout.right_pad(responses, tokenizer.pad_token_id),
                             rollout.right_pad([[1] * len(r) for r in responses], 0),
                             torch.randn(n_rows, generator=g))


def padded_reference(model, batch: update.TrainBatch, temperature: float = 1.0):
    """Log-probs and entropies [B, R] from the model's own forward on the padded rows (full
    [B, P + R, V] logits, transformers' sdpa with a padding mask): what packing must equal."""
    input_ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=-1)
    attention_mask = torch.cat([batch.prompt_mask, batch.response_mask], dim=-1)
    r = batch.response_ids.shape[1]
    logprobs = naive_token_logprobs(model, input_ids, attention_mask, r, temperature)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                   use_cache=False).logits[:, -r - 1 : -1].float() / temperature
    entropy = -(logits.log_softmax(-1) * logits.softmax(-1)).sum(-1) * batch.response_mask
    return logprobs, entropy.detach()


# fp32 sums of <= 128 terms (the hidden size) of order 1, in another order or blocking, differ by
# <= 128 * 2^-24 = 8e-6; log-probs of order 1 carry that through each layer once more
FP32_SHAPE_ATOL = 1e-5


@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_logprobs_entropies_and_gradients_equal_the_padded_forward(untrained_policy,
                                                                          checkpointing):
    model, tokenizer = untrained_policy
    model = copy.deepcopy(model)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    batch = make_batch(tokenizer, n_rows=8)
    padded, padded_entropy = padded_reference(model, batch, temperature=0.7)
    padded_grads = torch.autograd.grad(padded.sum(), list(model.parameters()))
    policy = update.Policy(model)  # packed attention from here on
    rows = [5, 2, 7, 0, 1, 3, 6, 4]  # packed in any order
    pack = update.pack_rows(batch, rows)
    packed, entropy = policy(pack, 0.7, 3)  # chunks of 3 response tokens
    packed_grads = torch.autograd.grad(packed.sum(), list(model.parameters()))
    r = pack.live.shape[1]
    assert torch.allclose(packed, padded[rows, :r], atol=FP32_SHAPE_ATOL)
    assert torch.allclose(entropy, padded_entropy[rows, :r], atol=FP32_SHAPE_ATOL)
    assert (entropy[~pack.live] == 0).all() and (entropy[pack.live] > 0).all()
    # a weight's gradient sums its products over the batch's <= 8 x 11 positions, carried back
    # through 4 layers and the output layer: <= 88 x 5 x 2^-24 = 2.6e-5 of its size apart
    for a, b in zip(packed_grads, padded_grads):
        assert torch.allclose(a, b, atol=FP32_SHAPE_ATOL, rtol=1e-4)


def test_selective_checkpointing_recomputes_only_every_kth_layer_with_the_same_gradients(
        untrained_policy):
    import run

    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer, n_rows=4)
    pack = update.pack_rows(batch, [0, 1, 2, 3])
    results = {}
    for every in (None, 2):
        policy = update.Policy(copy.deepcopy(model))
        if every:
            run.checkpoint_layers(policy.model, every)
        calls = [0] * len(policy.model.base_model.layers)
        for i, layer in enumerate(policy.model.base_model.layers):
            # a pre-hook: the recompute stops once it has what backward needs (torch's early stop)
            layer.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
        policy.train()
        logprobs = policy(pack)[0]
        grads = torch.autograd.grad(logprobs.sum(), list(policy.parameters()))
        results[every] = calls, grads
    assert results[None][0] == [1, 1, 1, 1]
    assert results[2][0] == [2, 1, 2, 1]  # layers 0 and 2 run again in backward
    # the recompute repeats the same operations on the same inputs: the same gradients
    for a, b in zip(results[None][1], results[2][1]):
        assert torch.equal(a, b)


def test_compiled_layers_give_the_eager_log_probs_gradients_names_and_generation(
        untrained_policy):
    import run

    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer, n_rows=4)
    pack = update.pack_rows(batch, [2, 0, 3, 1])
    eager, compiled = (update.Policy(copy.deepcopy(model)) for _ in range(2))
    run.compile_layers(compiled)
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in eager.named_parameters()]
    out = {}
    for name, policy in (("eager", eager), ("compiled", compiled)):
        policy.train()
        logprobs, entropy = policy(pack, 0.7)
        out[name] = logprobs, entropy, torch.autograd.grad(logprobs.sum(),
                                                           list(policy.parameters()))
    # fused kernels sum in another order: the fp32 bound of the packed-vs-padded test
    for a, b in zip(out["eager"][:2] + out["eager"][2], out["compiled"][:2] + out["compiled"][2]):
        assert torch.allclose(a, b, atol=FP32_SHAPE_ATOL, rtol=1e-4)
    # the hf engine samples through the same layers
    params = rollout.SamplingParams(n=2, max_new_tokens=4, temperature=1.0)
    prompts = [[5, 6, 7], [8, 9]]
    samples = [rollout.generate(policy.model.eval(), tokenizer, prompts, params,
                                torch.Generator().manual_seed(0)).response_ids
               for policy in (eager, compiled)]
    assert torch.equal(*samples)


def test_a_packed_row_never_sees_another_row_of_its_pack(untrained_policy):
    model, tokenizer = untrained_policy
    policy = update.Policy(copy.deepcopy(model))
    batch = make_batch(tokenizer, n_rows=3)
    other = dataclasses.replace(batch, response_ids=batch.response_ids.clone())
    other.response_ids[0] = (other.response_ids[0] + 1) % 90 + 3  # only row 0's response differs
    with torch.no_grad():
        seen, _ = policy(update.pack_rows(batch, [0, 1, 2]))
        changed, _ = policy(update.pack_rows(other, [0, 1, 2]))
    assert not torch.allclose(seen[0], changed[0], atol=1e-2)
    # rows 1 and 2 follow row 0 in the pack: what they compute is their own business alone
    assert torch.allclose(seen[1:], changed[1:], atol=FP32_SHAPE_ATOL)
    # and each equals the row computed alone
    with torch.no_grad():
        alone, _ = policy(update.pack_rows(batch, [2]))
    assert torch.allclose(seen[2, : alone.shape[1]], alone[0], atol=FP32_SHAPE_ATOL)


@pytest.mark.parametrize("lengths", [[1], [5, 5, 5], [1, 9, 2, 9, 1], [300, 7, 150, 150, 1, 40],
                                     [3, 200, 4, 5, 6, 190, 2]])
def test_packed_attention_equals_causal_attention_of_each_sequence_alone(lengths):
    """Sequences of any lengths in any order, alone or grouped (a group's shorter rows filled out
    with the tokens after them): each sequence's outputs and gradients are those of causal
    attention over it alone."""
    g = torch.Generator().manual_seed(len(lengths))
    total, heads, kv_heads, dim = sum(lengths), 4, 2, 8
    q, k, v = (torch.randn(1, h, total, dim, generator=g).requires_grad_()
               for h in (heads, kv_heads, kv_heads))
    cu_seqlens = torch.tensor([0, *lengths]).cumsum(0)
    packed = update._causal_attention_per_sequence(q, k, v, cu_seqlens, 0.3)  # [1, T, heads, dim]
    upstream = torch.randn(packed.shape, generator=g)
    packed_grads = torch.autograd.grad((packed * upstream).sum(), (q, k, v))
    alone, start = [], 0
    for n in lengths:
        alone.append(torch.nn.functional.scaled_dot_product_attention(
            *(x[:, :, start : start + n] for x in (q, k, v)), is_causal=True, scale=0.3,
            enable_gqa=True).transpose(1, 2))
        start += n
    alone = torch.cat(alone, dim=1)
    alone_grads = torch.autograd.grad((alone * upstream).sum(), (q, k, v))
    # another blocking of the same fp32 sums over <= 300 keys: terms of order 1 (softmax weights
    # times unit-normal values; gradients of size <= ~5 here), rounded in another order: about
    # sqrt(300) x 2^-24 x 5 = 5e-6 (300 x 2^-24 = 1.8e-5 for the outputs, convex combinations)
    assert torch.allclose(packed, alone, atol=2e-5)
    for a, b in zip(packed_grads, alone_grads):
        assert torch.allclose(a, b, atol=2e-5)


def test_a_llama_model_packs_as_each_row_alone():
    """A config without `layer_types` (Llama's): the pack's mask is not built per layer type."""
    import transformers

    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2)
    torch.manual_seed(0)
    policy = update.Policy(transformers.LlamaForCausalLM(config))
    batch = make_batch(types.SimpleNamespace(pad_token_id=0), n_rows=4)
    with torch.no_grad():
        packed, _ = policy(update.pack_rows(batch, [0, 1, 2, 3]))
        for row in range(4):
            alone, _ = policy(update.pack_rows(batch, [row]))
            width = alone.shape[1]
            assert torch.allclose(packed[row, :width], alone[0], atol=FP32_SHAPE_ATOL)


@pytest.mark.parametrize("head", ["bias", "final_logit_softcapping", "logit_scale"])
def test_an_output_layer_the_chunked_log_probs_would_misread_is_refused_in_one_line(
        untrained_policy, head):
    model = copy.deepcopy(untrained_policy[0])
    if head == "bias":
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.config.vocab_size))
    else:  # Gemma 2's soft-capping, Cohere's logit scale
        setattr(model.config, head, 30.0 if head == "final_logit_softcapping" else 0.0625)
    with pytest.raises(ValueError, match="bias, a logit scale or soft-capping"):
        update.Policy(model)


def test_packed_attention_on_cpu_takes_sdpas_fused_kernel_never_its_math_path(untrained_policy):
    model, tokenizer = untrained_policy
    policy = update.Policy(copy.deepcopy(model))
    policy.train()
    responses = [[3 + i % 80 for i in range(150)], [5, 6, 7], [8, 9, 10, 11]]  # long alone
    batch = update.TrainBatch(torch.tensor([[4, 5]] * 3), torch.ones(3, 2, dtype=torch.long),
                              rollout.right_pad(responses, tokenizer.pad_token_id),
                              rollout.right_pad([[1] * len(r) for r in responses], 0),
                              torch.ones(3))
    assert len(update.length_buckets([152, 5, 6])) == 2
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        policy(update.pack_rows(batch, [0, 1, 2]))[0].sum().backward()
    kernels = {event.key for event in profile.key_averages()}
    # the math path materializes every [L, L] score and skips no causal block
    assert "aten::_scaled_dot_product_attention_math" not in kernels
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in kernels


def test_the_trainers_forward_builds_no_kv_cache(untrained_policy):
    model, tokenizer = untrained_policy
    policy = update.Policy(copy.deepcopy(model))
    caches = []
    policy.model.model.register_forward_hook(
        lambda module, args, output: caches.append(output.past_key_values))
    policy(update.pack_rows(make_batch(tokenizer), [0, 1]))
    assert caches == [None]


def test_generation_through_the_packed_attention_is_transformers_sdpa(untrained_policy):
    model, tokenizer = untrained_policy
    plain = copy.deepcopy(model)
    policy = update.Policy(copy.deepcopy(model))
    batch = make_batch(tokenizer, n_rows=4)
    kwargs = dict(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, do_sample=False,
                  max_new_tokens=6, pad_token_id=tokenizer.pad_token_id)
    plain.set_attn_implementation("sdpa")
    assert torch.equal(plain.generate(**kwargs), policy.model.generate(**kwargs))


def test_the_saved_model_keeps_a_standard_attention_and_its_state_dict_keys(untrained_policy,
                                                                              tmp_path):
    model, _ = untrained_policy
    policy = update.Policy(copy.deepcopy(model))
    policy.model.save_pretrained(tmp_path)
    assert update.PACKED_ATTENTION not in (tmp_path / "config.json").read_text()
    assert rollout.load_policy(str(tmp_path))[0].config._attn_implementation == "sdpa"
    assert list(policy.model.state_dict()) == list(model.state_dict())


def test_a_row_without_a_prompt_token_is_refused_in_one_line():
    batch = batch_of_lengths([0, 2], [3, 1])
    with pytest.raises(ValueError, match="empty prompt"):
        update.pack_rows(batch, [0, 1])


def batch_of_lengths(prompt_lengths: list[int], response_lengths: list[int]) -> update.TrainBatch:
    prompt_ids, prompt_mask = rollout.left_pad([[5] * n for n in prompt_lengths], 0)
    response_ids = rollout.right_pad([[7] * n for n in response_lengths], 0)
    response_mask = rollout.right_pad([[1] * n for n in response_lengths], 0)
    return update.TrainBatch(prompt_ids, prompt_mask, response_ids, response_mask,
                             torch.zeros(len(prompt_lengths)))


def test_micro_batches_hold_at_most_the_budget_in_real_tokens_and_cover_every_answered_row_once():
    g = torch.Generator().manual_seed(0)
    prompts, responses = torch.randint(1, 9, (40,), generator=g), torch.randint(0, 30, (40,),
                                                                                 generator=g)
    batch = batch_of_lengths(prompts.tolist(), responses.tolist())
    lengths = prompts + responses
    rows = list(range(3, 40))
    batches = update.micro_batches(batch, rows, max_tokens=50)
    # a row without a response token has nothing to score: left out
    assert (responses[rows] == 0).any()
    assert sorted(i for b in batches for i in b) == [i for i in rows if responses[i] > 0]
    assert all(int(lengths[b].sum()) <= 50 for b in batches)
    # first fit: a row did not fit in any micro-batch opened before its own (loads only grow)
    for k, b in enumerate(batches):
        assert all(int(lengths[earlier].sum() + lengths[i]) > 50
                   for earlier in batches[:k] for i in b)
    # nothing is padded: two rows of 9 tokens, one with a long prompt and one with a long response,
    # fill a budget of 18
    assert update.micro_batches(batch_of_lengths([8, 1], [1, 8]), [0, 1], max_tokens=18) == [[0, 1]]
    # too long: alone
    assert update.micro_batches(batch_of_lengths([30], [20]), [0], max_tokens=18) == [[0]]


# Two ways to one SGD step (lr 0.1) in fp32: gradients of order 1 summed over a batch's <= 88
# positions (8 rows of <= 11 tokens) in another order differ by <= 88 * 2^-24, the step by a tenth
# of that, and rounding the weights (of order 1) adds 2^-24: 6e-7 in all.
SGD_STEP_ATOL = 1e-6


def run_update(model, batch, old=None, **cfg_overrides):
    policy = update.Policy(copy.deepcopy(model))
    cfg = update.UpdateConfig(**cfg_overrides)
    # SGD: Adam would amplify float noise in ~0 gradients
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    old = update.batch_logprobs(policy, batch, cfg) if old is None else old
    stats = update.ppo_update(policy, optimizer, batch, old, cfg,
                              generator=torch.Generator().manual_seed(0))
    return policy.model, stats


def test_a_gradient_that_is_not_finite_is_never_applied(untrained_policy):
    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer)
    batch.advantages[0] = math.inf  # what a diverging run produces
    policy = update.Policy(copy.deepcopy(model))
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    old = update.batch_logprobs(policy, batch, update.UpdateConfig())
    with pytest.raises(FloatingPointError, match="mini-batch 1 of 2: the gradient norm is "
                                                 "(nan|inf), not applied"):
        update.ppo_update(policy, optimizer, batch, old, update.UpdateConfig())
    assert all(torch.equal(a, b) for a, b in zip(policy.model.parameters(), model.parameters()))


def test_gradient_accumulation_over_micro_batches_matches_one_big_batch(untrained_policy):
    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer)
    big, _ = run_update(model, batch, micro_batch_tokens=10_000)
    small, _ = run_update(model, batch, micro_batch_tokens=12)
    for a, b in zip(big.parameters(), small.parameters()):
        assert torch.allclose(a, b, atol=SGD_STEP_ATOL)


def test_rows_without_a_response_token_change_nothing_in_the_update(untrained_policy):
    """An engine that returned no token for some prompts: those rows are left out of every pass
    (a pack of them alone would have nothing to backpropagate), and the step is the one without
    them."""
    model, tokenizer = untrained_policy
    g = torch.Generator().manual_seed(0)
    # row 0 fills a 12-token micro-batch alone; rows 1 and 2 would make the next one
    prompts = [torch.randint(3, 90, (4,), generator=g).tolist() for _ in range(3)]
    responses = [torch.randint(3, 90, (8,), generator=g).tolist(), [], []]
    prompt_ids, prompt_mask = rollout.left_pad(prompts, tokenizer.pad_token_id)
    with_empty = update.TrainBatch(prompt_ids, prompt_mask,
                                   rollout.right_pad(responses, tokenizer.pad_token_id),
                                   rollout.right_pad([[1] * len(r) for r in responses], 0),
                                   torch.tensor([1.0, -1.0, 0.5]))
    without = update.TrainBatch(*(x[:1] for x in (
        with_empty.prompt_ids, with_empty.prompt_mask, with_empty.response_ids,
        with_empty.response_mask, with_empty.advantages)))
    trained, stats = run_update(model, with_empty, minibatches=1, micro_batch_tokens=12)
    reference, reference_stats = run_update(model, without, minibatches=1, micro_batch_tokens=12)
    assert stats == reference_stats
    for a, b in zip(trained.parameters(), reference.parameters()):
        assert torch.equal(a, b)


def test_ppo_update_statistics_and_step_equal_those_of_the_padded_forward(untrained_policy):
    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer, n_rows=8)
    cfg = update.UpdateConfig(minibatches=1, max_grad_norm=1e9, micro_batch_tokens=20)
    reference = copy.deepcopy(model)
    logprobs, entropy = padded_reference(reference, batch)
    # ratios e^0.3 > 1 + ε_high: tokens of positive advantage clip, of negative advantage not
    old = logprobs.detach() - 0.3 * batch.response_mask
    loss, was_clipped, _ = update.per_token_loss(logprobs, old, batch.advantages,
                                                 batch.response_mask.float(), cfg)
    tokens = batch.response_mask.sum()
    (loss.sum() / tokens).backward()
    # float64: an fp32 norm of 1M squares in one reduction is off by ~1e-4 on some CPUs
    grad_norm = torch.cat([p.grad.flatten().double() for p in reference.parameters()]).norm()
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.1 * p.grad
    packed, stats = run_update(model, batch, old=old, **dataclasses.asdict(cfg))
    assert stats["loss"] == pytest.approx(float(loss.detach().sum() / tokens), rel=1e-5)
    assert stats["clip_frac"] == pytest.approx(float(was_clipped.sum() / tokens))
    assert 0 < stats["clip_frac"] < 1
    assert stats["entropy"] == pytest.approx(float(entropy.sum() / tokens), rel=1e-5)
    assert stats["grad_norm"] == pytest.approx(float(grad_norm), rel=1e-5)
    for a, b in zip(packed.parameters(), reference.parameters()):
        assert torch.allclose(a, b, atol=SGD_STEP_ATOL)


def test_the_first_mini_batch_ratio_is_exactly_one(untrained_policy):
    """π_old is computed in the update's own micro-batches: with a zero learning rate nothing moves,
    every ratio is exactly 1, and with ε = 0 any ratio off 1 in either direction would clip."""
    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer, n_rows=8)
    batch.advantages[::2] = -batch.advantages[::2].abs()  # both signs
    merged = update.merge_duplicates(batch, 2, torch.Generator().manual_seed(0))
    policy = update.Policy(copy.deepcopy(model))
    cfg = update.UpdateConfig(minibatches=2, micro_batch_tokens=20, eps_low=0.0, eps_high=0.0)
    stats = update.ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.0), merged,
                              update.batch_logprobs(policy, merged, cfg), cfg)
    assert stats["clip_frac"] == 0.0 and stats["grad_norm"] > 0


def test_a_mini_batch_without_rows_takes_no_step_and_no_share_of_the_grad_norm(untrained_policy):
    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer)
    # a recorded split that left mini-batch 1 empty: one optimizer step, as with one mini-batch
    split = dataclasses.replace(batch, minibatch=torch.zeros(len(batch.advantages),
                                                             dtype=torch.long))
    stepped_once, stats = run_update(model, split, minibatches=2)
    reference, reference_stats = run_update(model, batch, minibatches=1)
    assert stats == reference_stats
    for a, b in zip(stepped_once.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    # a split into more mini-batches than the update runs would drop rows: refused
    three = dataclasses.replace(batch, minibatch=torch.arange(len(batch.advantages)) % 3)
    with pytest.raises(ValueError, match="records 3 mini-batches, the update was asked for 2"):
        run_update(model, three, minibatches=2)


def test_mini_batches_split_rows_into_equal_shares():
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        assert update.split_minibatches(torch.ones(6), 2, g).bincount().tolist() == [3, 3]
        assert update.split_minibatches(torch.ones(8), 4, g).bincount().tolist() == [2, 2, 2, 2]


@pytest.mark.parametrize("minibatches", [1, 2, 4])
def test_merged_duplicates_give_the_same_update_as_the_repeated_rows(untrained_policy, minibatches):
    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer, n_rows=3)
    repeated_rows = [0, 0, 0, 1, 2, 2, 0, 2]
    repeated = update.TrainBatch(batch.prompt_ids[repeated_rows], batch.prompt_mask[repeated_rows],
                                 batch.response_ids[repeated_rows],
                                 batch.response_mask[repeated_rows],
                                 batch.advantages[repeated_rows])
    # the split run_update's ppo_update draws for the repeated rows (seed 0), then merged within
    # each mini-batch
    merged = update.merge_duplicates(repeated, minibatches, torch.Generator().manual_seed(0))
    assert (merged.weights.sum() == len(repeated_rows)
            and len(merged.advantages) < len(repeated_rows))
    if minibatches == 1:
        assert merged.weights.tolist() == [4.0, 1.0, 3.0]
    plain, plain_stats = run_update(model, repeated, minibatches=minibatches)
    weighted, weighted_stats = run_update(model, merged, minibatches=minibatches)
    for a, b in zip(plain.parameters(), weighted.parameters()):
        assert torch.allclose(a, b, atol=SGD_STEP_ATOL)
    # a token mean over <= 48 tokens: <= 48 * 2^-24 apart
    assert weighted_stats["entropy"] == pytest.approx(plain_stats["entropy"], rel=1e-5)


def test_merging_an_empty_batch_gives_an_empty_batch(untrained_policy):
    _, tokenizer = untrained_policy
    batch = make_batch(tokenizer, n_rows=2)
    empty = update.TrainBatch(batch.prompt_ids[:0], batch.prompt_mask[:0], batch.response_ids[:0],
                              # every group dropped this step
                              batch.response_mask[:0], batch.advantages[:0])
    merged = update.merge_duplicates(empty)
    assert len(merged.advantages) == 0 and merged.weights.shape == (0,)


def test_update_raises_the_probability_of_positive_advantage_responses(untrained_policy):
    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer)
    before = update.batch_logprobs(update.Policy(model), batch, update.UpdateConfig()).sum(-1)
    updated, stats = run_update(model, batch, kl_coef=0.0)
    after = update.batch_logprobs(update.Policy(updated), batch, update.UpdateConfig()).sum(-1)
    best, worst = int(batch.advantages.argmax()), int(batch.advantages.argmin())
    assert after[best] > before[best] and after[worst] < before[worst]
    assert stats["grad_norm"] > 0 and 0 <= stats["clip_frac"] <= 1
    # freed: on a GPU their memory goes to the waking sampler
    assert all(p.grad is None for p in updated.parameters())


def test_shrinkage_monitor_on_a_constructed_case():
    before = torch.tensor([-1.0, -2.0, -3.0, -4.0])
    after = torch.tensor([-0.5, -2.25, -3.0, -5.0])  # two fell: by 0.25 and by 1.0
    assert monitor.shrinkage(before, after) == (0.5, -1.0)
    assert monitor.shrinkage(before, before + 1) == (0.0, 0.0)
    assert monitor.shrinkage(torch.zeros(0), torch.zeros(0)) == (0.0, 0.0)


def test_truncated_importance_sampling_weights_each_token_by_the_capped_ratio(untrained_policy):
    model, tokenizer = untrained_policy
    batch = make_batch(tokenizer, n_rows=3)
    old = update.batch_logprobs(update.Policy(model), batch, update.UpdateConfig())
    # a sampler that agrees with the trainer changes nothing
    agreeing = dataclasses.replace(batch, sampler_logprobs=old.clone())
    plain, _ = run_update(model, batch, old=old)
    corrected, _ = run_update(model, agreeing, old=old, tis_cap=2.0)
    assert all(torch.allclose(a, b, atol=SGD_STEP_ATOL)
               for a, b in zip(plain.parameters(), corrected.parameters()))
    # a sampler 1 nat less confident on every token: ratio e > cap 2, so every token's loss is
    # doubled, which for one SGD step (one mini-batch) is the update of a doubled learning rate
    doubted = dataclasses.replace(batch, sampler_logprobs=(old - 1.0) * batch.response_mask)
    capped, _ = run_update(model, doubted, old=old, tis_cap=2.0, max_grad_norm=1e9, minibatches=1)
    doubled, _ = run_update(model, batch, old=old, max_grad_norm=1e9, minibatches=1)
    for start, a, b in zip(model.parameters(), capped.parameters(), doubled.parameters()):
        assert torch.allclose(a - start, 2 * (b - start), atol=SGD_STEP_ATOL)


def test_sampler_mismatch_statistics():
    old = torch.tensor([[-1.0, -2.0, 0.0]])
    sampler = torch.tensor([[-1.5, -2.0, -9.0]])
    mask = torch.tensor([[1, 1, 0]])  # the third token is padding
    stats = update.sampler_mismatch(old, sampler, mask)
    assert (stats["mismatch_abs_mean"] == pytest.approx(0.25)
            and stats["mismatch_abs_max"] == pytest.approx(0.5))
    assert stats["mismatch_kl"] == pytest.approx((math.exp(0.5) - 1 - 0.5) / 2)


def test_sampler_mismatch_kl_of_a_nearly_identical_fp32_engine_is_tiny_and_never_negative():
    # float32 log-probs 1e-6 apart, as an fp32 engine gives: k3 ≈ Δ²/2 ≈ 5e-13
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        sampler = torch.randn(4, 50, generator=g) - 3.0
        old = sampler + 1e-6 * torch.randn(4, 50, generator=g)
        delta = (old - sampler).double()
        kl = update.sampler_mismatch(old, sampler, torch.ones(4, 50))["mismatch_kl"]
        assert kl == pytest.approx(float((delta**2 / 2).mean()), rel=1e-3)


@pytest.mark.parametrize("sharding", ["ddp", "fsdp2"])
def test_processes_with_unequal_shares_run_the_same_number_of_passes(untrained_model_dir, tmp_path,
                                                                     sharding):
    """FSDP gathers every layer's shards in each forward/backward: all processes must run the same
    passes."""
    accelerate_launch("tests/unequal_shares_update.py", str(untrained_model_dir), str(tmp_path),
                      sharding)
    counts = [json.loads((tmp_path / f"passes_{rank}.json").read_text()) for rank in (0, 1)]
    assert counts[0]["ppo_update"] > 2  # process 0 needs several micro-batches per mini-batch
    for phase in ("monitor", "old_logprobs", "ppo_update", "monitor_after", "update_without_rows"):
        assert counts[0][phase] == counts[1][phase], phase
    assert (counts[0]["grad_norm"] == pytest.approx(counts[1]["grad_norm"])
            and counts[0]["grad_norm"] > 0)


def reference_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None,
                          window_size=(-1, -1), enable_gqa=False):
    """torch.nn.attention.varlen.varlen_attn's documented semantics ([T, heads, head_dim]
    sequences delimited by cu_seq; window (-1, 0): causal), on CPU, for the glue around it."""
    assert window_size == (-1, 0) and torch.equal(cu_seq_q, cu_seq_k) and max_q == max_k
    assert enable_gqa or key.shape[1] == query.shape[1]
    bounds = cu_seq_q.tolist()
    assert max_q == max(b - a for a, b in zip(bounds[:-1], bounds[1:]))
    return torch.cat([torch.nn.functional.scaled_dot_product_attention(
        query[a:b].transpose(0, 1), key[a:b].transpose(0, 1), value[a:b].transpose(0, 1),
        is_causal=True, scale=scale, enable_gqa=enable_gqa).transpose(0, 1)
        for a, b in zip(bounds[:-1], bounds[1:])])


@pytest.mark.parametrize("gqa_in_kernel", [True, False])
def test_the_cuda_varlen_call_gets_the_layout_causality_and_heads_it_documents(monkeypatch,
                                                                                gqa_in_kernel):
    g = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(1, heads, 11, 8, generator=g) for heads in (4, 2, 2))
    cu_seqlens = torch.tensor([0, 3, 4, 11], dtype=torch.int32)
    parameters = dict(inspect.signature(reference_varlen_attn).parameters)
    if not gqa_in_kernel:  # a torch whose varlen_attn takes no enable_gqa: K/V repeated per head
        del parameters["enable_gqa"]
    monkeypatch.setattr(update, "varlen_kernel", lambda: (reference_varlen_attn, parameters))
    out = update._varlen_attention(query, key, value, cu_seqlens, 7, 0.3)
    bounds = cu_seqlens.tolist()
    exact = torch.cat([torch.nn.functional.scaled_dot_product_attention(
        query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True, scale=0.3,
        enable_gqa=True) for a, b in zip(bounds[:-1], bounds[1:])], dim=2).transpose(1, 2)
    assert out.shape == (1, 11, 4, 8) and torch.allclose(out, exact, atol=1e-6)


def test_a_varlen_kernel_without_a_scale_is_refused_for_a_model_with_its_own_scale(monkeypatch):
    parameters = dict(inspect.signature(reference_varlen_attn).parameters)
    del parameters["scale"]  # a torch whose varlen_attn always scales by 1/sqrt(head_dim)
    monkeypatch.setattr(update, "varlen_kernel", lambda: (reference_varlen_attn, parameters))
    query, key, value = (torch.randn(1, heads, 5, 16) for heads in (4, 2, 2))
    cu_seqlens = torch.tensor([0, 2, 5], dtype=torch.int32)
    assert update._varlen_attention(query, key, value, cu_seqlens, 3, 0.25).shape == (1, 5, 4, 16)
    with pytest.raises(ValueError, match="takes no scale"):
        update._varlen_attention(query, key, value, cu_seqlens, 3, 0.3)


def test_the_examples_in_update_docstrings_hold():
    assert doctest.testmod(update).failed == 0


def test_the_command_line_shows_a_groups_advantages_and_where_the_clip_stops_a_token(capsys):
    update.main(["--rewards", "1", "0", "0", "0", "--ratios", "1.5", "0.5"])
    lines = capsys.readouterr().out.splitlines()
    assert "  grpo                   +1.500 -0.500 -0.500 -0.500" in lines
    assert "  dr_grpo                +0.750 -0.250 -0.250 -0.250" in lines
    above, below = [line.split() for line in lines[-2:]]
    # r = 1.5 > 1 + eps_high: a token with A = +1 is clipped (no gradient), one with A = -1 is not
    assert above == ["1.5", "|", "-1.280", "0.000", "|", "1.500", "1.500"]
    # r = 0.5 < 1 - eps_low: the other way round
    assert below == ["0.5", "|", "-0.500", "-0.500", "|", "0.800", "0.000"]
    for argv in (["--rewards", "1"], ["--rewards", "1e308", "0"], ["--rewards", "nan", "0"],
                 ["--ratios", "0"], ["--ratios", "1e308"], ["--eps-high", "nan"]):
        with pytest.raises(SystemExit) as exit:  # numbers that would print nan or inf
            update.main(argv)
        assert exit.value.code == 2 and "error: --r" in capsys.readouterr().err
