"""data/make_paper_mix.py: the paper-style training mix from files in the sources' own layouts."""

import tasks
from conftest import ROOT, run_script


def test_paper_mix_from_deepscaler_and_eurus_files_plus_reasoning_gym(tmp_path):
    fixtures = ROOT / "tests" / "fixtures" / "paper_mix"
    result = run_script("data/make_paper_mix.py", "--math-file", str(fixtures / "deepscaler.jsonl"),
                        "--code-file", str(fixtures / "eurus2.jsonl"), "--rg-per-task", "1",
                        "--val-size", "4", "--out-dir", str(tmp_path))
    assert "math                 2 rows" in result.stdout and "(1 dropped" in result.stdout
    # a math row, lost tests
    assert "code                 2 rows" in result.stdout and "(2 dropped" in result.stdout
    train = tasks.load_tasks(tmp_path / "paper_mix_train.jsonl")
    val = tasks.load_tasks(tmp_path / "paper_mix_val.jsonl")
    rows = train + val
    assert len(val) == 4 and len(rows) == 2 + 2 + 17
    tasks.check_answers(rows, "paper mix")  # every ground truth is one its verifier can check
    by_id = {row["id"]: row for row in rows}
    assert by_id["math/0"]["answer"] == "\\frac{3}{2}" and "\\boxed{}" in by_id["math/0"]["prompt"]
    assert by_id["code/codecontests/0"]["answer"] == {"inputs": ["1 2\n", "5 7\n"],
                                                      "outputs": ["3\n", "12\n"]}
    assert by_id["code/apps/3"]["answer"]["fn_name"] == "add"
    assert {row["source"] for row in rows} == {"math", "code", "reasoning_gym"}


def test_paper_mix_without_files_or_hub_says_so(tmp_path):
    result = run_script("data/make_paper_mix.py", "--out-dir", str(tmp_path), check=False,
                        env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode != 0
    assert "error: no local file given and the Hugging Face hub is not reachable" in result.stderr
