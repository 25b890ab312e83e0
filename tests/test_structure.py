"""The house rules of amb_dspy/, measured on its source: small functions and files, no import cycle, no
task kind read from text by a regex, settings read by their section.

Two more rules have their own tests: every exception class is under ``AmbError``
(tests/test_errors.py) and only ``amb_dspy/config`` touches ``os.environ`` (tests/test_config.py).
Everything here reads the source with :mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import amb_dspy

PACKAGE = Path(amb_dspy.__file__).parent
OPTIMIZE = PACKAGE.parent / "optimize"
MAX_FUNCTION_LINES = 50  # amb_dspy/ and optimize/ alike
MAX_FILE_LINES = 400
MAX_VIEW_PARAMETERS = 8  # a memory view's constructor: its parts and settings come typed (RankWeights, a Ranking)

# Being reworked on branch strategy right now (the `amb run` command, the loop, the answering): the lead removes
# these after merging it, splitting `run` and converting those files' flat setting names.
SPLIT_ELSEWHERE_FUNCTIONS: set[tuple[str, str]] = set()
FLAT_READS_ELSEWHERE: set = set()

TASK_KIND_WORDS = ("NORMAL", "CROSS_VALIDATE", "IMAGE", "MEMORY", "ANSWER")  # storage.insight_doc.TaskKind
TASK_KIND_NAMES = {"TaskKind", "CROSS_VALIDATE_TEXT", "IMAGE_TEXT"}
REGEX_FUNCTIONS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _sources() -> dict[str, ast.Module]:
    """Each module of the package by its path relative to the package, parsed."""
    return {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(encoding="utf-8"), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def _module_name(relative: str) -> str:
    parts = ["amb_dspy", *Path(relative).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _long_functions(sources: dict[str, ast.Module], limit: int) -> list[str]:
    return [f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path, tree in sources.items() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit
            and (path, node.name) not in SPLIT_ELSEWHERE_FUNCTIONS]


def test_no_function_in_amb_dspy_or_optimize_is_over_50_lines():
    sources = {**{f"amb_dspy/{path}": tree for path, tree in _sources().items()},
               **{f"optimize/{path.relative_to(OPTIMIZE).as_posix()}": ast.parse(path.read_text(encoding="utf-8"), str(path))
                  for path in sorted(OPTIMIZE.rglob("*.py"))}}
    assert "amb_dspy/bank.py" in sources and "optimize/evaluate.py" in sources  # the check reads the real folders
    long = _long_functions(sources, MAX_FUNCTION_LINES)
    assert not long, "functions over 50 lines (split them into well-named steps):\n" + "\n".join(long)


def test_the_length_check_counts_a_function_from_def_to_its_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(49))
    sources = {"short.py": ast.parse(f"def short():\n{body}"), "long.py": ast.parse(f"def long():\n{body}\n    return x0")}
    assert _long_functions(sources, 50) == ["long.py:1 long (51 lines)"]


def test_no_file_is_over_400_lines():
    long = [f"{path} ({lines} lines)" for path in _sources()
            if (lines := len((PACKAGE / path).read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]
    assert not long, "files over 400 lines:\n" + "\n".join(long)


def _wide_constructors(sources: dict[str, ast.Module], limit: int) -> list[str]:
    """Each class's ``__init__`` that takes more than ``limit`` parameters besides ``self`` (``*args`` and
    ``**kwargs`` count one each)."""
    found = []
    for path, tree in sources.items():
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            for init in (item for item in cls.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"):
                args = init.args
                count = (len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs) + (args.vararg is not None)
                         + (args.kwarg is not None) - 1)
                if count > limit:
                    found.append(f"{path}:{init.lineno} {cls.name}.__init__ ({count} parameters)")
    return found


def test_no_memory_view_constructor_takes_over_8_parameters():
    sources = {path: tree for path, tree in _sources().items() if path.startswith("memory/view/")}
    assert "memory/view/ranking.py" in sources  # the check reads the real folder
    wide = _wide_constructors(sources, MAX_VIEW_PARAMETERS)
    assert not wide, "memory view constructors over 8 parameters (group settings in a typed value):\n" + "\n".join(wide)


def test_the_parameter_check_counts_every_parameter_but_self():
    tree = ast.parse("class A:\n    def __init__(self, a, /, b=1, *c, d, **e): ...\n"
                     "class B:\n    def __init__(self, a, b, c, d): ...\n    def f(self, a, b, c, d, e, f): ...")
    assert _wide_constructors({"x.py": tree}, 4) == ["x.py:2 A.__init__ (5 parameters)"]


def _imported(module: str, is_package: bool, tree: ast.Module, known: set[str]) -> set[str]:
    """The modules of the package that ``module`` imports anywhere in its source (functions included)."""

    def owner(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {owner(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            found |= {owner(f"{target}.{alias.name}") for alias in node.names}
    return {name for name in found if name and name.startswith("amb_dspy") and name != module}


def _import_graph() -> dict[str, set[str]]:
    sources = _sources()
    known = {_module_name(path) for path in sources}
    graph = {_module_name(path): _imported(_module_name(path), path.endswith("__init__.py"), tree, known)
             for path, tree in sources.items()}
    # amb_dspy/__init__ hands users MemoryBank, TaskSession, AmbConfig... lazily (module __getattr__): a module
    # that reads amb_dspy.__version__ does not depend on them (the same exception as pyproject's import-linter).
    graph["amb_dspy"] = {name for name in graph["amb_dspy"] if name.startswith("amb_dspy.config")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            if group:
                groups.append(sorted([node, *group]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_cycle_finder_finds_a_cycle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle_at_module_or_function_level():
    graph = _import_graph()
    assert {"amb_dspy.bank", "amb_dspy.task.session", "amb_dspy.longterm.edge"} <= set(graph)
    assert "amb_dspy.task.session" in graph["amb_dspy.bank"]  # the walk sees real imports
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _regex_call(node: ast.AST) -> ast.expr | None:
    """The pattern argument of a ``re.<function>(pattern, ...)`` call, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
            and node.func.attr in REGEX_FUNCTIONS and isinstance(node.func.value, ast.Name)
            and node.func.value.id in {"re", "regex"}):
        return node.args[0]
    return None


