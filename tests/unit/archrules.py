"""Checks of the package's shape, on source text (AST), so they are fast and need no import.

Each rule is a function from parsed modules to a list of violations; the
architecture test runs them on the tree and on synthetic violations.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Module:
    name: str  # dotted, e.g. dbmigrate.engine.runner
    path: str  # relative, e.g. dbmigrate/engine/runner.py
    tree: ast.Module
    imports: list[tuple[str, int, bool]] = field(default_factory=list)  # (module, line, top level)
    private: list[tuple[str, int]] = field(default_factory=list)  # ("module._name", line)


def parse(name: str, path: str, source: str) -> Module:
    mod = Module(name, path, ast.parse(source))
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    top_level = {id(n) for n in mod.tree.body}
    type_only = {id(n) for guard in mod.tree.body if _is_type_checking(guard) for n in ast.walk(guard)}
    aliases: dict[str, str] = {}  # local name -> imported module
    for node in ast.walk(mod.tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                mod.imports.append((a.name, node.lineno, id(node) in top_level))
                aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for a in node.names:
                # `from pkg import mod` imports a module; `from mod import name` a name of it
                mod.imports.append((f"{base}.{a.name}", node.lineno, id(node) in top_level))
                mod.imports.append((base, node.lineno, id(node) in top_level))
                if a.name.startswith("_") and not a.name.startswith("__"):
                    mod.private.append((f"{base}.{a.name}", node.lineno))
                aliases[a.asname or a.name] = f"{base}.{a.name}"
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            mod.private.append((f"{aliases[node.value.id]}.{node.attr}", node.lineno))
    return mod


def _is_type_checking(node: ast.stmt) -> bool:
    """`if TYPE_CHECKING:` blocks hold annotations' imports: no runtime dependency."""
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def load_tree(root: Path, package: str = "dbmigrate") -> dict[str, Module]:
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        name = rel[:-3].replace("/", ".")
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        modules[name] = parse(name, rel, path.read_text())
    return modules


# -- layering ---------------------------------------------------------------------

LAYER_RULES = [
    # (importer prefix, forbidden prefixes, why)
    ("dbmigrate.engine", ("dbmigrate.db",), "the engine knows nothing of MySQL"),
    ("dbmigrate.procedures", ("dbmigrate.cli", "dbmigrate.tui", "dbmigrate.app"),
     "procedures never print and never call the front ends' use cases"),
    ("dbmigrate.app", ("dbmigrate.cli", "dbmigrate.tui"), "use cases serve every front end alike"),
]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_violations(modules: dict[str, Module]) -> list[str]:
    out = []
    for mod in modules.values():
        for importer, forbidden, why in LAYER_RULES:
            if not _under(mod.name, importer):
                continue
            for target, line, _top in mod.imports:
                if any(_under(target, f) for f in forbidden):
                    out.append(f"{mod.path}:{line} imports {target} ({why})")
    return sorted(set(out))


# -- front ends ------------------------------------------------------------------------

# What a front end (cli/, tui/) may import of dbmigrate besides its own package: the use
# cases, the table helper, the errors and the run's events.
FRONT_END_MAY_IMPORT = ("dbmigrate.app", "dbmigrate.console_table", "dbmigrate.exceptions", "dbmigrate.engine.events")
FRONT_ENDS = ("dbmigrate.cli", "dbmigrate.tui")
# The commands that rehearse drive the rehearsal package (sandboxes, load, verifier).
REHEARSAL_COMMANDS = ("dbmigrate.cli.rehearse", "dbmigrate.cli.sandbox")
# Beyond that, one command opens the other front end: `dbmigrate tui`.
FRONT_END_EXTRA = {name: ("dbmigrate.rehearsal",) for name in REHEARSAL_COMMANDS} | {"dbmigrate.cli.tui": ("dbmigrate.tui",)}


