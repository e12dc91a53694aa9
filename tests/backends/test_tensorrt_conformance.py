"""The TensorRT backend and its stand-ins checked against the REAL ``tensorrt`` bindings and the REAL
cuda-python, on a machine without TensorRT's libraries or a GPU.

TensorRT's bindings wheels (``tensorrt-cu12-bindings``, ``tensorrt-cu13-bindings``, about 1.3 MB) are
downloaded with pip at test time into pytest's cache (never committed: NVIDIA's licence) and unpacked.
Their extension links against libnvinfer.so.11, libnvonnxparser.so.11 and libnvinfer_plugin.so.11 for
nine C functions; tests/backends/trt_stub.c (factories returning NULL) is compiled with the system C
compiler under each library name, put on LD_LIBRARY_PATH, and the real module is imported in a
subprocess (tests/backends/_probe_tensorrt.py) that describes it. cuda-python's ``cuda-bindings`` (12.x
and 13.x) installs and imports without a GPU; tests/backends/_probe_cuda.py describes it.

Checked: every TensorRT / cuda-python name the backend's source uses (tests/backends/_trt_uses.py walks
it), the settings' TensorRT names, the stand-ins' public names, signatures and enum values, and the
behaviours the backend relies on (a failed factory raises TypeError, DataType.itemsize, nptype, the
distribution metadata that tells cu12 from cu13). Skips, with the reason, only where pip cannot download
or no C compiler exists; with TRT_ROUTES_REQUIRE_CONFORMANCE=1 (CI) those skips fail instead."""

from __future__ import annotations

import ast
import ctypes
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDIN = REPO / "tests" / "standin"
BACKEND = REPO / "trt_routes" / "backends" / "tensorrt"
SOURCES = [*sorted(BACKEND.glob("*.py")), REPO / "trt_routes" / "backends" / "cuda_device.py"]
sys.path.insert(0, str(HERE))

from _trt_uses import DYNAMIC, ROOTS, analyze, root_occurrences  # noqa: E402

pytestmark = pytest.mark.slow  # sets up the real bindings and the stub per flavour: ~1 min of setup

FLAVORS = {"cu12": "tensorrt-cu12-bindings>=11.1", "cu13": "tensorrt-cu13-bindings>=11.1"}
CUDA_PYTHON = {"12": "cuda-bindings>=12,<13", "13": "cuda-bindings>=13"}
#: What tensorrt-cu12's (and cu13's) sdist ships as tensorrt/__init__.py: the bindings, re-exported.
TENSORRT_SHIM = "from tensorrt_bindings import *\nfrom tensorrt_bindings import __version__\n"
#: Public names of the stand-ins that are test controls, not TensorRT / cuda-python API.
STANDIN_ONLY_TRT = {"STANDIN", "CATALOG", "ENGINE_MAGIC", "CACHE_MAGIC", "SUPPORTED_OPS", "inspect_engine"}
STANDIN_ONLY_CUDA = {"DEVICES", "RUNTIME_VERSION", "DRIVER_VERSION", "live_allocations", "live_streams",
                     "live_events", "live_graphs"}
#: The anchors of what this round fixed: the analyzer must see each use (it found the code it checks).
EXPECTED_USES = {
    "tensorrt.Builder.build_serialized_network",
    "tensorrt.IBuilderConfig.build_route (set)",
    "tensorrt.IBuilderConfig.all_build_routes",
    "tensorrt.Runtime.deserialize_cuda_engine",
    "tensorrt.Runtime.engine_host_code_allowed (set)",
    "tensorrt.IExecutionContext.execute_async_v3",
    "tensorrt.DataType.itemsize",
    "tensorrt.ILogger.log (overridden)",
    "tensorrt.IBuilderConfig.create_timing_cache",
    "tensorrt.OnnxParser.get_error",
    "tensorrt.ParserError.node_operator",
    "tensorrt.ParserError.desc",
    "tensorrt.IExecutionContext.report_to_profiler",
    "tensorrt.IExecutionContext.profiler (set)",
    "tensorrt.IExecutionContext.enqueue_emits_profile (set)",
    "tensorrt.IProfiler.report_layer_time (overridden)",
    "tensorrt.ICudaEngine.create_engine_inspector",
    "tensorrt.EngineInspector.get_engine_information",
    "tensorrt.ITensor.is_shape_tensor",
    "tensorrt.IOptimizationProfile.set_shape_input",
    "tensorrt.ICudaEngine.is_shape_inference_io",
    "cuda.bindings.runtime.cudaGraphLaunch",
    "cuda.bindings.runtime.cudaStreamEndCapture[1]",
    "cuda.bindings.runtime.cudaEventCreate -> (cudaError_t, cudaEvent_t)",
}


