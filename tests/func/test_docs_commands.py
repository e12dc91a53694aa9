"""README.md, CONTRIBUTING.md and docs/: every fenced shell command runs, or is mapped to what runs it; every
relative link resolves; README stays a front door.

A ```bash block runs, command by command and in page order, in a fresh copy of the repository's quickstart
project (README.md) or in a copy of that project after `trt-routes apply` (every other page); each command must
exit 0. `trt-routes` is this tree's console script (the entry point in pyproject.toml). What a test cannot run
here is mapped instead:

* `pip install ...` (the part before `&&`): the wheel installed in a fresh venv (tests/func/test_packaging.py)
  and `.ci/run`; what follows `&&` runs.
* `pytest` (the whole suite), `ruff check .`, `lint-imports`, `mypy`: lines of `.ci/run`, which CI runs.
* `python -m pytest ARGS`: its test paths exist and its markers are declared (running the suite from a test
  would run this test again).
* a block tagged `bench` (```` ```bash bench ````): `python bench/X.py`, which tests/func/test_bench.py or
  test_tool_time.py runs in a small configuration.
* a block tagged `needs-torch` or `needs-tensorrt` runs where that library imports, else is skipped with the
  reason; `needs-gpu` and `needs-ray` (a GPU machine, a Ray cluster) are skipped with the reason. The page
  says so beside the block.
* a command piped to `jq` runs without the pipe where jq is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "ARCHITECTURE.md",
                *(REPO / "docs").glob("*.md")])
TAGS = {"", "bench", "needs-gpu", "needs-ray", "needs-torch", "needs-tensorrt"}
CI_RUN = REPO / ".ci" / "run"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    tag: str
    commands: tuple[str, ...]


def _blocks(page: Path) -> list[Block]:
    blocks: list[Block] = []
    text = page.read_text(encoding="utf-8")
    for m in re.finditer(r"^```(?:bash|sh)([^\n]*)\n(.*?)^```", text, flags=re.S | re.M):
        body = m.group(2).replace("\\\n", " ")
        commands = tuple(c.strip() for c in body.splitlines() if c.strip() and not c.strip().startswith("#"))
        blocks.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group(1).strip(), commands))
    return blocks


def _rel(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def _ci_lines() -> set[str]:
    return {line.strip() for line in CI_RUN.read_text(encoding="utf-8").splitlines()}


def _mapped(command: str) -> str | None:
    """Why ``command`` is not run here (and the check that it is covered elsewhere holds), or None to run it."""
    words = shlex.split(command, comments=True)
    if words[:2] == ["pip", "install"]:
        return "install: tests/func/test_packaging.py and .ci/run"
    if command in ("pytest", "ruff check .", "lint-imports", "mypy"):
        assert any(line == command or line.endswith(f"&& {command}") for line in _ci_lines()), \
            f"`{command}` is not a command of .ci/run"
        return ".ci/run"
    if words[:3] == ["python", "-m", "pytest"]:
        markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
        declared = {m.split(":")[0] for m in markers}
        args = words[3:]
        for i, arg in enumerate(args):
            if arg == "-m":
                named = set(re.findall(r"[a-z_]+", args[i + 1])) - {"not", "and", "or"}
                assert named <= declared, f"undeclared markers {named - declared}"
            elif not arg.startswith("-") and (i == 0 or args[i - 1] != "-m"):
                assert (REPO / arg.split("::")[0]).exists(), f"no test path {arg}"
        return "pytest from a test"
    return None


def _strip_install(command: str) -> str:
    if command.startswith("pip install") and "&&" in command:
        return command.split("&&", 1)[1].strip()
    return command


def test_every_block_is_runnable_or_mapped() -> None:
    """Cheap: every block's tag is known, every mapped command's mapping holds (checked in _mapped)."""
    blocks = [b for page in PAGES for b in _blocks(page)]
    assert len(blocks) >= 10
    for block in blocks:
        where = f"{_rel(block.page)}:{block.line}"
        assert block.tag in TAGS, f"{where}: unknown block tag {block.tag!r} (known: {sorted(TAGS)})"
        if block.tag.startswith("needs-"):
            text = block.page.read_text(encoding="utf-8").splitlines()
            before = " ".join(text[max(0, block.line - 4):block.line - 1]).lower()
            assert "need" in before, f"{where}: say beside the block what it needs"
        for command in block.commands:
            if block.tag == "bench":
                m = re.match(r"python (bench/\w+\.py)", command)
                assert m and (REPO / m.group(1)).is_file(), f"{where}: {command}"
                tests = ((REPO / "tests/func/test_bench.py").read_text() +
                         (REPO / "tests/func/test_tool_time.py").read_text())
                assert Path(m.group(1)).name in tests, f"{where}: no test runs {m.group(1)}"
            elif not block.tag:
                _mapped(command)
                _mapped(_strip_install(command))


def test_the_readme_commands_are_the_ones_ci_runs() -> None:
    readme = [c for b in _blocks(REPO / "README.md") for c in b.commands]
    assert readme[:2] == ["pip install -e . && trt-routes apply", "pip install -e '.[test]' && pytest"]
    assert _mapped(_strip_install(readme[1])) == ".ci/run"  # the whole suite, as CI runs it


def test_readme_is_a_front_door() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 210
    for idea in ("trial", "route", "signature", "plan", "lock"):
        assert f"**{idea}**" in text.lower(), idea


def test_every_docs_page_is_listed_in_the_index() -> None:
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    for page in (REPO / "docs").glob("*.md"):
        if page.name != "index.md":
            assert f"]({page.name})" in index, f"docs/index.md does not link {page.name}"


@pytest.mark.parametrize("page", [*PAGES, REPO / "bench" / "README.md", REPO / "recipes" / "ci" / "README.md"],
                         ids=_rel)
def test_every_relative_link_resolves(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{_rel(page)}: broken link {target}"


# --- running the commands ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with this tree's `trt-routes` console script (the entry point pyproject.toml declares)."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, func = scripts["trt-routes"].partition(":")
    folder = tmp_path_factory.mktemp("bin")
    script = folder / "trt-routes"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n"
                      f"sys.argv[0] = 'trt-routes'\nsys.exit({func}())\n")
    script.chmod(0o755)
    (folder / "python").symlink_to(sys.executable)
    return folder


def _fresh_project(where: Path) -> Path:
    """The repository's quickstart project, as a user's checkout has it: tuning.yaml and recipes/."""
    where.mkdir(parents=True)
    shutil.copy2(REPO / "tuning.yaml", where / "tuning.yaml")
    shutil.copytree(REPO / "recipes", where / "recipes", symlinks=True)
    return where



def _run(command: str, cwd: Path, bin_dir: Path) -> None:
    if "| jq" in command and shutil.which("jq") is None:
        command = command.split("| jq")[0]
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(REPO))
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"`{command}` exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def _runnable(block: Block) -> list[str]:
    if block.tag in ("bench", "needs-gpu", "needs-ray"):
        return []
    if block.tag in ("needs-torch", "needs-tensorrt") and importlib.util.find_spec(block.tag[6:]) is None:
        return []
    return [c for c in map(_strip_install, block.commands) if _mapped(c) is None]


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory, bin_dir: Path) -> Path:
    project = _fresh_project(tmp_path_factory.mktemp("applied") / "project")
    _run("trt-routes apply --quiet", project, bin_dir)
    return project


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(b.commands for b in _blocks(p))], ids=_rel)
def test_every_command_of_the_page_runs(page: Path, tmp_path: Path, bin_dir: Path,
                                        request: pytest.FixtureRequest) -> None:
    if page.name == "README.md":
        project = _fresh_project(tmp_path / "project")
    else:
        project = tmp_path / "project"
        shutil.copytree(request.getfixturevalue("applied"), project, symlinks=True)
    ran, skipped = 0, []
    for block in _blocks(page):
        commands = _runnable(block)
        if not commands and block.tag:
            skipped.append(f"line {block.line}: {block.tag}")
        for command in commands:
            _run(command, project, bin_dir)
            ran += 1
    if not ran:
        pytest.skip(f"nothing runs here: {', '.join(skipped)}")
