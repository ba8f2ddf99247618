"""61: a CI reports "failed: type, message" through a webhook; the waiting code catches it
(issue 13, "a failure channel on every wait").

``verify`` is a workflow tool: for each build it mints a webhook, starts the build with the
webhook's URL in a step, and awaits the CI's callback. The CI posts a *failure* instead of a
value, to the webhook's ``/failure`` route: ``{"type": "FlakyTest", "message": ...}``. The
body gets a typed :class:`~bide.workflow.FailureReceived` and catches it: a flaky test is
retried once with a new build (and a new webhook, so a CI resending its POST reaches only its
own build's). A failure of another type is not caught, and the call ends *failed* with it (its
outcome is ``failed``, not a completed call with error text). The second report uses the body
form instead, ``{"$failure": {...}}`` on the webhook's own URL.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from scenario_kit import World, run_resilient

from bide.service.failure_body import delivery_of
from bide.tools import ToolRegistry, result_of
from bide.workflow import FailureReceived, define_workflow_tool, post_webhook


class VerifyArgs(BaseModel):
    ref: str


class FakeCi:
    """Builds are idempotent by key, as real CI APIs allow; the CI calls back the URL."""

    def __init__(self) -> None:
        self.builds: dict[str, dict[str, str]] = {}

    def start(self, ref: str, callback: str, key: str) -> str:
        build = self.builds.setdefault(
            key, {"id": f"build-{len(self.builds) + 7}", "ref": ref, "callback": callback}
        )
        return build["id"]

    def latest(self, ref: str) -> dict[str, str] | None:
        found = [b for b in self.builds.values() if b["ref"] == ref]
        return found[-1] if found else None


def tools(ci: FakeCi) -> ToolRegistry:
    async def verify(args: VerifyArgs, ctx: Any) -> dict[str, Any]:
        for attempt in (1, 2):
            hook = await ctx.webhook()  # one URL per build: a CI's resent POST reaches its own
            url = hook.url

            def start(step: Any, url: str = url) -> str:
                return ci.start(args.ref, url, step.idempotency_key)

            build = await ctx.step(start, name=f"build-{attempt}")
            try:
                report = await hook  # a value, or FailureReceived for a posted failure
                return {"build": build, "status": report["status"], "attempts": attempt}
            except FailureReceived as failure:
                if failure.type != "FlakyTest" or attempt == 2:
                    raise  # uncaught: the call ends failed with this failure
                ctx.progress(f"{build}: {failure.message}; retrying once")
        raise AssertionError("unreachable")

    tool = define_workflow_tool("verify", "Run CI on a ref and report", VerifyArgs, verify)
    return ToolRegistry([tool])


def ci_posts(h: Any, build: dict[str, str], path: str, body: dict[str, Any]) -> str:
    """What the HTTP route does with the CI's POST (``<url>`` or ``<url>/failure``), in
    process: the body becomes a value or a failure (bide.service.failure_body), then goes to
    the webhook's task."""
    delivery = delivery_of(body, failure_route=path == "/failure")
    return str(post_webhook(h, build["callback"], delivery))


async def scenario(world: World) -> dict[str, Any]:
    ci = world.services.setdefault("ci", FakeCi())
    registry = tools(ci)
    h = await world.process([registry.task])
    h.services["webhook_base_url"] = "https://bide.example"
    say = world.say
    results: dict[str, Any] = {}

    say("1. verify(main): the CI reports a flaky test as a failure; the body catches it.")
    first = await h.create_task(registry.task, registry.call("verify", {"ref": "main"}), key="a")
    await h.run_until_parked()
    build = ci.latest("main")
    if build is not None and build["id"] == "build-7" and h.outcome(first) is None:
        flaky = {"type": "FlakyTest", "message": "test_login timed out"}
        say(f"   CI POST {build['id']} /failure {flaky} -> {ci_posts(h, build, '/failure', flaky)}")
    await h.run_until_parked()
    build = ci.latest("main")
    if build is not None and build["id"] == "build-8" and h.outcome(first) is None:
        say(f"   the retry {build['id']} posts {{'status': 'passed'}}")
        ci_posts(h, build, "", {"status": "passed"})
    await h.run_until_parked()
    outcome = h.outcome(first)
    results["main"] = (outcome.status, result_of(outcome).details)
    say(f"   outcome: {outcome.status}, result {results['main'][1]}")

    say("2. verify(release): a compile error, sent in the body form, is not caught.")
    second = await h.create_task(registry.task, registry.call("verify", {"ref": "rel"}), key="b")
    await h.run_until_parked()
    build = ci.latest("rel")
    if build is not None and h.outcome(second) is None:
        broken = {"$failure": {"type": "CompileError", "message": "main.c:3: syntax error"}}
        say(f"   CI POST {build['id']} {broken} -> {ci_posts(h, build, '', broken)}")
    await h.run_until_parked()
    outcome = h.outcome(second)
    results["rel"] = (outcome.status, result_of(outcome).text)
    say(f"   outcome: {outcome.status}: {results['rel'][1]}")
    results["builds"] = len(ci.builds)
    return results


def check(result: dict[str, Any], world: World) -> None:
    """The flaky failure was caught and retried once; the compile error ended the call
    failed with its type and message; one build per attempt."""
    assert result["main"] == ("completed", {"build": "build-8", "status": "passed", "attempts": 2})
    assert result["rel"] == ("failed", "CompileError: main.c:3: syntax error")
    assert result["builds"] == 3


if __name__ == "__main__":
    world = World()
    outcome = asyncio.run(run_resilient(scenario, world))
    check(outcome, world)
    print("ok: a typed failure was caught and retried; an uncaught one failed the call")
