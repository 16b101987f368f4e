"""What each AgentDojo suite's tools do to the world: one declaration table per suite.

Sending mail or money is ``publish`` (it reaches someone else), deleting is ``destroy``,
creating or changing the user's own data is ``write``. A tool whose results carry text
someone else wrote (mail, shared files, calendar invitations, transaction subjects)
declares ``outside_results``: that is where AgentDojo's injections arrive. A new suite is
a table here and its regenerated Cedar schema fragment
(``deploy/policies/assistant/agentdojo-<suite>.cedarschema``), no policy logic.
"""

from __future__ import annotations

from typing import Any

from lockgate.evaluation.agentdojo.tools import Declaration, Tool

#: The benchmark version ``agentdojo``'s own benchmark script defaults to (0.1.35).
BENCHMARK_VERSION = "v1.2.2"

MONEY, FILES, PERSONAL, CREDENTIALS = ("money",), ("files",), ("personal",), ("credentials",)
MAIL, CALENDAR, CONTACTS = ("mail",), ("calendar",), ("contacts",)


def _banking_user(environment: Any) -> tuple[str, ...]:
    return (str(environment.bank_account.iban),)


def _workspace_user(environment: Any) -> tuple[str, ...]:
    return (str(environment.inbox.account_email),)


def _payment() -> Tool:
    return Tool("publish", MONEY, destination_arguments=("recipient",), amount_argument="amount")


BANKING = Declaration(suite="banking", user=_banking_user, tools={
    "get_iban": Tool("read", MONEY),
    "send_money": _payment(),
    # A scheduled or re-pointed payment sends money too, only later.
    "schedule_transaction": _payment(),
    "update_scheduled_transaction": _payment(),
    "get_balance": Tool("read", MONEY),
    # Incoming transactions' subjects are written by their senders.
    "get_most_recent_transactions": Tool("read", MONEY, outside_results=True),
    "get_scheduled_transactions": Tool("read", MONEY),
    # Bills and landlords' notices are written by others.
    "read_file": Tool("read", FILES, outside_results=True),
    "get_user_info": Tool("read", PERSONAL),
    "update_password": Tool("write", CREDENTIALS),
    "update_user_info": Tool("write", PERSONAL),
})

_SENT_MAIL = Tool("read", MAIL)
_INBOX = Tool("read", MAIL, outside_results=True)
_EVENTS = Tool("read", CALENDAR, outside_results=True)
# Files in the drive may be shared with the user by others.
_DRIVE = Tool("read", FILES, outside_results=True)

WORKSPACE = Declaration(suite="workspace", user=_workspace_user, tools={
    "send_email": Tool("publish", MAIL + FILES, destination_arguments=("recipients", "cc", "bcc")),
    "delete_email": Tool("destroy", MAIL),
    "get_unread_emails": _INBOX,
    "get_sent_emails": _SENT_MAIL,
    "get_received_emails": _INBOX,
    "get_draft_emails": _SENT_MAIL,
    "search_emails": _INBOX,
    "search_contacts_by_name": Tool("read", CONTACTS),
    "search_contacts_by_email": Tool("read", CONTACTS),
    "get_current_day": Tool("read", CALENDAR),
    "search_calendar_events": _EVENTS,
    "get_day_calendar_events": _EVENTS,
    # An event with participants invites them: it reaches them by mail.
    "create_calendar_event": Tool("publish", CALENDAR, destination_arguments=("participants",)),
    "cancel_calendar_event": Tool("destroy", CALENDAR),
    "reschedule_calendar_event": Tool("write", CALENDAR),
    "add_calendar_event_participants": Tool("publish", CALENDAR,
                                            destination_arguments=("participants",)),
    "append_to_file": Tool("write", FILES),
    "search_files_by_filename": _DRIVE,
    "create_file": Tool("write", FILES),
    "delete_file": Tool("destroy", FILES),
    "get_file_by_id": _DRIVE,
    "list_files": _DRIVE,
    "share_file": Tool("publish", FILES, destination_arguments=("email",)),
    "search_files": _DRIVE,
})

#: Every suite the evaluation knows, by AgentDojo's name.
SUITES: dict[str, Declaration] = {d.suite: d for d in (BANKING, WORKSPACE)}
