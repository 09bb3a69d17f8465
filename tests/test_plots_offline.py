"""`dvc plots show` renders offline: the project's DVC config (.dvc/config, `plots.html_template`)
points the plain command at vendor/vega/offline_plots.html, which carries vega, vega-lite and
vega-embed inline. Checked on a small DVC project with the checkout's config and template (seconds;
tests/test_dvc.py checks the page of the whole tiny DAG), and rendered in headless Chromium (Debian's
`chromium`, which `make test` installs where it can): every data plot must be drawn, with no network."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import CHECKOUT

DVC = str(Path(sys.executable).parent / "dvc")
# a tag that makes the browser fetch a script or a stylesheet (a URL inside the inlined code is no fetch)
REMOTE = re.compile(r"<script\b[^>]*\bsrc\s*=|<link\b[^>]*\bhref\s*=\s*[\"']?(https?:)?//", re.IGNORECASE)


def remote_references(page: str) -> list[str]:
    """The tags of an HTML page that load a script (any `src`: the page must carry its scripts) or a
    remote stylesheet."""
    return [match.group(0) for match in REMOTE.finditer(page)]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `make test` installs Debian's "
                                    "chromium when it can (apt-get as root); install it to render the pages")
# a drawn data plot: vega-embed's class on the plot's div, then the chart it drew (canvas or svg)
DRAWN = re.compile(r'<div id="[^"]*" class="vega-embed[^"]*">\s*<div class="chart-wrapper"[^>]*>\s*<(canvas|svg)\b')


def rendered_dom(page: Path) -> str:
    """The DOM of a local page after its scripts ran, from headless Chromium (the flags keep it off
    the network: the machine is offline, and a page that needs a CDN must come out undrawn)."""
    with tempfile.TemporaryDirectory() as profile:
        shown = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=180)
    assert shown.returncode == 0 and "<body" in shown.stdout, shown.stderr[-2000:]
    return shown.stdout


def drawn_plots(page: Path) -> tuple[int, int]:
    """(data plots the page asks vega-embed to draw, plots drawn in headless Chromium)."""
    return page.read_text().count("vegaEmbed("), len(DRAWN.findall(rendered_dom(page)))


def _plots_page(project: Path) -> str:
    """Write a one-CSV plot in `project` and return the page plain `dvc plots show` writes for it."""
    (project / "loss.csv").write_text("step,loss\n0,1.5\n1,0.8125\n")
    (project / "dvc.yaml").write_text("plots:\n  - loss.csv:\n      x: step\n      y: loss\n")
    shown = subprocess.run([DVC, "plots", "show", "-o", "out"], cwd=project, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return (project / "out" / "index.html").read_text()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A DVC project (no git) with the checkout's .dvc/config and vendor/vega/."""
    subprocess.run([DVC, "init", "--no-scm", "-q"], cwd=tmp_path, check=True, timeout=60)
    shutil.copy(CHECKOUT / ".dvc" / "config", tmp_path / ".dvc" / "config")
    shutil.copytree(CHECKOUT / "vendor", tmp_path / "vendor")
    return tmp_path


def test_the_plain_dvc_plots_show_writes_a_page_with_no_remote_script(project):
    page = _plots_page(project)
    assert remote_references(page) == []
    # the three libraries inline (their UMD globals), then the plot's own call with its data
    assert all(name in page for name in (".vega={}", ".vegaLite={}", "vegaEmbed="))
    assert "vegaEmbed(" in page and "0.8125" in page


def test_without_the_projects_template_the_page_loads_its_scripts_from_a_cdn(project):
    """What the config fixes (and that the check above can see it): DVC's own page fetches the three."""
    subprocess.run([DVC, "config", "--unset", "plots.html_template"], cwd=project, check=True, timeout=60)
    assert len(remote_references(_plots_page(project))) >= 3


@needs_chromium
def test_headless_chromium_draws_the_plot_offline(project):
    _plots_page(project)
    assert drawn_plots(project / "out" / "index.html") == (1, 1)


@needs_chromium
def test_headless_chromium_draws_nothing_where_the_page_needs_a_cdn(project):
    """The check can fail: DVC's own page, whose scripts are on a CDN, stays blank here."""
    subprocess.run([DVC, "config", "--unset", "plots.html_template"], cwd=project, check=True, timeout=60)
    _plots_page(project)
    assert drawn_plots(project / "out" / "index.html") == (1, 0)
