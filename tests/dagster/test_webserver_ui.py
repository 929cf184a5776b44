"""``dagster dev`` on the demo workspace: GraphQL sees the asset graph, Chromium renders it.

The webserver runs in its own process group on a free loopback port, against the
instance ``scripts/demo.sh`` materialized (the ``demo_home`` session fixture), and is
stopped by the test (SIGTERM to the group, SIGKILL after a timeout). The browser is
Debian's ``chromium`` in headless mode; the screenshot of the finalization asset's
page is kept under ``test-artifacts/``.
"""

import contextlib
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.dagster.test_demo_cli import BIN, REPO, DemoHome, demo_home  # noqa: F401

ARTIFACTS = REPO / "test-artifacts"
STARTUP_TIMEOUT_S = 180
STOP_TIMEOUT_S = 10
DEMO_ASSETS = {
    "episodes",
    "labeled_episodes",
    "episode_dataset",
    "episode_dataset_finalized",
    "episode_dataset_repacked",
    "episode_dataset_repacked_finalized",
    "episodes_with_gap",
    "episodes_with_gap_finalized",
    # a fan-out dataset asset (build_dataset_asset), the episodes_export job's
    "episodes_jsonl",
    # a LeRobot dataset with real video, audited by video_integrity (demo/robotics.py)
    "robot_episodes",
    "robot_episodes_finalized",
    # declared in YAML (RefinerDatasetComponent, demo/defs/episode_thumbnails)
    "episode_thumbnails",
    "episode_thumbnails_finalized",
}
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1400,1600",
    "--virtual-time-budget=20000",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def graphql(base: str, query: str) -> dict:
    request = urllib.request.Request(
        f"{base}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        pytest.fail(f"GraphQL answered {exc.code}: {exc.read()[:2000]!r} for {query}")
    assert "errors" not in payload, payload
    return payload["data"]


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the whole process group, SIGKILL whatever is left after a timeout."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_TIMEOUT_S)
    # Children that outlived the leader, or a leader that ignored SIGTERM.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=STOP_TIMEOUT_S)


PORT_ATTEMPTS = 3


def start_dagster_dev(
    home: Path, env: dict[str, str], log: Path, ports: Callable[[], int] = free_port
) -> tuple[subprocess.Popen, str]:
    """``dagster dev`` on the demo workspace and instance ``home``, once it answers.

    A free port can be taken by another process (another test session's webserver) before
    ours binds it: a ``dagster dev`` that then cannot bind, or a server on our port that
    serves another instance, means a new port, up to ``PORT_ATTEMPTS`` times.
    """
    for _ in range(PORT_ATTEMPTS):
        port = ports()
        with open(log, "ab") as out:
            logged = out.tell()
            process = subprocess.Popen(
                [str(BIN / "dagster"), "dev", "-w", "workspace.yaml"]
                + ["-p", str(port), "-h", "127.0.0.1"],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        base = f"http://127.0.0.1:{port}"
        try:
            if _serves(process, base, home, log, logged):
                return process, base
        except BaseException:
            stop_group(process)
            raise
        stop_group(process)
    pytest.fail(f"no free port for dagster dev in {PORT_ATTEMPTS} tries:\n{log.read_text()}")


def _serves(process: subprocess.Popen, base: str, home: Path, log: Path, logged: int) -> bool:
    """True once ``base`` answers for our instance; False if the port is someone else's.

    This ``dagster dev`` logs to ``log`` from byte ``logged`` on.
    """

    def output() -> str:
        return log.read_bytes()[logged:].decode(errors="replace")

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        # uvicorn logs a failed bind; dagster dev may keep running without its webserver
        if "address already in use" in output().lower():
            return False
        if process.poll() is not None:
            pytest.fail(f"dagster dev exited with {process.returncode}:\n{output()}")
        try:
            info = json.loads(http_get(f"{base}/server_info"))
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"dagster dev did not answer in {STARTUP_TIMEOUT_S}s:\n{output()}")
        time.sleep(0.5)
    assert info["dagster_webserver_version"] == "1.13.27"
    # The instance's settings name its folder: tells our server from one on a reused port.
    return str(home) in (graphql(base, "{ instance { info } }")["instance"]["info"] or "")


@pytest.fixture(scope="module")
def webserver(demo_home: DemoHome, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    log = tmp_path_factory.mktemp("webserver") / "dagster-dev.log"
    process, base = start_dagster_dev(demo_home.home, demo_home.env, log)
    try:
        yield base
    finally:
        stop_group(process)
    assert process.poll() is not None


def keep_artifact(image: Path) -> Path:
    """Copies ``image`` into ``test-artifacts/`` in one rename, so sessions sharing the
    checkout never see each other's half-written files."""
    ARTIFACTS.mkdir(exist_ok=True)
    staged = ARTIFACTS / f".{image.name}.{os.getpid()}.tmp"
    shutil.copyfile(image, staged)
    kept = ARTIFACTS / image.name
    os.replace(staged, kept)
    return kept


def wait_for_asset_nodes(base: str) -> list[dict]:
    """assetNodes once the code location has loaded (bounded wait)."""
    query = "{ assetNodes { assetKey { path } groupName dependencyKeys { path } } }"
    deadline = time.monotonic() + 120
    while True:
        nodes = graphql(base, query)["assetNodes"]
        if nodes or time.monotonic() > deadline:
            return nodes
        time.sleep(1)


def test_graphql_serves_demo_asset_graph(webserver: str) -> None:
    nodes = {"/".join(n["assetKey"]["path"]): n for n in wait_for_asset_nodes(webserver)}
    assert set(nodes) == DEMO_ASSETS
    assert {n["groupName"] for n in nodes.values()} == {"refiner_demo"}

    def deps(key: str) -> set[str]:
        return {"/".join(d["path"]) for d in nodes[key]["dependencyKeys"]}

    assert deps("labeled_episodes") == {"episodes"}
    assert deps("episode_dataset") == {"labeled_episodes"}
    assert deps("episode_dataset_finalized") == {"episode_dataset"}
    assert deps("episode_dataset_repacked") == {"episode_dataset_finalized"}
    assert deps("episodes_with_gap_finalized") == {"episodes_with_gap"}
    assert deps("episode_thumbnails_finalized") == {"episode_thumbnails"}

    repositories = graphql(
        webserver,
        "{ repositoriesOrError { ... on RepositoryConnection { nodes { location { name } "
        "jobs { name } sensors { name description } schedules { name cronSchedule "
        "description } } } } }",
    )["repositoriesOrError"]["nodes"]
    (repository,) = repositories
    assert repository["location"]["name"] == "refiner_demo"
    assert {"demo_refresh", "episodes_export"} <= {j["name"] for j in repository["jobs"]}
    # the finalizations' eager automation conditions bring Dagster's automation sensor
    names = [sensor["name"] for sensor in repository["sensors"]]
    assert names == ["default_automation_condition_sensor", "demo_drop_sensor"]
    sensor = repository["sensors"][1]
    (schedule,) = repository["schedules"]
    assert schedule["name"] == "demo_refresh_daily"
    assert schedule["cronSchedule"] == "0 4 * * *"
    # Both start stopped, and say so where they are switched on.
    assert "Starts stopped" in sensor["description"]
    assert "dagster sensor start demo_drop_sensor" in sensor["description"]
    assert "Starts stopped" in schedule["description"]
    assert "dagster schedule start demo_refresh_daily" in schedule["description"]


def page_text(dom: str) -> str:
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


def metadata_value(text: str, key: str, next_key: str) -> str:
    """The last word of the metadata row ``key`` (the rows are in definition order)."""
    match = re.search(rf"\b{key}\b(.*?)\b{next_key}\b", text)
    assert match, f"{key} is not on the page: {text[:3000]}"
    return match.group(1).split()[-1]


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    browser = shutil.which("chromium")
    assert browser, "headless Chromium is needed: apt-get install -y chromium"
    return subprocess.run(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )


def test_dataset_asset_shows_its_published_state(webserver: str) -> None:
    wait_for_asset_nodes(webserver)
    query = (
        '{ assetOrError(assetKey: {path: ["episode_dataset"]}) { ... on Asset { '
        "assetMaterializations(limit: 1) { metadataEntries { label "
        "... on TextMetadataEntry { text } } } "
        "assetObservations(limit: 1) { metadataEntries { label "
        "... on TextMetadataEntry { text } } } } } }"
    )
    asset = graphql(webserver, query)["assetOrError"]

    def entries(events: list[dict]) -> dict[str, str]:
        (event,) = events
        return {e["label"]: e.get("text") for e in event["metadataEntries"]}

    written = entries(asset["assetMaterializations"])
    observed = entries(asset["assetObservations"])
    assert written["refiner/state"] == "written (its finalization asset publishes it)"
    assert observed["refiner/state"] == "published by episode_dataset_finalized"
    assert observed["refiner/version"] == written["refiner/version"]


def test_chromium_renders_finalization_metadata(
    webserver: str,
    demo_home: DemoHome,  # noqa: F811
    tmp_path: Path,
) -> None:
    wait_for_asset_nodes(webserver)
    # A fresh instance shows a "join the community" dialog over every page; the demo's
    # instance (its dagster.yaml written by scripts/demo.sh) starts with it off.
    assert graphql(webserver, "{ shouldShowNux }") == {"shouldShowNux": False}

    coalesced = demo_home.metadata("episode_dataset_repacked_finalized")["blobs_coalesced"]
    assert coalesced > 0
    url = f"{webserver}/assets/episode_dataset_repacked_finalized"

    dumped = chromium("--dump-dom", url, profile=tmp_path / "profile")
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    text = page_text(dumped.stdout)
    assert "episode_dataset_repacked_finalized" in text
    # The metadata table: rows of key, timestamp, value for the latest materialization.
    assert metadata_value(text, "blobs_coalesced", "references_coalesced") == str(coalesced)
    assert metadata_value(text, "references_coalesced", "bytes_coalesced") == "24"
    assert "Join the Dagster community" not in text

    shot = tmp_path / "episode_dataset_repacked_finalized.png"
    taken = chromium(f"--screenshot={shot}", url, profile=tmp_path / "profile")
    assert taken.returncode == 0, taken.stderr[-3000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    keep_artifact(shot)