# -- fetching the real modules ---------------------------------------------------------------------
def _unavailable(reason: str) -> NoReturn:
    """Skip, or fail where the run must not pass without the real modules (TRT_ROUTES_REQUIRE_CONFORMANCE)."""
    if os.environ.get("TRT_ROUTES_REQUIRE_CONFORMANCE") == "1":
        pytest.fail(f"{reason} (TRT_ROUTES_REQUIRE_CONFORMANCE=1)")
    pytest.skip(reason)


def _cache_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("trt-routes-real-bindings"))
    return tmp_path_factory.mktemp("real-bindings")


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=600, check=False)


def _download_wheel(spec: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        done = _pip("download", "--no-deps", "--only-binary=:all:", "--dest", str(folder), spec)
        wheels = sorted(folder.glob("*.whl"))
        if done.returncode != 0 or not wheels:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            _unavailable(f"pip could not download {spec}: {tail[0]}")
    return wheels[-1]


def _compiler() -> str:
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    _unavailable("no C compiler (cc, gcc or clang) to build the libnvinfer stub")


def _needed_libraries(extension: Path) -> list[str]:
    """The NEEDED entries of the extension that are TensorRT's (readelf; the three 11.x names without it)."""
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", str(extension)], capture_output=True, text=True, check=True).stdout
        return sorted(re.findall(r"\(NEEDED\)\s+Shared library: \[(libnv[^\]]+)\]", out))
    return ["libnvinfer.so.11", "libnvinfer_plugin.so.11", "libnvonnxparser.so.11"]


class RealTensorRT:
    def __init__(self, flavor: str, site: Path, libs: Path, extension: Path, wheel: Path) -> None:
        self.flavor, self.site, self.libs, self.extension, self.wheel = flavor, site, libs, extension, wheel

    def env(self) -> dict[str, str]:
        return {**os.environ, "LD_LIBRARY_PATH": str(self.libs),
                "PYTHONPATH": os.pathsep.join([str(self.site), str(REPO)])}

    def probe(self) -> dict[str, Any]:
        done = subprocess.run([sys.executable, str(HERE / "_probe_tensorrt.py")], capture_output=True, text=True,
                              env=self.env(), cwd=self.site, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=sorted(FLAVORS))
def real_trt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> RealTensorRT:
    flavor = request.param
    root = _cache_dir(request, tmp_path_factory) / flavor
    wheel = _download_wheel(FLAVORS[flavor], root / "wheel")
    compiler = _compiler()
    site = tmp_path_factory.mktemp(f"site-{flavor}")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    (site / "tensorrt").mkdir()
    (site / "tensorrt" / "__init__.py").write_text(TENSORRT_SHIM)
    extension = next(site.glob("tensorrt_bindings/tensorrt*.so"))
    libs = tmp_path_factory.mktemp(f"libs-{flavor}")
    for name in _needed_libraries(extension):
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", f"-Wl,-soname,{name}", "-o", str(libs / name),
                        str(HERE / "trt_stub.c")], check=True, capture_output=True)
    return RealTensorRT(flavor, site, libs, extension, wheel)


@pytest.fixture(scope="module")
def trt_desc(real_trt: RealTensorRT) -> dict[str, Any]:
    return real_trt.probe()


