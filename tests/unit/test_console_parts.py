"""The console's pure parts: tokens, honest labels, tenant scoping, refusals, the page's script."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from lockgate.client.tokens import PREFIX, TokenError, seal, unseal
from lockgate.console import domain
from lockgate.console.api import CSP, STATIC
from lockgate.intent.aggregate import State
from lockgate.runtime.credentials import Credentials

KEY = b"k" * 32
ALICE = Credentials(user="reviewer-alice", password="s3cret-password", account="EDGE",
                    inbox_prefix="_INBOX_reviewer_alice", js_prefix="lg.jsapi", principal="alice")


def test_a_token_opens_under_its_key_until_it_expires() -> None:
    token = seal(KEY, ALICE, ttl_s=60, now=1000)
    claims = unseal(KEY, token, now=1059)
    assert (claims.user, claims.password, claims.expires_at) == ("reviewer-alice", "s3cret-password", 1060)
    with pytest.raises(TokenError) as expired:
        unseal(KEY, token, now=1060)
    assert expired.value.code == "auth.token-expired"


def test_the_password_is_not_readable_in_the_token() -> None:
    token = seal(KEY, ALICE, ttl_s=60)
    raw = base64.urlsafe_b64decode(token[len(PREFIX):] + "==")
    assert b"s3cret" not in raw and b"reviewer-alice" not in raw
    assert "s3cret" not in repr(unseal(KEY, token))


@pytest.mark.parametrize("forge", [
    lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # a changed byte
    lambda t: t.replace(PREFIX, "lgc2.", 1),  # another format
    lambda t: PREFIX + base64.urlsafe_b64encode(b'{"user":"reviewer-alice"}').decode(),  # unsealed
    lambda t: PREFIX + "!!!",  # not base64
    lambda t: "",  # nothing
    lambda t: t + "A" * 3000,  # too long
])
def test_a_forged_or_damaged_token_is_refused(forge: object) -> None:
    token = seal(KEY, ALICE, ttl_s=60)
    with pytest.raises(TokenError) as refused:
        unseal(KEY, forge(token))  # type: ignore[operator]
    assert refused.value.code == "auth.token-invalid"


def test_a_token_sealed_under_another_key_is_refused() -> None:
    with pytest.raises(TokenError) as refused:
        unseal(b"x" * 32, seal(KEY, ALICE, ttl_s=60))
    assert refused.value.code == "auth.token-invalid"


@pytest.mark.parametrize("ttl_s", [0, -1, 31 * 24 * 3600])
def test_a_token_lives_a_bounded_time(ttl_s: float) -> None:
    with pytest.raises(ValueError):
        seal(KEY, ALICE, ttl_s=ttl_s)


# -- honest labels ----------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "model_status", "code"), [
    ("denied", "unavailable", "stopped"),
    ("rejected", "rejected", "stopped"),
    ("withdrawn", "withdrawn", "stopped"),
    ("refused", "unavailable", "stopped"),
    ("sent", "interruption_requested", "interruption_requested"),
    ("authorized", "withdrawal_requested", "withdrawal_requested"),
    ("unknown", "outcome_unknown", "outcome_unknown"),
    ("needs_operator", "outcome_unknown", "outcome_unknown"),
    ("completed", "executed", "executed"),
    ("awaiting_approval", "pending_approval", "awaiting_review"),
    ("interrupted", "withdrawn", "interrupted"),
])
def test_labels_say_what_the_record_says(state: str, model_status: str, code: str) -> None:
    assert domain.label(state, model_status).code == code


def test_nothing_that_may_still_be_sent_is_called_stopped() -> None:
    for state in (State.AUTHORIZED, State.SENT, State.UNKNOWN, State.NEEDS_OPERATOR):
        for told in ("in_progress", "withdrawal_requested", "interruption_requested", "outcome_unknown"):
            assert domain.label(state, told).code not in ("stopped", "executed"), (state, told)


def test_every_state_and_event_has_words() -> None:
    from lockgate.intent.codec import EVENT_TYPES

    assert set(EVENT_TYPES) <= set(domain.EVENT_WORDS)
    for state in State:
        if state not in (State.PROPOSED, State.NORMALIZED, State.ALLOWED):
            assert domain.label(state, "in_progress").code != "in_progress", state


# -- scope and refusals -----------------------------------------------------------------------


def test_a_person_reads_only_their_tenants() -> None:
    assert domain.tenants_to_read((), None) is None
    assert domain.tenants_to_read((), "tenant-b") == ("tenant-b",)
    assert domain.tenants_to_read(("tenant-a",), None) == ("tenant-a",)
    with pytest.raises(domain.Forbidden) as refused:
        domain.tenants_to_read(("tenant-b",), "tenant-a")
    assert refused.value.code == "auth.tenant-forbidden"


@pytest.mark.parametrize(("code", "status"), [
    ("review.unknown", 404), ("review.digest-mismatch", 409), ("review.closed", 409),
    ("review.expired", 409), ("review.self-approval", 403), ("policy.no-permit", 403),
    ("review.malformed", 422), ("reconcile.already-settled", 409), ("lockgate.unavailable", 503),
    ("withdraw.unknown-intent", 404), ("something.new", 409),
])
def test_refusals_map_onto_http(code: str, status: int) -> None:
    assert domain.http_status(code) == status


# -- the page ---------------------------------------------------------------------------------


def test_the_page_never_turns_text_into_markup() -> None:
    script = (STATIC / "console.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "setAttribute(\"on", "srcdoc"):
        assert sink not in script, sink
    page = (STATIC / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", page), "inline script: the CSP would block it"
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", page), "inline handler: the CSP would block it"
    assert "'unsafe-inline'" not in CSP and "'unsafe-eval'" not in CSP


def test_every_static_file_is_served_from_the_package() -> None:
    assert {p.name for p in Path(STATIC).iterdir()} == {"index.html", "console.js", "console.css",
                                                        "shadow.html", "shadow.js"}


def test_the_timeline_says_how_each_step_went() -> None:
    assert domain.event_words("PolicyDecided", {"outcome": "deny"}) == "policy decided: deny"
    assert domain.event_words("ReviewApproved", {"reviewer": "alice"}) == "a reviewer approved (by alice)"
    assert domain.event_words("Reconciled", {"finding": "confirmed", "resolution": "completed",
                                             "by": "operator:ops"}).startswith("the outcome was reconciled: confirmed")
    assert domain.event_words("SomethingNew") == "SomethingNew"


def test_no_role_renders_an_empty_allow_list() -> None:
    from lockgate.operations.roles import Role, console_role, render_accounts

    assert console_role().publish  # nats-server reads an empty list as "everything"
    with pytest.raises(ValueError, match="empty publish allow-list"):
        render_accounts({"nobody": (Role("nobody", (), ("_INBOX.>",)), "pw")})


def test_an_edited_intent_is_stopped_and_says_why() -> None:
    assert domain.label("denied", "unavailable", "review.edited") == domain.EDITED
    assert domain.EDITED.code == "stopped"