def _names_a_task_kind(pattern: ast.expr) -> bool:
    for part in ast.walk(pattern):
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            text = part.value
            if any(word in text for word in TASK_KIND_WORDS) or "cross" in text.lower():
                return True
        name = part.id if isinstance(part, ast.Name) else part.attr if isinstance(part, ast.Attribute) else ""
        if name in TASK_KIND_NAMES or any(word in name for word in TASK_KIND_WORDS):  # CROSS_VALIDATE_PREFIX
            return True
    return False


def test_no_regex_names_a_task_kind():
    found = [f"{path}:{node.lineno}" for path, tree in _sources().items() for node in ast.walk(tree)
             if (pattern := _regex_call(node)) is not None and _names_a_task_kind(pattern)]
    assert not found, "task kinds are typed (storage.insight_doc.TaskKind), not read from text:\n" + "\n".join(found)


def test_the_regex_check_sees_a_kind_in_a_pattern():
    tree = ast.parse('import re\nre.compile(r"^CROSS_VALIDATE\\s*\\[")\nre.match(IMAGE_TEXT, s)\n'
                     're.sub("a", "b", s)\nre.compile(rf"^{CROSS_VALIDATE_PREFIX} (\\[[^\\]]*\\])")')
    flagged = [node.lineno for node in ast.walk(tree)
               if (pattern := _regex_call(node)) is not None and _names_a_task_kind(pattern)]
    assert flagged == [2, 3, 5]


def _flat_setting_reads(tree: ast.Module) -> list[tuple[int, set[str]]]:
    """``<...>config.<flat name>`` reads (the compatibility spelling): each one's line and the functions
    it is inside."""
    from amb_dspy.config.settings import FLAT_NAMES

    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [(node.lineno, {f.name for f in functions if f.lineno <= node.lineno <= f.end_lineno})
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in FLAT_NAMES
            and ((base := ast.unparse(node.value)) == "config" or base.endswith(".config"))]


def test_settings_are_read_by_their_section():
    """``config.loops.max_loops``, not ``config.max_loops``: the flat names are for users (a compatibility
    layer, amb_dspy.config); the package itself says which section a setting belongs to."""
    flat = [f"{path}:{line}" for path, tree in _sources().items()
            if not path.startswith("config/") and path not in FLAT_READS_ELSEWHERE
            for line, functions in _flat_setting_reads(tree)
            if not any((path, name) in FLAT_READS_ELSEWHERE for name in functions)]
    assert not flat, "flat setting names read inside amb_dspy (read the section):\n" + "\n".join(flat)


def test_the_flat_read_check_sees_a_flat_name():
    tree = ast.parse("def f(session):\n    return session.config.max_loops, session.config.loops.max_loops")
    assert _flat_setting_reads(tree) == [(2, {"f"})]


