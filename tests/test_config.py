"""Parameters: typed, strict, and failing before any work with the key named."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from flows import METHODS
from paperline.config import MethodConfig, ParamsError, load_method_config, parse_override, read_params
from paperline.methods.dnc.config import DNCConfig
from tests.conftest import CHECKOUT

PARAMS = read_params(CHECKOUT / "params")


@pytest.mark.parametrize("profile", ["tiny", "smoke", "paper"])
def test_every_profile_of_the_checked_in_params_validates(profile):
    name, cfg = load_method_config(DNCConfig, PARAMS, "dnc", profile)
    assert name == profile and cfg.classes and cfg.depths


def test_default_profile_is_smoke():
    assert load_method_config(DNCConfig, PARAMS, "dnc")[0] == "smoke"


@pytest.mark.parametrize("override, key", [
    ("bogus=1", "dnc.profiles.smoke.bogus: unknown parameter"),
    ("lam=-0.1", "dnc.profiles.smoke.lam"),
    ("depths=[0, 2]", "dnc.profiles.smoke.depths.0"),
    ("classes=[4.5]", "dnc.profiles.smoke.classes.0"),
    ("seeds=many", "dnc.profiles.smoke.seeds"),
    ("seeds=3", "dnc.profiles.smoke.seeds: Input should be a valid list"),  # seeds, not a count
    ("seeds=[1, 1, 2]", "seeds: [1] listed more than once"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ParamsError, match=key.replace(".", r"\.").replace("[", r"\[")):
        load_method_config(DNCConfig, PARAMS, "dnc", "smoke", [override])


def test_unknown_key_in_the_section_and_bad_profile():
    params = {"dnc": {**PARAMS["dnc"], "profil": "tiny"}}
    with pytest.raises(ParamsError, match=r"dnc\.profil: unknown parameter"):
        load_method_config(DNCConfig, params, "dnc")
    with pytest.raises(ParamsError, match="not one of"):
        load_method_config(DNCConfig, PARAMS, "dnc", "huge")
    with pytest.raises(ParamsError, match="no section 'nope'"):
        load_method_config(DNCConfig, PARAMS, "nope")


def test_overrides_are_yaml_values():
    assert parse_override("depths=[1, 2]") == ("depths", [1, 2])
    assert parse_override("lam=1e-3") == ("lam", 1e-3)
    with pytest.raises(ParamsError, match="expected key=value"):
        parse_override("lam")
    _, cfg = load_method_config(DNCConfig, PARAMS, "dnc", "tiny", ["lam=0.01", "seeds=[0, 1, 2]"])
    assert cfg.lam == 0.01 and cfg.seeds == [0, 1, 2]


def test_run_seeds_are_the_listed_seeds_or_seed_alone():
    assert MethodConfig(seed=7).run_seeds() == [7]
    assert MethodConfig(seed=7, seeds=[3, 1]).run_seeds() == [3, 1]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_takes_its_seeds_from_method_config(method):
    """One `seeds` for every method: MethodConfig's list and its run_seeds(), never redeclared by a
    method's config (an int count, or a list with a default of its own, would read otherwise)."""
    model = METHODS[method].load_config_model()
    assert issubclass(model, MethodConfig)
    redeclared = [k.__name__ for k in model.__mro__[:model.__mro__.index(MethodConfig)]
                  if "seeds" in vars(k).get("__annotations__", {}) or "run_seeds" in vars(k)]
    assert not redeclared, f"{method}: {redeclared} redeclare seeds or run_seeds (MethodConfig has them)"
    assert model.model_fields["seeds"].annotation == list[int] and model.model_fields["seeds"].default_factory is list


def test_malformed_params_file_names_the_file(tmp_path):
    bad = tmp_path / "dnc.yaml"
    bad.write_text("dnc: [unclosed\n")
    with pytest.raises(ParamsError, match=str(bad)):
        read_params(tmp_path)


