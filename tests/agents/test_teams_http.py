"""Team models (``team/<slug>``) over live HTTP: each mode with fake members (one failing),
the inner messages stored with from/to, streamed on each dialect's reasoning channel, seen
on the feed, counted in usage; members concurrently; the team's bounds."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest

from agents.models import Team, TeamMember, Thread
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)

PLAN = json.dumps({"researcher": "find the facts about tides",
                   "writer": "draft two sentences about tides"})


def make_team(make_agent: Any, slug: str, mode: str, members: list[tuple[str, dict[str, Any]]],
              *, leader_options: dict[str, Any] | None = None, **settings: Any) -> Team:
    leader = make_agent(slug=f"{slug}-lead", description="Leads.",
                        provider__name=f"{slug}-lead-p",
                        provider__options=leader_options or {"echo": "system"})
    team = Team.objects.create(slug=slug, display_name=slug.title(), leader=leader, mode=mode,
                               description=f"The {slug} team.", **settings)
    for i, (name, options) in enumerate(members):
        agent = make_agent(slug=name, description=options.pop("description", f"{name}."),
                           provider__name=f"{name}-p", provider__options=options)
        TeamMember.objects.create(team=team, agent=agent, position=i)
    return team


def chat(server: Any, key: str, model: str, text: str, *, stream: bool = False
         ) -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "stream": stream,
                            "stream_options": {"include_usage": True},
                            "messages": [{"role": "user", "content": text}]})


def thread_of(r: httpx.Response) -> Thread:
    return Thread.objects.get(pk=r.headers["x-gaia-thread-id"])


@pytest.fixture
def crew(make_agent: Any) -> Team:
    """coordinate: the leader plans (a JSON split) and answers with the prompt it was given,
    so the answer shows what reached it."""
    return make_team(make_agent, "crew", "coordinate", [
        ("researcher", {}), ("writer", {}), ("flaky", {"fail": "before"})],
        leader_options={"replies": [{"system_contains": "Split the user's request",
                                     "reply": PLAN}], "echo": "system"})


def test_models_list_teams(gaia_server, api_key, crew):
    headers = {"Authorization": f"Bearer {api_key}"}
    ids = [m["id"] for m in httpx.get(gaia_server.v1 + "/models", headers=headers).json()["data"]]
    assert "team/crew" in ids
    entry = httpx.get(gaia_server.v1 + "/models/team/crew", headers=headers).json()
    assert entry["id"] == "team/crew"
    assert entry["name"] == "Crew"
    r = httpx.get(gaia_server.v1 + "/models/team/nope", headers=headers)
    assert r.status_code == 404


def test_coordinate_splits_the_task_and_stores_the_inner_messages(gaia_server, api_key, crew):
    r = chat(gaia_server, api_key, "team/crew", "Explain tides")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "team/crew"
    answer = body["choices"][0]["message"]["content"]
    # The leader's prompt (echoed) holds each member's part of the work.
    assert "[researcher] (task: find the facts about tides)\nfind the facts about tides" in answer
    assert "[writer] (task: draft two sentences about tides)" in answer
    assert "flaky" not in answer  # the plan gave it no task
    reasoning = body["choices"][0]["message"]["reasoning_content"]
    assert "[crew-lead → researcher] find the facts about tides" in reasoning
    assert "[writer → crew-lead] draft two sentences about tides" in reasoning
    thread = thread_of(r)
    assert thread.route["model"] == "team/crew"
    rows = list(thread.messages.order_by("seq"))
    steps = [(m.role, m.sender, m.recipient, m.internal) for m in rows]
    assert steps[0] == ("user", "", "", False)
    assert steps[1] == ("assistant", "crew-lead", "team/crew", True)  # the plan
    assert set(steps[2:4]) == {("user", "crew-lead", "researcher", True),
                               ("user", "crew-lead", "writer", True)}
    assert set(steps[4:6]) == {("assistant", "researcher", "crew-lead", True),
                               ("assistant", "writer", "crew-lead", True)}
    assert steps[6] == ("assistant", "", "", False)  # the answer, from the leader
    assert thread.message_count == len(rows) == 7
    # Usage counts every call: the plan, both members and the answer.
    usage = body["usage"]
    calls = [m for m in rows if m.role == "assistant"]
    assert usage["completion_tokens"] == sum(m.output_tokens for m in calls)
    assert usage["prompt_tokens"] == sum(m.input_tokens for m in calls)
    thread.refresh_from_db()
    assert thread.output_tokens == usage["completion_tokens"]


def test_a_follow_up_sees_only_the_client_conversation(gaia_server, api_key, crew):
    r1 = chat(gaia_server, api_key, "team/crew", "Explain tides")
    tid = r1.headers["x-gaia-thread-id"]
    r2 = httpx.post(gaia_server.v1 + "/chat/completions", timeout=30,
                    headers={"Authorization": f"Bearer {api_key}", "X-Gaia-Thread-Id": tid},
                    json={"model": "team/crew",
                          "messages": [{"role": "user", "content": "and waves?"}]})
    assert r2.status_code == 200, r2.text
    assert r2.headers["x-gaia-thread-id"] == tid
    thread = Thread.objects.get(pk=tid)
    public = [m for m in thread.messages.order_by("seq") if not m.internal]
    assert [m.role for m in public] == ["user", "assistant", "user", "assistant"]


def test_collaborate_reports_a_failing_member_and_still_answers(gaia_server, api_key,
                                                                make_agent):
    make_team(make_agent, "panel", "collaborate", [
        ("optimist", {"reply": "it will work"}), ("pessimist", {"reply": "it will fail"}),
        ("broken", {"fail": "before", "fail_message": "broken is down"})])
    r = chat(gaia_server, api_key, "team/panel", "Will my plan work?", stream=True)
    assert r.status_code == 200
    chunks = parse_sse(r.text).json_payloads()
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or ""
                        for c in chunks if c.get("choices"))
    content = "".join(c["choices"][0]["delta"].get("content") or ""
                      for c in chunks if c.get("choices"))
    assert "[optimist → panel-lead] it will work" in reasoning
    assert "[broken] failed: broken is down" in reasoning
    assert "[optimist]" not in content.split("Your members' work")[0]  # not mixed in
    assert "[pessimist] (task: Will my plan work?)\nit will fail" in content
    assert "[broken] (task: Will my plan work?)\nFAILED: broken is down" in content
    usage = chunks[-1]["usage"]
    thread = thread_of(r)
    failed = thread.messages.get(sender="broken")
    assert failed.finish_reason == "error"
    assert failed.recipient == "panel-lead"
    assert thread.status == Thread.Status.COMPLETED
    calls = thread.messages.filter(role="assistant")
    assert usage["completion_tokens"] == sum(m.output_tokens or 0 for m in calls)


def test_members_run_concurrently(gaia_server, api_key, make_agent):
    make_team(make_agent, "slowpoke", "collaborate", [
        (f"slow-{i}", {"reply": f"done {i}", "ttft_ms": 400}) for i in range(3)])
    r = chat(gaia_server, api_key, "team/slowpoke", "go")
    assert r.status_code == 200
    rows = thread_of(r).messages.filter(internal=True, role="assistant")
    spans = [(m.created_at - timedelta(milliseconds=m.latency_ms), m.created_at) for m in rows]
    assert len(spans) == 3
    # Every member started before any finished: their calls overlapped.
    assert max(s for s, _ in spans) < min(e for _, e in spans)


def test_route_hands_the_request_to_one_member(gaia_server, api_key, make_agent):
    make_team(make_agent, "desk", "route", [
        ("billing", {"reply": "billing answers"}), ("support", {"reply": "support answers"})],
        leader_options={"tool_call": {"name": "hand_to", "arguments": {"member": "support"}}})
    for dialect in ("chat", "responses", "messages"):
        if dialect == "chat":
            r = chat(gaia_server, api_key, "team/desk", "My invoice is wrong")
            text = r.json()["choices"][0]["message"]["content"]
        elif dialect == "responses":
            r = httpx.post(gaia_server.v1 + "/responses", timeout=30,
                           headers={"Authorization": f"Bearer {api_key}"},
                           json={"model": "team/desk", "input": "My invoice is wrong"})
            out = r.json()
            assert out["model"] == "team/desk"
            text = "".join(c["text"] for i in out["output"] if i["type"] == "message"
                           for c in i["content"])
        else:
            r = httpx.post(gaia_server.v1 + "/messages", timeout=30,
                           headers={"x-api-key": api_key, "anthropic-version": "2023-06-01"},
                           json={"model": "team/desk", "max_tokens": 50, "messages": [
                               {"role": "user", "content": "My invoice is wrong"}]})
            out = r.json()
            assert out["model"] == "team/desk"
            text = "".join(b["text"] for b in out["content"] if b["type"] == "text")
        assert r.status_code == 200, r.text
        assert text == "support answers", dialect  # the leader's pick, not the ranker's
        answer = thread_of(r).messages.filter(internal=False, role="assistant").get()
        assert answer.sender == "support"


def test_route_falls_back_to_the_member_whose_description_fits(gaia_server, api_key,
                                                              make_agent):
    make_team(make_agent, "desk2", "route", [
        ("billing2", {"reply": "billing answers", "description": "Invoices and payments."}),
        ("support2", {"reply": "support answers", "description": "Login problems."})],
        leader_options={"reply": "no idea"})
    r = chat(gaia_server, api_key, "team/desk2", "My invoice is wrong")
    assert r.json()["choices"][0]["message"]["content"] == "billing answers"
    assert "billing2 fits best" in r.json()["choices"][0]["message"]["reasoning_content"]


@pytest.mark.parametrize("dialect", ["responses", "messages"])
def test_inner_work_streams_on_the_dialects_reasoning_channel(gaia_server, api_key, crew,
                                                              dialect):
    if dialect == "responses":
        r = httpx.post(gaia_server.v1 + "/responses", timeout=30,
                       headers={"Authorization": f"Bearer {api_key}"},
                       json={"model": "team/crew", "input": "Explain tides", "stream": True})
        events = parse_sse(r.text).json_payloads()
        reasoning = "".join(e["delta"] for e in events
                            if e["type"] == "response.reasoning_summary_text.delta")
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    else:
        r = httpx.post(gaia_server.v1 + "/messages", timeout=30,
                       headers={"x-api-key": api_key, "anthropic-version": "2023-06-01"},
                       json={"model": "team/crew", "max_tokens": 500, "stream": True,
                             "messages": [{"role": "user", "content": "Explain tides"}]})
        events = parse_sse(r.text).json_payloads()
        reasoning = "".join(e["delta"].get("thinking", "") for e in events
                            if e["type"] == "content_block_delta")
        text = "".join(e["delta"].get("text", "") for e in events
                       if e["type"] == "content_block_delta")
    assert r.status_code == 200
    assert "[crew-lead → writer] draft two sentences about tides" in reasoning
    assert "[researcher → crew-lead]" in reasoning
    assert "[crew-lead → writer]" not in text
    assert "[writer] (task: draft two sentences about tides)" in text


def test_a_member_that_times_out_is_reported(gaia_server, api_key, make_agent):
    make_team(make_agent, "patient", "collaborate", [
        ("quick", {"reply": "quick answer"}), ("stuck", {"fail": "timeout"})],
        member_timeout_seconds=0.5)
    r = chat(gaia_server, api_key, "team/patient", "hurry")
    assert r.status_code == 200
    content = r.json()["choices"][0]["message"]["content"]
    assert "FAILED: stuck did not answer within 0.5 s" in content
    assert "quick answer" in content


def test_the_token_budget_bounds_every_call(gaia_server, api_key, make_agent):
    long = " ".join(f"w{i}" for i in range(200))
    make_team(make_agent, "thrifty", "collaborate", [
        ("talker-1", {"reply": long}), ("talker-2", {"reply": long})],
        leader_options={"reply": long}, max_total_tokens=400)
    r = chat(gaia_server, api_key, "team/thrifty", "talk")
    assert r.status_code == 200
    usage = r.json()["usage"]
    assert usage["total_tokens"] <= 400
    members = thread_of(r).messages.filter(internal=True, role="assistant")
    assert {m.finish_reason for m in members} == {"length"}
    # the team's budget, not the client's max_tokens: the turn is over (common.client_finish)
    assert r.json()["choices"][0]["finish_reason"] == "stop"


def test_the_wall_time_bounds_the_answer(gaia_server, api_key, make_agent):
    make_team(make_agent, "hasty", "collaborate", [("fast", {"reply": "ok"})],
              leader_options={"reply": "a b c d e f g h", "delay_ms": 400}, max_seconds=1.0)
    r = chat(gaia_server, api_key, "team/hasty", "go", stream=True)
    payloads = parse_sse(r.text).json_payloads()
    assert "did not finish within 1 s" in payloads[-1]["error"]["message"]
    assert thread_of(r).status == Thread.Status.ERROR


def test_team_errors_are_dialect_errors(gaia_server, api_key, make_agent):
    team = make_team(make_agent, "sleepy", "collaborate", [("napper", {})])
    r = chat(gaia_server, api_key, "team/none", "x")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"
    r = httpx.post(gaia_server.v1 + "/messages", timeout=30,
                   headers={"x-api-key": api_key, "anthropic-version": "2023-06-01"},
                   json={"model": "team/none", "max_tokens": 5,
                         "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    assert r.json()["type"] == "error"
    napper = team.memberships.get().agent
    napper.paused = True
    napper.save()
    r = chat(gaia_server, api_key, "team/sleepy", "x")
    assert r.status_code == 503
    assert r.headers["retry-after"] == "30"


def test_the_feed_shows_the_team_at_work(gaia_server, api_key, crew, feed_listener):
    r = chat(gaia_server, api_key, "team/crew", "Explain tides")
    tid = r.headers["x-gaia-thread-id"]
    step = feed_listener.wait_for(lambda e: e["event"] == "team_step"
                                  and e["thread_id"] == tid and e["step"] == "reply")
    assert step["team"] == "team/crew"
    assert step["recipient"] == "crew-lead"
    inner = feed_listener.wait_for(
        lambda e: e["event"] == "message" and e["message"]["thread_id"] == tid
        and e["message"]["internal"] and e["message"]["payload_type"] == "task")
    assert inner["message"]["from"] == "crew-lead"
    assert inner["message"]["to"] in ("researcher", "writer")


def test_a_stored_team_reply_names_the_team(gaia_server, api_key, crew):
    r = httpx.post(gaia_server.v1 + "/responses", timeout=30,
                   headers={"Authorization": f"Bearer {api_key}"},
                   json={"model": "team/crew", "input": "Explain tides"})
    assert r.status_code == 200, r.text
    again = httpx.get(gaia_server.v1 + f"/responses/{r.json()['id']}",
                      headers={"Authorization": f"Bearer {api_key}"})
    assert again.status_code == 200
    assert again.json()["model"] == "team/crew"


def test_an_operator_kill_stops_the_team_while_members_work(gaia_server, api_key, make_agent,
                                                            feed_listener):
    """The operator's kill (services.thread_kill: a control message through Redis to the
    server process) stops a team turn in its members' phase."""
    import threading

    from agents import services

    make_team(make_agent, "doomed", "collaborate", [("sloth", {"reply": "zz", "ttft_ms": 20000})])
    result: dict[str, httpx.Response] = {}
    worker = threading.Thread(target=lambda: result.setdefault(
        "r", chat(gaia_server, api_key, "team/doomed", "take your time")))
    worker.start()
    step = feed_listener.wait_for(lambda e: e["event"] == "team_step"
                                  and e["team"] == "team/doomed" and e["step"] == "task")
    services.thread_kill(thread=Thread.objects.get(pk=step["thread_id"]))
    worker.join(15)
    assert not worker.is_alive()
    r = result["r"]
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "turn_killed"
    thread = Thread.objects.get(pk=step["thread_id"])
    assert thread.status == Thread.Status.KILLED
    answer = thread.messages.get(internal=False, role="assistant")
    assert answer.finish_reason == "killed"
    assert not thread.lock_token


def test_route_streams_the_chosen_members_answer(gaia_server, api_key, make_agent):
    make_team(make_agent, "desk3", "route", [
        ("billing3", {"reply": "billing answers"}), ("support3", {"reply": "support answers"})],
        leader_options={"reply": "billing3"})
    r = chat(gaia_server, api_key, "team/desk3", "anything", stream=True)
    chunks = parse_sse(r.text).json_payloads()
    assert {c["model"] for c in chunks} == {"team/desk3"}
    content = "".join(c["choices"][0]["delta"].get("content") or ""
                      for c in chunks if c.get("choices"))
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or ""
                        for c in chunks if c.get("choices"))
    assert content == "billing answers"
    assert "[desk3-lead → billing3] desk3-lead chose billing3" in reasoning
    assert chunks[-1]["usage"]["completion_tokens"] == 1 + 2  # the pick and the answer
