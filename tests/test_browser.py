"""In a real browser: JupyterLab 4 on loopback, driven by Playwright in Debian's Chromium.

1. A student opens a release notebook (with every answer filled in), runs all cells from
   the Run menu, finds the explorer widget rendered, clicks its slider and sees the view
   change; the last cell's check_submission() says READY.
2. The instructor opens nbgrader's formgrader from JupyterLab's Nbgrader menu and sees
   every assignment of the course listed.
3. The instructor opens the class page of `report` (a file, offline) and its plots render.

Screenshots land in test-artifacts/browser/ (or $COURSE_TEST_ARTIFACTS); the test log
names them. Needs /usr/bin/chromium (apt-get install chromium) and the Python package
playwright (pip install playwright): without them the tests skip and say why, unless
COURSE_REQUIRE_BROWSER=1 (set by .ci/run after it installed both), where they fail.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import QUICKEST_ASSIGNMENT, REPO_ROOT, record_artifact
from notebook_helpers import completed_notebook, write

from autograder.course import layout as course
from autograder.grading.batch import grade
from autograder.reports.class_page import write as write_report
from autograder.grading.workspace import add_sources, add_submission, open_workspace

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TOKEN = "course-browser-test"
ARTIFACTS = Path(os.environ.get("COURSE_TEST_ARTIFACTS") or REPO_ROOT / "test-artifacts") / "browser"
ASSIGNMENTS = course.assignments()


def _browser_or_skip():
    reasons = []
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401
    except ImportError:
        reasons.append("the Python package playwright is not installed (pip install playwright)")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        reasons.append(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    if reasons:
        message = "browser test skipped: " + "; ".join(reasons)
        if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
            pytest.fail(message + " although COURSE_REQUIRE_BROWSER=1")
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, path: str, body: dict | None = None) -> dict:
    """A call to the Jupyter server's REST API (POST with `body`, else GET)."""
    request = urllib.request.Request(f"{base}{path}?token={TOKEN}", method="POST" if body is not None else "GET",
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def _serve(command: list[str], env: dict, cwd: Path, log) -> tuple[subprocess.Popen, str]:
    """JupyterLab on a free loopback port, and its address. The port was free when picked; if
    another process takes it before the server binds, the server stops (no silent move to
    another port, where an older server may answer) and the next free port is tried."""
    for _ in range(5):
        port = _free_port()
        server = subprocess.Popen([*command, f"--ServerApp.port={port}", "--ServerApp.port_retries=0"],
                                  cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while server.poll() is None and time.monotonic() < deadline:
            try:
                _api(base, "/api/status")
                return server, base
            except OSError:  # not listening yet (or our token refused: not our server)
                time.sleep(0.5)
        server.kill()
        server.wait()
    raise RuntimeError(f"JupyterLab did not start; see {log.name}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving an nbgrader course folder that also holds a student's notebook."""
    _browser_or_skip()
    root = tmp_path_factory.mktemp("lab")
    ws = open_workspace(root / "course")
    for name in ASSIGNMENTS:  # the formgrader lists the assignments of source/
        shutil.copytree(course.solution_path(name).parent, ws.path("source", name))
    name = ASSIGNMENTS[0]
    student = ws.path("student", name)
    student.mkdir(parents=True)
    write(completed_notebook(name), student / f"{name}.ipynb")

    settings = root / "settings"
    for plugin, values in {
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    with open(ws.path("nbgrader_config.py"), "a") as config:  # keep nbgrader's exchange inside the test
        config.write(f"\nc.Exchange.root = {str(root / 'exchange')!r}\n")
    (root / "exchange").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NBGRADER_EXECUTION", "JPY_SESSION_NAME")}
    env.update(
        # experiments shrink, but the explorer still shows its widget
        COURSE_FAST="1", COURSE_WIDGETS="1",
        # nbgrader's gradebook runs the `alembic` command of this environment
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        JUPYTER_PATH=os.pathsep.join(filter(None, [str(ws.root / "jupyter"), env.get("JUPYTER_PATH")])),
        JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"), JUPYTER_RUNTIME_DIR=str(root / "runtime"),
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log_path = ARTIFACTS / "jupyterlab.log"
    log = open(log_path, "w")
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={ws.root}", "--allow-root",
               "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    server = None
    try:
        server, base = _serve(command, env, ws.root, log)
        yield base, name
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
        log.close()
        record_artifact(log_path)


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _shot(page, name: str) -> Path:
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=False)
    record_artifact(path)
    return path


def _menu(page, menu: str, command: str) -> None:
    page.locator(".lm-MenuBar-item", has_text=menu).first.click()
    page.locator(f'.lm-Menu-item[data-command="{command}"]').first.click()


@pytest.fixture
def page(browser, request):
    """A browser tab; a screenshot of it is kept when the test fails."""
    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    tab.set_default_timeout(60_000)
    yield tab
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        _shot(tab, f"FAILED_{request.node.name}.png")
    tab.close()


def _open_with_a_ready_kernel(page, base: str, path: str) -> None:
    """Open the notebook at `path` and wait until its kernel is idle. The session is started
    through the REST API first, so JupyterLab attaches the notebook to it instead of choosing
    a kernel itself (the "Select Kernel" dialog, which comes when the kernel list is late and
    then covers the menus); should the dialog appear all the same, its choice (the notebook's
    own kernel) is accepted. JupyterLab only asks while it attaches the notebook to a kernel,
    so once the toolbar names the kernel no dialog can come."""
    session = _api(base, "/api/sessions", {"path": path, "type": "notebook", "name": Path(path).name,
                                            "kernel": {"name": "python3"}})
    page.goto(f"{base}/lab/tree/{path}?token={TOKEN}")
    # The toolbar names the kernel once the notebook is attached ("Kernel" while it looks,
    # "No Kernel" without one); the toolbar's kernel indicator says "idle" even before.
    attached = page.locator(".jp-NotebookPanel-toolbar .jp-KernelName", has_text=re.compile("python", re.IGNORECASE))
    dialog = page.locator(".jp-Dialog")
    attached.or_(dialog).first.wait_for()
    if dialog.count():
        dialog.locator(".jp-Dialog-button.jp-mod-accept").click()
        dialog.wait_for(state="detached")
        attached.wait_for()
    # The server follows the kernel's status messages: idle once it answered the page.
    deadline = time.monotonic() + 120
    while _api(base, f"/api/kernels/{session['kernel']['id']}")["execution_state"] != "idle":
        assert time.monotonic() < deadline, "the notebook's kernel did not become idle"
        time.sleep(0.5)
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()


def test_student_runs_a_release_notebook_and_uses_its_widget(lab, page):
    base, name = lab
    _open_with_a_ready_kernel(page, base, f"student/{name}/{name}.ipynb")
    _menu(page, "Run", "runmenu:run-all")
    page.locator(".jp-Notebook .jp-OutputArea-output", has_text="| seed 0 |").first.wait_for(timeout=60_000)

    check_output = page.locator(".jp-Notebook .jp-Cell").last.locator(".jp-OutputArea-output")
    check_output.filter(has_text="Submission check").first.wait_for(timeout=240_000)
    report = check_output.first.inner_text()
    assert "READY" in report and "NOT READY" not in report, report

    slider = page.locator(".widget-slider .noUi-target, .widget-hslider .noUi-target").first
    slider.scroll_into_view_if_needed()
    widget = page.locator(".jupyter-widgets.widget-vbox", has=page.locator(".widget-slider, .widget-hslider")).first
    before = widget.inner_text()
    assert "0 merges" in before, f"the explorer did not render its first view: {before[:300]!r}"
    assert page.locator(".course-static-view").count() == 0, "JupyterLab showed the static fallback, not the widget"
    _shot(page, "01_widget_before_click.png")

    box = slider.bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.98, box["y"] + box["height"] / 2)
    page.wait_for_function(
        "el => !el.innerText.includes('0 merges:')", arg=widget.element_handle(), timeout=30_000
    )
    after = widget.inner_text()
    assert "merge " in after and after != before, after[:300]
    _shot(page, "02_widget_after_click.png")
    check_output.first.scroll_into_view_if_needed()
    _shot(page, "03_check_submission.png")


def test_instructor_sees_every_assignment_in_the_formgrader(lab, page):
    base, _ = lab
    page.goto(f"{base}/lab?token={TOKEN}")
    page.locator(".lm-MenuBar-item", has_text="Nbgrader").first.wait_for()
    _menu(page, "Nbgrader", "nbgrader:open-formgrader")
    frame = page.frame_locator("iframe").first
    for name in ASSIGNMENTS:
        frame.locator("td", has_text=name).first.wait_for(timeout=60_000)
    _shot(page, "04_formgrader_assignments.png")


def test_instructor_opens_the_class_report_and_its_plots_render(browser, tmp_path):
    """Two graded hand-ins (the solution, the blank release), their class page opened from disk
    with the network cut: every figure is decoded and drawn, none is a broken image. (The module's
    browser is reused: a second Playwright inside the first one's event loop is refused.)"""
    ws = open_workspace(tmp_path / "ws")
    add_sources(ws, [QUICKEST_ASSIGNMENT])
    add_submission(ws, "ada", QUICKEST_ASSIGNMENT, course.solution_path(QUICKEST_ASSIGNMENT))
    add_submission(ws, "blank", QUICKEST_ASSIGNMENT, ws.release_path(QUICKEST_ASSIGNMENT))
    grade(ws, [QUICKEST_ASSIGNMENT], jobs=2)
    page_path, _ = write_report(ws, [QUICKEST_ASSIGNMENT], tmp_path / "report")
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
    try:
        tab = context.new_page()
        tab.goto(page_path.as_uri())
        images = tab.locator("img")
        assert images.count() >= 3  # the heatmap, the histogram, the pass shares
        sizes = tab.evaluate("() => Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
        assert all(done and width > 100 and height > 50 for done, width, height in sizes), sizes
        assert tab.locator("h2", has_text=QUICKEST_ASSIGNMENT).count() == 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        _shot(tab, "05_class_report.png")
    finally:
        context.close()
