"""Typed parameters. Each method's section, in its own file `params/<method>.yaml`, is

    <method>:
      profile: smoke            # the profile `dvc repro` and the flow run by default
      schedule: "0 3 * * 0"     # cron for the Prefect deployment
      profiles:
        tiny:  {...}            # keys of the method's config model
        smoke: {...}
        paper: {...}

and the chosen profile (plus any `--set key=value` overrides) is validated into the method's
pydantic model before any work starts: an unknown key, a wrong type or an out-of-range value
fails with a message naming the key.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Iterable, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

PROFILES = ("tiny", "smoke", "paper")


class ParamsError(ValueError):
    """Invalid parameters; the message names the file and the key."""


def _against_root(value: str, info: ValidationInfo) -> str:
    root = (info.context or {}).get("root")
    if root is None:
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else Path(root) / path)


# A path in the params files: relative ones are relative to the project root (above params/),
# made absolute when the config is validated with that root (flows.launch.resolve does), so every
# task of a run reads the same file wherever its process runs.
ProjectPath = Annotated[str, AfterValidator(_against_root)]


class StrictModel(BaseModel):
    # validate_default + revalidate_instances: a ProjectPath inside a default (nested) model is
    # resolved like one given in the params files
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, validate_default=True,
                              revalidate_instances="always")


class MethodConfig(StrictModel):
    """Base for every method's config: fields every method has.

    `seed` seeds what a run does once (data draws, a shared warm-up); `seeds` lists the seeds each
    compared variant trains with, so a claim has per-seed values to pair (empty: `[seed]` alone).
    """

    seed: int = 0
    seeds: list[int] = Field(default_factory=list)

    def run_seeds(self) -> list[int]:
        """The seeds each variant trains with: `seeds`, or `seed` alone when none are listed."""
        return list(self.seeds) or [self.seed]

    @model_validator(mode="after")
    def _seeds_distinct(self):
        repeated = sorted({s for s in self.seeds if self.seeds.count(s) > 1})
        if repeated:
            raise ValueError(f"seeds: {repeated} listed more than once")
        return self


ConfigT = TypeVar("ConfigT", bound=BaseModel)


PARAMS_DIR = "params"  # one file per top-level section: params/<section>.yaml holds `<section>:`


def section_file(section: str, folder: str | Path = PARAMS_DIR) -> str:
    """The file holding `section` (`params/dnc.yaml`), as messages and `dvc exp run -S` name it."""
    return f"{Path(folder).name}/{section}.yaml"


# libyaml's parser where PyYAML was built with it (~10x faster: a stage reads the params several
# times), the same safe schema either way
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# a file -> (its text, the parsed mapping): each text is parsed once a process; a file rewritten
# replaces its entry, so a long session that rewrites params keeps one entry a file
_PARSED: dict[Path, tuple[str, dict[str, Any]]] = {}


def _read_section_file(path: Path) -> dict[str, Any]:
    text = path.read_text()
    key = path.resolve()
    cached = _PARSED.get(key)
    if cached is None or cached[0] != text:
        try:
            data = yaml.load(text, Loader=_SAFE_LOADER)
        except yaml.YAMLError as err:
            raise ParamsError(f"{path}: not valid YAML: {err}") from err
        if not isinstance(data, dict):
            raise ParamsError(f"{path}: expected a mapping with one top-level key, {path.stem!r}")
        cached = _PARSED[key] = (text, data)
    return copy.deepcopy(cached[1])  # callers may change what they get


def read_params(folder: str | Path = PARAMS_DIR) -> dict[str, Any]:
    """The union of the folder's `<section>.yaml` files. One file per section (each DVC stage then
    parses only its own small file): a file whose top-level key is not its stem, or a section in
    two files, fails naming the file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ParamsError(f"{folder}: no such parameters folder (one <section>.yaml per section)")
    files = {path: _read_section_file(path) for path in sorted(folder.glob("*.yaml"))}
    where: dict[str, Path] = {}
    for path, data in files.items():
        for section in data:
            if section in where:
                raise ParamsError(f"{where[section]} and {path} both hold section {section!r} "
                                  "(one file per section)")
            where[section] = path
    for path, data in files.items():
        if list(data) != [path.stem]:
            raise ParamsError(f"{path}: top-level keys {list(data)}: a params file holds one section, "
                              f"the one its name says ({path.stem!r})")
    return {section: values for data in files.values() for section, values in data.items()}


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` with the value read as YAML (so `lam=1e-3`, `depths=[1,2]` and `name=x` work)."""
    if "=" not in text:
        raise ParamsError(f"override {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ParamsError(f"override {text!r}: empty key")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ParamsError(f"override {text!r}: value is not valid YAML: {err}") from err
    if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            pass
    return key, value


def _set_dotted(target: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    for part in parts[:-1]:
        node = target.setdefault(part, {})
        if not isinstance(node, dict):
            raise ParamsError(f"override {key!r}: {part!r} is not a section")
        target = node
    target[parts[-1]] = value


def validate(model: type[ConfigT], values: dict[str, Any], where: str, root: str | Path | None = None) -> ConfigT:
    """`values` as `model`; ParamsError names each bad key. `root` resolves ProjectPath fields."""
    try:
        return model.model_validate(values, context={"root": root})
    except ValidationError as err:
        lines = []
        for e in err.errors():
            key = ".".join(str(p) for p in e["loc"]) or "<section>"
            if e["type"] == "extra_forbidden":
                lines.append(f"{where}.{key}: unknown parameter")
            else:
                lines.append(f"{where}.{key}: {e['msg']} (got {e.get('input')!r})")
        raise ParamsError("invalid parameters:\n  " + "\n  ".join(lines)) from None


def method_section(params: dict[str, Any], method: str, source: str = PARAMS_DIR) -> dict[str, Any]:
    where = section_file(method, source)  # the file the section is in
    section = params.get(method)
    if not isinstance(section, dict):
        raise ParamsError(f"{where}: no section {method!r}")
    unknown = set(section) - {"profile", "schedule", "profiles"}
    if unknown:
        raise ParamsError(f"{where}: {method}.{sorted(unknown)[0]}: unknown parameter "
                          "(a method section holds profile, schedule and profiles)")
    return section


def load_method_config(
    model: type[ConfigT],
    params: dict[str, Any],
    method: str,
    profile: str | None = None,
    overrides: Iterable[str] = (),
    source: str = PARAMS_DIR,  # the params folder's name, as messages show it
    root: str | Path | None = None,
) -> tuple[str, ConfigT]:
    """Resolve (profile, validated config) for `method` from a parsed params mapping."""
    where = section_file(method, source)  # the file the section is in
    section = method_section(params, method, source)
    profile = profile or section.get("profile", "smoke")
    if profile not in PROFILES:
        raise ParamsError(f"{where}: {method}.profile: {profile!r} is not one of {', '.join(PROFILES)}")
    profiles = section.get("profiles") or {}
    if profile not in profiles:
        raise ParamsError(f"{where}: {method}.profiles.{profile}: missing")
    values = copy.deepcopy(profiles[profile] or {})  # a nested --set must not edit `params`
    for text in overrides:
        key, value = parse_override(text)
        _set_dotted(values, key, value)
    return profile, validate(model, values, f"{where}: {method}.profiles.{profile}", root)


def load_data_config(
    model: type[ConfigT],
    params: dict[str, Any],
    section_name: str,
    follows: str,
    profile: str | None = None,
    overrides: Iterable[str] = (),
    source: str = PARAMS_DIR,
    root: str | Path | None = None,
) -> tuple[str, ConfigT]:
    """(profile, validated config) of a shared data-prep section (`wsi`, `tulu`): it holds only
    `profiles`, and the profile is the one the method that reads the data (`follows`) names, so one
    switch sets data and model scale together; `profile` overrides it."""
    where = section_file(section_name, source)  # the file the section is in
    section = params.get(section_name)
    if not isinstance(section, dict):
        raise ParamsError(f"{where}: no section {section_name!r}")
    unknown = set(section) - {"profiles"}
    if unknown:
        raise ParamsError(f"{where}: {section_name}.{sorted(unknown)[0]}: unknown parameter "
                          f"(the section holds profiles; the profile is {follows}.profile)")
    profile = profile or (params.get(follows) or {}).get("profile", "smoke")
    if profile not in PROFILES:
        raise ParamsError(f"{section_file(follows, source)}: {follows}.profile: {profile!r} is not one of "
                          f"{', '.join(PROFILES)}")
    profiles = section.get("profiles") or {}
    if profile not in profiles:
        raise ParamsError(f"{where}: {section_name}.profiles.{profile}: missing")
    values = copy.deepcopy(profiles[profile] or {})
    for text in overrides:
        _set_dotted(values, *parse_override(text))
    return profile, validate(model, values, f"{where}: {section_name}.profiles.{profile}", root)


def load_section_config(
    model: type[ConfigT],
    params: dict[str, Any],
    section_name: str,
    overrides: Iterable[str] = (),
    source: str = PARAMS_DIR,
) -> ConfigT:
    """The validated config of a section that holds one configuration for every profile
    (`text_corpus`), with `overrides` applied."""
    values = copy.deepcopy(params.get(section_name) or {})
    for text in overrides:
        _set_dotted(values, *parse_override(text))
    return validate(model, values, f"{section_file(section_name, source)}: {section_name}")


class LMShapeConfig(StrictModel):
    """The shape of a small `paperline.nn.causal_lm.CausalLM` (MHA): Memory Decoder's and QFFT's."""

    hidden_size: int = Field(64, ge=1)
    num_layers: int = Field(2, ge=1)
    num_heads: int = Field(2, ge=1)
    head_dim: int = Field(32, ge=1)


class LMTrainConfig(StrictModel):
    """The training budget of a language-model method (TPA, Memory Decoder, QFFT): the parameters
    of `paperline.train.lm.train_lm`, which `LMTrainSettings.from_config` turns into its settings."""

    steps: int = Field(200, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-3, gt=0)
    min_lr: float = Field(3e-4, ge=0)
    warmup_steps: int = Field(10, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    eval_every: int = Field(100, ge=1)
    eval_windows: int = Field(32, ge=1)
    log_every: int = Field(10, ge=1)
    checkpoint_every: int = Field(100, ge=1)

    @model_validator(mode="after")
    def _schedule(self):
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr {self.min_lr} exceeds lr {self.lr}")
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps {self.warmup_steps} ≥ steps {self.steps}")
        return self