# --- rooms: the memory never reaches up into the task ---------------------------------------------------------
def _imports_into(graph: dict[str, set[str]], lower: str, upper: str) -> list[str]:
    """Each ``module -> imported`` of ``graph`` from the room (package) ``lower`` into the room ``upper``."""

    def within(name: str, room: str) -> bool:
        return name == room or name.startswith(f"{room}.")

    return sorted(f"{module} -> {imported}" for module, found in graph.items() if within(module, lower)
                  for imported in found if within(imported, upper))


def test_no_module_of_the_memory_room_imports_the_task_room():
    """amb_dspy/memory/ is a floor below amb_dspy/task/: the writer takes plain inputs (texts, its own
    ToolResponse) and returns what it did; the task applies it. Any form counts, inside functions too."""
    graph = _import_graph()
    assert "amb_dspy.memory.writer" in graph and "amb_dspy.memory.writer" in graph["amb_dspy.task.memory"]
    upward = _imports_into(graph, "amb_dspy.memory", "amb_dspy.task")
    assert not upward, "the memory room imports the task room (pass plain values down instead):\n" + "\n".join(upward)


def test_the_room_check_sees_every_form_of_import():
    known = {"amb_dspy.memory", "amb_dspy.memory.writer", "amb_dspy.task", "amb_dspy.task.state",
             "amb_dspy.task.adapter", "amb_dspy.storage"}
    forms = {"import amb_dspy.task.state": "amb_dspy.task.state", "from amb_dspy import task": "amb_dspy.task",
             "from amb_dspy.task.adapter import knowledge_text": "amb_dspy.task.adapter",
             "def later():\n    from ..task import state": "amb_dspy.task.state",
             "import amb_dspy.task as t": "amb_dspy.task", "from amb_dspy.storage import X": None}
    for source, expected in forms.items():
        graph = {"amb_dspy.memory.writer": _imported("amb_dspy.memory.writer", False, ast.parse(source), known)}
        assert _imports_into(graph, "amb_dspy.memory", "amb_dspy.task") == (
            [f"amb_dspy.memory.writer -> {expected}"] if expected else []), source


# --- no mixin: a class sets (or declares, or inherits) every attribute its methods read -------------------------
PLAIN_BASES = {"object", "ABC", "Generic", "Protocol"}  # bases that give a class no attribute of their own
# The store's file side, a base of MemoryStore that reads the store's graph, tree, index...: on the branch that
# gives the bank a PostgreSQL store (pgbank) the store's saving is reworked; compose it or declare its parts there,
# then the lead removes this line.
MIXINS_ELSEWHERE = {"amb_dspy/memory/bank_io.py StoreFiles"}


def _repo_sources() -> dict[str, ast.Module]:
    """The modules of amb_dspy/ and optimize/, by their path from the repository."""
    return {path.relative_to(PACKAGE.parent).as_posix(): ast.parse(path.read_text(encoding="utf-8"), str(path))
            for root in (PACKAGE, OPTIMIZE) for path in sorted(root.rglob("*.py"))}


def _methods(cls: ast.ClassDef) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """The class's instance methods and the name their first parameter gives the instance (``self``)."""
    found = []
    for item in cls.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        decorators = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in item.decorator_list}
        params = [*item.args.posonlyargs, *item.args.args]
        if params and not decorators & {"staticmethod", "classmethod"}:
            found.append((item, params[0].arg))
    return found


def _walk_method(method: ast.AST):
    """The nodes of a method, not those of a class defined inside it (whose ``self`` is another)."""
    stack = list(ast.iter_child_nodes(method))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def _self_attributes(cls: ast.ClassDef) -> tuple[set[str], dict[str, int]]:
    """What the class gives itself (names of its body: fields, annotations, methods, properties; ``self.X = ...``,
    ``setattr(self, "X", ...)`` in its methods) and the ``self.X`` its methods read, each at its first line."""
    given: set[str] = set()
    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            given.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            given.add(item.target.id)
        elif isinstance(item, ast.Assign):
            given |= {name.id for target in item.targets for name in ast.walk(target) if isinstance(name, ast.Name)}
    read: dict[str, int] = {}
    for method, me in _methods(cls):
        for node in _walk_method(method):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == me:
                if isinstance(node.ctx, (ast.Store, ast.Del)):
                    given.add(node.attr)
                else:
                    read.setdefault(node.attr, node.lineno)
            elif (isinstance(node, ast.Call) and ast.unparse(node.func) in {"setattr", "object.__setattr__"}
                  and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == me
                  and isinstance(node.args[1], ast.Constant)):
                given.add(node.args[1].value)
    return given, read


