"""Agent sessions: conversations, submissions, the generation loop, subagents, hooks."""

from .agent import Agent, Conversations, start_run, submit_in
from .compaction import Compaction, plain_summary
from .conversation import (
    SUBMISSION_SETTLED,
    ConversationError,
    ConversationHead,
    Notify,
    SettledSubmission,
    Submission,
    WhenBusy,
    append_entry,
    create_conversation,
    owned_conversation_id,
)
from .generation import GENERATION_TASK, STOP_AT_SERVICE
from .hooks import Continue, GenerationHooks, HookTask, StartTasks, hook_task
from .subagent import subagent_tool

__all__ = [
    "GENERATION_TASK",
    "STOP_AT_SERVICE",
    "SUBMISSION_SETTLED",
    "Agent",
    "Compaction",
    "Continue",
    "ConversationError",
    "ConversationHead",
    "Conversations",
    "GenerationHooks",
    "HookTask",
    "Notify",
    "SettledSubmission",
    "StartTasks",
    "Submission",
    "WhenBusy",
    "append_entry",
    "create_conversation",
    "hook_task",
    "owned_conversation_id",
    "plain_summary",
    "start_run",
    "subagent_tool",
    "submit_in",
]
