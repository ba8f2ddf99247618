"""Heartbeats on the local stack, over HTTP: a webhook beat moves the deadline, queues no
wake and leaves the alarm at the earlier deadline; that alarm's fire runs nothing and arms at
the moved ``beat_by``; a missed beat wakes the tool call with reason ``heartbeat``."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from pydantic import BaseModel
from stack_kit import manual_session, wait_for
from test_local_stack import db, finished, parked_tool, view

from bide.agent import Agent
from bide.agent.providers import ModelRequest, ToolResultMessage
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.app import App
from bide.engine.signals import define_signal
from bide.tools import Sleep, ToolRegistry, define_tool
from bide.tools.webhooks import mint_webhook

__all__ = ["db"]  # the fixture, imported for pytest to find

BEAT, UNTIL = 120.0, 3600.0
DONE = define_signal("test.render-done", 1, dict)
URLS: dict[str, str] = {}


class RenderArgs(BaseModel):
    job: str


async def render(args: RenderArgs, api: Any) -> Any:
    if api.wake is not None:
        return f"woke: {api.wake.reason}"
    hook = await mint_webhook(api, DONE, "done")
    URLS[args.job] = hook.url
    return Sleep(checkpoint={}, signals=[DONE.key("done")], until=api.now() + UNTIL, heartbeat=BEAT)


def render_app() -> App:
    def model(request: ModelRequest):
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            return reply(f"render ended ({last.text})")
        return call_tool("render", {"job": "j-1"}, id="render-1")

    tools = ToolRegistry([define_tool("render", "Render a job", RenderArgs, render)])
    return App(tools=tools, agent=Agent(ScriptedProvider(model), tools), signals=[DONE])


def post(url: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=b"", method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_beats_move_the_local_alarm_and_a_missed_beat_wakes_the_call(db: str) -> None:
    with manual_session(render_app(), db, "render j-1") as (local, stack, client, clock, sid):
        start = clock.now()
        wait_for(lambda: parked_tool(client, sid), "render to park")
        alarm = {"session_id": sid, "at": start + BEAT}  # min(until, beat_by)
        assert wait_for(lambda: stack.status()["alarms"], "the alarm") == [alarm]
        assert stack.settle(5)

        clock.advance(BEAT / 2)
        status, body = post(URLS["j-1"] + "/heartbeat")
        assert (status, body) == (202, b'{"result":"delivered","errors":[]}')
        moved = clock.now() + BEAT
        assert stack.settle(5)
        status_now = stack.status()
        assert status_now["wakes_queued"] == [] and status_now["workers_running"] == []
        assert status_now["alarms"] == [alarm]  # left at the earlier deadline

        clock.advance(BEAT / 2)  # the old alarm fires: nothing runs, it arms at beat_by
        local.alarms._poke()  # the alarm loop sleeps real time: look at the manual clock now
        rearmed = [{"session_id": sid, "at": moved}]
        assert wait_for(lambda: stack.status()["alarms"] == rearmed, "re-arming")
        assert parked_tool(client, sid) is not None

        clock.advance(moved - clock.now())  # missed: noticed an hour before until
        local.alarms._poke()
        done = wait_for(lambda: finished(client, sid), "the missed beat to wake the call")
        assert done["entries"][-1]["text"] == "render ended (woke: heartbeat)"
        assert clock.now() - start < UNTIL / 10
        assert stack.settle(5)
        assert stack.status()["alarms"] == []
        status, _ = post(URLS["j-1"] + "/heartbeat")
        assert status == 410  # the call ended
        assert view(client, sid)["tasks"] == []
