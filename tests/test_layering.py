"""The layering docs/ARCHITECTURE.md states, read from the source (no imports run): no
library module imports a command module, probes/ never imports pandas, analyzer/ never
imports bcc."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"jstall": "src/jstall", "jstall.probes": "probes", "jstall.analyzer": "analyzer",
            "jstall.workloads": "workloads", "jstall.monitor": "monitor"}


def is_command(module):
    """A command module: the `jstall` entry point (cli) or one subcommand's (*_cmd)."""
    last = module.rsplit(".", 1)[-1]
    return last == "cli" or last.endswith("_cmd")


def modules():
    """(package, file name, path) of every Python module of the five packages."""
    for package, directory in PACKAGES.items():
        for name in sorted(os.listdir(os.path.join(ROOT, directory))):
            if name.endswith(".py"):
                yield package, name, os.path.join(ROOT, directory, name)


def imports(package, path):
    """Absolute names of the modules (and names from them) a module imports, at any depth."""
    tree = ast.parse(open(path).read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def test_the_packages_hold_modules():
    found = {package for package, _, _ in modules()}
    assert found == set(PACKAGES)


def test_no_library_module_imports_a_command_module():
    offenders = [f"{name} imports {m}" for package, name, path in modules() if not is_command(name[:-3])
                 for m in sorted(imports(package, path)) if is_command(m)]
    assert offenders == []


def test_probes_never_import_pandas_and_the_analyzer_never_imports_bcc():
    for package, name, path in modules():
        top = {m.split(".")[0] for m in imports(package, path)}
        if package == "jstall.probes":
            assert "pandas" not in top, name
        if package == "jstall.analyzer":
            assert "bcc" not in top, name
