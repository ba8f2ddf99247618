"""Workflow-tool bindings (design 002, "Bind workflow tools through trusted declarations").

A :class:`WorkflowBinding` connects a typed tool to a workflow relationship. The model supplies
business arguments; the destination and completion come from the trusted declaration:

=========================  ===================================================================
destination                how it receives work
=========================  ===================================================================
:class:`Push` (receiver)   the session's receiver task gets a ``request`` envelope in its
                           mailbox and a signal, in the invocation's commit
:class:`Pull` (receiver)   the receiver reads accepted invocations from the session's
                           documents (:func:`pull_invocations`); nothing is sent
:class:`Start` (recipe)    a new task of the recipe per invocation, keyed by the invocation,
                           so its identity is derived and stable
=========================  ===================================================================

Completion: ``accepted`` (an acknowledgment, no promise), ``joined`` (the call parks on one
promise until the reply) or ``promises`` (the call returns keyed promise handles to await
later). Admission (:func:`binding_violations`): pull => accepted; joined => push or start, with
a nonzero hard deadline; start => joined or promises. Replies (:func:`reply_in`,
:meth:`BindingSet.reply`) must carry the stored producer identity and correlation id and match
the optional reply schema, or they are rejected (:class:`ReplyRejected`) with nothing written.
Cancelling a promise sends its producer a per-key notice (a ``cancel`` envelope for receivers,
:data:`~bide.promises.PROMISE_CANCELLED` for started executions); a started execution is
aborted once all its keyed promises are terminal. A receiver is shared, so it is never
cancelled for one caller.
"""

from .declaration import (
    BindingRule,
    Completion,
    Destination,
    InvalidBinding,
    Pull,
    Push,
    Receiver,
    Start,
    WorkflowBinding,
    binding_violations,
)
from .invocations import (
    InvocationDoc,
    KeyRef,
    ReplyRejected,
    check_reply,
    invocation_doc_key,
    invocation_id_for,
    pull_invocations,
    read_invocation,
    record_invocation,
    reply_in,
    task_receiver,
)
from .tool import BindingSet, binding_tool

__all__ = [
    "BindingRule",
    "BindingSet",
    "Completion",
    "Destination",
    "InvalidBinding",
    "InvocationDoc",
    "KeyRef",
    "Pull",
    "Push",
    "Receiver",
    "ReplyRejected",
    "Start",
    "WorkflowBinding",
    "binding_tool",
    "binding_violations",
    "check_reply",
    "invocation_doc_key",
    "invocation_id_for",
    "pull_invocations",
    "read_invocation",
    "record_invocation",
    "reply_in",
    "task_receiver",
]
