"""Operators' commands on the policy bundles: where they stand, a shadow started or stopped,
the shadow promoted.

A shadow bundle runs beside the active one on live traffic: every decision is also made
under it and recorded beside the real one (``PolicyDecided.shadow``), never enforced and
never shown to the model. Promoting it writes its files over the active bundle's in the
policy directory, which every service reloads within seconds (``BundleSource``), and
stops the shadow. Each change is logged with the revisions on both sides and who made it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

import msgspec

from lockgate.authz.config import CONFIG_FILE
from lockgate.authz.engine import BUNDLE_SUFFIXES, BundleError, PolicyBundle, bundle_files
from lockgate.authz.source import BundleSource
from lockgate.contracts.messages import PolicyChange, PolicyCommand, PolicyStatus, Refusal
from lockgate.contracts.subjects import NotACommandSubject, parse_policy
from lockgate.core.clock import Clock
from lockgate.runtime.ports.policies import Policies, PublishedBundle

#: The most files and bytes a bundle handed over may have.
MAX_FILES = 256
MAX_BYTES = 512 * 1024


class BundleRefused(Exception):  # noqa: N818 -- carried to the reply as a refusal
    """A command that cannot be done as asked: its reply's code and detail."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(code)
        self.code, self.detail = code, detail


def checked_files(files: Mapping[str, str]) -> dict[str, str]:
    """``files`` if they can be a bundle written under a directory: relative paths that stay
    inside it, of policies, schema fragments and ``bundle.yaml`` only, within the limits.

    Raises:
        BundleRefused: ``policy.files-invalid``, naming the offending path.
    """
    if not files or len(files) > MAX_FILES or sum(len(t) for t in files.values()) > MAX_BYTES:
        raise BundleRefused("policy.files-invalid",
                            f"a bundle is 1 to {MAX_FILES} files, at most {MAX_BYTES} bytes")
    for name in files:
        path = PurePosixPath(name)
        inside = (name and not path.is_absolute() and ".." not in path.parts
                  and "\\" not in name and "\x00" not in name and all(path.parts))
        if not inside or not (path.suffix in BUNDLE_SUFFIXES or name == CONFIG_FILE):
            raise BundleRefused("policy.files-invalid", f"{name[:120]!r} is not a bundle file")
    return dict(files)


def write_bundle(directory: Path, files: Mapping[str, str]) -> None:
    """Make ``directory`` hold exactly the bundle ``files``: each written whole (to a temporary
    file renamed over it), then the bundle files it no longer has removed. Other files (case
    tables, notes) stay."""
    for name, text in files.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, suffix=".tmp") as tmp:
            tmp.write(text)
        os.replace(tmp.name, target)
    for name in set(bundle_files(directory)) - set(files):
        (directory / name).unlink(missing_ok=True)


class BundleCommands:
    """Answers ``lg.policy.<verb>.<operator>``."""

    def __init__(self, policies: Policies, bundles: BundleSource, clock: Clock) -> None:
        self.policies = policies
        self.bundles = bundles
        self.clock = clock

    async def answer(self, subject: str, body: bytes) -> bytes:
        """The command's reply: the status after it, or a refusal with its code."""
        try:
            verb, operator = parse_policy(subject)
            command = msgspec.json.decode(body or b"{}", type=PolicyCommand)
        except NotACommandSubject:
            return msgspec.json.encode(Refusal("policy.unknown-command"))
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("policy.malformed", str(exc)[:200]))
        try:
            if verb == "shadow":
                await self._shadow(command, operator)
            elif verb == "shadow-off":
                await self._off(operator)
            elif verb == "promote":
                await self._promote(command, operator)
        except BundleRefused as refused:
            return msgspec.json.encode(Refusal(refused.code, refused.detail[:400]))
        return msgspec.json.encode(await self.status())

    async def status(self) -> PolicyStatus:
        """The active revision, the shadow's, and the log."""
        shadow = await self.policies.shadow()
        return PolicyStatus(
            active_revision=self.bundles.current().revision,
            shadow_revision=shadow.revision if shadow else None,
            shadow_by=shadow.by if shadow else None, shadow_since=shadow.at if shadow else None,
            changes=tuple(await self.policies.changes()),
        )

    async def _shadow(self, command: PolicyCommand, operator: str) -> None:
        files = checked_files(command.files)
        try:
            bundle = PolicyBundle.from_files(files)
        except BundleError as exc:
            raise BundleRefused(exc.code, str(exc)) from None
        now = self.clock()
        await self.policies.set_shadow(PublishedBundle(revision=bundle.revision, files=files,
                                                       by=operator, at=now))
        await self.policies.record(PolicyChange(action="shadow", revision=bundle.revision,
                                                active_revision=self.bundles.current().revision,
                                                by=operator, at=now))

    async def _off(self, operator: str) -> None:
        shadow = await self.policies.shadow()
        if shadow is None:
            raise BundleRefused("policy.no-shadow", "no shadow bundle runs")
        await self.policies.clear_shadow()
        await self.policies.record(PolicyChange(action="shadow-off", revision=shadow.revision,
                                                active_revision=self.bundles.current().revision,
                                                by=operator, at=self.clock()))

    async def _promote(self, command: PolicyCommand, operator: str) -> None:
        shadow = await self.policies.shadow()
        if shadow is None:
            raise BundleRefused("policy.no-shadow", "no shadow bundle runs")
        if command.revision != shadow.revision:
            # The operator confirmed another shadow than the one running now.
            raise BundleRefused("policy.shadow-changed",
                                f"the shadow is {shadow.revision}, not {command.revision or '(none)'}")
        replaced = self.bundles.current().revision
        write_bundle(self.bundles.directory, shadow.files)
        if self.bundles.current(look=True).revision != shadow.revision:
            raise BundleRefused("policy.promote-failed", "the directory does not hold the shadow now")
        await self.policies.clear_shadow()
        await self.policies.record(PolicyChange(action="promote", revision=shadow.revision,
                                                active_revision=replaced, by=operator,
                                                at=self.clock(), flips=command.flips))
