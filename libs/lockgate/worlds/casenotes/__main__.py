"""``python -m lockgate.worlds.casenotes``: run the case-notes adapter worker."""

from __future__ import annotations

import logging

from lockgate.adapters.sdk import run_adapter
from lockgate.runtime import loop
from lockgate.runtime.entry import exit_if_misconfigured
from lockgate.runtime.settings import Settings
from lockgate.worlds.casenotes.adapter import CaseNotesAdapter, CaseWorldSettings


def main() -> None:
    """Open (or seed) the case world and serve ``case.add_note`` until stopped."""
    with exit_if_misconfigured("adapter.casenotes"):
        settings = Settings()
        logging.basicConfig(level=settings.log_level)
        adapter = CaseNotesAdapter.from_settings(CaseWorldSettings())
        loop.run(run_adapter([adapter], settings, name="casenotes"))


if __name__ == "__main__":
    main()
