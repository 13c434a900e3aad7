"""``gaia bench`` for conversation suites and replay runs: the real CLI, as a subprocess, against
a live server in single-process mode (its embedded worker replays). Suites from stored threads
and from JSONL, export, a judged replay of two agents waited on with the progress bar, its
summary, results and cases side by side, a comparison, cancel and resume, and the API's errors
printed with a non-zero exit."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.models import Thread
from tests.benchmarks.test_embedded_e2e import cli
from tests.benchmarks.test_replay import VERDICT, conversation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
API = "/api/v1/benchmarks"


@pytest.fixture
def server(gaia_server_factory: Any) -> Any:
    return gaia_server_factory(REDIS_URL="", GAIA_EMBEDDED_WORKER="1",
                               GAIA_BENCH_HEARTBEAT_SECONDS="0.3")


@pytest.fixture
def stored(make_agent: Any) -> list[str]:
    """20 conversations of ``support`` ("What is 2 plus i?" / "The answer is 2+i."), and the
    agents a replay compares: ``parrot`` echoes the question, ``adder`` runs its calculator
    and answers "The answer is 2." (right for case 0 only), ``judge`` always says 0.75/same."""
    support = make_agent(slug="support", provider__options={})
    ids = [conversation(support, i) for i in range(20)]
    make_agent(slug="parrot", provider__name="parrot", provider__options={})
    make_agent(slug="adder", provider__name="adder", tools=["calculator"],
               provider__options={"script": [
                   {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2 + 0"}}]},
                   {"reply": "The answer is {results}."}]})
    make_agent(slug="judge", provider__name="judge", provider__options={"reply": VERDICT})
    return ids


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return str(result.stdout)


def run_id_of(stdout: str) -> int:
    return int(stdout.split("queued run ")[1].split()[0])


def row(stdout: str, first: str) -> list[str]:
    """The words of the table row that starts with ``first``."""
    return next(line.split() for line in stdout.splitlines() if line.split()[:1] == [first])


def test_cli_suite_from_threads_replay_wait_status_results_cases_compare(
        server: Any, bench_key: tuple[Any, str], stored: list[str]) -> None:
    key = bench_key[1]
    made = ok(cli(server, key, "suite-from-threads", "support-q4", "--agent", "support"))
    assert made.startswith("made suite support-q4@1 (id ")
    assert made.rstrip().endswith(": 20 case(s) from 20 thread(s)")
    picked = ok(cli(server, key, "suite-from-threads", "picked", "--ids", *stored[:3],
                    "--turns", "all"))
    assert "made suite picked@1" in picked
    assert ": 3 case(s) from 3 thread(s)" in picked
    listing = ok(cli(server, key, "suites", "--kind", "conversations"))
    assert row(listing, "id")[:4] == ["id", "suite", "kind", "cases"]
    assert "support-q4@1" in listing
    assert "picked@1" in listing
    assert "bench" in listing
    assert "(2 suite version(s))" in listing

    waited = cli(server, key, "replay", "support-q4", "--agent", "parrot", "--agent", "adder",
                 "--judge", "judge", "--wait", timeout=180)
    out = ok(waited)
    run = run_id_of(out)
    assert "(20 case(s) x 2 target(s), suite support-q4@1)" in out
    assert ("[" + "#" * 30 + "] 40/40 succeeded (20 case(s) x 2 target(s))") in waited.stderr
    assert (f"run {run} succeeded replay of support-q4@1 against parrot, adder judged by "
            "judge 40/40") in out
    adder = row(out, "adder")
    # cases done fail EM F1 ROUGE-L sim judge vs-ref tokens tools p50
    assert adder[1:6] == ["20", "20", "0", "0.050", "0.683"]  # EM: case 0 only; F1 2/3 else
    assert adder[8:10] == ["0.750", "0/20/0"]  # the judge: 0.75, "same" every time
    assert adder[11] == "20"  # one calculator call a case
    parrot = row(out, "parrot")
    assert parrot[1:5] == ["20", "20", "0", "0.000"]
    assert float(parrot[7]) < float(adder[7])  # similarity: the adder is nearer
    assert "adder vs parrot (by the judge's score): 0 win(s), 20 tie(s), 0 loss(es)" in out

    status = ok(cli(server, key, "status", str(run)))
    assert status.splitlines()[0].startswith(f"run {run} succeeded replay of support-q4@1")
    assert row(status, "adder")[1:6] == adder[1:6]
    as_json = json.loads(ok(cli(server, key, "status", str(run), "--json")))
    assert (as_json["kind"], as_json["agents"]) == ("replay", ["parrot", "adder"])

    results = ok(cli(server, key, "results", str(run)))
    lines = [line for line in results.splitlines() if line.startswith("case ")]
    assert len(lines) == 40
    case0 = next(line for line in lines if line.split()[1:3] == ["0", "adder"])
    assert "completed EM 1 F1 1.00 RL 1.00 sim 1.000" in case0
    assert "tools 1 answer='The answer is 2.' judge 0.75 same" in case0
    case3 = next(line for line in lines if line.split()[1:3] == ["3", "parrot"])
    assert "EM 0 F1 0.25" in case3
    assert "answer='What is 2 plus 3?'" in case3
    assert row(results, "adder")[1:6] == adder[1:6]

    cases = ok(cli(server, key, "cases", str(run), "--limit", "50"))
    assert "(20 of 20 case(s), largest regression first)" in cases
    block = cases.split("case 0 (")[1].split("\ncase ")[0]
    assert "user 'What is 2 plus 0?'" in block
    assert "reference        'The answer is 2.'" in block
    assert "[-The answer-] {+What+} is [-2.-] {+2 plus 0?+}" in block  # the parrot's diff
    assert "judge: Says what the reference says." in block

    again = ok(cli(server, key, "replay", "support-q4@1", "--agent", "adder", "--limit", "5",
                   "--wait", timeout=120))
    other = run_id_of(again)
    compare = ok(cli(server, key, "compare", str(run), str(other)))
    assert f"#{run} adder: EM 0.050" in compare
    assert f"#{other} adder: EM 0.200" in compare  # case 0 of the first 5
    assert "The runs asked different questions" not in compare  # warnings are the API's
    listed = ok(cli(server, key, "list"))
    assert f"run {other} succeeded replay of support-q4@1 against adder 5/5" in listed
    # replayed turns are threads of the runs, the originals untouched
    assert Thread.objects.filter(run_id=None).count() == 20


def test_cli_jsonl_export_import_round_trip_and_errors(
        server: Any, bench_key: tuple[Any, str], stored: list[str], suite: Any,
        tmp_path: Path) -> None:
    key = bench_key[1]
    ok(cli(server, key, "suite-from-threads", "export-me", "--ids", *stored[:5]))
    path = tmp_path / "export-me.jsonl"
    exported = cli(server, key, "suite-export", "export-me", "-o", str(path))
    ok(exported)
    assert "wrote 5 case(s) of suite" in exported.stderr
    samples = [json.loads(line) for line in path.read_text().splitlines()]
    assert samples[0]["input"] == [{"role": "user", "content": "What is 2 plus 0?"}]
    assert samples[0]["ideal"] == "The answer is 2."
    assert samples[0]["gaia"]["thread"] == stored[0]

    imported = ok(cli(server, key, "suite-import", "export-me", str(path)))
    assert "made suite export-me@2" in imported
    assert "5 case(s) from JSONL" in imported
    assert ok(cli(server, key, "suite-export", "export-me@2")) == path.read_text()
    assert ok(cli(server, key, "suite-export", "export-me@1")) == path.read_text()
    suite_id = imported.split("(id ")[1].split(")")[0]
    assert ok(cli(server, key, "suite-export", suite_id)) == path.read_text()

    # errors: the API's message on stderr, exit 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": [{"role": "user", "content": "Hi"}], "ideal": "Hello"}\nnot json\n')
    failed = cli(server, key, "suite-import", "bad", str(bad))
    assert failed.returncode == 2
    assert "HTTP 400" in failed.stderr
    assert "line 2" in failed.stderr  # the API names the bad line
    assert "could not parse" in failed.stderr
    for argv, message in [
        (("suite-export", "nosuch"), "no suite 'nosuch'"),
        (("suite-export", "export-me@9"), "no suite 'export-me@9'"),
        (("suite-export", str(suite.pk)), "Only a conversation suite exports as JSONL"),
        (("replay", "export-me", "--agent", "ghost"), "no enabled agent 'ghost'"),
        (("replay", "nosuch", "--agent", "adder"), "No suite 'nosuch'"),
        (("suite-from-threads", "none", "-q", "no such words"), "No thread matches"),
        (("suite-from-threads", "both", "--ids", stored[0], "--agent", "support"), "not both"),
        (("suite-import", "missing", str(tmp_path / "missing.jsonl")), "missing.jsonl"),
    ]:
        result = cli(server, key, *argv)
        assert result.returncode == 2, (argv, result.stdout, result.stderr)
        assert message in result.stderr, (argv, result.stderr)
    assert cli(server, "gaia_bad_key", "suites").returncode == 2


def test_cli_replay_cancel_resume_and_a_failed_run(
        server: Any, bench_key: tuple[Any, str], stored: list[str], make_agent: Any) -> None:
    key = bench_key[1]
    make_agent(slug="slowpoke", provider__name="slowpoke",
               provider__options={"reply": "Slowly.", "ttft_ms": 150})
    ok(cli(server, key, "suite-from-threads", "slow", "--agent", "support"))
    run = run_id_of(ok(cli(server, key, "replay", "slow", "--agent", "slowpoke",
                           "--concurrency", "1")))
    http = httpx.Client(base_url=server.url + API, timeout=10,
                        headers={"Authorization": f"Bearer {key}"})
    deadline = time.monotonic() + 60
    while http.get(f"/runs/{run}").json()["progress"]["questions_done"] < 3:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    cancelled = ok(cli(server, key, "cancel", str(run)))
    assert cancelled.startswith(f"run {run} cancelled replay of slow@1 against slowpoke ")
    while http.get(f"/runs/{run}").json()["summary"] is None:  # the worker stopped
        assert time.monotonic() < deadline
        time.sleep(0.1)
    status = ok(cli(server, key, "status", str(run)))
    kept = row(status, "slowpoke")
    assert 3 <= int(kept[2]) < 20  # the partial summary: the cases done before the cancel

    resumed = cli(server, key, "resume", str(run), "--wait", timeout=120)
    out = ok(resumed)
    assert out.startswith(f"run {run} ")
    assert "replay of slow@1" in out.splitlines()[0]
    assert f"run {run} succeeded replay of slow@1 against slowpoke 20/20" in out
    assert row(out, "slowpoke")[1:4] == ["20", "20", "0"]
    assert "] 20/20 succeeded (20 case(s) x 1 target(s))" in resumed.stderr
    assert "note: resumed by bench" in ok(cli(server, key, "status", str(run)))
    again = cli(server, key, "resume", str(run))
    assert again.returncode == 2
    assert "HTTP 409" in again.stderr
    assert "only a cancelled or failed run resumes" in again.stderr

    # a run that fails (its time limit passes) exits 1, saying why
    over = cli(server, key, "replay", "slow", "--agent", "slowpoke", "--concurrency", "1",
               "--time-limit", "1", "--wait", timeout=120)
    assert over.returncode == 1, over.stdout + over.stderr
    assert "failed replay of slow@1" in over.stdout
    assert "error: time limit of 1 s reached" in over.stdout
