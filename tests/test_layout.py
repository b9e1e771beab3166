"""The layout's promises: imports flow one way, and the verifier can be copied into another
trainer."""

import ast
import json
import re
import runpy
import sys

import pytest

from conftest import ROOT, run_script

MODULES = {path.stem: path for path in ROOT.glob("*.py")}


def project_imports(module: str) -> set[str]:
    """The repository's top-level modules that `module` imports, anywhere in the file."""
    imported = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    return imported & set(MODULES) - {module}


def test_no_module_imports_one_that_imports_it_back():
    graph = {module: project_imports(module) for module in MODULES}
    done, path = set(), []

    def visit(module):
        assert module not in path, \
            f"import circle: {' -> '.join(path[path.index(module):] + [module])}"
        if module in done:
            return
        path.append(module)
        for imported in sorted(graph[module]):
            visit(imported)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def test_the_verifier_imports_nothing_of_the_project_but_its_sandbox():
    assert project_imports("reward") <= {"sandbox"}
    assert project_imports("sandbox") == set()


def test_the_update_and_the_theory_stand_alone():
    assert project_imports("update") == set()
    # the theory checks the trainer's own advantage estimators (update.ADVANTAGES), nothing else
    assert project_imports("simulate") == {"update"}


def test_the_research_instruments_and_eval_stand_apart_from_the_step():
    # allocation.py and monitor.py plug into train_brorl.py, eval.py reads any checkpoint: none
    # imports the trainer
    for module in ("allocation", "monitor", "eval"):
        assert "train_brorl" not in project_imports(module)
    # ... nor the trainer's plumbing: a checkpoint is read by checkpoints.py, which needs no trainer
    for module in ("monitor", "eval"):
        assert "run" not in project_imports(module)
    assert project_imports("checkpoints") == {"tasks"}
    assert project_imports("allocation") <= {"rollout", "tasks", "update"}


def test_every_script_runs_alone_and_says_how_with_help():
    scripts = sorted(str(path.relative_to(ROOT)) for folder in ("", "experiments", "bench", "data")
                     for path in (ROOT / folder).glob("*.py")
                     if re.search(r'^if __name__ == "__main__":', path.read_text(), re.MULTILINE))
    assert {"train_brorl.py", "eval.py", "simulate.py", "rollout.py", "reward.py",
            "update.py"} <= set(scripts)
    helps = [json.loads(line) for line in
             run_script("tests/every_help.py", *scripts).stdout.splitlines()]
    assert [h["script"] for h in helps] == scripts
    for h in helps:
        assert h["code"] == 0 and h["printed"].startswith("usage: "), (h["script"], h["code"])


def test_the_generators_refuse_an_out_that_is_a_file_in_one_line(tmp_path, monkeypatch, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    for script, argv, message in [
            ("tiny_model.py", ["--out", str(a_file)], f"error: --out {a_file} exists"),
            ("data/make_arith.py", ["--out-dir", str(a_file)], "error: --out-dir is a file"),
            ("data/make_arith.py", ["--train", "0"], "error: --train and --test must be >= 1")]:
        monkeypatch.setattr(sys, "argv", [script, *argv])
        with pytest.raises(SystemExit) as exit:
            runpy.run_path(str(ROOT / script), run_name="__main__")
        said = str(exit.value.code) if isinstance(exit.value.code, str) else capsys.readouterr().err
        assert message in said
    assert a_file.read_text() == "kept"