def _repo_imports(tree: ast.Module) -> dict[str, bool]:
    """Each name a module imports, and whether it comes from this repository (amb_dspy, optimize, relative)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            ours = node.level > 0 or (node.module or "").split(".")[0] in {"amb_dspy", "optimize"}
            names |= {(alias.asname or alias.name): ours for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0]: False for alias in node.names}
    return names


def _unset_attributes(sources: dict[str, ast.Module]) -> list[str]:
    """``path:line Class.attribute`` for each attribute a class's methods read that neither the class nor a base
    class of this repository sets, declares or defines (the mixin that relies on another class's ``__init__``).
    Not judged: a class with a base from outside (pydantic, dspy, Exception, NamedTuple, Enum...), and a class
    mixed into one (a library's connection class): their attributes may come from there."""
    classes: dict[str, list[tuple[ast.ClassDef, dict[str, bool]]]] = {}
    for tree in sources.values():
        imports = _repo_imports(tree)
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            classes.setdefault(cls.name, []).append((cls, imports))

    def base_name(base: ast.expr, imports: dict[str, bool]) -> str | None:
        """A base's class name here, "" for a plain base (object, ABC, Protocol...), None for one from outside."""
        base = base.value if isinstance(base, ast.Subscript) else base
        name = base.id if isinstance(base, ast.Name) else ast.unparse(base)
        if name.rpartition(".")[2] in PLAIN_BASES and (isinstance(base, ast.Name) or name.startswith(("abc.", "typing."))):
            return ""
        return name if isinstance(base, ast.Name) and imports.get(name, True) and name in classes else None

    mixed_out = {name for entries in classes.values() for cls, imports in entries
                 if None in (names := [base_name(b, imports) for b in cls.bases]) for name in names if name}

    def provided(cls: ast.ClassDef, imports: dict[str, bool], seen: frozenset = frozenset()) -> set[str] | None:
        """What ``cls`` and its bases give an instance; None when a base is not this repository's."""
        given = _self_attributes(cls)[0]
        for base in cls.bases:
            name = base_name(base, imports)
            if name is None or name in seen:
                return None
            for parent, parent_imports in classes.get(name, []):
                inherited = provided(parent, parent_imports, seen | {name})
                if inherited is None:
                    return None
                given |= inherited
        return given

    unset = []
    for path, tree in sources.items():
        imports = _repo_imports(tree)
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name not in mixed_out):
            given = provided(cls, imports)
            if given is None:
                continue
            read = _self_attributes(cls)[1]
            unset += [f"{path}:{line} {cls.name}.{name}" for name, line in sorted(read.items())
                      if name not in given and not (name.startswith("__") and name.endswith("__"))]
    return unset


def test_no_class_reads_an_attribute_it_never_sets():
    """A class's parts are its own: set in its ``__init__`` (or another of its methods), declared as fields, or
    inherited from a base class here that sets them; never left for a subclass or a sibling to set."""
    sources = _repo_sources()
    assert "amb_dspy/task/memory.py" in sources and "optimize/runner.py" in sources  # the check reads the real folders
    unset = [line for line in _unset_attributes(sources)
             if f"{line.split(':')[0]} {line.split()[1].split('.')[0]}" not in MIXINS_ELSEWHERE]
    assert not unset, "attributes read but never set by the class or its bases (compose the parts):\n" + "\n".join(unset)


def test_the_attribute_check_finds_a_mixin_and_spares_what_sets_or_declares_its_parts():
    tree = ast.parse(
        "from dataclasses import dataclass\nfrom typing import Protocol\nimport dspy\nfrom pydantic import BaseModel\n"
        "class Mixin:\n    def plan(self):\n        return self.runner.call(self.state)\n"
        "class Session(Mixin):\n    def __init__(self):\n        self.runner = None\n"
        "class Base:\n    def __init__(self):\n        self.store = 1\n    @property\n    def size(self): return 2\n"
        "class Child(Base):\n    def count(self):\n        return self.store + self.size + self.later\n"
        "    def set_later(self):\n        self.later = 3\n"
        "@dataclass\nclass Fields:\n    store: int\n    def twice(self): return self.store * 2\n"
        "class Reader(Protocol):\n    name: str\n    def shown(self) -> str: return self.name\n"
        "class Agent(dspy.Module):\n    def forward(self): return self.predictor()\n"
        "class Model(BaseModel):\n    def total(self): return self.model_fields\n"
        "class Frozen:\n    def __init__(self):\n        object.__setattr__(self, 'x', 1)\n"
        "    def read(self): return self.x\n")
    assert _unset_attributes({"m.py": tree}) == ["m.py:7 Mixin.runner", "m.py:7 Mixin.state"]
