"""streameval.core is pure: numpy and the standard library, no adapter library, no asyncio."""

import ast
import subprocess
import sys
from pathlib import Path

import streameval.core

FORBIDDEN = {
    "faust",
    "mode",
    "aiokafka",
    "confluent_kafka",
    "kafka",
    "prometheus_client",
    "asyncio",
}
CORE = Path(streameval.core.__file__).parent


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_core_module_imports_an_adapter_library():
    offenders = {
        str(path.relative_to(CORE)): sorted(_imported_roots(path) & FORBIDDEN)
        for path in sorted(CORE.rglob("*.py"))
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_importing_the_core_loads_no_adapter_library():
    code = (
        "import sys, streameval.core, pkgutil, importlib\n"
        "for m in pkgutil.walk_packages(streameval.core.__path__, 'streameval.core.'):\n"
        "    importlib.import_module(m.name)\n"
        f"print(sorted(set({sorted(FORBIDDEN)!r}) & {{n.split('.')[0] for n in sys.modules}}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
