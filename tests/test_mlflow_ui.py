"""What a person sees in MLflow's own UI, in a real browser: a small sweep and a card attached to
a registered model version, served by ``mlflow server`` on loopback and opened in headless
Chromium from the OS packages (driven by Playwright, pointed at that browser: nothing is
downloaded). Its screenshots are the pictures of ``docs/mlflow_ui.md``.

Skipped when no Chromium or no Playwright is installed (``.ci/run`` installs both). With
``RECIPE_AUDIT_SCREENSHOTS=1`` the screenshots replace those in ``docs/img/``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import procs

REPO = Path(__file__).resolve().parents[1]
# the docs' pictures are refreshed with RECIPE_AUDIT_SCREENSHOTS=1; otherwise they stay in tmp_path
DOCS_IMG = REPO / "docs" / "img"


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sweep_and_attach(tmp_path: Path, uri: str) -> dict:
    """Five seeds of examples/bare_function (seed 2 collapses to one class: it fails τ = 0.7), its
    card from the sweep, a model version registered from seed 0's rerun, the card attached to it."""
    from mlflow.tracking import MlflowClient

    from recipe_audit import keys
    from recipe_audit.cli import main

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_RUN", "RECIPE_AUDIT_"))}
    env.update(MLFLOW_TRACKING_URI=uri, HYDRA_FULL_ERROR="0", OMP_NUM_THREADS="1")
    proc = procs.run([sys.executable, str(REPO / "examples" / "bare_function" / "train.py"), "-m",
                           "seed=range(5)", "collapse_seed=2", "hydra/callbacks=recipe_audit",
                           "hydra.callbacks.recipe_audit.metric=val_accuracy", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                     cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.get_experiment_by_name("train")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    kind = {r.info.run_id: r.data.tags.get(keys.TAG_KIND) for r in runs}
    (sweep,) = [r for r in runs if kind[r.info.run_id] == keys.KIND_SWEEP]
    (card,) = [r for r in runs if kind[r.info.run_id] == keys.KIND_CARD]
    (seed0,) = [r for r in runs if r.data.tags.get(keys.TAG_SEED) == "0"]
    client.create_registered_model("clf")
    client.create_model_version("clf", source=f"runs:/{seed0.info.run_id}/model", run_id=seed0.info.run_id)
    rc = main(["attach", "--model-name", "clf", "--version", "1", "--card", f"runs:/{card.info.run_id}/card.json",
               "--tracking-uri", uri])
    assert rc == 0
    mv = client.get_model_version("clf", "1")
    attached = mv.tags["recipe_audit.card.val_accuracy.tau_0.7.card_uri"].split("/")[1]
    return {"experiment_id": exp.experiment_id, "sweep": sweep.info.run_id, "card_run": attached,
            "sweep_name": client.get_run(sweep.info.run_id).info.run_name}


@pytest.fixture
def mlflow_ui(tmp_path):
    """``mlflow server`` on a free loopback port over a fresh SQLite store; yields (base URL, URI,
    the server's process, its log). Skips first when there is no browser to open it with."""
    if _chromium() is None:
        pytest.skip("no Chromium found (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    (tmp_path / "store").mkdir()
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    from mlflow.tracking import MlflowClient

    # MLflow's tables first, so the server (booting while the sweep runs) and the sweep do not
    # both create them at once
    MlflowClient(tracking_uri=uri).search_experiments()
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    server = procs.spawn([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host",
                               "127.0.0.1", "--port", str(port), "--workers", "1"],
                         cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True,  # without MLflow's job runner (seven more processes)
                         env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    try:
        yield f"http://127.0.0.1:{port}", uri, server, tmp_path / "server.log"
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()


def _wait_up(base: str, server, log: Path, timeout: float = 180) -> None:
    end = time.monotonic() + procs.timeout(timeout)
    while time.monotonic() < end:
        assert server.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1)
    pytest.fail(f"mlflow server did not answer in {timeout:.0f} s: {log.read_text()[-2000:]}")


def _close_assistant(page) -> None:
    """MLflow 3's assistant panel takes a third of the page; a person closes it once."""
    close = page.get_by_role("button", name="Close")
    if close.count():
        close.first.click()
        page.wait_for_timeout(300)


@pytest.mark.slow
def test_mlflow_ui_shows_the_card_ci(mlflow_ui, tmp_path):
    from playwright import sync_api

    chromium = _chromium()
    base, uri, server, log = mlflow_ui
    ids = _sweep_and_attach(tmp_path, uri)
    # the sweep's row is named by its verdict first (the runs table's name column is narrow)
    assert ids["sweep_name"].startswith("1/5 fail τ 0.7 · insufficient-evidence · U 0.584 · sweep-")
    _wait_up(base, server, log)
    from recipe_audit.store.cards import ui_experiment_path

    img = DOCS_IMG if os.environ.get("RECIPE_AUDIT_SCREENSHOTS") == "1" else tmp_path / "img"
    img.mkdir(parents=True, exist_ok=True)

    def shot(page, name: str) -> None:
        """A screenshot, kept small: a palette PNG (the UI has few colours)."""
        from PIL import Image

        path = img / name
        page.screenshot(path=str(path))
        Image.open(path).convert("RGB").quantize(colors=256).save(path, optimize=True)

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 760})
            page = context.new_page()
            page.set_default_timeout(90_000)  # the first page of a cold server on a busy machine

            # 0. the experiment's default page (MLflow 3.17 opens its GenAI overview): its header, the
            # experiment's description, leads with the card's verdict line, folded to that line
            page.goto(f"{base}/#/experiments/{ids['experiment_id']}")
            edit = page.get_by_test_id("experiment-metadata-editor-edit-button")
            edit.wait_for()
            header = edit.locator("xpath=..")
            folded = header.inner_text().strip().splitlines()[0]
            assert folded.startswith("insufficient-evidence · 1/5 failed τ 0.7 · U 0.584 · recipe ") and "val_accuracy" in folded
            assert "<!--" not in header.inner_text()
            page.wait_for_timeout(2000)  # the overview's first-visit tip and the assistant open late
            _close_assistant(page)
            got_it = page.get_by_role("button", name="Got it")
            if got_it.count():
                got_it.first.click()
            header.locator("[data-component-id='mlflow.experiment.metadata_editor.expand_button']").click()
            runs_link = header.get_by_role("link", name="the runs table")
            runs_link.wait_for()
            assert runs_link.get_attribute("href") == ui_experiment_path(ids["experiment_id"])
            shot(page, "mlflow_ui_experiment.png")

            # 1. the experiment, by the link recipe_audit prints: the model-training runs table
            page.goto(f"{base}/{ui_experiment_path(ids['experiment_id'])}")
            name = page.get_by_text(ids["sweep_name"], exact=True)
            name.wait_for()
            assert f"/experiments/{ids['experiment_id']}/runs" in page.url
            assert page.get_by_role("heading", name="Runs").count() == 1
            # what the narrow column shows of the sweep's name begins with its count, bar and verdict
            shown = name.evaluate("e => [e.getBoundingClientRect().width, e.textContent]")
            assert shown[0] > 60 and shown[1].startswith("1/5 fail τ 0.7 · insufficient-evidence")
            _close_assistant(page)
            # expanded, the sweep's row shows its reruns and its card run
            name.locator("xpath=ancestor::*[@role='gridcell'][1]").locator("button").first.click()
            names = page.locator("[role=gridcell][col-id='attributes.`Run Name`']")
            page.get_by_text("train-seed4", exact=True).wait_for()
            assert sum("card · recipe" in t for t in names.all_inner_texts()) == 2  # the sweep's and the attached
            shot(page, "mlflow_ui_runs.png")
            # every rerun is tagged pass/fail at the card's τ: the search lists the one that failed
            box = page.get_by_test_id("search-box")
            box.fill("tags.`recipe_audit.fails.val_accuracy.tau_0.7` = 'true'")
            box.press("Enter")
            page.get_by_text("2 matching runs").wait_for()  # the failing rerun and the sweep it is in
            assert [t.split("\n")[-1] for t in names.all_inner_texts()] == [ids["sweep_name"], "train-seed2"]

            # the sweep's run: its description is the summary of its card
            page.goto(f"{base}/#/experiments/{ids['experiment_id']}/runs/{ids['sweep']}")
            note = page.get_by_test_id("note-editor-preview-content").first
            note.wait_for()
            assert "insufficient-evidence" in note.inner_text() and "1/5" in note.inner_text()

            # 2. the card run: its description is the card; its artifacts open on card.html, histogram included
            page.goto(f"{base}/#/experiments/{ids['experiment_id']}/runs/{ids['card_run']}")
            page.get_by_test_id("note-editor-preview-content").get_by_text("Recipe card", exact=True).wait_for()
            assert "· val_accuracy · τ 0.7 · " in page.content() and "· attached to clf/1" in page.content()
            page.goto(f"{base}/#/experiments/{ids['experiment_id']}/runs/{ids['card_run']}/artifacts/card.html"
                      "?workflowType=machine_learning")
            frame = page.frame_locator("iframe").first
            frame.locator("h1", has_text="Recipe card").wait_for()
            hist = frame.locator("img").first
            hist.wait_for()
            src, width = hist.evaluate("i => [i.getAttribute('src').slice(0, 22), i.naturalWidth]")
            assert src == "data:image/png;base64," and width > 300  # the histogram, decoded and drawn
            _close_assistant(page)
            shot(page, "mlflow_ui_card.png")

            # 3. the model version: the description begins with the verdicts in a line, then the verdict
            # table (its columns apart: MLflow's renderer pads no cell), then a link to the card run
            page.goto(f"{base}/#/models/clf/versions/1")
            desc = page.locator("[data-testid=note-editor-preview-content]").first
            desc.wait_for()
            first = desc.evaluate("d => [d.children[0].tagName, d.children[0].textContent, d.children[1].tagName]")
            assert first == ["P", "insufficient-evidence on val_accuracy at τ 0.7 (1/5 failed, U 0.584)", "TABLE"]
            head = desc.locator("table th").first.inner_text()
            assert head.startswith("recipe cards (audit set)") and head != "recipe cards (audit set)"  # padded
            texts = desc.locator("table tbody tr").first.locator("td").evaluate_all("tds => tds.map(t => t.textContent)")
            assert all(t.endswith("\u00a0\u00a0") for t in texts[:-1]), texts  # room after each cell's text
            row = desc.locator("table tbody tr").first.inner_text()
            assert "insufficient-evidence" in row and "1/5" in row and "0.584" in row
            assert "<!--" not in desc.inner_text()
            # three short tags: the verdict with k/N and U, where the card is, the recipe (digests in the card)
            from mlflow.tracking import MlflowClient

            tags = MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version("clf", "1").tags
            assert sorted(tags) == ["recipe_audit.card.val_accuracy.tau_0.7",
                                    "recipe_audit.card.val_accuracy.tau_0.7.card_uri", "recipe_audit.recipe_id"]
            assert tags["recipe_audit.card.val_accuracy.tau_0.7"].startswith("insufficient-evidence · 1/5 failed τ 0.7 · U")
            assert all(len(v) <= 80 for v in tags.values()), tags
            _close_assistant(page)
            shot(page, "mlflow_ui_model_version.png")
            link = desc.get_by_role("link", name="card run").first
            assert link.get_attribute("href") == (f"#/experiments/{ids['experiment_id']}/runs/{ids['card_run']}"
                                                  "/artifacts/card.html?workflowType=machine_learning")
            with context.expect_page() as opened:  # the link opens the card in a new tab
                link.click()
            card_page = opened.value
            card_page.set_default_timeout(90_000)
            card_page.frame_locator("iframe").first.locator("h1", has_text="Recipe card").wait_for()

            # 4. the model's versions table shows the first characters of a description, as text: the verdict
            page.goto(f"{base}/#/models/clf")
            page.get_by_text("insufficient-evidence on val", exact=False).first.wait_for()
            body = page.inner_text("body")
            assert "<!--" not in body and "| recipe cards" not in body
            shot(page, "mlflow_ui_model.png")

            # 5. the experiments list: the description column begins with the verdict line, as text;
            # no marker and no JSON in sight (the rows are in a tag the UI hides)
            page.goto(f"{base}/#/experiments")
            row = page.get_by_test_id("experiment-list-item").filter(has_text="train")
            row.first.wait_for()
            cells = row.first.locator("td, [role=cell]").all_inner_texts()
            desc_cell = next(t for t in cells if "failed" in t)
            assert desc_cell.strip().startswith("insufficient-evidence · 1/5 failed τ 0.7 · U 0.584 · "), cells
            # the cell is cut to one line (with an ellipsis): what it shows is the line's beginning, and
            # the block's marker comes after the verdict lines and the sentence below them
            assert desc_cell.index("<!--") > desc_cell.index("The latest recipe cards") > desc_cell.index("val_accuracy")
            assert "\\" not in desc_cell
            cell = row.first.get_by_text(desc_cell.strip()[:30], exact=False).last
            fits = cell.evaluate("e => [e.scrollWidth, e.clientWidth, getComputedStyle(e).textOverflow]")
            assert fits[2] == "ellipsis" or fits[0] <= fits[1], fits
            listing = page.inner_text("body")
            assert "[{" not in listing and "latest_cards" not in listing
            _close_assistant(page)
            shot(page, "mlflow_ui_experiments.png")

            # 6. the registered-models list: each model's latest verdict, in its one tag
            page.goto(f"{base}/#/models")
            page.get_by_text("clf", exact=True).first.wait_for()
            page.wait_for_timeout(2000)  # the registry's first-visit dialog opens late
            models = page.inner_text("body")
            assert "recipe_audit:" in models and "insufficient-evidence · 1/5 failed τ 0.7" in models, models[-1500:]
            page.keyboard.press("Escape")  # the dialog
            page.wait_for_timeout(1000)
            for b in page.get_by_role("button", name="Close").all():  # the assistant, if open
                try:
                    b.click(timeout=3000)
                except sync_api.TimeoutError:  # not shown (the dialog's own, closed)
                    pass
            shot(page, "mlflow_ui_models.png")
        finally:
            browser.close()
