"""Playbooks: the YAML file that says which procedure to run on which cluster, and how.

    procedure: promote
    inventory: inventories/prod.yaml      # relative to this file
    cluster: main
    params: {candidate: db-2, max_lag_s: 5}
    gates:
      - {name: go-ahead, kind: manual, before: cutover}
      - {name: replica-lag, kind: auto, before: cutover}
    hooks:
      before_phase: [./hooks/notify.sh]
      on_failure: [[pagerduty-trigger, --severity, high]]
      timeout_s: 30

Every error names the file, the line and the field, and what would be valid.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, field_validator

from dbmigrate.engine.hooks import HOOK_KINDS, HookRunner
from dbmigrate.engine.step import AutoGate, GateVerdict, ManualGate, Procedure, RunContext
from dbmigrate.exceptions import ConfigError, UsageError
from dbmigrate.procedures import registry
from dbmigrate.yamlload import Locator, error_at, format_validation_error, load_yaml_with_lines

# A command line (split like a shell would) or an argv list.
HookEntry = Union[Annotated[str, Field(min_length=1)], Annotated[list[str], Field(min_length=1)]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GateSpec(_Strict):
    name: str = Field(min_length=1)
    kind: Literal["manual", "auto"]
    before: str = Field(min_length=1)
    prompt: str | None = None


class HooksSpec(_Strict):
    before_phase: list[HookEntry] = []
    after_phase: list[HookEntry] = []
    on_success: list[HookEntry] = []
    on_failure: list[HookEntry] = []
    timeout_s: PositiveFloat = 60.0


class GuardSection(BaseModel):
    """Typed where known, open for the guard feature to validate its own rules."""

    model_config = ConfigDict(extra="allow")
    window_s: PositiveFloat | None = None
    min_samples: PositiveInt | None = None
    rules: list[dict[str, Any]] = []


class PlaybookSpec(_Strict):
    procedure: str = Field(min_length=1)
    cluster: str = Field(min_length=1)
    inventory: str | None = Field(None, min_length=1, description="inventory file, relative to the playbook")
    params: dict[str, Any] = {}
    gates: list[GateSpec] = []
    guard: GuardSection | None = None
    hooks: HooksSpec = HooksSpec()
    journal: str | None = Field(None, min_length=1)
    dry_run: bool = False

    @field_validator("inventory", "journal")
    @classmethod
    def _path_fits(cls, v: str | None) -> str | None:
        # Refused here, with the field's line, rather than as an OSError from the first open.
        if v is not None:
            longest = max(len(part.encode()) for part in v.split("/"))
            if longest > 255 or len(v.encode()) > 4095:
                raise ValueError(f"a path of {len(v)} characters (a file name is at most 255 bytes, "
                                 f"a path at most 4095)")
        return v


@dataclass
class Playbook:
    """A validated playbook plus where it came from (for paths and error lines)."""

    path: Path
    spec: PlaybookSpec
    params: BaseModel
    entry: registry.ProcedureEntry[Any, Any]
    locate: Locator
    sha256: str

    @property
    def procedure(self) -> str:
        return self.spec.procedure

    @property
    def cluster(self) -> str:
        return self.spec.cluster

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def guard_section(self) -> GuardSection | None:
        return self.spec.guard

    def line_of(self, loc: tuple[str | int, ...]) -> int:
        return self.locate(loc) or 0  # 0: unknown, as PlaybookView says

    @property
    def inventory_path(self) -> Path | None:
        return self._relative(self.spec.inventory)

    @property
    def journal_path(self) -> Path | None:
        return self._relative(self.spec.journal)

    def _relative(self, value: str | None) -> Path | None:
        if value is None:
            return None
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def load_inventory(self) -> Any:
        """The playbook's inventory, with its cluster checked; None when it names none. One rule
        for relative paths: in a playbook, from the playbook's directory (said when not found)."""
        from dbmigrate.config import load_inventory

        path = self.inventory_path
        if path is None:
            return None
        try:
            found = path.exists()
        except OSError as e:
            raise self.error_at(("inventory",), f"cannot be read: {e.strerror}",
                                hint="give the inventory's path, relative to the playbook's directory") from None
        if not found:
            raise self.error_at(("inventory",), f"{path}: no such file",
                                hint=f"a relative path in a playbook is from the playbook's directory "
                                     f"({self.base_dir.resolve()}), not from the current directory")
        inventory = load_inventory(path)
        if self.cluster not in inventory.clusters:
            raise self.error_at(("cluster",), f"'{self.cluster}' is not a cluster of {path}",
                                hint=f"clusters there: {', '.join(inventory.clusters) or 'none'}")
        return inventory

    def error_at(self, loc: tuple[str | int, ...], message: str, hint: str | None = None) -> ConfigError:
        return error_at(self.path, self.locate, loc, message, hint)

    def hook_runner(self) -> HookRunner:
        hooks = {kind: getattr(self.spec.hooks, kind) for kind in HOOK_KINDS}
        return HookRunner(hooks, timeout_s=self.spec.hooks.timeout_s, base_dir=self.base_dir)

    def build(self, ctx: RunContext[Any, Any]) -> Procedure:
        """Build the procedure and attach the playbook's gates to its phases."""
        # Procedures may read playbook-level sections (e.g. the guard policy) at build time.
        if ctx.playbook is None:
            ctx.playbook = self
        procedure = self.entry.build(ctx, self.params)
        phases = [p.name for p in procedure.phases]
        for i, gate in enumerate(self.spec.gates):
            if gate.before not in phases:
                raise self.error_at(("gates", i, "before"),
                                    f"'{gate.before}' is not a phase of {procedure.name}; "
                                    f"expected one of {', '.join(phases)}")
            phase = procedure.phase(gate.before)
            if gate.kind == "manual":
                phase.gates.append(ManualGate(gate.name, gate.prompt or ""))
            else:
                phase.gates.append(AutoGate(gate.name, self._gate(self.entry.gates[gate.name])))
        return procedure

    def _gate(self, check: registry.GateCheck[Any, Any]) -> Callable[[RunContext[Any, Any]], GateVerdict | tuple[bool, str]]:
        """The gate as the engine calls it: with the run context, and the params as they are then."""
        return lambda ctx: check(ctx, self.params)


def load_playbook(path: str | Path) -> Playbook:
    path = Path(path)
    data, locate = load_yaml_with_lines(path)
    if not isinstance(data, dict):
        valid = ", ".join(PlaybookSpec.model_fields)
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{path}:{locate(())}: expected a mapping with keys {valid}; got {got}")
    try:
        spec = PlaybookSpec.model_validate(data)
    except ValidationError as exc:
        raise format_validation_error(path, exc, locate, data=data, model=PlaybookSpec) from None

    try:
        entry = registry.get(spec.procedure)
    except UsageError:
        known = ", ".join(registry.known()) or "(none registered)"
        raise error_at(path, locate, ("procedure",),
                       f"'{spec.procedure}' is not a known procedure; expected one of {known}") from None
    try:
        params = entry.params.model_validate(spec.params)
    except ValidationError as exc:
        raise format_validation_error(path, exc, locate, data=data, model=entry.params, prefix=("params",)) from None

    for i, gate in enumerate(spec.gates):
        if gate.kind == "auto" and gate.name not in entry.gates:
            offered = ", ".join(sorted(entry.gates)) or "(this procedure offers none)"
            raise error_at(path, locate, ("gates", i, "name"),
                           f"'{gate.name}' is not an automatic gate of {entry.name}; expected one of {offered}")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return Playbook(path=path, spec=spec, params=params, entry=entry, locate=locate, sha256=sha)
