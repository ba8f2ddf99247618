"""Agent turns at a bounded cost: the transcript is read once per model request, and a
compaction hook keeps what the model reads bounded while history keeps every entry."""

from __future__ import annotations

import itertools

import pytest
from kit import Kit, run
from pydantic import BaseModel

from bide import SQLiteStore
from bide.agent import Agent, Compaction, Conversations, GenerationHooks
from bide.agent.compaction import boundary, plain_summary
from bide.agent.limits import RunLimits
from bide.agent.providers import AssistantMessage, ModelRequest, ToolResultMessage, UserMessage
from bide.agent.providers.scripted import ScriptedProvider, call_tool, reply
from bide.engine.store.wrapper import StoreWrapper
from bide.testing import Crash, FaultyStore
from bide.tools import ToolRegistry, define_tool

CID = "c1"
PREFIX = f"conv/{CID}/e/"


class Q(BaseModel):
    q: str


async def lookup(args: Q, api):
    return f"found {args.q}"


class Counting(StoreWrapper):
    """Records every listing of the transcript: (start_after, documents returned)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.listings: list[tuple[str | None, int]] = []

    def list_docs(self, session_id, prefix, *, start_after=None, limit=None):
        found = self.inner.list_docs(session_id, prefix, start_after=start_after, limit=limit)
        if prefix == PREFIX:
            self.listings.append((start_after, len(found)))
        return found


def tool_turns():
    """A model that calls ``lookup`` once for each user input containing "tool", then
    answers; a plain answer otherwise."""
    ids = itertools.count(1)

    def respond(request: ModelRequest):
        last = request.messages[-1]
        if isinstance(last, UserMessage) and "tool" in last.text:
            return call_tool("lookup", {"q": last.text}, id=f"k-{next(ids)}")
        return reply(f"answer {len(request.messages)}")

    return ScriptedProvider(respond)


class Chat:
    def __init__(self, provider, *, compaction=None, store=None, limits=None):
        hooks = [GenerationHooks("compaction", compact=compaction)] if compaction else []
        registry = ToolRegistry([define_tool("lookup", "", Q, lookup)])
        kw = {"limits": limits} if limits else {}
        self.provider = provider
        self.agent = Agent(provider, registry, hooks=hooks, **kw)
        self.kit = Kit(*self.agent.task_kinds(), store=store)
        self.conv = Conversations(self.kit.h, self.agent)

    async def start(self):
        await self.kit.h.open()
        await self.conv.create(CID)

    async def turn(self, text, n):
        await self.conv.submit(CID, text, request_id=f"r{n}")
        await self.kit.h.run_until_parked()

    async def reopen(self):
        await self.kit.reopen()
        self.conv = Conversations(self.kit.h, self.agent)


def well_formed(request: ModelRequest) -> bool:
    """Every tool result answers a call the same request shows."""
    calls: set[str] = set()
    for m in request.messages:
        if isinstance(m, AssistantMessage):
            calls.update(c.id for c in m.tool_calls)
        if isinstance(m, ToolResultMessage) and m.call_id not in calls:
            return False
    return True


def test_a_tool_round_reads_the_transcript_once_per_model_request():
    async def go():
        store = Counting(SQLiteStore())
        chat = Chat(tool_turns(), store=store)
        await chat.start()
        for n in range(15):
            await chat.turn(f"tool {n}" if n % 2 else f"hi {n}", n)
        history = len(chat.conv.entries(CID))
        store.listings.clear()
        asked = len(chat.provider.requests)
        await chat.turn("tool again", 99)
        requests = len(chat.provider.requests) - asked
        assert requests == 2  # the call, then the answer
        whole = [n for after, n in store.listings if n >= history]
        assert len(whole) == requests  # once per model request, not once more per round
        # The round's end reads the round (its result), not the transcript.
        assert sum(n for after, n in store.listings if n < history) <= 2

    run(go())


def test_compaction_bounds_what_the_model_reads_and_history_keeps_everything():
    async def go():
        store = Counting(SQLiteStore())
        chat = Chat(tool_turns(), store=store, compaction=Compaction(threshold=12, keep=4))
        await chat.start()
        for n in range(40):
            await chat.turn(f"tool {n}" if n % 3 == 0 else f"hi {n}", n)
        requests = chat.provider.requests
        assert all(well_formed(r) for r in requests)
        # The window: a summary plus at most the threshold's entries (and the newest one).
        assert max(len(r.messages) for r in requests) <= 12 + 2
        last = requests[-1].messages
        assert isinstance(last[0], UserMessage) and last[0].text.startswith("[Summary")
        # Reads stay bounded: the latest turns' listings read the window, not the history.
        assert max(n for _after, n in store.listings[-10:]) <= 12 + 4
        # History keeps every entry: 40 inputs, their answers, tool calls, the summaries.
        kept = chat.conv.entries(CID)
        assert [e["i"] for e in kept] == list(range(1, len(kept) + 1))
        assert sum(1 for e in kept if e["type"] == "user") == 40
        summaries = [e for e in kept if e["type"] == "summary"]
        assert summaries and chat.conv.head(CID).compacted.summary == summaries[-1]["i"]
        assert len(kept) > 100

    run(go())


def test_the_boundary_never_splits_a_round():
    entries = [
        {"i": 1, "type": "user", "text": "a"},
        {"i": 2, "type": "assistant", "tool_calls": [{"id": "x"}, {"id": "y"}]},
        {"i": 3, "type": "tool_result", "call_id": "x"},
        {"i": 4, "type": "tool_result", "call_id": "y"},
        {"i": 5, "type": "assistant", "tool_calls": []},
    ]
    # Keeping 2 or 3 would start at a result, or keep a result without its call.
    assert boundary(entries, 2) == 1 and boundary(entries, 3) == 1
    assert boundary(entries, 1) == 4
    assert boundary(entries[:4], 1) == 1


def test_run_limits_count_what_a_compaction_folded():
    async def go():
        # One run of many tool rounds: the compaction runs inside it.
        provider = ScriptedProvider(
            [call_tool("lookup", {"q": str(n)}, id=f"k-{n}") for n in range(30)] + [reply("done")]
        )
        chat = Chat(
            provider,
            compaction=Compaction(threshold=6, keep=2),
            limits=RunLimits(max_model_rounds=10),
        )
        await chat.start()
        await chat.turn("go", 1)
        assert len(provider.requests) == 10
        assert any(e["type"] == "summary" for e in chat.conv.entries(CID))
        assert chat.conv.entries(CID)[-1]["code"] == "run_limit"

    run(go())


def test_compaction_settings_are_checked():
    with pytest.raises(ValueError, match="keep"):
        Compaction(threshold=5, keep=5)
    with pytest.raises(ValueError, match="threshold"):
        Compaction(threshold=0, keep=1)


def test_a_failing_summariser_leaves_the_request_uncompacted():
    async def broken(previous, entries, rt):
        raise RuntimeError("summariser down")

    async def go():
        chat = Chat(tool_turns(), compaction=Compaction(threshold=4, keep=2, summarise=broken))
        await chat.start()
        for n in range(5):
            await chat.turn(f"hi {n}", n)
        assert [e["type"] for e in chat.conv.entries(CID)].count("summary") == 0
        assert chat.conv.head(CID).compacted is None
        assert len(chat.provider.requests[-1].messages) == 9  # everything, as before

    run(go())


class CrashAtSummary(FaultyStore):
    """Dies at the commit that writes a summary entry (before or after it is stored)."""

    def __init__(self, inner, when):
        super().__init__(inner, when=when)
        self.armed = True

    def commit(self, session_id, expected_seq, writes, docs=(), *, absent=()):
        if self.armed and any(
            isinstance(d.body, dict) and d.body.get("type") == "summary" for d in docs
        ):
            self.armed = False
            self.fail_at = self.commits + 1
        return super().commit(session_id, expected_seq, writes, docs, absent=absent)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_the_compaction_commit(when):
    async def go():
        store = CrashAtSummary(SQLiteStore(), when)
        seen: list[str] = []

        async def summarise(previous, entries, rt):
            seen.append("asked")
            return await plain_summary(previous, entries, rt)

        chat = Chat(
            tool_turns(),
            store=store,
            compaction=Compaction(threshold=6, keep=2, summarise=summarise),
        )
        await chat.start()
        crashed = None
        for n in range(10):
            try:
                await chat.turn(f"tool {n}", n)
            except Crash:
                crashed = n
                await chat.reopen()
                await chat.kit.h.run_until_parked()
        assert crashed is not None and store.crashed
        kept = chat.conv.entries(CID)
        assert [e["i"] for e in kept] == list(range(1, len(kept) + 1))
        summaries = [e for e in kept if e["type"] == "summary"]
        throughs = [e["through"] for e in summaries]
        assert throughs == sorted(set(throughs))  # never the same entries folded twice
        head = chat.conv.head(CID)
        assert head.compacted.summary == summaries[-1]["i"] and head.run is None
        # Every input answered exactly once, in order.
        users = [e for e in kept if e["type"] == "user"]
        assert [e["text"] for e in users] == [f"tool {n}" for n in range(10)]
        answers = [e for e in kept if e["type"] == "assistant" and not e["tool_calls"]]
        assert len(answers) == 10
        assert all(well_formed(r) for r in chat.provider.requests)
        # before: the summary was asked again; after: the stored one was used as is.
        assert len(seen) == len(summaries) + (1 if when == "before" else 0)

    run(go())


def test_a_head_pointing_past_its_entries_reads_the_whole_transcript():
    # A fork copies entries up to a point and the head with ``entries`` set to it; a summary
    # written after that point is not in the copy, so the copy reads what it has.
    from bide.agent.conversation import Compacted, ConversationHead
    from bide.agent.window import read_window

    class Docs:
        def list_docs(self, prefix, *, start_after=None, limit=None):
            rows = [(f"{prefix}{i:08d}", {"i": i, "type": "user", "text": str(i)}) for i in (1, 2)]
            return [r for r in rows if start_after is None or r[0] > start_after]

    head = ConversationHead(id=CID, entries=2, compacted=Compacted(summary=3, through=1))
    view = read_window(Docs(), CID, head)
    assert view.summary is None and [e["i"] for e in view.entries] == [1, 2]