def test_the_params_folder_is_the_union_of_one_file_per_section(tmp_path):
    folder = tmp_path / "params"
    shutil.copytree(CHECKOUT / "params", folder)
    assert read_params(folder) == PARAMS and set(PARAMS) == {p.stem for p in folder.glob("*.yaml")}
    (folder / "dnc.yaml").write_text("dcn:\n  profile: smoke\n")  # a misnamed section
    with pytest.raises(ParamsError, match=rf"{folder / 'dnc.yaml'}: top-level keys \['dcn'\]"):
        read_params(folder)
    (folder / "dnc.yaml").write_text("dnc:\n  profile: smoke\nsumo:\n  profile: tiny\n")  # sumo twice
    with pytest.raises(ParamsError, match=rf"{folder / 'dnc.yaml'} and {folder / 'sumo.yaml'} both hold "
                                          "section 'sumo'"):
        read_params(folder)
    (folder / "dnc.yaml").write_text("- dnc\n")
    with pytest.raises(ParamsError, match=rf"{folder / 'dnc.yaml'}: expected a mapping"):
        read_params(folder)
    with pytest.raises(ParamsError, match="no such parameters folder"):
        read_params(tmp_path / "nope")


def test_a_bad_key_is_named_with_its_sections_file():
    with pytest.raises(ParamsError, match=r"params/dnc.yaml: dnc.profiles.smoke.lamda: unknown parameter"):
        load_method_config(DNCConfig, PARAMS, "dnc", None, ["lamda=1"])


def test_cli_rejects_an_unknown_key_before_any_work(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(CHECKOUT / "params", root / "params")
    env = {"PAPERLINE_ROOT": str(root), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "flows", "run", "dnc", "--set", "lamda=0.1"],
                          cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "dnc.profiles.smoke.lamda: unknown parameter" in proc.stderr
    # nothing started: no Prefect home, no MLflow database, no outputs
    assert sorted(p.name for p in root.iterdir()) == ["params"]
    assert time.monotonic() - started < 60


def test_a_nested_override_leaves_the_parsed_params_untouched():
    params = {"m": {"profiles": {"tiny": {"grid": {"a": 1}}}}}

    from paperline.config import MethodConfig

    class Nested(MethodConfig):
        grid: dict[str, int]

    _, cfg = load_method_config(Nested, params, "m", "tiny", ["grid.a=2"])
    assert cfg.grid == {"a": 2} and params["m"]["profiles"]["tiny"]["grid"] == {"a": 1}


def test_project_paths_are_made_absolute_against_the_root_even_as_defaults(tmp_path):
    from paperline.config import ProjectPath, StrictModel, validate

    class Inner(StrictModel):
        shards: ProjectPath

    class Corpus(StrictModel):
        folder: ProjectPath = "data/text"

    class Cfg(StrictModel):
        pool: ProjectPath = "data/pool"
        model: ProjectPath | None = None
        inner: Inner
        corpus: Corpus = Corpus()  # a default model instance: revalidated with the root too

    cfg = validate(Cfg, {"inner": {"shards": "c4"}, "model": "/models/m"}, "params/x.yaml: x", root=tmp_path)
    assert (cfg.pool, cfg.inner.shards, cfg.model) == (str(tmp_path / "data/pool"), str(tmp_path / "c4"), "/models/m")
    assert cfg.corpus.folder == str(tmp_path / "data/text")
    assert validate(Cfg, {"inner": {"shards": "c4"}}, "params/x.yaml: x").pool == "data/pool"  # no root: as given


def test_read_params_parses_each_text_once_but_sees_every_change(tmp_path):
    params = tmp_path / "params"
    params.mkdir()
    (params / "dnc.yaml").write_text("dnc:\n  profile: smoke\n")
    first = read_params(params)
    first["dnc"]["profile"] = "changed by a caller"  # a copy: the next read does not see it
    assert read_params(params) == {"dnc": {"profile": "smoke"}}
    (params / "dnc.yaml").write_text("dnc:\n  profile: tiny_\n")  # same size, same second
    assert read_params(params) == {"dnc": {"profile": "tiny_"}}
    (params / "dnc.yaml").write_text("dnc: [unclosed\n")
    with pytest.raises(ParamsError, match="dnc.yaml: not valid YAML"):
        read_params(params)


def test_read_params_keeps_one_parsed_entry_a_file_however_often_it_is_rewritten(tmp_path):
    from paperline import config

    params = tmp_path / "params"
    params.mkdir()
    for profile in ("smoke", "tiny", "paper", "smoke"):
        (params / "dnc.yaml").write_text(f"dnc:\n  profile: {profile}\n")
        assert read_params(params) == {"dnc": {"profile": profile}}
    assert [key for key in config._PARSED if tmp_path in key.parents] == [(params / "dnc.yaml").resolve()]
