"""The layering docs/ARCHITECTURE.md states, read from the source (no imports run): no
library module imports a command module, probes/ never imports pandas, analyzer/ never
imports bcc, the workloads or the monitor; the analyzer's subpackages import only the layers
below their own, and jbd2 and xfs never import each other."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"jstall": "src/jstall", "jstall.probes": "probes", "jstall.analyzer": "analyzer",
            "jstall.workloads": "workloads", "jstall.monitor": "monitor"}

#: the analyzer's layers, lowest first: a module may import its own layer and those before it
ANALYZER_LAYERS = (("session",), ("jbd2", "xfs"), ("stalls",), ("advice",), ("analysis", "summary"),
                   ("render",), ("multi",), ("commands",))


def is_command(module):
    """A command module: the `jstall` entry point (cli) or one subcommand's (*_cmd)."""
    last = module.rsplit(".", 1)[-1]
    return last == "cli" or last.endswith("_cmd")


def modules():
    """(package, module name, path) of every Python module of the five packages and their
    subpackages; ``package`` is the module's own package (``jstall.analyzer.jbd2``)."""
    for package, directory in PACKAGES.items():
        base = os.path.join(ROOT, directory)
        for d, dirs, files in os.walk(base):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            rel = os.path.relpath(d, base)
            pkg = package if rel == "." else f"{package}.{rel.replace(os.sep, '.')}"
            for name in sorted(files):
                if name.endswith(".py"):
                    yield pkg, name, os.path.join(d, name)


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


def analyzer_layer(module):
    """The layer index of a jstall.analyzer module name (None for the package itself)."""
    parts = module.split(".")
    if parts[:2] != ["jstall", "analyzer"] or len(parts) < 3:
        return None
    for i, names in enumerate(ANALYZER_LAYERS):
        if parts[2] in names:
            return i
    raise AssertionError(f"{module}: in no layer of ANALYZER_LAYERS")


def test_the_packages_hold_modules():
    found = {package for package, _, _ in modules()}
    assert set(PACKAGES) <= found
    assert {f"jstall.analyzer.{p}" for layer in ANALYZER_LAYERS for p in layer
            if os.path.isdir(os.path.join(ROOT, "analyzer", p))} <= found


def test_no_library_module_imports_a_command_module():
    offenders = [f"{name} imports {m}" for package, name, path in modules() if not is_command(name[:-3])
                 for m in sorted(imports(package, path)) if is_command(m)]
    assert offenders == []


def test_probes_never_import_pandas_and_the_analyzer_never_imports_bcc():
    for package, name, path in modules():
        top = {m.split(".")[0] for m in imports(package, path)}
        if package == "jstall.probes":
            assert "pandas" not in top, name
        if package.startswith("jstall.analyzer"):
            assert "bcc" not in top, name


def test_the_analyzer_never_imports_the_workloads_or_the_monitor():
    offenders = [f"{package}.{name} imports {m}" for package, name, path in modules()
                 if package.startswith("jstall.analyzer")
                 for m in sorted(imports(package, path)) if m.startswith(("jstall.workloads", "jstall.monitor"))]
    assert offenders == []


def test_the_analyzer_layers_import_only_those_below():
    offenders = []
    for package, name, path in modules():
        if not package.startswith("jstall.analyzer") or name == "__init__.py":
            continue
        own = analyzer_layer(f"{package}.{name[:-3]}")
        for m in sorted(imports(package, path)):
            layer = analyzer_layer(m)
            if layer is not None and layer > own:
                offenders.append(f"{package}.{name[:-3]} ({ANALYZER_LAYERS[own]}) imports {m}")
    assert offenders == []


def test_jbd2_and_xfs_never_import_each_other():
    for package, name, path in modules():
        for a, b in (("jbd2", "xfs"), ("xfs", "jbd2")):
            if package == f"jstall.analyzer.{a}":
                assert not [m for m in imports(package, path) if m.startswith(f"jstall.analyzer.{b}")], name
        if package == "jstall" and name in ("jbd2.py", "xfs.py"):
            other = "xfs" if name == "jbd2.py" else "jbd2"
            assert not [m for m in imports(package, path) if m in (f"jstall.{other}",)
                        or m.startswith(f"jstall.{other}.")], name


def test_the_monitor_never_imports_the_workloads():
    offenders = [f"{name} imports {m}" for package, name, path in modules() if package == "jstall.monitor"
                 for m in sorted(imports(package, path)) if m.startswith("jstall.workloads")]
    assert offenders == []


def test_the_layer_check_sees_an_import_that_runs_back_up():
    # the rule itself: a render module importing a command module is above its layer
    assert analyzer_layer("jstall.analyzer.commands.analyze_cmd") > analyzer_layer("jstall.analyzer.render.text")
    assert analyzer_layer("jstall.analyzer.session.load") < analyzer_layer("jstall.analyzer.jbd2.journals")
    assert analyzer_layer("jstall.analyzer") is None