@pytest.fixture(scope="module", params=sorted(CUDA_PYTHON))
def cuda_desc(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    target = _cache_dir(request, tmp_path_factory) / f"cuda-bindings-{request.param}"
    if not (target / "cuda" / "bindings").is_dir():
        done = _pip("install", "--quiet", "--no-compile", "--target", str(target), CUDA_PYTHON[request.param])
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            shutil.rmtree(target, ignore_errors=True)
            _unavailable(f"pip could not install {CUDA_PYTHON[request.param]}: {tail[0]}")
    done = subprocess.run([sys.executable, str(HERE / "_probe_cuda.py")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(target)}, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _other_pythons() -> dict[str, str]:
    """Working interpreters of the supported Python versions other than this one ("3.12" -> its path), found
    under pyenv or on PATH (a pyenv shim of an inactive version does not run, and is left out)."""
    found: dict[str, str] = {}
    for minor in (11, 12, 13, 14):
        if (3, minor) == sys.version_info[:2]:
            continue
        paths = [*sorted(str(p) for p in Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3.{minor}")),
                 shutil.which(f"python3.{minor}")]
        for python in (p for p in paths if p):
            if subprocess.run([python, "-c", "pass"], capture_output=True, check=False).returncode == 0:
                found[f"3.{minor}"] = python
                break
    return found


def test_the_bindings_of_every_python_found_here_have_the_names_the_backend_uses(
        real_trt: RealTensorRT, trt_desc: dict[str, Any], cuda_desc: dict[str, Any], tmp_path: Path) -> None:
    """TensorRT ships one bindings extension per Python version (cp311, cp312, ...): each found on this machine
    is downloaded, imported by its own interpreter against the same stub libraries, described, and the backend's
    every use checked against it, as for this interpreter. Skips where no other Python is installed."""
    others = _other_pythons()
    if not others:
        pytest.skip("no other Python 3.11+ interpreter on this machine")
    spec = FLAVORS[real_trt.flavor].replace(">=11.1", f"=={trt_desc['version']}")
    for version, python in others.items():
        folder = tmp_path / version
        done = _pip("download", "--no-deps", "--only-binary=:all:", "--python-version", version, "--dest",
                    str(folder / "wheel"), spec)
        wheels = sorted((folder / "wheel").glob("*.whl"))
        if done.returncode != 0 or not wheels:
            _unavailable(f"pip could not download {spec} for Python {version}")
        site = folder / "site"
        with zipfile.ZipFile(wheels[-1]) as archive:
            archive.extractall(site)
        (site / "tensorrt").mkdir()
        (site / "tensorrt" / "__init__.py").write_text(TENSORRT_SHIM)
        probed = subprocess.run([python, str(HERE / "_probe_tensorrt.py"), "--names-only"], capture_output=True,
                                text=True, env={**real_trt.env(), "PYTHONPATH": str(site)}, cwd=site, timeout=300,
                                check=False)
        assert probed.returncode == 0, probed.stderr[-3000:]
        desc = json.loads(probed.stdout)
        assert (desc["version"], desc["python"]) == (trt_desc["version"], version)
        report = analyze(SOURCES, desc, cuda_desc)
        assert report.problems == [], f"Python {version}: " + "\n".join(report.problems)


# -- the stub and the import -------------------------------------------------------------------------
def _undefined(path: Path) -> set[str]:
    if not shutil.which("nm"):
        _unavailable("nm (binutils) is not installed: cannot list the extension's undefined symbols")
    out = subprocess.run(["nm", "-D", "--undefined-only", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def test_the_stub_provides_exactly_what_the_extension_needs_from_tensorrt(real_trt: RealTensorRT) -> None:
    """The extension's undefined symbols that neither Python, libc, libm, libgcc nor libstdc++ provides are
    TensorRT's; the stub must export each of them (and nothing else)."""
    process = ctypes.CDLL(None)
    others = [ctypes.CDLL(name) for name in ("libstdc++.so.6", "libm.so.6", "libgcc_s.so.1")]
    needed = {s for s in _undefined(real_trt.extension)
              if not hasattr(process, s) and not any(hasattr(lib, s) for lib in others)}
    needed -= {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__gmon_start__"}  # weak, optional
    for library in sorted(real_trt.libs.iterdir()):
        out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                             check=True).stdout
        stub = {line.split()[-1] for line in out.splitlines() if " T " in line}
        assert needed == stub, f"the extension needs {sorted(needed)}; {library.name} exports {sorted(stub)}"
    assert _needed_libraries(real_trt.extension) == [
        "libnvinfer.so.11", "libnvinfer_plugin.so.11", "libnvonnxparser.so.11"]


def test_real_module_imports_and_its_factories_raise_type_error(trt_desc: dict[str, Any]) -> None:
    assert re.match(r"11\.\d+\.", trt_desc["version"])
    assert trt_desc["factories"] == {
        "Builder": "TypeError: pybind11::init(): factory function returned nullptr",
        "Runtime": "TypeError: pybind11::init(): factory function returned nullptr",
    }
    # the backend turns that TypeError into its reason, from the real module
    reason = trt_desc["backend_unavailable"]
    assert reason.startswith("TensorRT Global Performance Tuner unavailable: tensorrt.Builder could not be created")


def test_real_wheel_metadata_tells_cu12_from_cu13(real_trt: RealTensorRT, trt_desc: dict[str, Any]) -> None:
    found = trt_desc["distribution"]
    assert found["name"] == f"tensorrt_{real_trt.flavor}_bindings"
    assert found["version"] == trt_desc["version"]
    assert found["cuda"] == real_trt.flavor.removeprefix("cu")


# -- the backend's source against the real modules --------------------------------------------------------
def test_every_name_the_backend_uses_exists_in_the_real_modules(trt_desc: dict[str, Any],
                                                                 cuda_desc: dict[str, Any]) -> None:
    report = analyze(SOURCES, trt_desc, cuda_desc)
    problems = sorted(set(report.problems))
    assert problems == [], "\n".join(problems)
    missing = EXPECTED_USES - set(report.uses)
    assert not missing, f"the analyzer no longer sees {sorted(missing)}"
    print(f"{len(set(report.uses))} distinct uses checked against tensorrt {trt_desc['version']} and "
          f"cuda-bindings {cuda_desc['version']}")


def test_roots_and_dynamic_entries_are_in_the_source() -> None:
    """ROOTS and DYNAMIC must describe the source as it is: stale entries would check nothing."""
    assert root_occurrences(SOURCES) == set(ROOTS)
    functions = {(path.name, node.name) for path in SOURCES for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef)}
    assert set(DYNAMIC) <= functions


def test_settings_name_real_tensorrt_members(trt_desc: dict[str, Any]) -> None:
    """Settings reach TensorRT by computed names (Setting.apply): each one checked from SETTINGS."""
    from trt_routes.backends.tensorrt.settings import SETTINGS

    names = trt_desc["names"]
    config = names["IBuilderConfig"]["members"]
    checked = 0
    for setting in SETTINGS.values():
        if setting.config_attr:
            member = config.get(setting.config_attr)
            assert member and member["kind"] == "property" and member["settable"], setting.name
            checked += 1
            if setting.enum:
                members = names[setting.enum]["enum"]
                assert {c.upper() for c in setting.choices} <= set(members), setting.name
        if setting.flag:
            assert setting.flag in names["BuilderFlag"]["enum"], setting.name
            checked += 1
        if setting.pool:
            assert setting.pool in names["MemoryPoolType"]["enum"], setting.name
            checked += 1
        if setting.phase == "build":
            assert setting.config_attr or setting.flag or setting.pool, f"{setting.name} reaches nothing"
    for method in ("set_flag", "clear_flag", "set_memory_pool_limit"):
        assert config[method]["kind"] == "method"
    assert checked == sum(1 for s in SETTINGS.values() if s.phase == "build")


def test_real_datatype_sizes_and_nptype_are_what_the_runner_assumes(trt_desc: dict[str, Any]) -> None:
    from trt_routes.backends.tensorrt.runner import ML_DTYPES, PACKED

    sizes = trt_desc["itemsize"]
    assert {name for name, size in sizes.items() if size == 0.5} == set(PACKED)
    assert set(trt_desc["nptype_raises"]) == set(ML_DTYPES) | set(PACKED)
    assert all(sizes[name] in (1, 2, None) for name in ML_DTYPES)


# -- the stand-ins against the real modules ------------------------------------------------------------
def _load_standin(name: str) -> ModuleType:
    saved = {n: m for n, m in sys.modules.items() if n == name.split(".")[0] or n.startswith(name.split(".")[0] + ".")}
    for n in saved:
        del sys.modules[n]
    sys.path.insert(0, str(STANDIN))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(STANDIN))
        for n in [n for n in sys.modules if n == name.split(".")[0] or n.startswith(name.split(".")[0] + ".")]:
            del sys.modules[n]
        sys.modules.update(saved)
    return module


def _params(func: Any) -> list[inspect.Parameter]:
    return list(inspect.signature(func).parameters.values())


def _compatible(mine: list[inspect.Parameter], real: list[dict[str, Any]]) -> bool:
    """The stand-in's parameters are the real ones, in order, and it requires at least what TensorRT does
    (a default the real one lacks would hide a call TensorRT rejects)."""
    if [p.name for p in mine] != [p["name"] for p in real][: len(mine)]:
        return False
    if any(not p["default"] for p in real[len(mine):]):
        return False
    return all(m.default is inspect.Parameter.empty or r["default"] for m, r in zip(mine, real, strict=False))


def _instance_attributes(module: ModuleType, cls: type) -> set[str]:
    """``self.x = ...`` in the stand-in class's __init__, and dataclass fields: TensorRT has properties there."""
    fields = set(getattr(cls, "__dataclass_fields__", {}))
    tree = ast.parse(Path(module.__file__ or "").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    for sub in ast.walk(item):
                        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and \
                                isinstance(sub.value, ast.Name) and sub.value.id == "self":
                            fields.add(sub.attr)
    return {f for f in fields if not f.startswith("_")}


def test_every_public_name_of_the_tensorrt_standin_exists_in_the_real_module(trt_desc: dict[str, Any]) -> None:
    standin = _load_standin("tensorrt")
    assert standin.__standin__
    real = trt_desc["names"]
    problems: list[str] = []
    for name, value in vars(standin).items():
        if name.startswith("_") or name in STANDIN_ONLY_TRT or inspect.ismodule(value):
            continue
        if getattr(value, "__module__", standin.__name__) != standin.__name__ and not isinstance(value, str):
            continue  # imported helpers (Any, dataclass, IntEnum, np)
        desc = real.get(name)
        if desc is None:
            problems.append(f"tensorrt.{name} is not in the real module")
            continue
        if inspect.isfunction(value):
            if not any(_compatible(_params(value), s["params"]) for s in desc["signatures"]):
                problems.append(f"tensorrt.{name}{inspect.signature(value)} vs {desc['signatures']}")
        elif isinstance(value, type):
            problems += _class_problems(standin, name, value, desc)
    assert problems == [], "\n".join(problems)


def _class_problems(standin: ModuleType, name: str, cls: type, desc: dict[str, Any]) -> list[str]:
    problems = []
    if desc["kind"] != "class":
        return [f"tensorrt.{name} is a class in the stand-in, a {desc['kind']} in TensorRT"]
    enum = getattr(cls, "__members__", None)
    if enum:
        real_enum = desc["enum"] or {}
        for member, value in enum.items():
            if real_enum.get(member) != int(value):
                problems.append(f"tensorrt.{name}.{member} = {int(value)}; TensorRT: {real_enum.get(member)}")
    members = desc["members"]
    for attr, value in vars(cls).items():
        if (attr.startswith("_") and attr != "__init__") or (enum and attr in enum):
            continue
        found = members.get(attr)
        if attr == "__init__" and (cls.__init__ is object.__init__ or _not_constructible(found)):
            continue  # TensorRT makes these objects itself; the stand-in's constructor is its own business
        if found is None:
            problems.append(f"tensorrt.{name}.{attr} is not in the real class")
        elif isinstance(value, property):
            if found["kind"] != "property":
                problems.append(f"tensorrt.{name}.{attr} is a property here, a {found['kind']} in TensorRT")
            elif value.fset is not None and not found["settable"]:
                problems.append(f"tensorrt.{name}.{attr} is settable here, read-only in TensorRT")
        elif inspect.isfunction(value):
            mine = _params(value)
            if found["kind"] != "method" or not any(_compatible(mine, s["params"]) for s in found["signatures"]):
                problems.append(f"tensorrt.{name}.{attr}{inspect.signature(value)} vs "
                                f"{[[p['name'] for p in s['params']] for s in found.get('signatures', [])]}")
        elif isinstance(value, type):
            problems += _class_problems(standin, f"{name}.{attr}", value, found)
    for attr in _instance_attributes(standin, cls):
        found = members.get(attr)
        if found is None or found["kind"] != "property":
            problems.append(f"tensorrt.{name}.{attr} (an attribute of the stand-in) is not a property in TensorRT")
    return problems


def _not_constructible(init: dict[str, Any] | None) -> bool:
    """pybind11 classes without a constructor show object's ``(self, /, *args, **kwargs)``."""
    signatures = (init or {}).get("signatures") or []
    return not signatures or all({"args", "kwargs"} & {p["name"] for p in sig["params"]} for sig in signatures)


def test_every_public_name_of_the_cuda_standin_exists_in_real_cuda_python(cuda_desc: dict[str, Any]) -> None:
    standin = _load_standin("cuda.bindings.runtime")
    problems: list[str] = []
    for name, value in vars(standin).items():
        if name.startswith("_") or name in STANDIN_ONLY_CUDA or inspect.ismodule(value):
            continue
        if getattr(value, "__module__", standin.__name__) != standin.__name__:
            continue
        if inspect.isfunction(value):
            real = cuda_desc["functions"].get(name)
            if real is None:
                problems.append(f"cuda.bindings.runtime.{name} is not in cuda-python")
                continue
            if real["params"] is not None and not _compatible(_params(value), [
                    {**p, "default": p["default"]} for p in real["params"]]):
                problems.append(f"{name}{inspect.signature(value)} vs ({', '.join(p['name'] for p in real['params'])})")
            returns = value.__annotations__.get("return", "")
            arity = len(_split_top(returns.removeprefix("tuple[").removesuffix("]")))
            if real["returns"] and arity != len(real["returns"]):
                problems.append(f"{name} returns {arity} value(s) here, {len(real['returns'])} in cuda-python")
        elif isinstance(value, type):
            members = getattr(value, "__members__", None)
            if members:
                real_enum = cuda_desc["enums"].get(name, {})
                for member, number in members.items():
                    if real_enum.get(member) != int(number):
                        problems.append(f"{name}.{member} = {int(number)}; cuda-python: {real_enum.get(member)}")
            elif name not in cuda_desc["classes"]:
                problems.append(f"cuda.bindings.runtime.{name} is not in cuda-python")
            else:
                attrs = set(cuda_desc["classes"][name])
                public = {a for a in vars(value) if not a.startswith("_")} | _instance_attributes(standin, value)
                public -= {"work", "recorded_ns"}  # the stand-in's own bookkeeping on its handles
                problems += [f"{name}.{a} is not in cuda-python" for a in sorted(public - attrs)]
    assert problems == [], "\n".join(problems)


def _split_top(text: str) -> list[str]:
    out, depth, current = [], 0, ""
    for char in text:
        depth += char in "[("
        depth -= char in "])"
        if char == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += char
    return [p for p in (*out, current) if p.strip()]


def test_cuda_python_tuples_are_err_first_as_the_runner_unpacks_them(cuda_desc: dict[str, Any]) -> None:
    """cuda_check takes (err, *values): the calls made without a GPU return such tuples, as documented."""
    for name, length in cuda_desc["observed_arity"].items():
        assert length == len(cuda_desc["functions"][name]["returns"]), name


def test_standin_datatype_sizes_and_nptype_fail_where_tensorrt_does(trt_desc: dict[str, Any]) -> None:
    standin = _load_standin("tensorrt")
    sizes = {name: member.itemsize for name, member in standin.DataType.__members__.items()}
    assert sizes == {name: trt_desc["itemsize"][name] for name in sizes}
    raises = set()
    for name, member in standin.DataType.__members__.items():
        try:
            standin.nptype(member)
        except TypeError:
            raises.add(name)
    assert raises == set(trt_desc["nptype_raises"]) & set(sizes)
