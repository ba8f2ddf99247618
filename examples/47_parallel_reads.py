"""Reading two files in parallel while an edit waits its turn (design 002).

The model asks for three calls in one answer: read changes.md, read release-notes.md, edit
release-notes.md. Reads are parallel-safe, the edit is exclusive: both reads run together,
then the edit runs alone, in batch order, and each call commits its own result. The
model sees the tools under the presentation of its family (Claude-style names here), while what
runs is named by its logical identity.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide.admission import Admission, Operation, Presentation
from bide.agent import Agent, Conversations
from bide.agent.providers import ModelRequest, ModelResponse
from bide.agent.providers.scripted import ScriptedProvider, call_tools, reply
from bide.tools import define_tool


class ReadArgs(BaseModel):
    path: str


class ClaudeRead(BaseModel):
    file_path: str


class EditArgs(BaseModel):
    path: str
    text: str


def build(log: list[str], files: dict[str, str]) -> Agent:
    async def read(args: ReadArgs, api: Any) -> str:
        log.append(f"start read {args.path}")
        await asyncio.sleep(0)  # a real read awaits I/O: the other read runs meanwhile
        log.append(f"end read {args.path}")
        return files.get(args.path, "")

    async def edit(args: EditArgs, api: Any) -> str:
        log.append(f"edit {args.path}")
        files[args.path] = args.text
        return f"wrote {len(args.text)} bytes"

    read_op = Operation(
        "vfs.read",
        define_tool(
            "vfs.read", "Read a file", ReadArgs, read, concurrency="parallel_safe", replay="safe"
        ),
        (
            Presentation("read_file", "Read a file", ReadArgs),
            Presentation(
                "Read",
                "Reads a file from the workspace",
                ClaudeRead,
                families=frozenset({"anthropic"}),
                adapt_arguments=lambda a: {"path": a["file_path"]},
            ),
        ),
    )
    edit_op = Operation(
        "vfs.edit",
        define_tool("vfs.edit", "Edit a file", EditArgs, edit),
        (
            Presentation("edit_file", "Replace a file's text", EditArgs),
            Presentation("Edit", "Edits a file", EditArgs, families=frozenset({"anthropic"})),
        ),
    )

    def script(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user":
            return call_tools(
                [
                    ("Read", {"file_path": "changes.md"}, "c1"),
                    ("Read", {"file_path": "release-notes.md"}, "c2"),
                    ("Edit", {"path": "release-notes.md", "text": "v2: faster resumes"}, "c3"),
                ]
            )
        results = {m.call_id: m.text for m in request.messages if m.role == "tool"}
        return reply(f"Changes: {results['c1']}; old notes: {results['c2']}; {results['c3']}")

    return Agent(
        ScriptedProvider(script),
        admission=Admission([read_op, edit_op]),
        model_family="anthropic",
    )


async def scenario(world: World) -> dict[str, Any]:
    log: list[str] = world.services.setdefault("log", [])
    files = world.services.setdefault(
        "files", {"changes.md": "- faster resumes", "release-notes.md": "v1"}
    )
    agent = world.services.setdefault("agent", build(log, files))
    h = await world.process(agent.task_kinds())
    conv = Conversations(h, agent)
    await conv.create("main")
    await conv.submit("main", "Update the release notes", request_id="r1")
    await h.run_until_parked()
    for entry in conv.entries("main"):
        if entry["type"] == "assistant" and entry["tool_calls"]:
            names = [f"{c['name']}({c['arguments']})" for c in entry["tool_calls"]]
            world.say("   the model called:", ", ".join(names))
        elif entry["type"] == "tool_result":
            world.say(f"   result of {entry['name']} ({entry['identity']}): {entry['text']!r}")
    world.say("   execution order:", " -> ".join(log))
    sub = conv.submission("main", "r1")
    assert sub is not None
    world.say(f"   answer: {sub.answer!r}")
    return {"log": list(log), "answer": sub.answer}


def check(result: dict[str, Any], world: World) -> None:
    """Both reads were in flight together; the edit ran alone, after both, at most once
    (it is replay-unsafe: a crash after its intent ends it ``interrupted``)."""
    log = result["log"]
    assert log.count("edit release-notes.md") <= 1
    if "edit release-notes.md" in log:
        edit = log.index("edit release-notes.md")
        assert all(i < edit for i, line in enumerate(log) if line.startswith("end read"))
    if world.crashes == 0:
        assert log[:2] == ["start read changes.md", "start read release-notes.md"]
        assert result["answer"] == "Changes: - faster resumes; old notes: v1; wrote 18 bytes"
    else:
        assert result["answer"].startswith("Changes: - faster resumes; old notes: v1; ")


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: two reads in parallel, then the exclusive edit; identities kept apart")