def front_end_violations(modules: dict[str, Module]) -> list[str]:
    out = []
    for mod in modules.values():
        own = next((f for f in FRONT_ENDS if _under(mod.name, f)), None)
        if own is None:
            continue
        allowed = FRONT_END_MAY_IMPORT + (own,) + FRONT_END_EXTRA.get(mod.name, ())
        for target, line, _top in mod.imports:
            if not _under(target, "dbmigrate") or _of_root_package(target, modules):
                continue
            if not any(_under(target, a) for a in allowed):
                out.append(f"{mod.path}:{line} imports {target} (a front end calls app/ only)")
    return sorted(set(out))


def _of_root_package(target: str, modules: dict[str, Module]) -> bool:
    """The root package itself or a name it defines (the version), not one of its modules."""
    return target == "dbmigrate" or (target.rpartition(".")[0] == "dbmigrate" and target not in modules)


def rehearsal_violations(modules: dict[str, Module]) -> list[str]:
    """The product does not depend on the rehearsal: only the rehearsal and the commands that rehearse import it."""
    out = []
    for mod in modules.values():
        if _under(mod.name, "dbmigrate.rehearsal") or mod.name in REHEARSAL_COMMANDS:
            continue
        for target, line, _top in mod.imports:
            if _under(target, "dbmigrate.rehearsal"):
                out.append(f"{mod.path}:{line} imports {target} (the product does not depend on the rehearsal)")
    return sorted(set(out))


# -- processes -------------------------------------------------------------------------

# Packages that start programs: how a host is reached (hosts/), the external tools (tools/),
# and the rehearsal's own servers and load (not the product).
MAY_START_PROCESSES = ("dbmigrate.hosts", "dbmigrate.tools", "dbmigrate.rehearsal")
_PROCESS_MODULES = ("subprocess", "pty", "multiprocessing")
_PROCESS_CALLS = {("os", n) for n in ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp",
                                       "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp",
                                       "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl",
                                       "spawnle", "spawnlp", "spawnlpe")} | \
                 {("asyncio", "create_subprocess_exec"), ("asyncio", "create_subprocess_shell")}


def process_violations(modules: dict[str, Module], allowed: list["Allowed"]) -> list[str]:
    out = []
    for mod in modules.values():
        if any(_under(mod.name, p) for p in MAY_START_PROCESSES) or any(a.path == mod.path for a in allowed):
            continue
        for target, line, _top in mod.imports:
            if any(_under(target, m) for m in _PROCESS_MODULES) or tuple(target.split(".")) in _PROCESS_CALLS:
                out.append(f"{mod.path}:{line} imports {target} (programs are started in hosts/ or tools/)")
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and (node.value.id, node.attr) in _PROCESS_CALLS:
                out.append(f"{mod.path}:{node.lineno} calls {node.value.id}.{node.attr} "
                           f"(programs are started in hosts/ or tools/)")
    return sorted(set(out))


# -- private names ------------------------------------------------------------------

def private_violations(modules: dict[str, Module]) -> list[str]:
    out = []
    for mod in modules.values():
        for target, line in mod.private:
            owner = target.rpartition(".")[0]
            if owner != mod.name and owner in modules:
                out.append(f"{mod.path}:{line} uses {target}, a private name of another module")
    return sorted(set(out))


@dataclass(frozen=True)
class Reached:
    """A private attribute reached through an object that is accepted, and why."""

    path: str
    attribute: str
    reason: str


