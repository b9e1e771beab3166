"""The layout's promises: imports flow one way, and the verifier can be copied into another
trainer."""

import ast

from conftest import ROOT

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
