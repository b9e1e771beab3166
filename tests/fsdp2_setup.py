"""What run.setup builds under FSDP2, checked on every process (launched by tests/test_fsdp.py with
configs/fsdp_cpu.yaml: 2 CPU processes, bf16, cpu_ram_efficient_loading).

    accelerate launch --config_file configs/fsdp_cpu.yaml tests/fsdp2_setup.py MODEL_DIR OUT_DIR

Each process writes OUT_DIR/rank_R.json: its log-probs' dtype, their error against the unsharded
fp32 model and that model's largest log-prob, whether they are all bf16-representable, |params| of
policy and reference, the KL between them before and after an update, and after the reference reset.
"""

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rollout  # noqa: E402
import train_brorl  # noqa: E402
import update  # noqa: E402
from run import reshard, setup  # noqa: E402


def main() -> None:
    model_dir, out_dir = sys.argv[1], Path(sys.argv[2])
    cfg = train_brorl.parse_config(["--preset", "smoke", "--model", model_dir, "--kl-coef", "0.01",
                                    "--output-dir", str(out_dir / "run")])
    run = setup(cfg)
    # every process's own fp32 copy (cpu_ram_efficient_loading would load zeros off rank 0)
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "false"
    fp32_model = rollout.load_policy(model_dir)[0]
    g = torch.Generator().manual_seed(0)
    batch = update.TrainBatch(
        prompt_ids=torch.randint(3, 20, (4, 6), generator=g),
        prompt_mask=torch.ones(4, 6, dtype=torch.long),
        response_ids=torch.randint(3, 20, (4, 5), generator=g),
        response_mask=torch.ones(4, 5, dtype=torch.long),
        advantages=torch.tensor([1.0, -1.0, 0.5, -0.5]))
    cfg_update = update.UpdateConfig(minibatches=1)
    logprobs = update.batch_logprobs(run.policy, batch, cfg_update)
    reference = update.batch_logprobs(update.Policy(fp32_model), batch, cfg_update)
    ref_logprobs = update.batch_logprobs(run.ref_policy, batch, cfg_update)
    reshard(run.policy)
    reshard(run.ref_policy)

    def local_abs_sum(module):
        return float(sum(p.to_local().abs().sum() for p in module.parameters()))

    result = {
        "dtype": str(logprobs.dtype),
        "all_bf16_representable": bool((logprobs == logprobs.bfloat16().float()).all()),
        "max_error_vs_fp32": float((logprobs - reference).abs().max()),
        "max_abs_fp32_logprob": float(reference.abs().max()),
        "policy_abs_sum": local_abs_sum(run.policy),
        "reference_abs_sum": local_abs_sum(run.ref_policy),
        "kl_before_update": float((logprobs - ref_logprobs).abs().max()),
        "tied": run.policy.model.lm_head.weight is run.policy.model.model.embed_tokens.weight,
    }
    update.ppo_update(run.policy, run.optimizer, batch, logprobs, cfg_update)
    moved = update.batch_logprobs(run.policy, batch, cfg_update)
    result["kl_after_update"] = float((moved - ref_logprobs).abs().max())
    run.reset_reference(step=1)
    after_reset = update.batch_logprobs(run.ref_policy, batch, cfg_update)
    result["kl_after_reset"] = float((moved - after_reset).abs().max())
    (out_dir / f"rank_{run.rank}.json").write_text(json.dumps(result))
    run.close()


if __name__ == "__main__":
    main()