def _defined_here(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, module and class attributes, and
    attributes it sets on self/cls (an object of a class of this module may be reached into here)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
    return {n for n in names if n.startswith("_")}


def private_attribute_violations(modules: dict[str, Module], allowed: list[Reached]) -> list[str]:
    """`obj._name` outside the module that defines `_name`: another class's (or library's) insides."""
    out = []
    for mod in modules.values():
        own = _defined_here(mod.tree)
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                continue
            if node.attr in own or any(a.path == mod.path and a.attribute == node.attr for a in allowed):
                continue
            out.append(f"{mod.path}:{node.lineno} reaches {ast.unparse(node)}, a private attribute defined elsewhere")
    return sorted(set(out))


# -- import cycles ---------------------------------------------------------------------

def import_graph(modules: dict[str, Module], top_level_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for mod in modules.values():
        for target, _line, top in mod.imports:
            if top_level_only and not top:
                continue
            if target in modules and target != mod.name and not _is_parent(target, mod.name):
                graph[mod.name].add(target)
    return graph


def _is_parent(package: str, module: str) -> bool:
    # Importing a submodule runs its package's __init__ first; that is not a dependency.
    return module.startswith(package + ".")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_of(mod: Module) -> str:
    """The component a module belongs to: a package of dbmigrate (a module at the top stands for
    itself), and under procedures/ each procedure's package and the kit on their own."""
    package = (mod.name if mod.path.endswith("__init__.py") else mod.name.rpartition(".")[0]).split(".")
    if len(package) == 1:
        return mod.name
    depth = 3 if package[1] == "procedures" and len(package) >= 3 else 2
    return ".".join(package[:depth])


def package_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Imports between packages, counting imports inside functions (type-only imports are not counted)."""
    graph: dict[str, set[str]] = {package_of(m): set() for m in modules.values()}
    for mod in modules.values():
        for target, _line, _top in mod.imports:
            if target in modules and not _is_parent(target, mod.name):
                a, b = package_of(mod), package_of(modules[target])
                if a != b:
                    graph[a].add(b)
    return graph


# -- SQL outside db/ ---------------------------------------------------------------------

_SQL = re.compile(
    r"""^\s*(?:/\*.*?\*/\s*)*(?:
        SELECT\s+(?:[\w@`*(]|DISTINCT\b).*?(?:\bFROM\b|@@|\(|\bAS\b|,)
      | SHOW\s+(?:(?:GLOBAL|SESSION|FULL|CREATE|BINARY|MASTER|SLAVE|REPLICA)\s+)?
            (?:STATUS|VARIABLES|GRANTS|PROCESSLIST|TABLES|DATABASES|SLAVE|REPLICAS?|MASTER|BINARY|CREATE|INDEX|ENGINE|ALL)\b
      | SET\s+(?:(?:GLOBAL|SESSION)\s+[\w.@`]+\s*=|@@[\w.]+\s*=|STATEMENT\s|NAMES\s|PASSWORD\b|sql_log_bin\s*=)
      | INSERT\s+(?:IGNORE\s+)?INTO\s
      | REPLACE\s+INTO\s
      | UPDATE\s+[\w`.{}]+\s+SET\s
      | DELETE\s+FROM\s
      | (?:CREATE|DROP|ALTER)\s+(?:TABLE|DATABASE|SCHEMA|USER|INDEX|VIEW|ROLE|EVENT|TRIGGER|PROCEDURE|FUNCTION)\s+
            (?:IF\s+(?:NOT\s+)?EXISTS\s+)?[\w`.{}%'"@]+\s*(?:$|\(|;|ADD\b|DROP\b|MODIFY\b|CHANGE\b|ENGINE\b|
            LIKE\b|AS\b|SELECT\b|IDENTIFIED\b|ON\b|RENAME\b|FORCE\b|CHARACTER\b|DEFAULT\b)
      | (?:START|STOP|RESET)\s+(?:SLAVE|REPLICA|MASTER|ALL\s+SLAVES|BINARY)\b
      | CHANGE\s+(?:MASTER|REPLICATION\s+SOURCE)\b
      | KILL\s+(?:CONNECTION\s+|QUERY\s+)?(?:\d|%s|\{)
      | FLUSH\s+(?:TABLES|LOGS|PRIVILEGES|BINARY|STATUS)\b
      | GRANT\s+.+\s+TO\s
      | LOCK\s+TABLES?\s
      | (?:DO|CALL)\s+\w+\s*\(
      | PURGE\s+(?:BINARY|MASTER)\s+LOGS\b
      | INSTALL\s+(?:SONAME|PLUGIN)\b
    )""",
    re.I | re.S | re.X,
)
# Prose that quotes SQL (dry-run descriptions with <placeholders>, "..." elisions, lists of
# alternatives) and regular expressions that parse SQL text are not statements sent anywhere.
_PROSE = re.compile(r"<[^<>]+>|\.\.\.|\(\?[:P<!=]|\\s|\[\^|\S\|\S")


def looks_like_sql(text: str) -> bool:
    return bool(_SQL.match(text)) and not _PROSE.search(text)


def _strings(tree: ast.Module):
    """String constants and the literal parts of f-strings, with their lines; docstrings skipped."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # judged whole, with {} for each value
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            yield text, node.lineno
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | parts:
            yield node.value, node.lineno


@dataclass(frozen=True)
class Allowed:
    """An SQL-looking literal outside db/ that is accepted, and why. `starts` None: the whole file."""

    path: str
    starts: str | None
    reason: str

    def covers(self, path: str, text: str) -> bool:
        return path == self.path and (self.starts is None or text.lstrip().startswith(self.starts))


def sql_violations(modules: dict[str, Module], allowed: list[Allowed]) -> list[str]:
    out = []
    for mod in modules.values():
        if _under(mod.name, "dbmigrate.db"):
            continue
        for text, line in _strings(mod.tree):
            if looks_like_sql(text) and not any(a.covers(mod.path, text) for a in allowed):
                out.append(f"{mod.path}:{line} has an SQL statement outside db/: {text[:60]!r}")
    return sorted(set(out))


# -- one fence -------------------------------------------------------------------------

FENCE_MODULE = "dbmigrate/procedures/kit/fence.py"
FENCE_CALLS = ("fence_and_read_binlog_pos",)  # the fence statement (db/applier.py defines it)


def fence_violations(modules: dict[str, Module], fence_fields: set[str]) -> list[str]:
    """Every procedure fences through the kit's fence: the fence statement is sent from
    kit/fence.py alone, and no settings class (`*Params`, `*Settings`) but FenceParams declares a
    fence setting (every procedure's params inherit them)."""
    out = []
    for mod in modules.values():
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in FENCE_CALLS and mod.path != FENCE_MODULE:
                out.append(f"{mod.path}:{node.lineno} sends the fence itself ({node.func.attr}); fence through "
                           f"procedures/kit/fence.py")
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Params", "Settings")) \
                    and not (mod.path == FENCE_MODULE and node.name == "FenceParams"):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                            and item.target.id in fence_fields:
                        out.append(f"{mod.path}:{item.lineno} {node.name} declares the fence setting "
                                   f"{item.target.id} again; inherit FenceParams")
    return sorted(out)


# -- every fencing statement in the kit's fence ------------------------------------------------

# What fences a server, by kind: read_only turned on (the applier's call with anything but a
# literal False, or the statement's text), the global read lock, and the fence's expiry (the
# call that schedules it, or an event's creation: the one event the tool creates).
FENCING_KINDS = ("read_only", "read_lock", "expiry")
_READ_ONLY_CALLS = ("set_read_only", "set_read_only_sql")
_FENCING_CALLS = {"fence_and_read_binlog_pos": ("read_only", "expiry"), "fence_expiry_sql": ("expiry",)}
_FENCING_TEXT = [
    ("read_only", re.compile(r"(?:\bGLOBAL\s+|@@GLOBAL\.)(?:super_)?read_only\s*=\s*['\"]?(?:ON|1|TRUE|\{\})(?!\w)",
                             re.I)),
    ("read_lock", re.compile(r"\bFLUSH\s+TABLES\s+WITH\s+READ\s+LOCK\b", re.I)),
    ("expiry", re.compile(r"(?<!SHOW )\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:DEFINER\s*=\s*\S+\s+)?EVENT\b", re.I)),
]


@dataclass(frozen=True)
class FenceAllowed:
    """A module that may send (or spell) fencing statements of the given kinds, and why."""

    path: str
    kinds: tuple[str, ...]
    reason: str


def _turns_read_only_on(call: ast.Call) -> bool:
    """set_read_only(...) with anything but a literal False: it may turn read_only on."""
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "on"), None)
    return not (isinstance(arg, ast.Constant) and arg.value is False)


def fencing_found(mod: Module) -> list[tuple[int, str, str]]:
    """(line, kind, what) for each fencing statement a module sends or spells."""
    found = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in _READ_ONLY_CALLS and _turns_read_only_on(node):
                found.append((node.lineno, "read_only", f"calls {name}({ast.unparse(node.args[0]) if node.args else ''})"))
            for kind in _FENCING_CALLS.get(name, ()):
                found.append((node.lineno, kind, f"calls {name}"))
    for text, line in _strings(mod.tree):
        for kind, pattern in _FENCING_TEXT:
            match = pattern.search(text)
            if match:
                found.append((line, kind, f"spells {match.group(0)!r}"))
    return found


def fencing_violations(modules: dict[str, Module], allowed: list[FenceAllowed]) -> list[str]:
    """Every fencing statement is sent from the kit's fence (and spelled where the flavours'
    SQL lives), except the named allowances."""
    out = []
    for mod in modules.values():
        for line, kind, what in fencing_found(mod):
            if not any(a.path == mod.path and kind in a.kinds for a in allowed):
                out.append(f"{mod.path}:{line} {what} ({kind}): fence through procedures/kit/fence.py")
    return sorted(set(out))


# -- module-level state ---------------------------------------------------------------------

# Calls whose result cannot change: a module-level name bound to one of them is a constant.
IMMUTABLE_CALLS = {"frozenset", "tuple", "re.compile", "TypeVar", "ParamSpec", "NewType", "Path", "object",
                   "namedtuple", "float", "int", "str", "bytes", "Field", "ConfigDict"}


def _call_name(node: ast.expr) -> str:
    return ast.unparse(node.func) if isinstance(node, ast.Call) else ""


def _is_state(value: ast.expr) -> bool:
    """A container that starts empty (filled while the process runs) or an object made by a call
    that may change: what a test would have to patch, and what two runs in one process share."""
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    if isinstance(value, ast.Call):
        return _call_name(value) not in IMMUTABLE_CALLS
    return False


def module_state(modules: dict[str, Module], under: str, allowed: list["StateAllowed"]) -> list[str]:
    """Module-level mutable state in `under`, except the named allowances."""
    ok = {(a.path, a.name) for a in allowed}
    out = []
    for mod in modules.values():
        if not _under(mod.name, under):
            continue
        for node in mod.tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) and node.value is not None else []
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            for t in targets:
                if isinstance(t, ast.Name) and t.id != "__all__" and value is not None and _is_state(value) \
                        and (mod.path, t.id) not in ok:
                    out.append(f"{mod.path}:{node.lineno} {t.id} is module-level state (pass an object in instead)")
    return sorted(out)


@dataclass(frozen=True)
class StateAllowed:
    path: str
    name: str
    reason: str


# -- the layers docs/architecture.md draws ---------------------------------------------------

def documented_layers(text: str) -> list[tuple[str, list[str]]]:
    """(layer, top-level names) from the table between the layers markers, top first."""
    body = text.split("<!-- layers: begin -->", 1)[1].split("<!-- layers: end -->", 1)[0]
    out = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and "`" in cells[1]:
            out.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return out


def _top_name(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_order_violations(modules: dict[str, Module], layers: list[tuple[str, list[str]]],
                           allowed: list[Reached]) -> list[str]:
    """Imports of a layer above the importer's own; `allowed` names (importer path, imported module)."""
    rank = {name: i for i, (_, names) in enumerate(layers) for name in names}
    ok = {(a.path, a.attribute) for a in allowed}
    out = []
    for mod in modules.values():
        mine = _top_name(mod.name)
        if mine not in rank:
            out.append(f"{mod.path}: {mine} is in no layer of docs/architecture.md")
            continue
        for target, line, _top in mod.imports:
            if target != "dbmigrate" and not target.startswith("dbmigrate."):
                continue
            theirs = "__init__" if _of_root_package(target, modules) else _top_name(target)
            if theirs in rank and rank[theirs] < rank[mine] and (mod.path, ".".join(target.split(".")[:3])) not in ok:
                out.append(f"{mod.path}:{line} imports {target}, a layer above ({layers[rank[theirs]][0]} over "
                           f"{layers[rank[mine]][0]})")
    return sorted(set(out))
